/* SPDX-License-Identifier: MIT */
/*
 * Silent sentinels (every one SIGSTOPped) with the master gone: asking
 * them takes up to a command timeout each, and nothing a caller does may
 * wait that out beyond its own bound -- an acquire returns by its wait,
 * and dlock_client_free does not wait for the subscriber's round of
 * questions to end.
 */
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-sentinel.h"
#include "test-util.h"

#define SERVICE "mymaster"
/* Long enough that a round of questions to three silent sentinels takes
 * three command timeouts (3 s each by default). */
#define OPTIONS "?connect-timeout=20s"

typedef struct waiter {
	dlock_lock *lock;
	int rc;
	gint done;
} waiter;

static gpointer wait_for_lock(gpointer data)
{
	waiter *w = data;

	w->rc = dlock_acquire(w->lock, 60000);
	g_atomic_int_set(&w->done, 1);
	return NULL;
}

static bool waiter_done(void *data)
{
	waiter *w = data;

	return g_atomic_int_get(&w->done);
}

static dlock_client *new_client(test_sentinel *ts)
{
	char *uri = test_sentinel_uri(ts, OPTIONS);
	dlock_client *client;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	g_free(uri);
	return client;
}

static void silence_everything(test_sentinel *ts)
{
	test_redis *master = test_sentinel_master(ts);

	for (int i = 0; i < TEST_SENTINEL_COUNT; i++)
		test_sentinel_freeze(ts, i);
	test_redis_signal(master, SIGKILL);
}

/*
 * A waiter's subscriber loses the master and asks the silent sentinels
 * again (a round of about 9 s); the client is freed meanwhile, and must
 * not wait for that round.
 */
static void test_client_free_does_not_wait_for_silent_sentinels(void **state)
{
	const char *resource = "sentinel/silence/free";
	test_sentinel *ts = test_sentinel_start(SERVICE, 1, NULL, NULL);
	dlock_client *holder_client = new_client(ts), *client = new_client(ts);
	dlock_lock *held;
	waiter w = { 0 };
	GThread *thread;
	gint64 start_us, elapsed_ms;

	(void)state;
	assert_int_equal(dlock_lock_new(holder_client, resource, &held), DLOCK_OK);
	assert_int_equal(dlock_acquire(held, 0), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, resource, &w.lock), DLOCK_OK);
	thread = g_thread_new("waiter", wait_for_lock, &w);
	/* Waiting, its subscriber connected to the master. */
	assert_false(test_poll_window(waiter_done, &w, 500));

	silence_everything(ts);
	g_usleep(1500 * 1000);
	assert_false(waiter_done(&w));

	start_us = g_get_monotonic_time();
	dlock_client_free(client);
	elapsed_ms = (g_get_monotonic_time() - start_us) / 1000;
	g_thread_join(thread);
	print_message("dlock_client_free took %" G_GINT64_FORMAT " ms; the wait ended %s\n", elapsed_ms,
	              dlock_code_name(w.rc));
	assert_int_equal(w.rc, DLOCK_ECANCELED);
	/* The deferred delete of the wait's queue entry takes up to 500 ms
	 * an attempt: one running, and a last one at close. */
	assert_true(elapsed_ms < 2500 * test_slack_factor());

	dlock_lock_free(w.lock); /* only its memory, after the client's free */
	dlock_lock_free(held);
	dlock_client_free(holder_client);
	test_sentinel_stop(ts);
}

/* An acquire over silent sentinels returns by its wait, naming them. */
static void test_an_acquire_returns_by_its_wait_while_the_sentinels_are_silent(void **state)
{
	test_sentinel *ts = test_sentinel_start(SERVICE, 1, NULL, NULL);
	dlock_client *client = new_client(ts);
	dlock_lock *lock;
	gint64 start_us, elapsed_ms;
	int rc;

	(void)state;
	assert_int_equal(dlock_lock_new(client, "sentinel/silence/acquire", &lock), DLOCK_OK);
	silence_everything(ts);
	start_us = g_get_monotonic_time();
	rc = dlock_acquire(lock, 1000);
	elapsed_ms = (g_get_monotonic_time() - start_us) / 1000;
	print_message("acquire: %s after %" G_GINT64_FORMAT " ms: %s\n", dlock_code_name(rc), elapsed_ms,
	              dlock_last_error_message());
	assert_true(rc == DLOCK_EUNAVAILABLE || rc == DLOCK_ETIMEDOUT);
	assert_true(elapsed_ms < 1000 + 500 * test_slack_factor());
	for (int i = 0; i < TEST_SENTINEL_COUNT; i++) {
		char *named = g_strdup_printf("127.0.0.1:%d", test_sentinel_port(ts, i));

		assert_non_null(strstr(dlock_last_error_message(), named));
		g_free(named);
	}
	dlock_lock_free(lock);
	start_us = g_get_monotonic_time();
	dlock_client_free(client);
	elapsed_ms = (g_get_monotonic_time() - start_us) / 1000;
	print_message("dlock_client_free took %" G_GINT64_FORMAT " ms\n", elapsed_ms);
	assert_true(elapsed_ms < 1000 * test_slack_factor());
	test_sentinel_stop(ts);
}

/*
 * A short wait gives the first sentinel all its time (each gets at least
 * 250 ms): while that one is silent, such calls never reach the others,
 * unless the one that failed to answer is asked last from then on.
 */
static void test_a_silent_first_sentinel_is_asked_last_by_the_next_calls(void **state)
{
	test_sentinel *ts = test_sentinel_start(SERVICE, 1, NULL, NULL);
	dlock_client *client = new_client(ts);
	dlock_lock *lock;
	int ok = 0;

	(void)state;
	assert_int_equal(dlock_lock_new(client, "sentinel/silence/first", &lock), DLOCK_OK);
	test_sentinel_freeze(ts, 0);
	for (int i = 0; i < 4; i++) {
		int rc = dlock_acquire(lock, 200);

		print_message("acquire %d, wait 200 ms: %s%s%s\n", i, dlock_code_name(rc), rc ? ": " : "",
		              rc ? dlock_last_error_message() : "");
		if (rc == DLOCK_OK) {
			ok++;
			assert_int_equal(dlock_release(lock), DLOCK_OK);
		}
	}
	/* The first may spend its time on the silent sentinel; not the rest. */
	assert_true(ok >= 3);
	dlock_lock_free(lock);
	dlock_client_free(client);
	test_sentinel_stop(ts);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_client_free_does_not_wait_for_silent_sentinels),
		cmocka_unit_test(test_an_acquire_returns_by_its_wait_while_the_sentinels_are_silent),
		cmocka_unit_test(test_a_silent_first_sentinel_is_asked_last_by_the_next_calls),
	};

	(void)argc;
	test_init(argv[0]);
	return test_finish(cmocka_run_group_tests_name("redis-sentinel-silence", tests, NULL, NULL));
}
