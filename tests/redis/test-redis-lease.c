/* SPDX-License-Identifier: MIT */
/*
 * Leases: the watchdog keeps them alive, and the library notices by itself
 * when one ends without a release — the key deleted or overwritten, the
 * server silent, the server restarted empty — and reports it.
 */
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-events.h"
#include "test-redis.h"

static test_redis *server;


static bool key_gone(void *arg)
{
	return test_redis_int(server, "EXISTS %s", (const char *)arg) == 0;
}


static bool got_lost(void *arg)
{
	return test_events_first_at(arg, DLOCK_STATE_LOST) >= 0;
}

typedef struct held_lock {
	dlock_client *client;
	dlock_lock *lock;
	test_events ev;
} held_lock;

static void hold(held_lock *h, const char *resource, int64_t ttl_ms, int watchdog)
{
	char *uri = test_redis_uri(server, "?command-timeout=300ms");

	memset(&h->ev, 0, sizeof(h->ev));
	test_events_init(&h->ev);
	assert_int_equal(dlock_client_new(uri, &h->client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(h->client, resource, &h->lock), DLOCK_OK);
	assert_int_equal(dlock_lock_set_ttl(h->lock, ttl_ms), DLOCK_OK);
	assert_int_equal(dlock_lock_set_watchdog(h->lock, watchdog), DLOCK_OK);
	assert_int_equal(dlock_lock_set_state_callback(h->lock, test_events_record, &h->ev), DLOCK_OK);
	assert_int_equal(dlock_acquire(h->lock, 5000), DLOCK_OK);
	g_free(uri);
}

static void drop(held_lock *h)
{
	dlock_lock_free(h->lock);
	dlock_client_free(h->client);
	test_events_clear(&h->ev);
}

static int try_other_client(const char *resource)
{
	char *uri = test_redis_uri(server, NULL);
	dlock_client *client;
	dlock_lock *lock;
	int rc;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, resource, &lock), DLOCK_OK);
	rc = dlock_acquire(lock, 0);
	if (rc == DLOCK_OK)
		dlock_release(lock);
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_free(uri);
	return rc;
}

static void test_watchdog_keeps_short_lease_alive(void **state)
{
	held_lock h;
	int64_t until;

	hold(&h, "lease/alive", 1000, 1);
	until = test_now_ms() + 3500;
	while (test_now_ms() < until) {
		long long pttl = test_redis_int(server, "PTTL %s", "dlock:{lease/alive}");

		assert_true(pttl > 0 && pttl <= 1000);
		assert_true(dlock_held(h.lock));
		assert_int_equal(try_other_client("lease/alive"), DLOCK_EBUSY);
		g_usleep(250000);
	}
	assert_int_equal(test_events_count(&h.ev), 0);
	assert_int_equal(dlock_release(h.lock), DLOCK_OK);
	assert_int_equal(test_redis_int(server, "EXISTS %s", "dlock:{lease/alive}"), 0);
	drop(&h);
}

static void test_lease_without_watchdog_runs_out_and_is_reported_lost(void **state)
{
	held_lock h;
	int64_t t0 = test_now_ms();

	hold(&h, "lease/nowatchdog", 500, 0);
	assert_true(test_wait_until(got_lost, &h.ev, 3000));
	/* Declared lost no later than the lease's end on the server. */
	assert_true(test_events_first_at(&h.ev, DLOCK_STATE_LOST) - t0 <= 600);
	assert_false(dlock_held(h.lock));
	g_usleep(100000);
	assert_int_equal(test_redis_int(server, "EXISTS %s", "dlock:{lease/nowatchdog}"), 0);
	assert_int_equal(dlock_release(h.lock), DLOCK_ELOST);
	drop(&h);
}

static void check_lost_after_tampering(const char *resource, const char *cmd)
{
	char *key = g_strdup_printf("dlock:{%s}", resource);
	held_lock h;
	int64_t tampered;
	int lost;

	hold(&h, resource, 900, 1);
	tampered = test_now_ms();
	if (strcmp(cmd, "DEL") == 0)
		assert_int_equal(test_redis_int(server, "DEL %s", key), 1);
	else
		freeReplyObject(test_redis_cmd(server, "SET %s %s", key, "someone-else"));
	assert_true(test_wait_until(got_lost, &h.ev, 3000));
	lost = test_events_index(&h.ev, DLOCK_STATE_LOST);
	/* Noticed by the next renewal: within TTL/3 plus scheduling slack. */
	assert_true(h.ev.at_ms[lost] - tampered <= 300 + test_slack(250));
	assert_false(dlock_held(h.lock));
	assert_int_equal(dlock_fencing_token(h.lock), 0);
	assert_int_equal(dlock_release(h.lock), DLOCK_ELOST);
	assert_int_equal(dlock_release(h.lock), DLOCK_ENOTHELD);
	if (strcmp(cmd, "SET") == 0) {
		/* The other owner's value is left alone. */
		char *value = test_redis_str(server, "GET %s", key);

		assert_string_equal(value, "someone-else");
		g_free(value);
		test_redis_int(server, "DEL %s", key);
	}
	drop(&h);
	g_free(key);
}

static void test_deleted_key_is_reported_lost_within_a_renewal(void **state)
{
	check_lost_after_tampering("lease/deleted", "DEL");
}

static void test_overwritten_key_is_reported_lost_within_a_renewal(void **state)
{
	check_lost_after_tampering("lease/overwritten", "SET");
}

static void test_silent_server_gives_suspended_then_lost_before_lease_ends(void **state)
{
	held_lock h;
	int64_t stopped;
	int suspended, lost;

	hold(&h, "lease/silent", 1000, 1);
	g_usleep(100000);
	test_redis_signal(server, SIGSTOP);
	stopped = test_now_ms();
	assert_true(test_wait_until(got_lost, &h.ev, 5000));
	test_redis_signal(server, SIGCONT);
	suspended = test_events_index(&h.ev, DLOCK_STATE_SUSPENDED);
	lost = test_events_index(&h.ev, DLOCK_STATE_LOST);
	assert_true(suspended >= 0);
	assert_true(suspended < lost);
	/* The last renewal the server saw was sent before the stop, so its
	 * lease ends at most TTL after the stop: LOST must come before. */
	print_message("suspended after %" PRId64 " ms, lost after %" PRId64 " ms\n",
	              h.ev.at_ms[suspended] - stopped, h.ev.at_ms[lost] - stopped);
	assert_true(h.ev.at_ms[lost] - stopped < 1000);
	assert_false(dlock_held(h.lock));
	assert_int_equal(dlock_release(h.lock), DLOCK_ELOST);
	drop(&h);
	/* The server resumed: the key goes (deferred delete or expiry), and
	 * another client can take the lock. */
	assert_true(test_wait_until(key_gone, "dlock:{lease/silent}", 3000));
	assert_int_equal(try_other_client("lease/silent"), DLOCK_OK);
}

static void test_restarted_server_loses_hold_and_tokens_keep_increasing(void **state)
{
	held_lock h;
	uint64_t before;

	hold(&h, "lease/restart", 1000, 1);
	before = dlock_fencing_token(h.lock);
	test_redis_restart(server);
	assert_true(test_wait_until(got_lost, &h.ev, 5000));
	assert_false(dlock_held(h.lock));
	assert_int_equal(dlock_release(h.lock), DLOCK_ELOST);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(dlock_acquire(h.lock, 5000), DLOCK_OK);
		assert_true(dlock_fencing_token(h.lock) > before);
		before = dlock_fencing_token(h.lock);
		assert_int_equal(dlock_release(h.lock), DLOCK_OK);
	}
	assert_true(test_wait_until(key_gone, "dlock:{lease/restart}", 1000));
	drop(&h);
}

/* Runs last: a group teardown's failure would not fail the program. */
/*
 * A peer's key with an expiry far beyond any lease (Redis takes PX up to
 * about 9.2e18 ms): the waiter's sleep is bounded by its backoff, and the
 * PTTL hint, turned into microseconds, must not overflow into a negative
 * sleep and a busy loop of tries.
 */
static void test_waiter_on_a_peer_key_with_enormous_expiry_backs_off(void **state)
{
	char *uri = test_redis_uri(server, NULL);
	dlock_client *client;
	dlock_lock *lock;
	long long tries_before, tries;
	int64_t t0, elapsed;

	(void)state;
	redisReply *r = test_redis_cmd(server, "SET dlock:{lease/enormous} peer PX 9000000000000000000");
	assert_non_null(r);
	assert_int_equal(r->type, REDIS_REPLY_STATUS);
	freeReplyObject(r);
	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "lease/enormous", &lock), DLOCK_OK);
	tries_before = test_redis_calls(server, "evalsha") + test_redis_calls(server, "eval");
	t0 = test_now_ms();
	assert_int_equal(dlock_acquire(lock, 1500), DLOCK_ETIMEDOUT);
	elapsed = test_now_ms() - t0;
	tries = test_redis_calls(server, "evalsha") + test_redis_calls(server, "eval") - tries_before;
	print_message("%lld tries in %" PRId64 " ms\n", tries, elapsed);
	/* Backoff from 50 ms doubling: about 6 tries in 1.5 s, plus one per
	 * subscription confirmation. */
	assert_true(tries <= 20);
	assert_true(elapsed < 1500 + test_slack(500));

	dlock_lock_free(lock);
	dlock_client_free(client);
	assert_int_equal(test_redis_int(server, "DEL dlock:{lease/enormous}"), 1);
	g_free(uri);
}

static void test_no_lock_key_of_this_suite_remains(void **state)
{
	assert_int_equal(test_redis_leftover_keys(server, "dlock:{lease/"), 0);
}

static int setup(void **state)
{
	server = test_redis_start(NULL, NULL, false);
	return 0;
}

static int teardown(void **state)
{
	test_redis_stop(server);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_watchdog_keeps_short_lease_alive),
		cmocka_unit_test(test_lease_without_watchdog_runs_out_and_is_reported_lost),
		cmocka_unit_test(test_deleted_key_is_reported_lost_within_a_renewal),
		cmocka_unit_test(test_overwritten_key_is_reported_lost_within_a_renewal),
		cmocka_unit_test(test_silent_server_gives_suspended_then_lost_before_lease_ends),
		cmocka_unit_test(test_restarted_server_loses_hold_and_tokens_keep_increasing),
		cmocka_unit_test(test_waiter_on_a_peer_key_with_enormous_expiry_backs_off),
		cmocka_unit_test(test_no_lock_key_of_this_suite_remains),
	};

	return test_finish(cmocka_run_group_tests_name("redis-lease", tests, setup, teardown));
}
