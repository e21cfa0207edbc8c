/* SPDX-License-Identifier: MIT */
/*
 * The Redis wait queue: waiters queue in "<lock key>:q" in arrival order
 * and the release hands the lock directly to the head (the key is never
 * free in between), so grants follow arrival, newcomers never get ahead of
 * the queue, and a waiter that gives up (deadline, cancel) leaves the
 * queue at once, handing the lock on if it had just been granted.  After
 * each test nothing but the fencing counter is left.
 *
 * Waiters are worker processes (test-waiters.h); each holder owns a
 * marker file while it holds, so two holders at once are seen.
 */
#include <errno.h>
#include <fcntl.h>
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

#define FIFO_WAITERS 5
/* A waiter that is not the head retries every second; the next waiter
 * must get the lock well before that could matter twice, and far before
 * a queue entry's 5 s lease. */
#define HANDOFF_BOUND_MS 2000

static test_redis *server;
static char *uri;
static char *marker;

/* ---- tests ------------------------------------------------------------ */

static void test_grants_follow_arrival_order_across_processes(void **state)
{
	const char *key = "dlock:{queue/fifo}";
	test_waiter ws[FIFO_WAITERS];
	uint64_t last;
	long long published;
	test_holder h;

	test_holder_open(&h, uri, "queue/fifo", marker);
	test_holder_take(&h);
	last = dlock_fencing_token(h.lock);
	/* Each one arrives only once the one before it is surely queued. */
	for (int i = 0; i < FIFO_WAITERS; i++)
		test_queue_waiter_start(server, &ws[i], key, uri, "queue/fifo", 30000, i + 1, marker);
	published = test_redis_calls(server, "publish");
	test_holder_release(&h, DLOCK_OK);
	for (int i = 0; i < FIFO_WAITERS; i++) {
		char line[64];
		int next = test_waiters_next(ws, FIFO_WAITERS, line, sizeof(line), 10000);

		if (next != i)
			fail_msg("waiter %d (of arrival %d) said \"%s\" where waiter %d was next", (int)ws[next].pid,
			         next, line, i);
		if (!g_str_has_prefix(line, "granted "))
			fail_msg("waiter %d: \"%s\"", i, line);
		ws[i].token = g_ascii_strtoull(line + 8, NULL, 10);
		assert_true(ws[i].token > last);
		last = ws[i].token;
		assert_int_equal(test_lock_holder_pid(server, key), ws[i].pid);
		/* The rest are still queued, none of them woken. */
		assert_int_equal(test_queue_len(server, key), FIFO_WAITERS - 1 - i);
		test_waiter_release(&ws[i]);
	}
	/* One message per handoff, to the one waiter it is for; none for the
	 * last release, with nobody queued. */
	assert_int_equal(test_redis_calls(server, "publish") - published, FIFO_WAITERS);
	for (int i = 0; i < FIFO_WAITERS; i++)
		test_waiter_finish(&ws[i]);
	test_holder_close(&h);
	test_queue_assert_only_fence(server, key);
}

static void test_newcomers_never_get_ahead_of_queued_waiters(void **state)
{
	const char *key = "dlock:{queue/barge}";
	test_waiter a, b;
	test_acquire_thread *n;
	test_holder h, newcomer;

	test_holder_open(&h, uri, "queue/barge", marker);
	test_holder_open(&newcomer, uri, "queue/barge", NULL);
	test_holder_take(&h);
	test_queue_waiter_start(server, &a, key, uri, "queue/barge", 30000, 1, marker);
	test_queue_waiter_start(server, &b, key, uri, "queue/barge", 30000, 2, marker);
	assert_int_equal(dlock_acquire(newcomer.lock, 0), DLOCK_EBUSY);
	test_holder_release(&h, DLOCK_OK);
	/* The release gave the lock to the head: it was never free. */
	assert_int_equal(dlock_acquire(newcomer.lock, 0), DLOCK_EBUSY);
	assert_int_equal(test_lock_holder_pid(server, key), a.pid);
	test_waiter_granted(&a, 5000);

	/* A newcomer that waits queues behind b. */
	n = test_acquire_thread_start(newcomer.lock, 30000);
	test_queue_wait_len(server, key, 2, 5000);
	test_waiter_release(&a);
	test_waiter_granted(&b, 5000);
	assert_true(b.token > a.token);
	assert_false(test_acquire_thread_done(n));
	assert_int_equal(dlock_acquire(h.lock, 0), DLOCK_EBUSY);
	test_waiter_release(&b);
	assert_int_equal(test_acquire_thread_join(n, 5000), DLOCK_OK);
	assert_true(dlock_fencing_token(newcomer.lock) > b.token);
	assert_int_equal(dlock_release(newcomer.lock), DLOCK_OK);
	test_waiter_finish(&a);
	test_waiter_finish(&b);
	test_holder_close(&newcomer);
	test_holder_close(&h);
	test_queue_assert_only_fence(server, key);
}

static bool key_free(void *arg)
{
	return test_redis_int(server, "EXISTS %s", (const char *)arg) == 0;
}

/*
 * The lock can be free with waiters queued: its holder died and the lease
 * ran out, and the head has not tried since (here it is stopped).  A
 * newcomer's try must still be refused; the head takes the lock once it
 * runs again, then the next.
 */
static void test_newcomers_never_take_a_free_lock_while_waiters_queue(void **state)
{
	const char *key = "dlock:{queue/free}";
	test_waiter a, b;
	test_holder h, newcomer;

	test_holder_open(&h, uri, "queue/free", NULL);
	test_holder_open(&newcomer, uri, "queue/free", NULL);
	/* A holder that stops renewing: its hold ends after 1 s. */
	assert_int_equal(dlock_lock_set_ttl(h.lock, 1000), DLOCK_OK);
	assert_int_equal(dlock_lock_set_watchdog(h.lock, 0), DLOCK_OK);
	test_holder_take(&h);
	test_queue_waiter_start(server, &a, key, uri, "queue/free", 30000, 1, marker);
	test_queue_waiter_start(server, &b, key, uri, "queue/free", 30000, 2, marker);
	assert_int_equal(kill(a.pid, SIGSTOP), 0);
	assert_true(test_wait_until(key_free, (void *)key, 3000));
	assert_int_equal(dlock_acquire(newcomer.lock, 0), DLOCK_EBUSY);
	/* b is not the head: it does not take it either. */
	assert_int_equal(test_redis_int(server, "EXISTS %s", key), 0);
	assert_int_equal(kill(a.pid, SIGCONT), 0);
	test_waiter_granted(&a, 3000);
	test_waiter_release(&a);
	test_waiter_granted(&b, 3000);
	assert_true(b.token > a.token);
	test_waiter_release(&b);
	test_waiter_finish(&a);
	test_waiter_finish(&b);
	assert_int_equal(dlock_release(h.lock), DLOCK_ELOST);
	test_holder_close(&newcomer);
	test_holder_close(&h);
	test_queue_assert_only_fence(server, key);
}

static void test_waiter_timing_out_while_queued_leaves_the_queue_at_once(void **state)
{
	const char *key = "dlock:{queue/timeout}";
	test_waiter t, b;
	char line[64];
	test_holder h;

	test_holder_open(&h, uri, "queue/timeout", marker);
	test_holder_take(&h);
	test_queue_waiter_start(server, &t, key, uri, "queue/timeout", 1500, 1, marker);
	test_queue_waiter_start(server, &b, key, uri, "queue/timeout", 30000, 2, marker);
	test_waiter_line(&t, line, sizeof(line), 5000);
	assert_string_equal(line, "failed DLOCK_ETIMEDOUT");
	/* Gone with the wait, not 5 s later with the entry's lease. */
	test_queue_wait_len(server, key, 1, 500);
	assert_null(test_queue_entry_id(server, key, t.pid));
	test_waiter_finish(&t);
	test_queue_release_to(server, &h, &b, key, HANDOFF_BOUND_MS);
	test_holder_close(&h);
	test_queue_assert_only_fence(server, key);
}

typedef enum wait_end {
	END_BY_CANCEL,      /* dlock_lock_cancel() from another thread */
	END_BY_LOCK_FREE,   /* the handle is freed */
	END_BY_CLIENT_FREE  /* the client is freed */
} wait_end;

/* A waiter of this process, queued first, has its wait ended from another
 * thread: it leaves the queue at once and the next waiter gets the lock. */
static void check_ended_wait_leaves_the_queue(const char *resource, wait_end how)
{
	char *key = g_strdup_printf("dlock:{%s}", resource);
	test_waiter b;
	test_acquire_thread *c;
	test_holder h, ended;

	test_holder_open(&h, uri, resource, marker);
	test_holder_open(&ended, uri, resource, NULL);
	test_holder_take(&h);
	c = test_acquire_thread_start(ended.lock, 30000);
	test_queue_wait_len(server, key, 1, 5000);
	test_queue_waiter_start(server, &b, key, uri, resource, 30000, 2, marker);
	if (how == END_BY_CANCEL)
		assert_int_equal(dlock_lock_cancel(ended.lock), DLOCK_OK);
	else if (how == END_BY_LOCK_FREE)
		dlock_lock_free(ended.lock);
	else
		dlock_client_free(ended.client);
	assert_int_equal(test_acquire_thread_join(c, 2000), DLOCK_ECANCELED);
	test_queue_wait_len(server, key, 1, 500);
	assert_null(test_queue_entry_id(server, key, getpid()));
	test_queue_release_to(server, &h, &b, key, HANDOFF_BOUND_MS);
	if (how == END_BY_CANCEL)
		dlock_lock_free(ended.lock);
	if (how != END_BY_CLIENT_FREE)
		dlock_client_free(ended.client);
	else
		dlock_lock_free(ended.lock);
	test_holder_close(&h);
	test_queue_assert_only_fence(server, key);
	g_free(key);
}

static void test_waiter_canceled_while_queued_leaves_the_queue_at_once(void **state)
{
	check_ended_wait_leaves_the_queue("queue/cancel", END_BY_CANCEL);
}

static void test_waiter_whose_handle_is_freed_leaves_the_queue_at_once(void **state)
{
	check_ended_wait_leaves_the_queue("queue/lock-free", END_BY_LOCK_FREE);
}

static void test_waiter_whose_client_is_freed_leaves_the_queue_at_once(void **state)
{
	check_ended_wait_leaves_the_queue("queue/client-free", END_BY_CLIENT_FREE);
}

/*
 * Granted at the moment it gives up: the waiter's client is behind a proxy
 * that stops passing answers down just before the release grants it the
 * lock, so it never hears of the grant and its deadline passes with the
 * key holding its token.  Leaving the queue must release that grant and
 * hand the lock on at once, not leave it held for the waiter's 30 s lease.
 */
static void test_waiter_granted_as_it_times_out_hands_the_lock_on(void **state)
{
	const char *key = "dlock:{queue/late}";
	test_proxy *proxy = test_proxy_start_proto(TEST_PROXY_REDIS, server->port);
	char *proxied = g_strdup_printf("redis://127.0.0.1:%d", test_proxy_port(proxy));
	dlock_client *client;
	dlock_lock *lock;
	test_waiter b;
	test_acquire_thread *w;
	int64_t deadline_ms;
	test_holder h;

	test_holder_open(&h, uri, "queue/late", marker);
	assert_int_equal(dlock_client_new(proxied, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "queue/late", &lock), DLOCK_OK);
	test_holder_take(&h);
	deadline_ms = test_now_ms() + 3000;
	w = test_acquire_thread_start(lock, 3000);
	test_queue_wait_len(server, key, 1, 1500);
	test_queue_waiter_start(server, &b, key, uri, "queue/late", 30000, 2, marker);
	test_proxy_stall(proxy, TEST_PROXY_DOWN);
	test_holder_release(&h, DLOCK_OK);
	/* Granted to the head: the key holds its token (this process's). */
	assert_int_equal(test_lock_holder_pid(server, key), getpid());
	test_waiter_granted(&b, 10000);
	print_message("the next waiter got the lock %" PRId64 " ms after the first one's deadline\n",
	              b.at_ms - deadline_ms);
	assert_true(b.at_ms - deadline_ms < HANDOFF_BOUND_MS);
	test_proxy_unstall(proxy, TEST_PROXY_DOWN);
	assert_int_equal(test_acquire_thread_join(w, 5000), DLOCK_ETIMEDOUT);
	assert_false(dlock_held(lock));
	test_waiter_release(&b);
	test_waiter_finish(&b);
	dlock_lock_free(lock);
	dlock_client_free(client);
	test_proxy_stop(proxy);
	g_free(proxied);
	test_holder_close(&h);
	test_queue_assert_only_fence(server, key);
}

static long long evalsha_seen;

static bool server_ran_a_script(void *arg)
{
	return test_redis_calls(server, "evalsha") > evalsha_seen;
}

/*
 * A grant counts its lease from the waiter's last try that found it
 * queued, which may be older than a short lease by the time the grant
 * comes (a try per second at most): such a waiter must still take the
 * lock at once (its next try finds its token in the key) and keep it, its
 * watchdog renewing it, for several of its leases.
 */
static void test_waiter_with_a_short_lease_takes_a_late_grant_and_keeps_it(void **state)
{
	const char *key = "dlock:{queue/short}";
	char *short_uri = test_redis_uri(server, "?ttl=300ms");
	char line[64];
	test_waiter w;
	test_holder h;
	int64_t t0;

	test_holder_open(&h, uri, "queue/short", marker);
	test_holder_take(&h);
	test_waiter_start(&w, short_uri, "queue/short", 30000, 1000, marker);
	test_queue_wait_len(server, key, 1, 5000);
	/* Past the backoff's growth to its 1 s cap; then just after a try. */
	g_usleep(2000 * 1000);
	evalsha_seen = test_redis_calls(server, "evalsha");
	assert_true(test_wait_until(server_ran_a_script, NULL, 2000));
	g_usleep(500 * 1000);
	evalsha_seen = test_redis_calls(server, "evalsha");
	t0 = test_now_ms();
	test_holder_release(&h, DLOCK_OK);
	test_waiter_granted(&w, 5000);
	print_message("got the lock %" PRId64 " ms after the release; scripts run meanwhile: %lld\n",
	              w.at_ms - t0, test_redis_calls(server, "evalsha") - evalsha_seen);
	assert_true(w.at_ms - t0 < HANDOFF_BOUND_MS);
	/* Held for 1 s, over three of its leases, and released as held. */
	test_waiter_line(&w, line, sizeof(line), 5000);
	assert_string_equal(line, "released DLOCK_OK");
	test_waiter_finish(&w);
	test_holder_close(&h);
	test_queue_assert_only_fence(server, key);
	g_free(short_uri);
}

static void test_plain_format_queues_under_the_bare_name(void **state)
{
	char *plain = test_redis_uri(server, "?key-format=plain");
	const char *key = "queue-plain/names";
	dlock_lock *refused = NULL;
	test_waiter w;
	test_holder h;

	test_holder_open(&h, plain, key, marker);
	/* Its queue would be another lock's key. */
	assert_int_equal(dlock_lock_new(h.client, "queue-plain/x:q", &refused), DLOCK_EINVAL);
	assert_null(refused);
	test_holder_take(&h);
	test_queue_waiter_start(server, &w, key, plain, key, 30000, 1, marker);
	assert_int_equal(test_redis_int(server, "EXISTS dlock:{%s}:q", key), 0);
	test_holder_release(&h, DLOCK_OK);
	test_waiter_granted(&w, 5000);
	assert_int_equal(test_lock_holder_pid(server, key), w.pid);
	test_waiter_release(&w);
	test_waiter_finish(&w);
	test_holder_close(&h);
	test_queue_assert_only_fence(server, key);
	g_free(plain);
}

/* Runs last: a group teardown's failure would not fail the program. */
typedef struct queue_at_least {
	const char *key;
	long long n;
} queue_at_least;

static bool queue_has(void *arg)
{
	const queue_at_least *q = arg;

	return test_queue_len(server, q->key) >= q->n;
}

/*
 * A waiter whose ACL user may run the scripts but not subscribe (acl: the
 * ACL SETUSER rule that says so) cannot be told of a grant.  It must still queue and
 * be served in its turn -- not starve behind the waiters that can, whose
 * entries keep a try without one out -- also when its lease (options) is
 * shorter than the second it would otherwise take to find its grant; and
 * the waiter after it must not wait on a grant it cannot use.
 */
static void check_waiter_without_channel_rights(const char *resource, const char *user, const char *acl,
                                                const char *options)
{
	char *key = g_strdup_printf("dlock:{%s}", resource);
	char *acl_uri = g_strdup_printf("redis://%s:acl-pw@127.0.0.1:%d%s", user, server->port, options);
	queue_at_least two = { key, 2 };
	redisReply *reply = test_redis_cmd(server, "ACL SETUSER %s on >acl-pw ~* &* +@all %s", user, acl);
	test_waiter a, x, b;
	test_holder h;
	int64_t from_ms;

	assert_non_null(reply);
	assert_int_equal(reply->type, REDIS_REPLY_STATUS);
	freeReplyObject(reply);
	test_holder_open(&h, uri, resource, marker);
	test_holder_take(&h);
	test_queue_waiter_start(server, &a, key, uri, resource, 30000, 1, marker);
	test_waiter_start(&x, acl_uri, resource, 30000, TEST_WAITER_HOLD_UNTIL_TOLD, marker);
	if (!test_wait_until(queue_has, &two, 3000))
		fail_msg("the waiter without channel rights did not queue within 3 s (%lld entries)",
		         test_queue_len(server, key));
	test_queue_waiter_start(server, &b, key, uri, resource, 30000, 3, marker);

	/* Served in arrival order: h, a, then x, then b. */
	test_holder_release(&h, DLOCK_OK);
	test_waiter_granted(&a, HANDOFF_BOUND_MS);
	from_ms = test_now_ms();
	test_waiter_release(&a);
	test_waiter_finish(&a);
	test_waiter_granted(&x, HANDOFF_BOUND_MS);
	print_message("%s: the waiter without channel rights got the lock %" PRId64 " ms after the "
	              "release before it\n", user, x.at_ms - from_ms);
	assert_false(test_waiter_spoke(&b));
	from_ms = test_now_ms();
	test_waiter_release(&x);
	test_waiter_finish(&x);
	test_waiter_granted(&b, HANDOFF_BOUND_MS);
	print_message("%s: the next waiter got it %" PRId64 " ms after its release\n", user,
	              b.at_ms - from_ms);
	test_waiter_release(&b);
	test_waiter_finish(&b);
	test_holder_close(&h);
	test_queue_assert_only_fence(server, key);
	g_free(acl_uri);
	g_free(key);
}

/*
 * The holder's ACL user may not publish (no channel rights): its release
 * cannot tell the head waiter of its grant.  The grant must stand all the
 * same, the head waiter finding it by its own try, as a waiter no message
 * can reach does; undone for want of a listener, it would take every
 * waiter's place in the queue with it and leave the lock free, nobody
 * told.  So right after that release the lock is the first waiter's and
 * the other two are still queued; all three are served in arrival order,
 * each next one as soon as the one before releases.
 */
static void test_release_by_a_holder_that_may_not_publish_keeps_the_queue(void **state)
{
	const char *resource = "queue/acl-mute-holder";
	char *key = g_strdup_printf("dlock:{%s}", resource);
	char *acl_uri = g_strdup_printf("redis://muteholder:acl-pw@127.0.0.1:%d", server->port);
	redisReply *reply = test_redis_cmd(server, "ACL SETUSER muteholder on >acl-pw ~* +@all "
	                                   "resetchannels");
	test_waiter w[3];
	test_holder h;
	int64_t from_ms;

	assert_non_null(reply);
	assert_int_equal(reply->type, REDIS_REPLY_STATUS);
	freeReplyObject(reply);
	test_holder_open(&h, acl_uri, resource, marker);
	test_holder_take(&h);
	for (int i = 0; i < 3; i++)
		test_queue_waiter_start(server, &w[i], key, uri, resource, 30000, i + 1, marker);
	test_holder_release(&h, DLOCK_OK);
	assert_int_equal(test_redis_int(server, "EXISTS %s", key), 1);
	assert_int_equal(test_queue_len(server, key), 2);
	test_waiter_granted(&w[0], HANDOFF_BOUND_MS);
	for (int i = 0; i < 2; i++) {
		assert_false(test_waiter_spoke(&w[i + 1]));
		from_ms = test_now_ms();
		test_waiter_release(&w[i]);
		test_waiter_finish(&w[i]);
		test_waiter_granted(&w[i + 1], 500);
		print_message("waiter %d got the lock %" PRId64 " ms after the release before it\n",
		              i + 2, w[i + 1].at_ms - from_ms);
	}
	test_waiter_release(&w[2]);
	test_waiter_finish(&w[2]);
	test_holder_close(&h);
	test_queue_assert_only_fence(server, key);
	g_free(acl_uri);
	g_free(key);
}

static void test_waiter_that_may_not_subscribe_queues_and_is_served_in_turn(void **state)
{
	check_waiter_without_channel_rights("queue/acl-nosubscribe", "nosubscribe", "-subscribe", "");
}

static void test_waiter_without_channels_queues_and_is_served_in_turn(void **state)
{
	check_waiter_without_channel_rights("queue/acl-nochannels", "nochannels", "resetchannels", "");
}

static void test_waiter_without_channels_and_a_short_lease_is_served_in_turn(void **state)
{
	check_waiter_without_channel_rights("queue/acl-short", "nochannels", "resetchannels", "?ttl=600ms");
}

static void test_no_lock_key_of_this_suite_remains(void **state)
{
	assert_int_equal(test_redis_leftover_keys(server, "dlock:{queue/"), 0);
	assert_int_equal(test_redis_leftover_keys(server, "queue-plain/"), 0);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_grants_follow_arrival_order_across_processes, test_queue_reset),
		cmocka_unit_test_setup(test_newcomers_never_get_ahead_of_queued_waiters, test_queue_reset),
		cmocka_unit_test_setup(test_newcomers_never_take_a_free_lock_while_waiters_queue, test_queue_reset),
		cmocka_unit_test_setup(test_waiter_timing_out_while_queued_leaves_the_queue_at_once, test_queue_reset),
		cmocka_unit_test_setup(test_waiter_canceled_while_queued_leaves_the_queue_at_once, test_queue_reset),
		cmocka_unit_test_setup(test_waiter_whose_handle_is_freed_leaves_the_queue_at_once, test_queue_reset),
		cmocka_unit_test_setup(test_waiter_whose_client_is_freed_leaves_the_queue_at_once, test_queue_reset),
		cmocka_unit_test_setup(test_waiter_granted_as_it_times_out_hands_the_lock_on, test_queue_reset),
		cmocka_unit_test_setup(test_waiter_with_a_short_lease_takes_a_late_grant_and_keeps_it, test_queue_reset),
		cmocka_unit_test_setup(test_plain_format_queues_under_the_bare_name, test_queue_reset),
		cmocka_unit_test_setup(test_waiter_that_may_not_subscribe_queues_and_is_served_in_turn,
		                       test_queue_reset),
		cmocka_unit_test_setup(test_waiter_without_channels_queues_and_is_served_in_turn,
		                       test_queue_reset),
		cmocka_unit_test_setup(test_waiter_without_channels_and_a_short_lease_is_served_in_turn,
		                       test_queue_reset),
		cmocka_unit_test_setup(test_release_by_a_holder_that_may_not_publish_keeps_the_queue,
		                       test_queue_reset),
		cmocka_unit_test(test_no_lock_key_of_this_suite_remains),
	};

	return test_queue_main(argc, argv, "redis-queue", tests, G_N_ELEMENTS(tests), &server, &uri,
	                       &marker);
}
