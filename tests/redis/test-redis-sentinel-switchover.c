/* SPDX-License-Identifier: MIT */
/*
 * Holds and waits across a switchover under Sentinel (SENTINEL FAILOVER):
 * the old master stays up, and stays a master, for seconds after the
 * sentinels promoted a replica.  Whatever the client sends from then on
 * goes to the new master: a holder's renewals keep the replicated key
 * there (and so keep the others out) instead of renewing a copy on the
 * old master that nobody else asks, and a waiter gets the lock once the
 * holder lets go, with a larger token.
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
#include "test-sentinel.h"
#include "test-util.h"

#define SERVICE "mymaster"

typedef struct holder {
	dlock_lock *lock;
	gint lost;        /* the state callback reported LOST */
	gint64 lost_us;   /* when (monotonic) */
} holder;

typedef struct waiter {
	dlock_lock *lock;
	int64_t wait_ms;
	int rc;
	gint done;
	gint64 got_us;    /* when the acquire returned (monotonic) */
	uint64_t token;
} waiter;

static void on_state(dlock_lock *lock, dlock_state state, void *user_data)
{
	holder *h = user_data;

	(void)lock;
	if (state == DLOCK_STATE_LOST && !g_atomic_int_get(&h->lost)) {
		h->lost_us = g_get_monotonic_time();
		g_atomic_int_set(&h->lost, 1);
	}
}

static gpointer wait_for_lock(gpointer data)
{
	waiter *w = data;

	w->rc = dlock_acquire(w->lock, w->wait_ms);
	w->got_us = g_get_monotonic_time();
	w->token = dlock_fencing_token(w->lock);
	g_atomic_int_set(&w->done, 1);
	return NULL;
}

static bool waiter_done(void *data)
{
	waiter *w = data;

	return g_atomic_int_get(&w->done);
}

static dlock_lock *new_lock(dlock_client *client, const char *resource, int64_t ttl_ms)
{
	dlock_lock *lock;

	assert_int_equal(dlock_lock_new(client, resource, &lock), DLOCK_OK);
	assert_int_equal(dlock_lock_set_ttl(lock, ttl_ms), DLOCK_OK);
	/* Acquired on one thread, released on another. */
	assert_int_equal(dlock_lock_set_owner(lock, DLOCK_OWNER_HANDLE), DLOCK_OK);
	return lock;
}

static dlock_client *new_client(test_sentinel *ts)
{
	char *uri = test_sentinel_uri(ts, NULL);
	dlock_client *client;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	g_free(uri);
	return client;
}

/* Whether some client of sentinel 0 is subscribed (CLIENT LIST sub=1). */
static bool listening_on_first_sentinel(void *data)
{
	test_sentinel *ts = data;
	redisReply *reply = test_sentinel_cmd(ts, 0, "CLIENT LIST");
	bool found = reply && reply->type == REDIS_REPLY_STRING && strstr(reply->str, " sub=1 ");

	if (reply)
		freeReplyObject(reply);
	return found;
}

/*
 * For window_ms, a client made now tries every 250 ms (wait 0): while A
 * holds, the lock must be busy on the master the sentinels name.
 */
static void newcomer_tries(test_sentinel *ts, const char *resource, int64_t ttl_ms, int64_t window_ms,
                           holder *a)
{
	dlock_client *cc = new_client(ts);
	dlock_lock *c = new_lock(cc, resource, ttl_ms);
	gint64 until_us = g_get_monotonic_time() + window_ms * 1000;
	int tries = 0, busy = 0;

	while (g_get_monotonic_time() < until_us) {
		int rc = dlock_acquire(c, 0);

		tries++;
		if (rc == DLOCK_OK) {
			bool lost = g_atomic_int_get(&a->lost);

			dlock_release(c);
			if (!lost)
				fail_msg("a newcomer got the lock while the holder held it (try %d)", tries);
		}
		busy += rc == DLOCK_EBUSY;
		g_usleep(250 * 1000);
	}
	print_message("newcomer: %d tries, %d busy\n", tries, busy);
	dlock_lock_free(c);
	dlock_client_free(cc);
}

/*
 * A holds, B waits; a switchover, with the sentinel that the client
 * listens on for +switch-master frozen first when silent_watch.  After
 * the switch A's renewals must reach the new master, where A's key was
 * replicated: B, which asks the new master, stays out for as long as A
 * holds -- longer than the copy there would live without A's renewals,
 * and about as long as the old master stays a master -- and gets the
 * lock as soon as A releases it.
 */
static void check_switchover(const char *resource, int64_t ttl_ms, int64_t window_ms, bool silent_watch,
                             bool refuse_subscribe)
{
	test_sentinel *ts;
	dlock_client *ca, *cb;
	holder a;
	waiter b;
	GThread *thread;
	gint64 switched_us, released_us;
	int old_port, rc;

	/* Sentinels whose ACL refuses SUBSCRIBE: no +switch-master heard. */
	test_sentinel_set_extra_conf(refuse_subscribe ? "user default on nopass ~* &* +@all -subscribe -psubscribe"
	                                              : NULL);
	ts = test_sentinel_start(SERVICE, 1, NULL, NULL);
	test_sentinel_set_extra_conf(NULL);
	ca = new_client(ts);
	cb = new_client(ts);
	a = (holder){ .lock = new_lock(ca, resource, ttl_ms) };
	b = (waiter){ .lock = new_lock(cb, resource, ttl_ms), .wait_ms = 40000 * test_slack_factor() };

	assert_int_equal(dlock_lock_set_state_callback(a.lock, on_state, &a), DLOCK_OK);
	assert_int_equal(dlock_acquire(a.lock, 0), DLOCK_OK);
	thread = g_thread_new("waiter", wait_for_lock, &b);
	/* B is queued behind A before the switch. */
	assert_false(test_poll_window(waiter_done, &b, 500));
	if (silent_watch) {
		/* The clients listen on the first sentinel; it goes silent. */
		assert_true(test_wait_until(listening_on_first_sentinel, ts, 5000));
		test_sentinel_freeze(ts, 0);
	}

	old_port = test_sentinel_failover(ts);
	switched_us = g_get_monotonic_time();
	print_message("switched over from port %d\n", old_port);
	/* A client that comes after the switch asks the new master only:
	 * A's key must be alive there all along. */
	newcomer_tries(ts, resource, ttl_ms, window_ms, &a);
	if (test_poll_window(waiter_done, &b, 1)) {
		print_message("B got the lock %.3f s after the switch (%s), A %s\n",
		              (b.got_us - switched_us) / 1e6, dlock_code_name(b.rc),
		              g_atomic_int_get(&a.lost) ? "lost before" : "still holding");
		if (b.rc == DLOCK_OK)
			assert_true(g_atomic_int_get(&a.lost) && a.lost_us <= b.got_us);
	}
	assert_false(g_atomic_int_get(&a.lost));
	assert_int_equal(dlock_held(a.lock), 1);

	released_us = g_get_monotonic_time();
	assert_int_equal(dlock_release(a.lock), DLOCK_OK);
	assert_true(test_wait_until(waiter_done, &b, 5000));
	assert_int_equal(b.rc, DLOCK_OK);
	print_message("B got the lock %.3f s after A released it\n", (b.got_us - released_us) / 1e6);
	assert_true(b.token > dlock_fencing_token(a.lock));
	rc = dlock_release(b.lock);
	if (rc != DLOCK_OK)
		print_message("B's release: %s\n", dlock_last_error_message());
	assert_int_equal(rc, DLOCK_OK);
	g_thread_join(thread);

	dlock_lock_free(a.lock);
	dlock_lock_free(b.lock);
	dlock_client_free(ca);
	dlock_client_free(cb);
	test_sentinel_stop(ts);
}

/* Three leases of 3 s: A renews all along, and B must not get in. */
static void test_a_holder_renews_on_the_new_master_and_keeps_others_out(void **state)
{
	(void)state;
	check_switchover("sentinel/switchover", 3000, 9000, false, false);
}

/*
 * The same when the sentinel the client listened on for +switch-master
 * is silent: the switch announced by the others must still be heard, by
 * listening to another sentinel and asking it which master it names.
 * A lease of 9 s, watched for its whole length past the switch.
 */
static void test_a_switch_is_followed_when_the_listened_sentinel_is_silent(void **state)
{
	(void)state;
	check_switchover("sentinel/switchover-silent", 9000, 10000, true, false);
}

/*
 * The same when no sentinel lets the client subscribe (their ACL refuses
 * SUBSCRIBE): the client asks them every second which master they name.
 * Leases of 4 s, watched for one and a half past the switch.
 */
static void test_a_switch_is_followed_when_no_sentinel_takes_a_subscription(void **state)
{
	(void)state;
	check_switchover("sentinel/switchover-polled", 4000, 6000, false, true);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_a_holder_renews_on_the_new_master_and_keeps_others_out),
		cmocka_unit_test(test_a_switch_is_followed_when_the_listened_sentinel_is_silent),
		cmocka_unit_test(test_a_switch_is_followed_when_no_sentinel_takes_a_subscription),
	};

	(void)argc;
	test_init(argv[0]);
	return test_finish(cmocka_run_group_tests_name("redis-sentinel-switchover", tests, NULL, NULL));
}
