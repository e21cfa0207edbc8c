/* SPDX-License-Identifier: MIT */
/* The wake table: key -> waiters (and a backend pointer), with add,
 * remove, wake and wake-all, for string and integer keys. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "waketable.h"

static dlock__waketable *string_table(void)
{
	return dlock__waketable_new(g_str_hash, g_str_equal, (dlock__key_copy_fn)g_strdup, g_free, NULL);
}

/* Whether w was woken since its sequence number was seen. */
static bool woken(dlock__waiter *w, uint64_t seen)
{
	return dlock__waiter_seq(w) != seen;
}

static void test_wake_reaches_only_the_waiters_of_that_key(void **state)
{
	dlock__waketable *t = string_table();
	dlock__waiter *a = dlock__waiter_new(), *b = dlock__waiter_new(), *c = dlock__waiter_new();
	uint64_t sa = dlock__waiter_seq(a), sb = dlock__waiter_seq(b), sc = dlock__waiter_seq(c);

	dlock__waketable_add(t, "x", a);
	dlock__waketable_add(t, "x", b);
	dlock__waketable_add(t, "y", c);
	assert_int_equal(dlock__waketable_count(t, "x"), 2);
	assert_int_equal(dlock__waketable_count(t, "y"), 1);
	assert_null(dlock__waketable_wake(t, "x"));
	assert_true(woken(a, sa));
	assert_true(woken(b, sb));
	assert_false(woken(c, sc));
	/* An unknown key wakes nobody. */
	sc = dlock__waiter_seq(c);
	assert_null(dlock__waketable_wake(t, "z"));
	assert_false(woken(c, sc));
	dlock__waketable_remove(t, "x", a);
	dlock__waketable_remove(t, "x", b);
	dlock__waketable_remove(t, "y", c);
	dlock__waketable_free(t);
	dlock__waiter_free(a);
	dlock__waiter_free(b);
	dlock__waiter_free(c);
}

static void test_removed_waiter_is_no_longer_woken(void **state)
{
	dlock__waketable *t = string_table();
	dlock__waiter *a = dlock__waiter_new(), *b = dlock__waiter_new();
	uint64_t sa, sb;

	dlock__waketable_add(t, "x", a);
	dlock__waketable_add(t, "x", b);
	assert_false(dlock__waketable_remove(t, "x", a));
	assert_false(dlock__waketable_has(t, "x", a));
	assert_true(dlock__waketable_has(t, "x", b));
	sa = dlock__waiter_seq(a);
	sb = dlock__waiter_seq(b);
	dlock__waketable_wake(t, "x");
	assert_false(woken(a, sa));
	assert_true(woken(b, sb));
	dlock__waketable_remove(t, "x", b);
	dlock__waketable_free(t);
	dlock__waiter_free(a);
	dlock__waiter_free(b);
}

static void test_removing_the_last_waiter_frees_the_key(void **state)
{
	dlock__waketable *t = string_table();
	dlock__waiter *a = dlock__waiter_new();

	dlock__waketable_add(t, "x", a);
	assert_true(dlock__waketable_contains(t, "x"));
	assert_true(dlock__waketable_remove(t, "x", a));
	assert_false(dlock__waketable_contains(t, "x"));
	assert_int_equal(dlock__waketable_count(t, "x"), 0);
	/* Removing again, or from an unknown key, frees nothing. */
	assert_false(dlock__waketable_remove(t, "x", a));
	dlock__waketable_free(t);
	dlock__waiter_free(a);
}

/* The same waiter added twice (a thread waiting on a key in two nested
 * steps) stays until removed twice. */
static void test_waiter_added_twice_needs_two_removes(void **state)
{
	dlock__waketable *t = string_table();
	dlock__waiter *a = dlock__waiter_new();

	dlock__waketable_add(t, "x", a);
	dlock__waketable_add(t, "x", a);
	assert_false(dlock__waketable_remove(t, "x", a));
	assert_true(dlock__waketable_has(t, "x", a));
	assert_true(dlock__waketable_remove(t, "x", a));
	dlock__waketable_free(t);
	dlock__waiter_free(a);
}

static void test_key_with_data_outlives_its_waiters(void **state)
{
	dlock__waketable *t = string_table();
	dlock__waiter *a = dlock__waiter_new();
	int data;

	dlock__waketable_add(t, "x", a);
	assert_false(dlock__waketable_set_data(t, "x", &data));
	assert_false(dlock__waketable_remove(t, "x", a));
	assert_true(dlock__waketable_contains(t, "x"));
	assert_ptr_equal(dlock__waketable_data(t, "x"), &data);
	/* Waking returns the data in the same lookup. */
	assert_ptr_equal(dlock__waketable_wake(t, "x"), &data);
	assert_true(dlock__waketable_set_data(t, "x", NULL));
	assert_false(dlock__waketable_contains(t, "x"));
	/* Clearing the data of an unknown key creates nothing. */
	assert_false(dlock__waketable_set_data(t, "y", NULL));
	assert_false(dlock__waketable_contains(t, "y"));
	dlock__waketable_free(t);
	dlock__waiter_free(a);
}

static void test_wake_all_reaches_every_key(void **state)
{
	dlock__waketable *t = string_table();
	dlock__waiter *w[3];
	uint64_t seen[3];
	const char *keys[3] = { "", "a", "b" };

	for (int i = 0; i < 3; i++) {
		w[i] = dlock__waiter_new();
		dlock__waketable_add(t, keys[i], w[i]);
		seen[i] = dlock__waiter_seq(w[i]);
	}
	dlock__waketable_wake_all(t);
	for (int i = 0; i < 3; i++) {
		assert_true(woken(w[i], seen[i]));
		dlock__waketable_remove(t, keys[i], w[i]);
		dlock__waiter_free(w[i]);
	}
	dlock__waketable_free(t);
}

/* A one-shot event drops its key: its waiters can tell it fired. */
static void test_dropped_key_forgets_its_waiters(void **state)
{
	dlock__waketable *t = string_table();
	dlock__waiter *a = dlock__waiter_new(), *b = dlock__waiter_new();

	dlock__waketable_add(t, "/n", a);
	dlock__waketable_add(t, "", b);
	dlock__waketable_wake(t, "/n");
	dlock__waketable_drop(t, "/n");
	assert_false(dlock__waketable_has(t, "/n", a));
	assert_true(dlock__waketable_has(t, "", b));
	/* The waiter's own remove afterwards is harmless. */
	assert_false(dlock__waketable_remove(t, "/n", a));
	dlock__waketable_remove(t, "", b);
	dlock__waketable_free(t);
	dlock__waiter_free(a);
	dlock__waiter_free(b);
}

static void test_integer_keys_are_stored_as_given(void **state)
{
	dlock__waketable *t = dlock__waketable_new(g_direct_hash, g_direct_equal, NULL, NULL,
	                                           (GDestroyNotify)g_ptr_array_unref);
	dlock__waiter *a = dlock__waiter_new();
	uint64_t seen = dlock__waiter_seq(a);

	dlock__waketable_add(t, GINT_TO_POINTER(7), a);
	/* Data left in the table is freed with it (data_free). */
	dlock__waketable_set_data(t, GINT_TO_POINTER(8), g_ptr_array_new());
	dlock__waketable_wake(t, GINT_TO_POINTER(8));
	assert_false(woken(a, seen));
	dlock__waketable_wake(t, GINT_TO_POINTER(7));
	assert_true(woken(a, seen));
	assert_true(dlock__waketable_remove(t, GINT_TO_POINTER(7), a));
	dlock__waketable_free(t);
	dlock__waiter_free(a);
}

/* The walk the Redis subscriber makes: per key, look at its waiters and
 * data, wake some, change the data; a key left empty goes at once. */
static void test_iteration_sets_data_and_frees_emptied_keys(void **state)
{
	dlock__waketable *t = string_table();
	dlock__waiter *a = dlock__waiter_new();
	uint64_t seen = dlock__waiter_seq(a);
	dlock__waketable_iter it;
	int visited = 0, freed = 0;

	dlock__waketable_add(t, "waited", a);
	dlock__waketable_set_data(t, "waited", GUINT_TO_POINTER(1));
	dlock__waketable_set_data(t, "idle", GUINT_TO_POINTER(1));
	dlock__waketable_iter_init(&it, t);
	while (dlock__waketable_iter_next(&it)) {
		const char *key = dlock__waketable_iter_key(&it);

		visited++;
		assert_true(strcmp(key, "waited") == 0 || strcmp(key, "idle") == 0);
		assert_int_equal(GPOINTER_TO_UINT(dlock__waketable_iter_data(&it)), 1);
		if (dlock__waketable_iter_count(&it) > 0)
			dlock__waketable_iter_wake(&it);
		freed += dlock__waketable_iter_set_data(&it, NULL);
	}
	assert_int_equal(visited, 2);
	assert_int_equal(freed, 1);
	assert_true(woken(a, seen));
	assert_false(dlock__waketable_contains(t, "idle"));
	assert_true(dlock__waketable_contains(t, "waited"));
	assert_null(dlock__waketable_data(t, "waited"));
	assert_true(dlock__waketable_remove(t, "waited", a));
	dlock__waketable_free(t);
	dlock__waiter_free(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_wake_reaches_only_the_waiters_of_that_key),
		cmocka_unit_test(test_removed_waiter_is_no_longer_woken),
		cmocka_unit_test(test_removing_the_last_waiter_frees_the_key),
		cmocka_unit_test(test_waiter_added_twice_needs_two_removes),
		cmocka_unit_test(test_key_with_data_outlives_its_waiters),
		cmocka_unit_test(test_wake_all_reaches_every_key),
		cmocka_unit_test(test_dropped_key_forgets_its_waiters),
		cmocka_unit_test(test_integer_keys_are_stored_as_given),
		cmocka_unit_test(test_iteration_sets_data_and_frees_emptied_keys),
	};

	return cmocka_run_group_tests_name("waketable", tests, NULL, NULL);
}
