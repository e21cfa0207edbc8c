/* SPDX-License-Identifier: MIT */
/* The deferred-cleanup queue: backoff, give-up rule, rounds, the last try. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cleanup.h"

#define MS 1000

/* A scripted cleanup: answers with *answer, counts its tries and frees. */
typedef struct fake {
	dlock__cleanup_result answer;
	int tries;
	int *freed;
} fake;

static dlock__cleanup_result fake_attempt(gpointer data, gpointer ctx)
{
	fake *f = data;

	(*(int *)ctx)++;
	f->tries++;
	return f->answer;
}

static void fake_free(gpointer data)
{
	fake *f = data;

	(*f->freed)++;
}

static const dlock__cleanup_ops fake_ops = { fake_attempt, fake_free };

/* A queue with the Redis watchdog's timings, holding the n fakes, due at 0
 * except those given a later first try. */
static dlock__cleanups *queue_of(int *calls, fake *fakes, size_t n, const int64_t *first_us)
{
	dlock__cleanups *q = dlock__cleanups_new(calls, 100 * MS, 2000 * MS);

	for (size_t i = 0; i < n; i++)
		dlock__cleanups_add(q, &fake_ops, &fakes[i], INT64_MAX, first_us ? first_us[i] : 0);
	return q;
}

/* One round as a backend runs it: due, attempt, settle at the same time. */
static int64_t round_at(dlock__cleanups *q, int64_t now)
{
	GPtrArray *batch = g_ptr_array_new();
	int64_t next = dlock__cleanups_due(q, now, batch);

	dlock__cleanups_attempt(q, batch);
	dlock__cleanups_settle(q, now);
	g_ptr_array_unref(batch);
	return next;
}

static void test_retries_back_off_from_first_doubling_to_cap(void **state)
{
	int calls = 0, freed = 0;
	fake f = { DLOCK__CLEANUP_UNANSWERED, 0, &freed };
	dlock__cleanups *q = dlock__cleanups_new(&calls, 100 * MS, 2000 * MS);
	const int64_t pauses[] = { 100, 200, 400, 800, 1600, 2000, 2000, 2000 };
	int64_t now = 0;

	dlock__cleanups_add(q, &fake_ops, &f, INT64_MAX, now);
	for (size_t i = 0; i < sizeof(pauses) / sizeof(pauses[0]); i++) {
		GPtrArray *batch = g_ptr_array_new();

		round_at(q, now);
		assert_int_equal(f.tries, (int)i + 1);
		/* Not due a microsecond early; due on time. */
		assert_int_equal(dlock__cleanups_due(q, now + pauses[i] * MS - 1, batch), now + pauses[i] * MS);
		assert_int_equal(batch->len, 0);
		g_ptr_array_unref(batch);
		now += pauses[i] * MS;
	}
	assert_int_equal(freed, 0);
	dlock__cleanups_free(q);
	assert_int_equal(freed, 1);
}

static void test_done_and_given_up_are_dropped_retry_stays(void **state)
{
	int calls = 0, freed = 0;
	fake f[] = { { DLOCK__CLEANUP_DONE, 0, &freed }, { DLOCK__CLEANUP_GIVE_UP, 0, &freed },
	             { DLOCK__CLEANUP_RETRY, 0, &freed } };
	dlock__cleanups *q = queue_of(&calls, f, 3, NULL);

	round_at(q, 0);
	assert_int_equal(calls, 3);
	assert_int_equal(freed, 2);
	assert_int_equal(dlock__cleanups_len(q), 1);
	round_at(q, 100 * MS);
	assert_int_equal(f[2].tries, 2);
	dlock__cleanups_free(q);
	assert_int_equal(freed, 3);
}

/* No answer from the server: the rest of the round is not tried (it would
 * wait for the same timeout), but backs off all the same. */
static void test_round_stops_at_first_unanswered(void **state)
{
	int calls = 0, freed = 0;
	fake f[] = { { DLOCK__CLEANUP_RETRY, 0, &freed }, { DLOCK__CLEANUP_UNANSWERED, 0, &freed },
	             { DLOCK__CLEANUP_DONE, 0, &freed } };
	dlock__cleanups *q = queue_of(&calls, f, 3, NULL);
	GPtrArray *batch = g_ptr_array_new();

	round_at(q, 0);
	assert_int_equal(f[0].tries, 1);
	assert_int_equal(f[1].tries, 1);
	assert_int_equal(f[2].tries, 0);
	assert_int_equal(dlock__cleanups_len(q), 3);
	assert_int_equal(dlock__cleanups_due(q, 100 * MS - 1, batch), 100 * MS);
	assert_int_equal(batch->len, 0);
	g_ptr_array_unref(batch);
	dlock__cleanups_free(q);
	assert_int_equal(freed, 3);
}

/* Past the end of the lease that would end it anyway, an item is dropped,
 * whether it was tried in that round or not. */
static void test_item_past_its_lease_end_is_dropped(void **state)
{
	int calls = 0, freed = 0;
	fake tried = { DLOCK__CLEANUP_RETRY, 0, &freed };
	fake waiting = { DLOCK__CLEANUP_RETRY, 0, &freed };
	dlock__cleanups *q = dlock__cleanups_new(&calls, 100 * MS, 2000 * MS);

	dlock__cleanups_add(q, &fake_ops, &tried, 250 * MS, 0);
	dlock__cleanups_add(q, &fake_ops, &waiting, 250 * MS, 200 * MS);
	round_at(q, 0);    /* tried once; waiting not yet due */
	round_at(q, 100 * MS);
	assert_int_equal(tried.tries, 2);
	assert_int_equal(waiting.tries, 0);
	assert_int_equal(freed, 0);
	dlock__cleanups_settle(q, 250 * MS);
	assert_int_equal(freed, 2);
	assert_int_equal(dlock__cleanups_len(q), 0);
	dlock__cleanups_free(q);
}

/* An item queued while a round runs (after its due step) is not tried in
 * it, and its first try waits one backoff, as the Redis watchdog always
 * did. */
static void test_item_added_during_a_round_waits_one_backoff(void **state)
{
	int calls = 0, freed = 0;
	fake old = { DLOCK__CLEANUP_RETRY, 0, &freed };
	fake added = { DLOCK__CLEANUP_RETRY, 0, &freed };
	dlock__cleanups *q = dlock__cleanups_new(&calls, 100 * MS, 2000 * MS);
	GPtrArray *batch = g_ptr_array_new();

	dlock__cleanups_add(q, &fake_ops, &old, INT64_MAX, 0);
	dlock__cleanups_due(q, 10 * MS, batch);
	dlock__cleanups_add(q, &fake_ops, &added, INT64_MAX, 20 * MS);
	dlock__cleanups_attempt(q, batch);
	dlock__cleanups_settle(q, 30 * MS);
	assert_int_equal(added.tries, 0);
	g_ptr_array_set_size(batch, 0);
	assert_int_equal(dlock__cleanups_due(q, 30 * MS, batch), 130 * MS);
	g_ptr_array_unref(batch);
	dlock__cleanups_free(q);
}

/* With no backoff (run only on an event, such as a reconnect), an item
 * not done is due again at the next run. */
static void test_zero_backoff_is_due_at_every_run(void **state)
{
	int calls = 0, freed = 0;
	fake f = { DLOCK__CLEANUP_RETRY, 0, &freed };
	dlock__cleanups *q = dlock__cleanups_new(&calls, 0, 0);

	dlock__cleanups_add(q, &fake_ops, &f, INT64_MAX, 5);
	dlock__cleanups_run(q, 5);
	dlock__cleanups_run(q, 5);
	dlock__cleanups_run(q, 6);
	assert_int_equal(f.tries, 3);
	f.answer = DLOCK__CLEANUP_DONE;
	dlock__cleanups_run(q, 7);
	assert_int_equal(dlock__cleanups_len(q), 0);
	assert_int_equal(freed, 1);
	dlock__cleanups_free(q);
}

/* The session that would end them ended: everything goes untried. */
static void test_clear_drops_untried(void **state)
{
	int calls = 0, freed = 0;
	fake a = { DLOCK__CLEANUP_DONE, 0, &freed };
	fake b = { DLOCK__CLEANUP_DONE, 0, &freed };
	dlock__cleanups *q = dlock__cleanups_new(&calls, 0, 0);

	dlock__cleanups_add(q, &fake_ops, &a, INT64_MAX, 0);
	dlock__cleanups_add(q, &fake_ops, &b, INT64_MAX, 0);
	dlock__cleanups_clear(q);
	assert_int_equal(calls, 0);
	assert_int_equal(freed, 2);
	dlock__cleanups_free(q);
}

/* At close, one last try of everything, due or not, up to the first
 * unanswered; then all is freed. */
static void test_finish_tries_all_once_until_unanswered(void **state)
{
	int calls = 0, freed = 0;
	fake f[] = { { DLOCK__CLEANUP_RETRY, 0, &freed }, { DLOCK__CLEANUP_UNANSWERED, 0, &freed },
	             { DLOCK__CLEANUP_DONE, 0, &freed } };
	const int64_t first_us[] = { 1000 * MS, 0, 0 }; /* the first not due before 1 s */
	dlock__cleanups *q = queue_of(&calls, f, 3, first_us);

	dlock__cleanups_finish(q);
	assert_int_equal(f[0].tries, 1);
	assert_int_equal(f[1].tries, 1);
	assert_int_equal(f[2].tries, 0);
	assert_int_equal(freed, 3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_retries_back_off_from_first_doubling_to_cap),
		cmocka_unit_test(test_done_and_given_up_are_dropped_retry_stays),
		cmocka_unit_test(test_round_stops_at_first_unanswered),
		cmocka_unit_test(test_item_past_its_lease_end_is_dropped),
		cmocka_unit_test(test_item_added_during_a_round_waits_one_backoff),
		cmocka_unit_test(test_zero_backoff_is_due_at_every_run),
		cmocka_unit_test(test_clear_drops_untried),
		cmocka_unit_test(test_finish_tries_all_once_until_unanswered),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
