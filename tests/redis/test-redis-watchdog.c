/* SPDX-License-Identifier: MIT */
/*
 * The watchdog under faults that touch several leases at once: a script
 * cache flushed while renewals go out pipelined, and a watchdog stuck in
 * I/O on a stalled link (a renewal, a reconnect, a deferred release) while
 * another lease runs out.  Each lease must get
 * its own outcome, and a lease must be reported LOST by its end whatever
 * the watchdog is blocked on.
 */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-events.h"
#include "test-proxy.h"
#include "test-redis.h"
#include "test-resume.h"

static test_redis *server;


static bool key_gone(void *arg)
{
	return test_redis_int(server, "EXISTS %s", (const char *)arg) == 0;
}

static bool got_lost(void *arg)
{
	return test_events_first_at(arg, DLOCK_STATE_LOST) >= 0;
}

static dlock_lock *new_lock(dlock_client *client, const char *resource, int64_t ttl_ms,
                            int watchdog, test_events *ev)
{
	dlock_lock *lock;

	memset(ev, 0, sizeof(*ev));
	test_events_init(ev);
	assert_int_equal(dlock_lock_new(client, resource, &lock), DLOCK_OK);
	assert_int_equal(dlock_lock_set_ttl(lock, ttl_ms), DLOCK_OK);
	assert_int_equal(dlock_lock_set_watchdog(lock, watchdog), DLOCK_OK);
	assert_int_equal(dlock_lock_set_state_callback(lock, test_events_record, ev), DLOCK_OK);
	return lock;
}

#define FLUSH_LOCKS 4
#define FLUSH_VICTIM 2

/*
 * Renewals of leases due together go out pipelined.  After SCRIPT FLUSH
 * each of them answers NOSCRIPT; the one whose key a peer overwrote must be
 * reported LOST, and the others renewed, never LOST.
 */
static void test_script_flush_gives_each_pipelined_renewal_its_own_result(void **state)
{
	char *uri = test_redis_uri(server, "?command-timeout=3s");
	dlock_client *client;
	dlock_lock *locks[FLUSH_LOCKS];
	test_events ev[FLUSH_LOCKS];
	char *keys[FLUSH_LOCKS];
	char *value;
	redisReply *reply;
	int64_t t0, until;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	for (int i = 0; i < FLUSH_LOCKS; i++) {
		char *resource = g_strdup_printf("wd/flush/%d", i);

		keys[i] = g_strdup_printf("dlock:{%s}", resource);
		locks[i] = new_lock(client, resource, 1500, 1, &ev[i]);
		g_free(resource);
	}
	for (int i = 0; i < FLUSH_LOCKS; i++)
		assert_int_equal(dlock_acquire(locks[i], 5000), DLOCK_OK);
	t0 = test_now_ms();

	/* Hold the first renewal (due 500 ms after its acquire) at the server
	 * until the others are due too: from then on they share one send time
	 * and go out in one pipelined batch. */
	g_usleep(300 * 1000);
	reply = test_redis_cmd(server, "CLIENT PAUSE 500 ALL");
	assert_non_null(reply);
	assert_int_equal(reply->type, REDIS_REPLY_STATUS);
	freeReplyObject(reply);
	g_usleep(600 * 1000);

	/* A peer takes the victim's key; keep the script cache empty for
	 * several renewal periods so every batch meets NOSCRIPT. */
	freeReplyObject(test_redis_cmd(server, "SET %s %s PX 10000", keys[FLUSH_VICTIM], "peer-value"));
	until = test_now_ms() + 2500;
	while (test_now_ms() < until) {
		freeReplyObject(test_redis_cmd(server, "SCRIPT FLUSH"));
		g_usleep(20 * 1000);
	}
	print_message("flushing ended %" PRId64 " ms after the acquires\n", test_now_ms() - t0);

	assert_true(test_wait_until(got_lost, &ev[FLUSH_VICTIM], 2000));
	assert_false(dlock_held(locks[FLUSH_VICTIM]));
	value = test_redis_str(server, "GET %s", keys[FLUSH_VICTIM]);
	assert_non_null(value);
	assert_string_equal(value, "peer-value");
	g_free(value);
	for (int i = 0; i < FLUSH_LOCKS; i++) {
		long long pttl;

		if (i == FLUSH_VICTIM)
			continue;
		pttl = test_redis_int(server, "PTTL %s", keys[i]);
		print_message("lock %d: PTTL %lld, lost at %" PRId64 "\n", i, pttl,
		              test_events_first_at(&ev[i], DLOCK_STATE_LOST));
		assert_int_equal(test_events_first_at(&ev[i], DLOCK_STATE_LOST), -1);
		assert_true(dlock_held(locks[i]));
		/* Renewed every 500 ms, so never much below TTL - 500 ms; without
		 * renewals since the flush began it would be gone. */
		assert_true(pttl > 700 && pttl <= 1500);
	}

	for (int i = 0; i < FLUSH_LOCKS; i++) {
		assert_int_equal(dlock_release(locks[i]), i == FLUSH_VICTIM ? DLOCK_ELOST : DLOCK_OK);
		dlock_lock_free(locks[i]);
		test_events_clear(&ev[i]);
	}
	dlock_client_free(client);
	/* The peer's value is left alone. */
	value = test_redis_str(server, "GET %s", keys[FLUSH_VICTIM]);
	assert_non_null(value);
	assert_string_equal(value, "peer-value");
	g_free(value);
	test_redis_int(server, "DEL %s", keys[FLUSH_VICTIM]);
	for (int i = 0; i < FLUSH_LOCKS; i++)
		g_free(keys[i]);
	g_free(uri);
}

static bool not_held(void *arg)
{
	return !dlock_held(arg);
}

/*
 * A peer connected directly (not through the stalled proxy) takes the
 * short lease's lock (in database db, "" or "/N") once the server
 * expires it.  dlock must stop calling
 * the lock held, and report LOST, by the lease's end: short_sent is test
 * time just before the short lease's acquire was sent.  The slack covers
 * only thread wake-ups on a loaded machine (the library aims at the lease
 * end less a margin of 1% + 5 ms).
 */
static void assert_lost_by_lease_end(dlock_lock *short_lock, test_events *short_ev, int64_t ttl_ms,
                                     int64_t short_sent, const char *db)
{
	char *peer_uri = test_redis_uri(server, db);
	dlock_client *peer_client;
	dlock_lock *peer;
	int64_t peer_got, held_until, lost_at;

	assert_int_equal(dlock_client_new(peer_uri, &peer_client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(peer_client, dlock_lock_resource(short_lock), &peer), DLOCK_OK);
	assert_int_equal(dlock_acquire(peer, 5000), DLOCK_OK);
	peer_got = test_now_ms();
	test_wait_until(not_held, short_lock, 5000);
	held_until = test_now_ms();
	test_wait_until(got_lost, short_ev, 5000);
	lost_at = test_events_first_at(short_ev, DLOCK_STATE_LOST);
	print_message("short lease: peer got it after %" PRId64 " ms, dlock_held 0 after %" PRId64
	              " ms, LOST after %" PRId64 " ms\n", peer_got - short_sent, held_until - short_sent,
	              lost_at < 0 ? -1 : lost_at - short_sent);
	assert_true(held_until - short_sent <= ttl_ms + test_slack(50));
	assert_true(lost_at >= 0);
	assert_true(lost_at - short_sent <= ttl_ms + test_slack(100));
	assert_int_equal(dlock_release(peer), DLOCK_OK);
	dlock_lock_free(peer);
	dlock_client_free(peer_client);
	g_free(peer_uri);
}

/* A client whose every connection goes through proxy; suffix: the URI's
 * database and options ("/1?ttl=1s"). */
static dlock_client *proxied_client(test_proxy *proxy, const char *suffix)
{
	char *uri = g_strdup_printf("redis://127.0.0.1:%d%s", test_proxy_port(proxy), suffix);
	dlock_client *client;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	g_free(uri);
	return client;
}

/*
 * A long lease's renewal blocks on a stalled link (up to its budget of one
 * renewal period, 2 s) while a 900 ms lease with the watchdog off runs
 * out.
 */
static void test_lease_is_lost_on_time_while_watchdog_blocks_in_a_renewal(void **state)
{
	test_proxy *proxy = test_proxy_start_proto(TEST_PROXY_REDIS, server->port);
	dlock_client *client = proxied_client(proxy, "?command-timeout=5s");
	dlock_lock *long_lock, *short_lock;
	test_events long_ev, short_ev;
	int64_t t0, short_sent;

	long_lock = new_lock(client, "wd/stall/long", 6000, 1, &long_ev);
	short_lock = new_lock(client, "wd/stall/short", 900, 0, &short_ev);
	t0 = test_now_ms();
	assert_int_equal(dlock_acquire(long_lock, 5000), DLOCK_OK);
	/* The long lease's first renewal goes out 2 s after t0, the short
	 * lease ends 2.3 s after it. */
	g_usleep(1400 * 1000);
	short_sent = test_now_ms();
	assert_int_equal(dlock_acquire(short_lock, 5000), DLOCK_OK);
	g_usleep(300 * 1000);
	test_proxy_stall(proxy, TEST_PROXY_BOTH);
	print_message("stalled %" PRId64 " ms after the long acquire\n", test_now_ms() - t0);

	assert_lost_by_lease_end(short_lock, &short_ev, 900, short_sent, "");

	test_proxy_unstall(proxy, TEST_PROXY_BOTH);
	assert_int_equal(dlock_release(short_lock), DLOCK_ELOST);
	dlock_release(long_lock);
	dlock_lock_free(short_lock);
	dlock_lock_free(long_lock);
	dlock_client_free(client);
	test_proxy_stop(proxy);
	test_events_clear(&long_ev);
	test_events_clear(&short_ev);
}

/*
 * The link drops; the watchdog's reconnect for the long lease's renewal
 * gets no answer to SELECT and waits (up to its budget, 2 s) while a
 * 900 ms lease with the watchdog off runs out.
 */
static void test_lease_is_lost_on_time_while_watchdog_reconnects(void **state)
{
	test_proxy *proxy = test_proxy_start_proto(TEST_PROXY_REDIS, server->port);
	dlock_client *client = proxied_client(proxy, "/1?command-timeout=5s");
	dlock_lock *long_lock, *short_lock;
	test_events long_ev, short_ev;
	int64_t short_sent;

	long_lock = new_lock(client, "wd/reconnect/long", 6000, 1, &long_ev);
	short_lock = new_lock(client, "wd/reconnect/short", 900, 0, &short_ev);
	assert_int_equal(dlock_acquire(long_lock, 5000), DLOCK_OK);
	/* As above: the long lease's renewal is due 2 s after its acquire,
	 * the short lease ends 2.3 s after it. */
	g_usleep(1400 * 1000);
	short_sent = test_now_ms();
	assert_int_equal(dlock_acquire(short_lock, 5000), DLOCK_OK);
	g_usleep(300 * 1000);
	/* The renewal finds its connection reset; the reconnect's SELECT is
	 * never answered. */
	test_proxy_drop_replies(proxy, "SELECT", 1, false);
	test_proxy_reset_all(proxy);

	assert_lost_by_lease_end(short_lock, &short_ev, 900, short_sent, "/1");
	assert_int_equal(test_proxy_dropped(proxy), 1);

	assert_int_equal(dlock_release(short_lock), DLOCK_ELOST);
	dlock_release(long_lock);
	dlock_lock_free(short_lock);
	dlock_lock_free(long_lock);
	dlock_client_free(client);
	test_proxy_stop(proxy);
	test_events_clear(&long_ev);
	test_events_clear(&short_ev);
}

/*
 * A deferred release is retried by the watchdog in the background, each
 * attempt waiting up to the command timeout (500 ms) for an answer; the
 * proxy discards the answers, so the watchdog sits in that wait while a
 * 600 ms lease with the watchdog off runs out.
 */
static void test_lease_is_lost_on_time_while_watchdog_retries_a_deferred_release(void **state)
{
	test_proxy *proxy = test_proxy_start_proto(TEST_PROXY_REDIS, server->port);
	dlock_client *client = proxied_client(proxy, "?command-timeout=500ms");
	dlock_lock *first, *deferred, *short_lock;
	test_events first_ev, deferred_ev, short_ev;
	int64_t short_sent;

	first = new_lock(client, "wd/defer/first", 10000, 1, &first_ev);
	deferred = new_lock(client, "wd/defer/deferred", 10000, 1, &deferred_ev);
	short_lock = new_lock(client, "wd/defer/short", 600, 0, &short_ev);
	assert_int_equal(dlock_acquire(first, 5000), DLOCK_OK);
	assert_int_equal(dlock_acquire(deferred, 5000), DLOCK_OK);

	/* The release script's answer is lost (a release makes one attempt
	 * within one command timeout): the release is deferred, and so are
	 * the releases of the next second, at once. */
	test_proxy_drop_replies(proxy, "EVALSHA", 1, false);
	assert_int_equal(dlock_release(first), DLOCK_OK);
	assert_int_equal(test_proxy_dropped(proxy), 1);

	short_sent = test_now_ms();
	assert_int_equal(dlock_acquire(short_lock, 5000), DLOCK_OK);
	/* From now on the background deletes get no answer; the first one
	 * starts 400 ms into the short lease and waits past its end. */
	test_proxy_drop_replies(proxy, "EVAL", 3, false);
	g_usleep(400 * 1000);
	assert_int_equal(dlock_release(deferred), DLOCK_OK);
	print_message("deferred release returned %" PRId64 " ms after the short acquire\n",
	              test_now_ms() - short_sent);

	assert_lost_by_lease_end(short_lock, &short_ev, 600, short_sent, "");

	/* The deletes ran on the server; their answers were what got lost. */
	assert_true(test_wait_until(key_gone, "dlock:{wd/defer/first}", 5000));
	assert_true(test_wait_until(key_gone, "dlock:{wd/defer/deferred}", 5000));
	assert_int_equal(dlock_release(short_lock), DLOCK_ELOST);
	dlock_lock_free(short_lock);
	dlock_lock_free(deferred);
	dlock_lock_free(first);
	dlock_client_free(client);
	test_proxy_stop(proxy);
	test_events_clear(&first_ev);
	test_events_clear(&deferred_ev);
	test_events_clear(&short_ev);
}

static bool got_suspended(void *arg)
{
	return test_events_first_at(arg, DLOCK_STATE_SUSPENDED) >= 0;
}

static bool got_reconnected(void *arg)
{
	return test_events_first_at(arg, DLOCK_STATE_RECONNECTED) >= 0;
}

/* Connections the watchdog may open in 3 s of renewal retries against a
 * far end that takes each one and closes it: a retry every 100 ms would
 * be about 30. */
#define SLAMMED_RETRIES_MAX 12

/*
 * The server goes behind something that accepts each connection and
 * closes it at once.  A suspended lease's renewals retry with a capped,
 * growing backoff, not a new connection every 100 ms for the rest of the
 * lease; and once connections are forwarded again, a retry before the
 * lease's end renews it.
 */
static void test_suspended_renewals_back_off_from_a_far_end_that_closes_each_connection(
	void **state)
{
	test_proxy *proxy = test_proxy_start_proto(TEST_PROXY_REDIS, server->port);
	dlock_client *client = proxied_client(proxy, "?command-timeout=500ms");
	dlock_lock *lock;
	test_events ev;
	int64_t acquired, suspended;
	int baseline, opened;

	lock = new_lock(client, "wd/slam", 10000, 1, &ev);
	assert_int_equal(dlock_acquire(lock, 5000), DLOCK_OK);
	acquired = test_now_ms();
	test_proxy_admit_mode(proxy, TEST_PROXY_SLAM);
	test_proxy_reset_all(proxy);
	baseline = test_proxy_accepted(proxy);

	/* The first renewal, a third into the lease, finds no server. */
	assert_true(test_wait_until(got_suspended, &ev, 8000));
	suspended = test_now_ms();
	g_usleep(3000 * 1000);
	opened = test_proxy_accepted(proxy) - baseline;
	print_message("suspended %" PRId64 " ms after the acquire; %d connections in the next %" PRId64
	              " ms\n", suspended - acquired, opened, test_now_ms() - suspended);
	assert_true(opened >= 1);
	assert_true(opened < SLAMMED_RETRIES_MAX);
	assert_int_equal(test_events_first_at(&ev, DLOCK_STATE_LOST), -1);

	/* The server is reachable again well before the lease ends (10 s
	 * after the acquire): a retry renews it. */
	test_proxy_admit_mode(proxy, TEST_PROXY_ADMIT);
	assert_true(test_wait_until(got_reconnected, &ev, 4000));
	print_message("reconnected %" PRId64 " ms after the acquire\n",
	              test_events_first_at(&ev, DLOCK_STATE_RECONNECTED) - acquired);
	assert_int_equal(test_events_first_at(&ev, DLOCK_STATE_LOST), -1);
	assert_true(dlock_held(lock));
	assert_true(test_redis_int(server, "PTTL dlock:{wd/slam}") > 5000);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	dlock_lock_free(lock);
	dlock_client_free(client);
	test_proxy_stop(proxy);
	test_events_clear(&ev);
}

/*
 * A holder paused past its lease's end while another process acquires
 * does not see the lock as its own for a moment after it resumes: the
 * lease's end is judged by the clock when asked, not when the expiry
 * thread next wakes.  The first dlock_held() after the pause returns 0,
 * the release right after returns DLOCK_ELOST, and LOST is reported once.
 */
static void test_resumed_holder_sees_lost_at_once_past_its_lease(void **state)
{
	char *uri = test_redis_uri(server, NULL);

	test_resume_rounds(uri, "wd/resumed", 1000, 4);
	g_free(uri);
}

/* Runs last: a group teardown's failure would not fail the program. */
static void test_no_lock_key_of_this_suite_remains(void **state)
{
	assert_int_equal(test_redis_leftover_keys(server, "dlock:{wd/"), 0);
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

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_script_flush_gives_each_pipelined_renewal_its_own_result),
		cmocka_unit_test(test_lease_is_lost_on_time_while_watchdog_blocks_in_a_renewal),
		cmocka_unit_test(test_lease_is_lost_on_time_while_watchdog_reconnects),
		cmocka_unit_test(test_lease_is_lost_on_time_while_watchdog_retries_a_deferred_release),
		cmocka_unit_test(test_suspended_renewals_back_off_from_a_far_end_that_closes_each_connection),
		cmocka_unit_test(test_resumed_holder_sees_lost_at_once_past_its_lease),
		cmocka_unit_test(test_no_lock_key_of_this_suite_remains),
	};

	test_init(argv[0]);
	if (argc >= 7 && strcmp(argv[1], "--worker") == 0 && strcmp(argv[2], "resume") == 0)
		return test_resume_worker(argv[3], argv[4], atoll(argv[5]), atoi(argv[6]));
	return test_finish(cmocka_run_group_tests_name("redis-watchdog", tests, setup, teardown));
}
