/* SPDX-License-Identifier: MIT */
/*
 * The Redis wait queue under faults: a waiter killed while queued, while
 * granted but not yet woken (stopped), and while being woken; and the
 * server's data or the subscriber connections lost while several waiters
 * are queued (FLUSHALL, a restart without persistence, CLIENT KILL of the
 * subscribers).  Every live waiter still gets the lock within a bound,
 * never two at once (each holder owns a marker file), with increasing
 * fencing tokens; a dead waiter delays the others by nothing while queued
 * and by no more than the lease of a grant it can no longer use.  After
 * each test nothing but the fencing counter is left.
 */
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-proxy.h"
#include "test-redis.h"
#include "test-waiters.h"

#define FAULT_WAITERS 4
/* How long each of them holds the lock once it has it. */
#define FAULT_HOLD_MS 100
/* Every waiter must have had the lock within this after the fault: a few
 * times a waiter's 1 s backoff, far below the 30 s lease of the hold
 * that the fault lost. */
#define FAULT_BOUND_MS 15000

static test_redis *server;
static char *uri;
static char *marker;

/* ---- a dead waiter ---------------------------------------------------- */

static bool channel_unheard(void *arg)
{
	return test_redis_numsub(server, arg) == 0;
}

static void test_waiter_killed_while_queued_is_skipped_at_once(void **state)
{
	const char *key = "dlock:{qfault/queued}";
	test_waiter a, b;
	test_holder h;
	char *id, *channel;
	pid_t a_pid;

	test_holder_open(&h, uri, "qfault/queued", marker);
	test_holder_take(&h);
	test_queue_waiter_start(server, &a, key, uri, "qfault/queued", 30000, 1, marker);
	test_queue_waiter_start(server, &b, key, uri, "qfault/queued", 30000, 2, marker);
	id = test_queue_entry_id(server, key, a.pid);
	assert_non_null(id);
	channel = g_strdup_printf("%s:w:%s", key, id);
	assert_int_equal(test_redis_numsub(server, channel), 1);
	a_pid = a.pid;
	test_waiter_kill(&a);
	/* The server has seen its connections close. */
	assert_true(test_wait_until(channel_unheard, channel, 5000));
	/* Its entry's lease has 5 s to run: the release must skip it. */
	test_queue_release_to(server, &h, &b, key, 2000);
	assert_null(test_queue_entry_id(server, key, a_pid));
	test_holder_close(&h);
	test_queue_assert_only_fence(server, key);
	g_free(channel);
	g_free(id);
}

/* More than a release skips (8): the rest of the dead entries hold up the
 * lock until their 5 s leases end, and no longer. */
#define DEAD_WAITERS 10
#define ENTRY_LEASE_MS 5000

static void test_waiter_behind_many_dead_ones_gets_the_lock_within_their_lease(void **state)
{
	const char *key = "dlock:{qfault/many-dead}";
	test_waiter dead[DEAD_WAITERS], live;
	test_holder h;
	int64_t last_queued_ms, t0;

	test_holder_open(&h, uri, "qfault/many-dead", marker);
	test_holder_take(&h);
	for (int i = 0; i < DEAD_WAITERS; i++)
		test_queue_waiter_start(server, &dead[i], key, uri, "qfault/many-dead", 30000, i + 1, marker);
	test_queue_waiter_start(server, &live, key, uri, "qfault/many-dead", 30000, DEAD_WAITERS + 1,
	                        marker);
	for (int i = 0; i < DEAD_WAITERS; i++)
		test_waiter_kill(&dead[i]);
	/* The last renewal of a dead entry came at most 1 s before this. */
	last_queued_ms = test_now_ms();
	t0 = test_now_ms();
	test_holder_release(&h, DLOCK_OK);
	test_waiter_granted(&live, 20000);
	print_message("behind %d dead waiters: the lock came %" PRId64 " ms after the release\n",
	              DEAD_WAITERS, live.at_ms - t0);
	assert_true(live.at_ms - last_queued_ms < ENTRY_LEASE_MS + test_slack(2000));
	assert_int_equal(test_queue_len(server, key), 0);
	test_waiter_release(&live);
	test_waiter_finish(&live);
	test_holder_close(&h);
	test_queue_assert_only_fence(server, key);
}

/*
 * The release grants the lock to a (a 1 s lease), which dies before it
 * can use it: stopped first, so it cannot have heard of the grant, or
 * killed right after the release, while the grant message is on its way.
 * b gets the lock once that lease has run out, not before (a's grant
 * excludes it until then) and not much after.
 */
static void check_dead_grantee_is_replaced_after_its_lease(const char *resource, bool stopped)
{
	char *key = g_strdup_printf("dlock:{%s}", resource);
	char *short_uri = test_redis_uri(server, "?ttl=1s");
	test_waiter a, b;
	test_holder h;
	pid_t a_pid;
	bool spoke = false;
	long long left_ms;
	uint64_t a_token;
	char *fence;
	int64_t killed_ms, waited_ms;

	test_holder_open(&h, uri, resource, marker);
	test_holder_take(&h);
	/* No marker for a: it may die holding. */
	test_queue_waiter_start(server, &a, key, short_uri, resource, 30000, 1, NULL);
	test_queue_waiter_start(server, &b, key, uri, resource, 30000, 2, marker);
	a_pid = a.pid;
	if (stopped)
		assert_int_equal(kill(a.pid, SIGSTOP), 0);
	test_holder_release(&h, DLOCK_OK);
	if (!stopped)
		spoke = test_waiter_spoke(&a);
	test_waiter_kill(&a);
	killed_ms = test_now_ms();
	/* The release set the key to a's token with a's lease. */
	assert_int_equal(test_lock_holder_pid(server, key), a_pid);
	left_ms = test_redis_int(server, "PTTL %s", key);
	assert_true(left_ms > 0 && left_ms <= 1000);
	fence = test_redis_str(server, "GET %s:fence", key);
	assert_non_null(fence);
	a_token = g_ascii_strtoull(fence, NULL, 10);
	g_free(fence);
	assert_int_equal(test_queue_len(server, key), 1);

	test_waiter_granted(&b, 10000);
	waited_ms = b.at_ms - killed_ms;
	print_message("a %s; its lease had %lld ms left; b got the lock %" PRId64 " ms after\n",
	              stopped ? "stopped" : spoke ? "had said it got the lock" : "had said nothing",
	              left_ms, waited_ms);
	assert_true(waited_ms >= left_ms - 20);
	assert_true(waited_ms <= left_ms + test_slack(1500));
	assert_true(b.token > a_token);
	test_waiter_release(&b);
	test_waiter_finish(&b);
	test_holder_close(&h);
	test_queue_assert_only_fence(server, key);
	g_free(short_uri);
	g_free(key);
}

static void test_waiter_granted_but_not_woken_is_replaced_after_its_lease(void **state)
{
	check_dead_grantee_is_replaced_after_its_lease("qfault/stopped", true);
}

static void test_waiter_killed_while_woken_is_replaced_after_its_lease(void **state)
{
	check_dead_grantee_is_replaced_after_its_lease("qfault/woken", false);
}

/*
 * A grant whose message never arrives: the waiter's connections go
 * through a proxy that holds back everything the server sends, the
 * release hands the lock over (the server sees the subscriber, so the
 * grant stands), and the connections are then reset with the message
 * still in the proxy.  The waiter's next try must find its own token in
 * the key and hold the lock, long before that grant's 30 s lease ends.
 */
static void test_waiter_whose_grant_message_is_lost_finds_it_on_its_next_try(void **state)
{
	const char *key = "dlock:{qfault/lost-grant}";
	test_proxy *proxy = test_proxy_start(server->port);
	char *proxied = g_strdup_printf("redis://127.0.0.1:%d", test_proxy_port(proxy));
	test_acquire_thread *w;
	test_holder h, waiter;
	uint64_t held_token;
	int64_t t0;
	int rc;

	test_holder_open(&h, uri, "qfault/lost-grant", marker);
	test_holder_open(&waiter, proxied, "qfault/lost-grant", NULL);
	test_holder_take(&h);
	w = test_acquire_thread_start(waiter.lock, 20000);
	test_queue_wait_len(server, key, 1, 5000);
	test_proxy_stall(proxy, TEST_PROXY_DOWN);
	held_token = dlock_fencing_token(h.lock);
	t0 = test_now_ms();
	test_holder_release(&h, DLOCK_OK);
	/* Handed over: the key holds the waiter's token (this process). */
	assert_int_equal(test_lock_holder_pid(server, key), getpid());
	test_proxy_reset_all(proxy);
	test_proxy_unstall(proxy, TEST_PROXY_DOWN);
	rc = test_acquire_thread_join(w, 10000);
	print_message("the waiter had the lock %" PRId64 " ms after the release: %s\n", test_now_ms() - t0,
	              dlock_code_name(rc));
	assert_int_equal(rc, DLOCK_OK);
	assert_true(test_now_ms() - t0 < 5000);
	assert_int_equal(dlock_held(waiter.lock), 1);
	assert_true(dlock_fencing_token(waiter.lock) > held_token);
	assert_int_equal(test_lock_holder_pid(server, key), getpid());
	assert_int_equal(dlock_release(waiter.lock), DLOCK_OK);
	test_holder_close(&waiter);
	test_holder_close(&h);
	test_proxy_stop(proxy);
	test_queue_assert_only_fence(server, key);
	g_free(proxied);
}

/* ---- lost data, lost subscribers -------------------------------------- */

typedef struct fault {
	const char *resource;
	void (*inject)(const char *resource);
	bool hold_survives; /* the holder's hold is still there afterwards */
	bool in_order;      /* the queue survives: grants stay in arrival order */
} fault;

static void flush_all(const char *resource)
{
	redisReply *reply = test_redis_cmd(server, "FLUSHALL");

	assert_non_null(reply);
	freeReplyObject(reply);
}

static void restart(const char *resource)
{
	test_redis_restart(server);
}

static void kill_subscribers(const char *resource)
{
	redisReply *reply = test_redis_cmd(server, "CLIENT KILL TYPE pubsub");

	assert_non_null(reply);
	assert_int_equal(reply->type, REDIS_REPLY_INTEGER);
	assert_true(reply->integer >= FAULT_WAITERS);
	freeReplyObject(reply);
}

static bool all_resubscribed(void *arg)
{
	return test_redis_numsub(server, arg) == FAULT_WAITERS;
}

static void kill_subscribers_and_wait(const char *resource)
{
	char *channel = g_strdup_printf("dlock:{%s}:released", resource);

	kill_subscribers(resource);
	assert_true(test_wait_until(all_resubscribed, channel, 10000));
	g_free(channel);
}

/*
 * FAULT_WAITERS waiters queue behind this process's hold, the fault
 * strikes, the hold is released (or found lost), and every waiter must
 * then get the lock, hold it FAULT_HOLD_MS and release it.
 */
static void check_waiters_get_through(const fault *f)
{
	char *key = g_strdup_printf("dlock:{%s}", f->resource);
	test_waiter ws[FAULT_WAITERS];
	test_holder h;
	int granted = 0, released = 0, order[FAULT_WAITERS];
	uint64_t last;
	int64_t t0;
	int rc;

	test_holder_open(&h, uri, f->resource, marker);
	test_holder_take(&h);
	last = dlock_fencing_token(h.lock);
	for (int i = 0; i < FAULT_WAITERS; i++) {
		test_waiter_start(&ws[i], uri, f->resource, 60000, FAULT_HOLD_MS, marker);
		test_queue_wait_len(server, key, i + 1, 5000);
	}
	/* A hold the fault takes away is no longer this process's to count. */
	if (!f->hold_survives) {
		unlink(marker);
		h.marker = NULL;
	}
	t0 = test_now_ms();
	f->inject(f->resource);
	if (f->hold_survives) {
		test_holder_release(&h, DLOCK_OK);
	} else {
		rc = dlock_release(h.lock);
		print_message("the holder's release after the fault: %s\n", dlock_code_name(rc));
		assert_true(rc == DLOCK_OK || rc == DLOCK_ELOST);
	}

	while (released < FAULT_WAITERS) {
		char line[64];
		int64_t left = FAULT_BOUND_MS - (test_now_ms() - t0);
		int i = test_waiters_next(ws, FAULT_WAITERS, line, sizeof(line), MAX(left, 1));

		if (g_str_has_prefix(line, "granted ")) {
			uint64_t token = g_ascii_strtoull(line + 8, NULL, 10);

			if (token <= last)
				fail_msg("waiter %d got token %" PRIu64 " after %" PRIu64, i, token, last);
			last = token;
			order[granted++] = i;
		} else if (strcmp(line, "released DLOCK_OK") == 0) {
			released++;
		} else {
			fail_msg("waiter %d: \"%s\"", i, line);
		}
	}
	print_message("all %d waiters had the lock %" PRId64 " ms after the fault\n", FAULT_WAITERS,
	              test_now_ms() - t0);
	assert_int_equal(granted, FAULT_WAITERS);
	for (int i = 0; f->in_order && i < FAULT_WAITERS; i++)
		assert_int_equal(order[i], i);
	for (int i = 0; i < FAULT_WAITERS; i++)
		test_waiter_finish(&ws[i]);
	test_holder_close(&h);
	test_queue_assert_only_fence(server, key);
	g_free(key);
}

static void test_waiters_get_through_a_flushall(void **state)
{
	const fault f = { "qfault/flushall", flush_all, false, false };

	check_waiters_get_through(&f);
}

static void test_waiters_get_through_a_restart_without_persistence(void **state)
{
	const fault f = { "qfault/restart", restart, false, false };

	check_waiters_get_through(&f);
}

/* Released while the subscribers reconnect: grants may reach nobody. */
static void test_waiters_get_through_a_subscriber_reconnect(void **state)
{
	const fault f = { "qfault/resubscribe", kill_subscribers, true, false };

	check_waiters_get_through(&f);
}

/* Released once they are back: the queue was never touched. */
static void test_grants_keep_arrival_order_after_a_subscriber_reconnect(void **state)
{
	const fault f = { "qfault/resubscribed", kill_subscribers_and_wait, true, true };

	check_waiters_get_through(&f);
}

/* Runs last: a group teardown's failure would not fail the program. */
static void test_no_lock_key_of_this_suite_remains(void **state)
{
	assert_int_equal(test_redis_leftover_keys(server, "dlock:{qfault/"), 0);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_waiter_killed_while_queued_is_skipped_at_once, test_queue_reset),
		cmocka_unit_test_setup(test_waiter_behind_many_dead_ones_gets_the_lock_within_their_lease,
		                       test_queue_reset),
		cmocka_unit_test_setup(test_waiter_granted_but_not_woken_is_replaced_after_its_lease, test_queue_reset),
		cmocka_unit_test_setup(test_waiter_killed_while_woken_is_replaced_after_its_lease, test_queue_reset),
		cmocka_unit_test_setup(test_waiter_whose_grant_message_is_lost_finds_it_on_its_next_try,
		                       test_queue_reset),
		cmocka_unit_test_setup(test_waiters_get_through_a_flushall, test_queue_reset),
		cmocka_unit_test_setup(test_waiters_get_through_a_restart_without_persistence, test_queue_reset),
		cmocka_unit_test_setup(test_waiters_get_through_a_subscriber_reconnect, test_queue_reset),
		cmocka_unit_test_setup(test_grants_keep_arrival_order_after_a_subscriber_reconnect, test_queue_reset),
		cmocka_unit_test(test_no_lock_key_of_this_suite_remains),
	};

	return test_queue_main(argc, argv, "redis-queue-faults", tests, G_N_ELEMENTS(tests), &server, &uri,
	                       &marker);
}
