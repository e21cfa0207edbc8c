/* SPDX-License-Identifier: MIT */
/*
 * Waking Redlock waiters.  A waiter listens on the release channel of the
 * masters whose key kept it out, and is woken by every release there: a
 * holder's release, one finished in the background after an outage, and
 * the background undo of another client's failed attempt.  It is not
 * woken by releases on masters it got, such as its own undo or another
 * waiter's, so waiters on a lock a quorum holds never wake each other in
 * a loop.
 *
 * A waiter that is not woken still tries again on its backoff, at most a
 * second apart; each test lets the waiter's backoff reach that cap and
 * then times the wake-up from the moment the masters let the lock go,
 * three times, so a waiter that only woke on its timer would have to be
 * lucky each time.
 */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-redlock.h"

/* The suite's five masters; these tests use the first three. */
#define rl test_redlock_suite

#define ROUNDS 3
/* Long enough for a waiter's backoff (20 ms doubling) to reach its 1 s cap. */
#define BACKOFF_CAPPED_MS 2000
/* A wake-up by a release message, not by the backoff timer. */
#define WOKEN_WITHIN_MS 150

typedef test_redlock_handle handle;

/* "redis://127.0.0.1:P0,...": master i through proxies[i] when given. */
static char *uri_via(test_proxy *const *proxies, const char *suffix)
{
	GString *uri = g_string_new("redis://");

	for (int i = 0; i < 3; i++)
		g_string_append_printf(uri, "%s127.0.0.1:%d", i ? "," : "",
		                       proxies && proxies[i] ? test_proxy_port(proxies[i])
		                                             : rl->masters[i]->port);
	g_string_append(uri, suffix);
	return g_string_free(uri, FALSE);
}

static void open_via(handle *h, test_proxy *const *proxies, const char *suffix,
                     const char *resource)
{
	char *uri = uri_via(proxies, suffix);

	if (dlock_client_new(uri, &h->client) != DLOCK_OK)
		fail_msg("dlock_client_new(%s): %s", uri, dlock_last_error_message());
	assert_int_equal(dlock_lock_new(h->client, resource, &h->lock), DLOCK_OK);
	g_free(uri);
}

typedef struct waiting {
	handle *h;
	int64_t wait_ms;
	int rc;
	int64_t returned_ms;
} waiting;

static void *wait_thread(void *data)
{
	waiting *w = data;

	w->rc = dlock_acquire(w->h->lock, w->wait_ms);
	__atomic_store_n(&w->returned_ms, test_now_ms(), __ATOMIC_SEQ_CST);
	return NULL;
}

/* The waiter's handle owns its hold, so the test's thread releases it.
 * Its state is static: a test that fails leaves the thread running. */
static handle waiter_handle;
static waiting w;

static GThread *start_waiting(int64_t wait_ms)
{
	w = (waiting){ &waiter_handle, wait_ms, DLOCK_EINVAL, 0 };
	return g_thread_new("waiter", wait_thread, &w);
}

static bool returned(void)
{
	return __atomic_load_n(&w.returned_ms, __ATOMIC_SEQ_CST) != 0;
}

/* The value of key on at least two of the first three masters (g_free),
 * or NULL. */
static char *quorum_value(const char *key)
{
	char *values[3], *found = NULL;

	for (int i = 0; i < 3; i++)
		values[i] = test_redis_str(rl->masters[i], "GET %s", key);
	for (int i = 0; i < 3 && !found; i++)
		for (int k = i + 1; k < 3 && !found; k++)
			if (values[i] && values[k] && strcmp(values[i], values[k]) == 0)
				found = g_strdup(values[i]);
	for (int i = 0; i < 3; i++)
		g_free(values[i]);
	return found;
}

static bool no_key_left(void *arg)
{
	int on = 0;

	for (int i = 0; i < 3; i++) {
		char *value = test_redis_str(rl->masters[i], "GET %s", (const char *)arg);

		on += value != NULL;
		g_free(value);
	}
	return on == 0;
}

/* How many of the first three masters have key with value. */
static int holding(const char *key, const char *value)
{
	int on = 0;

	for (int i = 0; i < 3; i++) {
		char *now = test_redis_str(rl->masters[i], "GET %s", key);

		on += now && strcmp(now, value) == 0;
		g_free(now);
	}
	return on;
}

/* A's value of rl/wake-bg is on every master. */
static bool on_all_three(void *value)
{
	return holding("dlock:{rl/wake-bg}", value) == 3;
}

/* How many of masters 0 and 1 have key. */
static int on_first_two(const char *key)
{
	int on = 0;

	for (int i = 0; i < 2; i++) {
		char *value = test_redis_str(rl->masters[i], "GET %s", key);

		on += value != NULL;
		g_free(value);
	}
	return on;
}

static bool on_both(void *arg)
{
	return on_first_two(arg) == 2;
}

/* Join the waiter: granted, within WOKEN_WITHIN_MS (plus slack) of
 * free_ms; then released. */
static void expect_woken(GThread *t, int64_t free_ms, const char *what)
{
	g_thread_join(t);
	if (w.rc != DLOCK_OK)
		fail_msg("%s: the waiter got %s: %s", what, dlock_code_name(w.rc),
		         dlock_last_error_message());
	print_message("%s: granted %" PRId64 " ms after the masters let go\n", what,
	              w.returned_ms - free_ms);
	assert_true(w.returned_ms - free_ms <= WOKEN_WITHIN_MS + test_slack(100));
	assert_int_equal(dlock_release(waiter_handle.lock), DLOCK_OK);
}

static void open_waiter(const char *resource)
{
	open_via(&waiter_handle, NULL, "?ttl=30s", resource);
	assert_int_equal(dlock_lock_set_owner(waiter_handle.lock, DLOCK_OWNER_HANDLE), DLOCK_OK);
}

/*
 * A holds on every master through proxies; the proxies drop A's
 * connections and refuse new ones, so A's release is left to each
 * master's background release.  Once the proxies let A in again, those
 * releases delete the key and announce it: the waiter, asleep on its
 * capped backoff, is woken at once.
 */
static void test_waiter_is_woken_by_a_release_finished_in_the_background(void **state)
{
	char key[] = "dlock:{rl/wake-bg}";
	test_proxy *proxies[3];
	handle a;

	for (int i = 0; i < 3; i++)
		proxies[i] = test_proxy_start(rl->masters[i]->port);
	open_via(&a, proxies, "?ttl=30s&master-timeout=200ms", "rl/wake-bg");
	open_waiter("rl/wake-bg");
	/* A's connections to every master are made before the rounds. */
	assert_int_equal(dlock_acquire(a.lock, 5000), DLOCK_OK);
	assert_int_equal(dlock_release(a.lock), DLOCK_OK);
	for (int round = 0; round < ROUNDS; round++) {
		GThread *t;
		int64_t free_ms;
		char *value;

		/* The last round's waiter may still be releasing on a master
		 * in the background. */
		assert_true(test_wait_until(no_key_left, key, 5000));
		assert_int_equal(dlock_acquire(a.lock, 5000), DLOCK_OK);
		value = quorum_value(key);
		assert_non_null(value);
		/* A master that answered after the round's end has it too. */
		assert_true(test_wait_until(on_all_three, value, 1000));
		t = start_waiting(20000);
		g_usleep(BACKOFF_CAPPED_MS * 1000);
		for (int i = 0; i < 3; i++) {
			test_proxy_admit_mode(proxies[i], TEST_PROXY_REFUSE);
			test_proxy_reset_all(proxies[i]);
		}
		assert_int_equal(dlock_release(a.lock), DLOCK_OK);
		assert_true(holding(key, value) >= 2);
		for (int i = 0; i < 3; i++)
			test_proxy_admit_mode(proxies[i], TEST_PROXY_ADMIT);
		/* Each master's background release retries with a backoff of
		 * its own; the lock is free once two of them are done. */
		while (holding(key, value) > 1 && !returned())
			g_usleep(1000);
		free_ms = test_now_ms();
		g_free(value);
		expect_woken(t, free_ms, "background release");
	}
	test_redlock_close(&a);
	test_redlock_close(&waiter_handle);
	for (int i = 0; i < 3; i++)
		test_proxy_stop(proxies[i]);
}

/*
 * B's try reaches masters 0 and 1 through proxies that hold back their
 * answers: its script sets the key there, and B, unanswered, leaves both
 * to their masters' background release.  The proxies refuse new
 * connections meanwhile, so those releases keep failing.  Master 2 holds
 * a peer's key.  The waiter finds every master held.  Once the proxies
 * let B in again, the background releases delete B's keys and announce
 * it: the waiter is woken at once.
 */
static void test_waiter_is_woken_by_the_background_undo_of_a_failed_attempt(void **state)
{
	char key[] = "dlock:{rl/wake-undo}";
	test_proxy *proxies[3] = { NULL, NULL, NULL };
	handle b;

	proxies[0] = test_proxy_start(rl->masters[0]->port);
	proxies[1] = test_proxy_start(rl->masters[1]->port);
	open_waiter("rl/wake-undo");
	freeReplyObject(test_redis_cmd(rl->masters[2], "SET %s peer PX 120000", key));
	for (int round = 0; round < ROUNDS; round++) {
		GThread *t;
		char *value;
		int64_t free_ms;
		int rc;

		/* A new B each round: its background releases have no
		 * connection yet, and need a new one.  B's connections to
		 * masters 0 and 1 are made while they answer (B holds them, a
		 * quorum); then their answers stop. */
		open_via(&b, proxies, "?ttl=30s&master-timeout=200ms", "rl/wake-undo");
		assert_int_equal(dlock_acquire(b.lock, 5000), DLOCK_OK);
		assert_int_equal(dlock_release(b.lock), DLOCK_OK);
		for (int i = 0; i < 2; i++) {
			test_proxy_stall(proxies[i], TEST_PROXY_DOWN);
			test_proxy_admit_mode(proxies[i], TEST_PROXY_REFUSE);
		}
		rc = dlock_acquire(b.lock, 0);
		if (rc != DLOCK_EUNAVAILABLE)
			fail_msg("B's try: %s: %s", dlock_code_name(rc), dlock_last_error_message());
		assert_true(test_wait_until(on_both, key, 1000));
		value = test_redis_str(rl->masters[0], "GET %s", key);
		t = start_waiting(20000);
		g_usleep(BACKOFF_CAPPED_MS * 1000);
		assert_false(returned());
		for (int i = 0; i < 2; i++) {
			test_proxy_unstall(proxies[i], TEST_PROXY_DOWN);
			test_proxy_admit_mode(proxies[i], TEST_PROXY_ADMIT);
		}
		/* Free once both of B's keys are gone. */
		while (holding(key, value) > 0 && !returned())
			g_usleep(1000);
		free_ms = test_now_ms();
		g_free(value);
		expect_woken(t, free_ms, "background undo");
		test_redlock_close(&b);
	}
	assert_int_equal(test_redis_int(rl->masters[2], "DEL %s", key), 1);
	test_redlock_close(&waiter_handle);
	test_proxy_stop(proxies[0]);
	test_proxy_stop(proxies[1]);
}

/* Scripts the master has run so far. */
static long long scripts_run(test_redis *master)
{
	return test_redis_calls(master, "evalsha") + test_redis_calls(master, "eval");
}

/*
 * A peer holds the lock on masters 1 and 2; master 0 is free.  Two
 * waiters each get master 0 on every try, short of a quorum, and give it
 * back at once.  Those releases wake nobody who waits: the waiters try on
 * their backoff, not in a loop, so master 0 sees a few dozen scripts in
 * 2 s, not thousands.
 */
static void test_waiters_on_a_lock_a_quorum_holds_do_not_wake_each_other_in_a_loop(void **state)
{
	char key[] = "dlock:{rl/no-spin}";
	static handle b, c;
	static waiting wb, wc;
	GThread *tb, *tc;
	long long before, scripts;

	for (int i = 1; i < 3; i++)
		freeReplyObject(test_redis_cmd(rl->masters[i], "SET %s peer PX 60000", key));
	open_via(&b, NULL, "", "rl/no-spin");
	open_via(&c, NULL, "", "rl/no-spin");
	before = scripts_run(rl->masters[0]);
	wb = (waiting){ &b, 2000, DLOCK_EINVAL, 0 };
	wc = (waiting){ &c, 2000, DLOCK_EINVAL, 0 };
	tb = g_thread_new("waiter-b", wait_thread, &wb);
	tc = g_thread_new("waiter-c", wait_thread, &wc);
	g_thread_join(tb);
	g_thread_join(tc);
	scripts = scripts_run(rl->masters[0]) - before;
	print_message("two waiters for 2 s: %lld scripts on the free master\n", scripts);
	assert_int_equal(wb.rc, DLOCK_ETIMEDOUT);
	assert_int_equal(wc.rc, DLOCK_ETIMEDOUT);
	/* Each try is an acquire and its undo; on a 20 ms backoff doubling
	 * to 1 s, a waiter tries about ten times in 2 s. */
	assert_true(scripts < 100);
	test_redlock_close(&b);
	test_redlock_close(&c);
	for (int i = 1; i < 3; i++)
		assert_int_equal(test_redis_int(rl->masters[i], "DEL %s", key), 1);
}

static int no_leftovers(void **state)
{
	long long left = test_redlock_leftover_keys(rl, "dlock:{rl/");

	if (left != 0)
		print_error("%lld keys of the suite left on the masters\n", left);
	return left == 0 ? 0 : -1;
}

#define WAKE_TEST(f) cmocka_unit_test_teardown(f, no_leftovers)

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		WAKE_TEST(test_waiters_on_a_lock_a_quorum_holds_do_not_wake_each_other_in_a_loop),
		WAKE_TEST(test_waiter_is_woken_by_a_release_finished_in_the_background),
		WAKE_TEST(test_waiter_is_woken_by_the_background_undo_of_a_failed_attempt),
	};

	test_init(argv[0]);
	return test_finish(cmocka_run_group_tests_name("redis-redlock-wake", tests,
	                                               test_redlock_suite_setup,
	                                               test_redlock_suite_teardown));
}
