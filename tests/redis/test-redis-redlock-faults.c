/* SPDX-License-Identifier: MIT */
/*
 * Redlock (docs/redis.md, "Redlock") under faults of single masters:
 * killed, frozen (SIGSTOP), restarted empty, or losing the lock key
 * while it is held.  A quorum of masters keeps the lock working; less
 * than a quorum makes acquire fail in bounded time and a hold be
 * reported lost.
 */
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-events.h"
#include "test-proxy.h"
#include "test-redlock.h"

/* The suite's five masters. */
#define rl test_redlock_suite

typedef test_redlock_handle handle;

/* Acquire and release `rounds` times through h, each token above the
 * last; returns the last token. */
static uint64_t take_turns(handle *h, int rounds, uint64_t last)
{
	for (int i = 0; i < rounds; i++) {
		int rc = dlock_acquire(h->lock, 5000);

		if (rc != DLOCK_OK)
			fail_msg("round %d: %s (%s)", i, dlock_code_name(rc), dlock_last_error_message());
		assert_true(dlock_fencing_token(h->lock) > last);
		last = dlock_fencing_token(h->lock);
		assert_int_equal(dlock_release(h->lock), DLOCK_OK);
	}
	return last;
}

/* ---- masters down ----------------------------------------------------- */

static void test_one_of_three_masters_killed_acquires_still_succeed(void **state)
{
	handle h;
	uint64_t before;

	test_redlock_open(rl, &h, 3, NULL, "rl/one-down");
	before = take_turns(&h, 2, 0);
	test_redis_halt(rl->masters[0]);
	take_turns(&h, 5, before);
	test_redlock_close(&h);
}

static void test_two_of_five_masters_killed_acquires_still_succeed(void **state)
{
	handle h;
	char *value;

	test_redlock_open(rl, &h, 5, NULL, "rl/two-down");
	test_redis_halt(rl->masters[1]);
	test_redis_halt(rl->masters[3]);
	take_turns(&h, 5, 0);
	/* Held on the three masters that are left, each with our token. */
	assert_int_equal(dlock_acquire(h.lock, 5000), DLOCK_OK);
	assert_int_equal(test_redlock_count_key(rl, "dlock:{rl/two-down}", &value), 3);
	g_free(value);
	assert_int_equal(dlock_release(h.lock), DLOCK_OK);
	assert_int_equal(test_redlock_count_key(rl, "dlock:{rl/two-down}", NULL), 0);
	test_redlock_close(&h);
}

/* Acquire with wait_ms must give DLOCK_EUNAVAILABLE, and not much later
 * than the caller's deadline. */
static void expect_unavailable(handle *h, int64_t wait_ms)
{
	int64_t start = test_now_ms(), took;
	int rc = dlock_acquire(h->lock, wait_ms);

	took = test_now_ms() - start;
	print_message("wait %" PRId64 " ms: %s after %" PRId64 " ms\n", wait_ms, dlock_code_name(rc), took);
	assert_int_equal(rc, DLOCK_EUNAVAILABLE);
	assert_false(dlock_held(h->lock));
	assert_true(took <= wait_ms + test_slack(1000));
}

static void test_majority_killed_acquire_is_unavailable_within_the_deadline(void **state)
{
	handle h;

	test_redlock_open(rl, &h, 3, "?connect-timeout=500ms&command-timeout=500ms", "rl/majority-down");
	test_redis_halt(rl->masters[0]);
	test_redis_halt(rl->masters[2]);
	expect_unavailable(&h, 0);
	expect_unavailable(&h, 2000);
	test_redlock_close(&h);
	/* Nothing left on the one master that answered. */
	assert_int_equal(test_redlock_count_key(rl, "dlock:{rl/majority-down}", NULL), 0);
}

static bool no_key_on_any_master(void *arg)
{
	return test_redlock_count_key(rl, arg, NULL) == 0;
}

static void test_majority_frozen_acquire_is_unavailable_within_the_deadline(void **state)
{
	char key[] = "dlock:{rl/majority-frozen}";
	handle h;
	int64_t thawed_ms;

	/* Frozen masters keep their connections but never answer: each try
	 * ends at the per-master timeout. */
	test_redlock_open(rl, &h, 3, "?master-timeout=200ms&ttl=2s", "rl/majority-frozen");
	take_turns(&h, 1, 0);
	test_redlock_freeze(rl, 1);
	test_redlock_freeze(rl, 2);
	expect_unavailable(&h, 0);
	expect_unavailable(&h, 2000);
	/* The frozen masters run the queued tries when they wake up; what
	 * they set must be gone within the 2 s lease. */
	test_redlock_thaw(rl, 1);
	test_redlock_thaw(rl, 2);
	thawed_ms = test_now_ms();
	assert_true(test_wait_until(no_key_on_any_master, key, 2000 + 1000));
	print_message("gone %" PRId64 " ms after the masters woke\n", test_now_ms() - thawed_ms);
	test_redlock_close(&h);
}

static void test_majority_frozen_acquire_returns_by_the_callers_deadline(void **state)
{
	char key[] = "dlock:{rl/deadline}";
	handle h;
	int64_t start, took;
	int rc;

	/* The deadline (500 ms) comes before two master timeouts (2 x 400
	 * ms): undoing the first round on masters that never answered it
	 * must not hold the caller past its deadline. */
	test_redlock_open(rl, &h, 3, "?master-timeout=400ms&ttl=8s", "rl/deadline");
	take_turns(&h, 1, 0);
	test_redlock_freeze(rl, 1);
	test_redlock_freeze(rl, 2);
	start = test_now_ms();
	rc = dlock_acquire(h.lock, 500);
	took = test_now_ms() - start;
	print_message("wait 500 ms: %s after %" PRId64 " ms\n", dlock_code_name(rc), took);
	test_redlock_thaw(rl, 1);
	test_redlock_thaw(rl, 2);
	assert_true(test_wait_until(no_key_on_any_master, key, 8000 + 1000));
	test_redlock_close(&h);
	assert_int_equal(rc, DLOCK_EUNAVAILABLE);
	assert_true(took <= 500 + test_slack(100));
}

static bool no_key_of(void *arg)
{
	long long found = 0;

	for (int i = 0; i < 3; i++)
		found += test_redis_count_keys(rl->masters[i], arg);
	return found == 0;
}

/*
 * Twenty holds when two masters of three stop answering: freeing the
 * client releases each, and one release without a quorum of answers shows
 * the masters gone, so the rest go to the masters' background releases at
 * once.  The free costs one master timeout (250 ms here), a renewal round
 * under way and each frozen master's last try at its background releases
 * (500 ms), not a master timeout per hold (5 s).  What the frozen masters
 * hold goes with its 6 s lease.
 */
static void test_many_holds_released_with_a_majority_frozen_cost_one_master_timeout(void **state)
{
	dlock_lock *locks[20];
	handle h;
	int64_t start, took;

	test_redlock_open(rl, &h, 3, "?master-timeout=250ms&ttl=6s", "rl/many-frozen");
	for (int i = 0; i < 20; i++) {
		char name[32];

		g_snprintf(name, sizeof(name), "rl/many-frozen-%d", i);
		assert_int_equal(dlock_lock_new(h.client, name, &locks[i]), DLOCK_OK);
		assert_int_equal(dlock_lock_set_owner(locks[i], DLOCK_OWNER_HANDLE), DLOCK_OK);
		assert_int_equal(dlock_acquire(locks[i], 5000), DLOCK_OK);
	}
	test_redlock_freeze(rl, 1);
	test_redlock_freeze(rl, 2);
	start = test_now_ms();
	dlock_client_free(h.client);
	took = test_now_ms() - start;
	print_message("freeing a client with 20 holds took %" PRId64 " ms\n", took);
	for (int i = 0; i < 20; i++)
		dlock_lock_free(locks[i]);
	dlock_lock_free(h.lock);
	test_redlock_thaw(rl, 1);
	test_redlock_thaw(rl, 2);
	assert_true(test_wait_until(no_key_of, "dlock:{rl/many-frozen*}", 6000 + 2000));
	assert_true(took <= 2 * 250 + 2 * 500 + test_slack(1000));
}

/* ---- a frozen master -------------------------------------------------- */

static void test_one_frozen_master_costs_at_most_the_master_timeout(void **state)
{
	char key[] = "dlock:{rl/frozen}";
	handle h;
	int64_t start, took;

	test_redlock_open(rl, &h, 3, "?master-timeout=200ms&ttl=2s", "rl/frozen");
	/* Connected to every master before one stops answering. */
	take_turns(&h, 1, 0);
	test_redlock_freeze(rl, 0);
	start = test_now_ms();
	assert_int_equal(dlock_acquire(h.lock, 5000), DLOCK_OK);
	took = test_now_ms() - start;
	print_message("acquire with a frozen master took %" PRId64 " ms\n", took);
	/* The two masters that answer make the quorum of both rounds (the
	 * lock, then the fencing token): the frozen one costs its 200 ms
	 * once, not once per round. */
	assert_true(took < 200 + test_slack(250));
	assert_int_equal(dlock_release(h.lock), DLOCK_OK);
	/* The frozen master gets the lock key once it runs again, after the
	 * release: it must be gone within the lease all the same. */
	test_redlock_thaw(rl, 0);
	assert_true(test_wait_until(no_key_on_any_master, key, 2000 + 1000));
	take_turns(&h, 2, 0);
	test_redlock_close(&h);
}

/* ---- undoing failed attempts ------------------------------------------ */

typedef struct attempt {
	handle *h;
	int64_t wait_ms;
	int rc;
} attempt;

static void *acquire_thread(void *data)
{
	attempt *a = data;

	a->rc = dlock_acquire(a->h->lock, a->wait_ms);
	return NULL;
}

static bool key_gone_from_master0(void *arg)
{
	char *value = test_redis_str(rl->masters[0], "GET %s", (const char *)arg);

	g_free(value);
	return value == NULL;
}

/*
 * A waiter's attempts fail while master 0 is frozen (it never answers)
 * and master 2 is held by a peer: each leaves master 0 to its background
 * release.  Thawed, master 0 runs the queued tries, and a later attempt
 * is granted with master 0 in its quorum.  The earlier attempts' cleanup
 * must not then delete that grant's key on master 0, or another client
 * gets masters 0 and 2 while the first still holds.
 */
static void test_failed_attempts_undo_never_removes_a_later_grant(void **state)
{
	char key[] = "dlock:{rl/stale-undo}";
	handle a, b;
	attempt waiting;
	redisReply *reply;
	GThread *t;
	int rc;

	test_redlock_open(rl, &a, 3, "?master-timeout=200ms", "rl/stale-undo");
	test_redlock_open(rl, &b, 3, "?master-timeout=200ms", "rl/stale-undo");
	/* A's hold outlives the thread that waits for it. */
	assert_int_equal(dlock_lock_set_owner(a.lock, DLOCK_OWNER_HANDLE), DLOCK_OK);
	take_turns(&a, 1, 0);
	reply = test_redis_cmd(rl->masters[2], "SET %s peer PX 60000", key);
	assert_true(reply && reply->type == REDIS_REPLY_STATUS);
	freeReplyObject(reply);
	test_redlock_freeze(rl, 0);
	waiting = (attempt){ &a, 15000, DLOCK_EINVAL };
	t = g_thread_new("waiter", acquire_thread, &waiting);
	g_usleep(2500 * 1000);
	test_redlock_thaw(rl, 0);
	g_thread_join(t);
	if (waiting.rc != DLOCK_OK)
		fail_msg("the waiter got %s: %s", dlock_code_name(waiting.rc), dlock_last_error_message());
	/* The background releases of the failed attempts run within a few
	 * seconds of the thaw (backoff up to 2 s); A's lease lasts 30 s. */
	if (test_poll_window(key_gone_from_master0, key, 4000))
		print_message("the lock key vanished from master 0 while A holds it\n");
	assert_int_equal(test_redis_int(rl->masters[2], "DEL %s", key), 1);
	rc = dlock_acquire(b.lock, 0);
	if (rc == DLOCK_OK)
		fail_msg("two holders: B was granted (token %" PRIu64 ") while A holds (token %" PRIu64
		         ", held %d)", dlock_fencing_token(b.lock), dlock_fencing_token(a.lock),
		         dlock_held(a.lock));
	assert_int_equal(rc, DLOCK_EBUSY);
	assert_true(dlock_held(a.lock));
	assert_int_equal(dlock_release(a.lock), DLOCK_OK);
	test_redlock_close(&a);
	test_redlock_close(&b);
}

/* ---- a majority frozen under a hold ------------------------------------ */

static bool reported(test_events *ev, dlock_state state)
{
	return test_events_index(ev, state) >= 0;
}

static bool suspended_reported(void *arg)
{
	return reported(arg, DLOCK_STATE_SUSPENDED);
}

static bool reconnected_reported(void *arg)
{
	return reported(arg, DLOCK_STATE_RECONNECTED);
}

static bool lost_reported(void *arg)
{
	return reported(arg, DLOCK_STATE_LOST);
}

/* The hold whose state changes a test watches: static, so that a test
 * that fails does not leave the callback writing into its stack; the
 * teardown closes it. */
static handle watched;
static test_events events;

/* Hold resource through `watched` with the watchdog on, state changes in
 * `events`; returns when the hold was granted. */
static int64_t hold_watched(const char *suffix, const char *resource)
{
	test_events_init(&events);
	test_redlock_open(rl, &watched, 3, suffix, resource);
	assert_int_equal(dlock_lock_set_watchdog(watched.lock, 1), DLOCK_OK);
	assert_int_equal(dlock_lock_set_state_callback(watched.lock, test_events_record, &events), DLOCK_OK);
	assert_int_equal(dlock_acquire(watched.lock, 5000), DLOCK_OK);
	return test_now_ms();
}

static void close_watched(void)
{
	if (watched.client)
		test_redlock_close(&watched);
	memset(&watched, 0, sizeof(watched));
}

static void test_majority_frozen_briefly_suspends_then_reconnects(void **state)
{
	char key[] = "dlock:{rl/suspend}";

	/* Renewals every second, each round bounded by the 200 ms master
	 * timeout; the lease lasts 3 s from the last one that reached the
	 * quorum. */
	hold_watched("?ttl=3s&master-timeout=200ms", "rl/suspend");
	test_redlock_freeze(rl, 1);
	test_redlock_freeze(rl, 2);
	assert_true(test_wait_until(suspended_reported, &events, 1000 + 200 + 500));
	assert_false(dlock_held(watched.lock));
	test_redlock_thaw(rl, 1);
	test_redlock_thaw(rl, 2);
	assert_true(test_wait_until(reconnected_reported, &events, 1000 + 500));
	assert_false(reported(&events, DLOCK_STATE_LOST));
	assert_true(dlock_held(watched.lock));
	assert_int_equal(dlock_release(watched.lock), DLOCK_OK);
	close_watched();
	assert_true(test_wait_until(no_key_on_any_master, key, 3000 + 1000));
}

static void test_majority_frozen_for_the_lease_is_lost_by_its_end(void **state)
{
	char key[] = "dlock:{rl/frozen-lost}";
	int64_t granted_ms = hold_watched("?ttl=1s&master-timeout=100ms", "rl/frozen-lost");
	int64_t lost_ms;

	test_redlock_freeze(rl, 1);
	test_redlock_freeze(rl, 2);
	assert_true(test_wait_until(lost_reported, &events, 1000 + 1000));
	lost_ms = test_events_first_at(&events, DLOCK_STATE_LOST);
	print_message("SUSPENDED %" PRId64 " ms, LOST %" PRId64 " ms after the grant\n",
	              test_events_first_at(&events, DLOCK_STATE_SUSPENDED) - granted_ms, lost_ms - granted_ms);
	/* No renewal reached the quorum after the grant: the lease, counted
	 * from before the grant, ends within 1 s of it. */
	assert_true(lost_ms - granted_ms <= 1000 + test_slack(100));
	/* The renewal due after ~333 ms missed the quorum within its 100 ms
	 * master timeout: SUSPENDED well before the end. */
	assert_true(reported(&events, DLOCK_STATE_SUSPENDED));
	assert_true(test_events_first_at(&events, DLOCK_STATE_SUSPENDED) - granted_ms < 333 + 100 + test_slack(200));
	assert_int_equal(dlock_release(watched.lock), DLOCK_ELOST);
	close_watched();
	test_redlock_thaw(rl, 1);
	test_redlock_thaw(rl, 2);
	assert_true(test_wait_until(no_key_on_any_master, key, 1000 + 1000));
}

/* ---- a master that loses its data ------------------------------------- */

static void test_master_restarted_empty_between_holders_keeps_tokens_increasing(void **state)
{
	handle a, b;
	uint64_t last = 0;

	test_redlock_open(rl, &a, 3, NULL, "rl/restart");
	test_redlock_open(rl, &b, 3, NULL, "rl/restart");
	for (int i = 0; i < 3; i++) {
		last = take_turns(i % 2 ? &a : &b, 1, last);
		/* Comes back without the lock key or the fencing counter. */
		test_redis_restart(rl->masters[i]);
		assert_int_equal(test_redis_int(rl->masters[i], "EXISTS dlock:{rl/restart}:fence"), 0);
	}
	last = take_turns(&a, 1, last);
	take_turns(&b, 1, last);
	test_redlock_close(&a);
	test_redlock_close(&b);
}

/* Master i's fencing counter of rl/overlap. */
static void set_counter(int i, uint64_t value)
{
	redisReply *r = test_redis_cmd(rl->masters[i], "SET dlock:{rl/overlap}:fence %llu", (unsigned long long)value);

	assert_non_null(r);
	assert_int_equal(r->type, REDIS_REPLY_STATUS);
	freeReplyObject(r);
}

static uint64_t get_counter(int i)
{
	char *text = test_redis_str(rl->masters[i], "GET dlock:{rl/overlap}:fence");
	uint64_t value;

	assert_non_null(text);
	value = g_ascii_strtoull(text, NULL, 10);
	g_free(text);
	return value;
}

/* Each holder's quorum shares one master with the last one's, and that
 * master alone carries the last token over: the token is 1 + the largest
 * counter of the quorum, and the fencing round raises each quorum
 * master's counter to it. */
static void test_tokens_increase_when_quorums_share_only_one_master(void **state)
{
	handle h;
	uint64_t first, second;

	test_redlock_open(rl, &h, 3, NULL, "rl/overlap");
	/* Quorum {1, 2}. */
	test_redis_halt(rl->masters[0]);
	first = take_turns(&h, 1, 0);
	/* Master 0 comes back with a counter far below every token handed
	 * out, as from an old snapshot. */
	test_redis_resume(rl->masters[0]);
	set_counter(0, 5);
	/* Quorum {0, 2}: master 2 carries the first token over. */
	test_redis_halt(rl->masters[1]);
	second = take_turns(&h, 1, first);
	assert_true(get_counter(0) >= second);
	/* Quorum {0, 1}: master 1 saw only the first token; master 0 carries
	 * the second over. */
	test_redis_resume(rl->masters[1]);
	set_counter(1, first);
	test_redis_halt(rl->masters[2]);
	take_turns(&h, 1, second);
	test_redlock_close(&h);
}

/* ---- keys removed under a hold ---------------------------------------- */

/* Hold rl/gone with a 1 s lease renewed every ~333 ms, and delete the
 * lock key on the first `deleted` masters. */
static int64_t hold_and_delete(int deleted)
{
	hold_watched("?ttl=1s", "rl/gone");
	for (int i = 0; i < deleted; i++)
		assert_int_equal(test_redis_int(rl->masters[i], "DEL dlock:{rl/gone}"), 1);
	return test_now_ms();
}

static void test_keys_deleted_on_a_majority_is_lost(void **state)
{
	char key[] = "dlock:{rl/gone}";
	int64_t deleted_ms = hold_and_delete(2), lost_after;

	/* The next renewal (within ~333 ms) finds the key missing on two
	 * masters out of three: LOST at once, well before the 1 s lease
	 * would have run out unrenewed. */
	assert_true(test_wait_until(lost_reported, &events, 1000 + 500));
	lost_after = test_events_first_at(&events, DLOCK_STATE_LOST) - deleted_ms;
	print_message("LOST %" PRId64 " ms after the keys were deleted\n", lost_after);
	assert_true(lost_after < 333 + test_slack(300));
	assert_false(dlock_held(watched.lock));
	assert_int_equal(dlock_release(watched.lock), DLOCK_ELOST);
	close_watched();
	/* The third master's copy is gone within its lease at the latest. */
	assert_true(test_wait_until(no_key_on_any_master, key, 1000 + 1000));
}

static void test_key_deleted_on_one_master_is_not_lost(void **state)
{
	hold_and_delete(1);
	/* Four renewal periods, each reaching the two masters that still
	 * hold the key: a quorum. */
	assert_false(test_poll_window(lost_reported, &events, 4 * 333));
	assert_true(dlock_held(watched.lock));
	assert_int_equal(dlock_release(watched.lock), DLOCK_OK);
	assert_int_equal(test_redlock_count_key(rl, "dlock:{rl/gone}", NULL), 0);
	close_watched();
}

/*
 * The answers to a release lost with their connections, on two masters of
 * three: each release ran there, and the script sent again on a new
 * connection finds the key gone -- by the release itself, not by a lost
 * lease.  The release is DLOCK_OK, every time, and nothing is left.
 */
static void test_release_whose_answers_are_lost_with_their_connections_is_not_lost(void **state)
{
	test_proxy *proxy[2];
	char *uri;
	handle h;

	for (int i = 0; i < 2; i++)
		proxy[i] = test_proxy_start_proto(TEST_PROXY_REDIS, rl->masters[i]->port);
	uri = g_strdup_printf("redis://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d?ttl=10s",
	                      test_proxy_port(proxy[0]), test_proxy_port(proxy[1]),
	                      rl->masters[2]->port);
	assert_int_equal(dlock_client_new(uri, &h.client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(h.client, "rl/release-answer-lost", &h.lock), DLOCK_OK);
	/* The scripts are loaded on every master, so each release is one
	 * EVALSHA there. */
	take_turns(&h, 1, 0);
	for (int round = 0; round < 3; round++) {
		int rc;

		assert_int_equal(dlock_acquire(h.lock, 5000), DLOCK_OK);
		for (int i = 0; i < 2; i++)
			test_proxy_drop_replies(proxy[i], "EVALSHA", 1, true);
		rc = dlock_release(h.lock);
		if (rc != DLOCK_OK)
			fail_msg("round %d: release %s (%s)", round, dlock_code_name(rc),
			         dlock_last_error_message());
		assert_int_equal(test_proxy_dropped(proxy[0]) + test_proxy_dropped(proxy[1]),
		                 2 * (round + 1));
		assert_int_equal(test_redlock_count_key(rl, "dlock:{rl/release-answer-lost}", NULL), 0);
	}
	test_redlock_close(&h);
	for (int i = 0; i < 2; i++)
		test_proxy_stop(proxy[i]);
	g_free(uri);
}

/* After each test: every master running again (those halted come back
 * empty), and none of them left with a key of the suite. */
static bool no_lock_key_of_the_suite(void *arg)
{
	long long found = 0;

	for (int i = 0; i < rl->n; i++)
		if (!rl->stopped[i] && rl->masters[i]->pid)
			found += test_redis_count_keys(rl->masters[i], "dlock:{rl/*}");
	return found == 0;
}

static int revive(void **state)
{
	(void)state;
	close_watched();
	return test_redlock_revive(rl, no_lock_key_of_the_suite, NULL, "dlock:{rl/");
}

/*
 * A client's holds are renewed in one round.  One of them short of a
 * quorum (its key gone from master 0) with master 2 frozen: that hold's
 * answer waits on master 2, but the round does not wait with it -- the
 * other holds, renewed by masters 0 and 1, stay held past several leases,
 * where a round waiting for master 2 (3 s) would have run past the end of
 * their 1.5 s leases.
 */
static void test_a_hold_short_of_a_quorum_does_not_hold_up_the_others(void **state)
{
	char *uri = test_redlock_uri(rl, 3, "?ttl=1500ms&master-timeout=3s");
	dlock_lock *locks[4];
	dlock_client *client;
	int rc;

	(void)state;
	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	for (int i = 0; i < 4; i++) {
		char *resource = g_strdup_printf("rl/short-%d", i);

		assert_int_equal(dlock_lock_new(client, resource, &locks[i]), DLOCK_OK);
		assert_int_equal(dlock_lock_set_watchdog(locks[i], 1), DLOCK_OK);
		assert_int_equal(dlock_acquire(locks[i], 5000), DLOCK_OK);
		g_free(resource);
	}
	assert_int_equal(test_redis_int(rl->masters[0], "DEL dlock:{rl/short-0}"), 1);
	test_redlock_freeze(rl, 2);
	g_usleep(3500 * 1000);
	for (int i = 1; i < 4; i++)
		if (!dlock_held(locks[i]))
			fail_msg("rl/short-%d was lost while masters 0 and 1 renewed it", i);
	test_redlock_thaw(rl, 2);
	for (int i = 0; i < 4; i++) {
		rc = dlock_release(locks[i]);
		assert_true(rc == DLOCK_OK || (i == 0 && rc == DLOCK_ELOST));
		dlock_lock_free(locks[i]);
	}
	dlock_client_free(client);
	g_free(uri);
}

/* Masters made slow, not silent: stopped stop_ms, then running run_ms, in
 * a loop, until told to end. */
typedef struct flapper {
	int masters[2], n;
	int stop_ms, run_ms;
	gint end;
	GThread *thread;
} flapper;

static gpointer flap_main(gpointer data)
{
	flapper *f = data;

	while (!g_atomic_int_get(&f->end)) {
		for (int i = 0; i < f->n; i++)
			test_redlock_freeze(rl, f->masters[i]);
		g_usleep(f->stop_ms * 1000);
		for (int i = 0; i < f->n; i++)
			test_redlock_thaw(rl, f->masters[i]);
		g_usleep(f->run_ms * 1000);
	}
	return NULL;
}

static void flap_start(flapper *f)
{
	f->end = 0;
	f->thread = g_thread_new("flap", flap_main, f);
}

static void flap_stop(flapper *f)
{
	g_atomic_int_set(&f->end, 1);
	g_thread_join(f->thread);
}

/*
 * Master 2 emptied (restarted without its data: its answer for every hold
 * is "not ours") and master 1 slow, answering within about 30 ms of a 1 s
 * master timeout: masters 0 and 1 are a quorum that renews every hold.
 * The round waits for master 1 for every hold that master 0's yes and
 * master 2's no leave open, and no hold is SUSPENDED or lost.
 */
static void test_a_slow_master_and_an_empty_one_keep_what_a_quorum_renews(void **state)
{
	char *uri = test_redlock_uri(rl, 3, "?ttl=1500ms&master-timeout=1s");
	flapper slow = { { 1 }, 1, 30, 2, 0, NULL };
	test_events ev[4];
	dlock_lock *locks[4];
	dlock_client *client;

	(void)state;
	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	for (int i = 0; i < 4; i++) {
		char *resource = g_strdup_printf("rl/slow-empty-%d", i);

		test_events_init(&ev[i]);
		assert_int_equal(dlock_lock_new(client, resource, &locks[i]), DLOCK_OK);
		assert_int_equal(dlock_lock_set_watchdog(locks[i], 1), DLOCK_OK);
		assert_int_equal(dlock_lock_set_state_callback(locks[i], test_events_record, &ev[i]), DLOCK_OK);
		assert_int_equal(dlock_acquire(locks[i], 5000), DLOCK_OK);
		g_free(resource);
	}
	freeReplyObject(test_redis_cmd(rl->masters[2], "FLUSHALL"));
	flap_start(&slow);
	g_usleep(4000 * 1000);
	flap_stop(&slow);
	for (int i = 0; i < 4; i++) {
		if (reported(&ev[i], DLOCK_STATE_SUSPENDED) || !dlock_held(locks[i]))
			fail_msg("rl/slow-empty-%d: SUSPENDED %d, held %d, while masters 0 and 1 renewed it", i,
			         reported(&ev[i], DLOCK_STATE_SUSPENDED), dlock_held(locks[i]));
	}
	for (int i = 0; i < 4; i++) {
		assert_int_equal(dlock_release(locks[i]), DLOCK_OK);
		dlock_lock_free(locks[i]);
	}
	dlock_client_free(client);
	g_free(uri);
}

/*
 * Holds of very different leases on one client: a 3 s one (master timeout
 * 150 ms, a twentieth of its TTL) and a 100 ms one (5 ms), with masters 1
 * and 2 slow (answering within about 20 ms).  The long hold's renewals
 * get their quorum within its own master timeout, and are never cut to
 * the short hold's: it is never SUSPENDED.
 */
static void test_a_short_lease_does_not_cut_a_long_ones_round(void **state)
{
	char *uri = test_redlock_uri(rl, 3, NULL);
	flapper slow = { { 1, 2 }, 2, 20, 5, 0, NULL };
	dlock_lock *longer, *shorter;
	dlock_client *client;
	int64_t end_us;

	(void)state;
	test_events_init(&events);
	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "rl/lease-long", &longer), DLOCK_OK);
	assert_int_equal(dlock_lock_set_ttl(longer, 3000), DLOCK_OK);
	assert_int_equal(dlock_lock_set_watchdog(longer, 1), DLOCK_OK);
	assert_int_equal(dlock_lock_set_state_callback(longer, test_events_record, &events), DLOCK_OK);
	assert_int_equal(dlock_acquire(longer, 5000), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "rl/lease-short", &shorter), DLOCK_OK);
	assert_int_equal(dlock_lock_set_ttl(shorter, 100), DLOCK_OK);
	assert_int_equal(dlock_lock_set_watchdog(shorter, 1), DLOCK_OK);
	flap_start(&slow);
	/* The short hold, lost as often as the slow masters make it, is
	 * taken again each time. */
	for (end_us = g_get_monotonic_time() + 6 * G_USEC_PER_SEC; g_get_monotonic_time() < end_us;) {
		if (!dlock_held(shorter)) {
			dlock_release(shorter);
			dlock_acquire(shorter, 200);
		}
		g_usleep(5 * 1000);
	}
	flap_stop(&slow);
	if (reported(&events, DLOCK_STATE_SUSPENDED) || !dlock_held(longer))
		fail_msg("the 3 s hold, renewed by a quorum within its 150 ms master timeout, was SUSPENDED "
		         "(%d) or lost (held %d)", reported(&events, DLOCK_STATE_SUSPENDED), dlock_held(longer));
	assert_int_equal(dlock_release(longer), DLOCK_OK);
	dlock_release(shorter);
	dlock_lock_free(longer);
	dlock_lock_free(shorter);
	dlock_client_free(client);
	g_free(uri);
}

/*
 * 384 holds of a 9 s lease in trouble (their keys gone from master 0,
 * master 2 frozen: each of their three rounds of 128 waits out its 400 ms
 * master timeout), and one healthy 1.5 s hold that masters 0 and 1 renew
 * at once.  Its renewal, due every 500 ms, waits for one round at most,
 * never behind all three: it stays held.
 */
static void test_a_healthy_hold_is_not_kept_behind_rounds_in_trouble(void **state)
{
	enum { TROUBLED = 384 };
	char *uri = test_redlock_uri(rl, 3, "?ttl=9s&master-timeout=400ms");
	dlock_lock **locks = g_new0(dlock_lock *, TROUBLED), *healthy;
	dlock_client *client;
	int64_t end_us;

	(void)state;
	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	for (int i = 0; i < TROUBLED; i++) {
		char *resource = g_strdup_printf("rl/trouble-%d", i);

		assert_int_equal(dlock_lock_new(client, resource, &locks[i]), DLOCK_OK);
		assert_int_equal(dlock_lock_set_watchdog(locks[i], 1), DLOCK_OK);
		assert_int_equal(dlock_acquire(locks[i], 5000), DLOCK_OK);
		g_free(resource);
	}
	assert_int_equal(dlock_lock_new(client, "rl/healthy", &healthy), DLOCK_OK);
	assert_int_equal(dlock_lock_set_ttl(healthy, 1500), DLOCK_OK);
	assert_int_equal(dlock_lock_set_watchdog(healthy, 1), DLOCK_OK);
	assert_int_equal(dlock_acquire(healthy, 5000), DLOCK_OK);
	for (int i = 0; i < TROUBLED; i++)
		freeReplyObject(test_redis_cmd(rl->masters[0], "DEL dlock:{rl/trouble-%d}", i));
	test_redlock_freeze(rl, 2);
	for (end_us = g_get_monotonic_time() + 6 * G_USEC_PER_SEC; g_get_monotonic_time() < end_us;) {
		if (!dlock_held(healthy))
			fail_msg("the healthy hold, renewed by masters 0 and 1, was lost %" G_GINT64_FORMAT
			         " ms before the end", (end_us - g_get_monotonic_time()) / 1000);
		g_usleep(10 * 1000);
	}
	test_redlock_thaw(rl, 2);
	assert_int_equal(dlock_release(healthy), DLOCK_OK);
	dlock_lock_free(healthy);
	for (int i = 0; i < TROUBLED; i++) {
		dlock_release(locks[i]);
		dlock_lock_free(locks[i]);
	}
	dlock_client_free(client);
	g_free(locks);
	g_free(uri);
}

static double cpu_seconds(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/*
 * A hold whose rounds settle at once short of a quorum (its key gone from
 * master 0, master 2 down: 1 yes, 1 no, 1 refused) is tried again after
 * 200 ms, not at once: over 2 s the watch thread sends master 1 about ten
 * scripts and uses next to no CPU.
 */
static void test_a_round_short_of_a_quorum_is_not_run_again_at_once(void **state)
{
	char *uri = test_redlock_uri(rl, 3, "?ttl=6s&master-timeout=100ms");
	dlock_client *client;
	dlock_lock *lock;
	long long scripts;
	double cpu;

	(void)state;
	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "rl/retry", &lock), DLOCK_OK);
	assert_int_equal(dlock_lock_set_watchdog(lock, 1), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, 5000), DLOCK_OK);
	assert_int_equal(test_redis_int(rl->masters[0], "DEL dlock:{rl/retry}"), 1);
	test_redis_halt(rl->masters[2]);
	g_usleep(2300 * 1000); /* the first renewal (at 2 s) came short */
	scripts = test_redis_calls(rl->masters[1], "evalsha");
	cpu = cpu_seconds();
	g_usleep(2000 * 1000);
	scripts = test_redis_calls(rl->masters[1], "evalsha") - scripts;
	cpu = cpu_seconds() - cpu;
	print_message("%lld scripts on master 1, %.2f s of CPU in 2 s\n", scripts, cpu);
	test_redis_resume(rl->masters[2]);
	if (scripts > 30 || cpu > 0.5)
		fail_msg("renewals short of a quorum run again at once: %lld scripts, %.2f s of CPU in 2 s",
		         scripts, cpu);
	dlock_release(lock);
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_free(uri);
}

/*
 * A hold in trouble whose validity ends just before a healthy one's, with
 * other master timeouts (a twentieth of each TTL): the healthy hold is
 * renewed when due all the same -- its key's PTTL never falls below a
 * third of its 3 s TTL -- and is never lost.
 */
static void test_a_hold_in_trouble_ending_sooner_does_not_starve_a_healthy_one(void **state)
{
	char *uri = test_redlock_uri(rl, 3, NULL);
	dlock_lock *troubled, *healthy;
	dlock_client *client;
	int64_t start_us, least = G_MAXINT64;

	(void)state;
	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "rl/starve-troubled", &troubled), DLOCK_OK);
	assert_int_equal(dlock_lock_set_ttl(troubled, 4000), DLOCK_OK);
	assert_int_equal(dlock_lock_set_watchdog(troubled, 1), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "rl/starve-healthy", &healthy), DLOCK_OK);
	assert_int_equal(dlock_lock_set_ttl(healthy, 3000), DLOCK_OK);
	assert_int_equal(dlock_lock_set_watchdog(healthy, 1), DLOCK_OK);
	start_us = g_get_monotonic_time();
	assert_int_equal(dlock_acquire(troubled, 5000), DLOCK_OK);
	assert_int_equal(test_redis_int(rl->masters[0], "DEL dlock:{rl/starve-troubled}"), 1);
	test_redlock_freeze(rl, 2);
	/* The healthy hold's validity ends about 1 ms after the other's. */
	while (g_get_monotonic_time() < start_us + 991 * 1000)
		;
	assert_int_equal(dlock_acquire(healthy, 5000), DLOCK_OK);
	for (start_us = g_get_monotonic_time(); g_get_monotonic_time() < start_us + 4 * G_USEC_PER_SEC;) {
		long long pttl = test_redis_int(rl->masters[1], "PTTL dlock:{rl/starve-healthy}");

		least = MIN(least, pttl);
		if (!dlock_held(healthy) || pttl < 1000)
			fail_msg("the healthy hold went unrenewed: PTTL %lld ms of 3000, held %d", pttl,
			         dlock_held(healthy));
		g_usleep(2 * 1000);
	}
	print_message("the healthy key's least PTTL: %" PRId64 " ms\n", least);
	test_redlock_thaw(rl, 2);
	assert_int_equal(dlock_release(healthy), DLOCK_OK);
	dlock_release(troubled);
	dlock_lock_free(healthy);
	dlock_lock_free(troubled);
	dlock_client_free(client);
	g_free(uri);
}

#define FAULT_TEST(f) cmocka_unit_test_teardown(f, revive)

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		FAULT_TEST(test_one_of_three_masters_killed_acquires_still_succeed),
		FAULT_TEST(test_two_of_five_masters_killed_acquires_still_succeed),
		FAULT_TEST(test_majority_killed_acquire_is_unavailable_within_the_deadline),
		FAULT_TEST(test_majority_frozen_acquire_is_unavailable_within_the_deadline),
		FAULT_TEST(test_majority_frozen_acquire_returns_by_the_callers_deadline),
		FAULT_TEST(test_many_holds_released_with_a_majority_frozen_cost_one_master_timeout),
		FAULT_TEST(test_one_frozen_master_costs_at_most_the_master_timeout),
		FAULT_TEST(test_failed_attempts_undo_never_removes_a_later_grant),
		FAULT_TEST(test_majority_frozen_briefly_suspends_then_reconnects),
		FAULT_TEST(test_majority_frozen_for_the_lease_is_lost_by_its_end),
		FAULT_TEST(test_master_restarted_empty_between_holders_keeps_tokens_increasing),
		FAULT_TEST(test_tokens_increase_when_quorums_share_only_one_master),
		FAULT_TEST(test_keys_deleted_on_a_majority_is_lost),
		FAULT_TEST(test_key_deleted_on_one_master_is_not_lost),
		FAULT_TEST(test_a_hold_short_of_a_quorum_does_not_hold_up_the_others),
		FAULT_TEST(test_a_slow_master_and_an_empty_one_keep_what_a_quorum_renews),
		FAULT_TEST(test_a_short_lease_does_not_cut_a_long_ones_round),
		FAULT_TEST(test_a_healthy_hold_is_not_kept_behind_rounds_in_trouble),
		FAULT_TEST(test_a_round_short_of_a_quorum_is_not_run_again_at_once),
		FAULT_TEST(test_a_hold_in_trouble_ending_sooner_does_not_starve_a_healthy_one),
		FAULT_TEST(test_release_whose_answers_are_lost_with_their_connections_is_not_lost),
	};

	test_init(argv[0]);
	return test_finish(cmocka_run_group_tests_name("redis-redlock-faults", tests, test_redlock_suite_setup,
	                                               test_redlock_suite_teardown));
}
