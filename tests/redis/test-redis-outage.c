/* SPDX-License-Identifier: MIT */
/*
 * A server that stops answering: a release returns promptly and the key
 * is deleted in the background once the server answers again (well before
 * the lease would have ended it); a deadline bounds an acquire whatever the
 * server does.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-redis.h"

static test_redis *server;

static bool key_gone(void *arg)
{
	return test_redis_int(server, "EXISTS %s", (const char *)arg) == 0;
}

static void test_release_during_outage_returns_at_once_and_deletes_later(void **state)
{
	char *uri = test_redis_uri(server, "?command-timeout=300ms&connect-timeout=300ms");
	dlock_client *client;
	dlock_lock *lock;
	int64_t t0, resumed;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "outage/release", &lock), DLOCK_OK);
	assert_int_equal(dlock_lock_set_ttl(lock, 20000), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_OK);
	test_redis_signal(server, SIGSTOP);
	t0 = test_now_ms();
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	/* One bounded attempt (the command timeout), then it goes on behind. */
	assert_true(test_now_ms() - t0 < 800);
	assert_false(dlock_held(lock));
	assert_int_equal(dlock_release(lock), DLOCK_ENOTHELD);
	test_redis_signal(server, SIGCONT);
	resumed = test_now_ms();
	/* The 20 s lease cannot explain this: the deferred delete did it. */
	assert_true(test_wait_until(key_gone, "dlock:{outage/release}", 5000));
	assert_true(test_now_ms() - resumed < 5000);
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_free(uri);
}

/*
 * The pooled connection times out on the frozen server; trying a fresh one
 * after that would only wait out a second timeout.  One command timeout
 * (1 s here) bounds the whole release.
 */
static void test_release_on_frozen_server_returns_within_one_command_timeout(void **state)
{
	char *uri = test_redis_uri(server, "?command-timeout=1s&connect-timeout=1s");
	dlock_client *client;
	dlock_lock *lock;
	int64_t t0, elapsed, resumed;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "outage/one-timeout", &lock), DLOCK_OK);
	assert_int_equal(dlock_lock_set_ttl(lock, 20000), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_OK);
	test_redis_signal(server, SIGSTOP);
	t0 = test_now_ms();
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	elapsed = test_now_ms() - t0;
	assert_false(dlock_held(lock));
	test_redis_signal(server, SIGCONT);
	resumed = test_now_ms();
	print_message("release took %lld ms\n", (long long)elapsed);
	assert_true(elapsed < 1000 + test_slack(300));
	assert_true(test_wait_until(key_gone, "dlock:{outage/one-timeout}", 5000));
	assert_true(test_now_ms() - resumed < 5000);
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_free(uri);
}

static bool no_outage_many_key(void *arg)
{
	return test_redis_count_keys(server, "dlock:{outage/many-*}") == 0;
}

static void test_many_releases_during_outage_cost_one_timeout(void **state)
{
	enum { N = 5 };
	char *uri = test_redis_uri(server, "?command-timeout=300ms&connect-timeout=300ms");
	dlock_client *client;
	dlock_lock *locks[N];
	int64_t t0, elapsed;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	for (int i = 0; i < N; i++) {
		char name[32];

		g_snprintf(name, sizeof(name), "outage/many-%d", i);
		assert_int_equal(dlock_lock_new(client, name, &locks[i]), DLOCK_OK);
		assert_int_equal(dlock_lock_set_ttl(locks[i], 20000), DLOCK_OK);
		assert_int_equal(dlock_acquire(locks[i], 0), DLOCK_OK);
	}
	test_redis_signal(server, SIGSTOP);
	t0 = test_now_ms();
	for (int i = 0; i < N; i++)
		assert_int_equal(dlock_release(locks[i]), DLOCK_OK);
	elapsed = test_now_ms() - t0;
	test_redis_signal(server, SIGCONT);
	/* The first release waits out the command timeout; the rest defer at
	 * once instead of paying it again (5 x 300 ms). */
	assert_true(elapsed < 900);
	assert_true(test_wait_until(no_outage_many_key, NULL, 5000));
	for (int i = 0; i < N; i++)
		dlock_lock_free(locks[i]);
	dlock_client_free(client);
	g_free(uri);
}

static void test_deadline_bounds_acquire_against_a_silent_server(void **state)
{
	char *uri = test_redis_uri(server, "?command-timeout=2s");
	dlock_client *client;
	dlock_lock *lock;
	int64_t t0;
	int rc;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "outage/deadline", &lock), DLOCK_OK);
	/* Warm the pool so the silent server is met mid-command. */
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_OK);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	test_redis_signal(server, SIGSTOP);
	t0 = test_now_ms();
	rc = dlock_acquire(lock, 300);
	assert_true(test_now_ms() - t0 < 700);
	assert_true(rc == DLOCK_ETIMEDOUT || rc == DLOCK_EUNAVAILABLE);
	test_redis_signal(server, SIGCONT);
	/* Whatever that try may have set is cleaned up; then it works again. */
	assert_true(test_wait_until(key_gone, "dlock:{outage/deadline}", 5000));
	assert_int_equal(dlock_acquire(lock, 5000), DLOCK_OK);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_free(uri);
}

static int setup(void **state)
{
	server = test_redis_start(NULL, NULL, false);
	return 0;
}

static void test_no_lock_key_of_this_suite_remains(void **state)
{
	assert_int_equal(test_redis_leftover_keys(server, "dlock:{outage/"), 0);
}

static int teardown(void **state)
{
	test_redis_stop(server);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_release_during_outage_returns_at_once_and_deletes_later),
		cmocka_unit_test(test_release_on_frozen_server_returns_within_one_command_timeout),
		cmocka_unit_test(test_many_releases_during_outage_cost_one_timeout),
		cmocka_unit_test(test_deadline_bounds_acquire_against_a_silent_server),
		cmocka_unit_test(test_no_lock_key_of_this_suite_remains),
	};

	test_init(argv[0]);
	return test_finish(cmocka_run_group_tests_name("redis-outage", tests, setup, teardown));
}
