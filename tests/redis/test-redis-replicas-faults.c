/* SPDX-License-Identifier: MIT */
/*
 * Replica acknowledgement under faults: a master, a replica, and a proxy
 * between the client and the master that stalls, drops or resets.
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
#include "test-holds.h"
#include "test-proxy.h"
#include "test-redis.h"

static test_redis *master;
static test_redis *replica;

/* Writes reach the replica: master_link_status:up alone does not say so. */
static bool replica_acknowledges(void *data)
{
	test_redis *m = data;

	freeReplyObject(test_redis_cmd(m, "SET replicas-probe 1"));
	return test_redis_int(m, "WAIT 1 200") == 1;
}

static void wait_replica_ready(void)
{
	assert_true(test_wait_until(replica_acknowledges, master, 15000));
}

static dlock_client *client_at(int port, const char *suffix)
{
	char *uri = g_strdup_printf("redis://127.0.0.1:%d%s", port, suffix ? suffix : "");
	dlock_client *client = test_client(uri);

	g_free(uri);
	return client;
}

typedef struct timed_acquire {
	dlock_lock *lock;
	int64_t wait_ms;
	int64_t started_ms;
	gint returned_ms;
	int rc;
	GThread *thread;
} timed_acquire;

static gpointer timed_acquire_main(gpointer data)
{
	timed_acquire *t = data;

	t->rc = dlock_acquire(t->lock, t->wait_ms);
	g_atomic_int_set(&t->returned_ms, (gint)(test_now_ms() - t->started_ms + 1));
	return NULL;
}

static bool timed_acquire_returned(void *arg)
{
	return g_atomic_int_get(&((timed_acquire *)arg)->returned_ms) != 0;
}

static bool key_gone(void *resource)
{
	return test_redis_int(master, "EXISTS dlock:{%s}", (const char *)resource) == 0;
}

/*
 * The script's answer came late (the request was held up on its way, 900
 * ms of a 1000 ms wait): the WAIT after it, with the replica frozen,
 * waits its whole timeout, and must not take the acquire past its
 * deadline.
 */
static void test_a_late_script_answer_keeps_the_acquire_within_its_deadline(void **state)
{
	test_proxy *proxy = test_proxy_start_proto(TEST_PROXY_REDIS, master->port);
	dlock_client *client = client_at(test_proxy_port(proxy), "?min-replicas=1&command-timeout=5s");
	dlock_lock *lock = test_lock(client, "replicas-faults/late");
	timed_acquire t = { .lock = lock, .wait_ms = 1000 };
	int64_t took;

	wait_replica_ready();
	/* A first hold makes the connection: the next try reuses it. */
	assert_int_equal(dlock_acquire(lock, 2000), DLOCK_OK);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	test_redis_signal(replica, SIGSTOP);
	test_proxy_stall(proxy, TEST_PROXY_UP);
	t.started_ms = test_now_ms();
	t.thread = g_thread_new("acquire", timed_acquire_main, &t);
	g_usleep(900 * 1000);
	test_proxy_unstall(proxy, TEST_PROXY_UP);
	assert_true(test_wait_until(timed_acquire_returned, &t, 10000));
	g_thread_join(t.thread);
	took = g_atomic_int_get(&t.returned_ms) - 1;
	print_message("acquire with a 1000 ms wait returned after %" PRId64 " ms: %d\n", took, t.rc);
	assert_true(t.rc == DLOCK_ETIMEDOUT || t.rc == DLOCK_EUNAVAILABLE);
	assert_true(took <= 1000 + test_slack(300));
	/* The grant the server made meanwhile goes with the cleanup. */
	assert_true(test_wait_until(key_gone, (void *)"replicas-faults/late", 5000));
	dlock_lock_free(lock);
	dlock_client_free(client);
	test_proxy_stop(proxy);
}

/*
 * The script cache flushed (SCRIPT FLUSH) and the replica frozen: the
 * acquire's first script is answered NOSCRIPT, and the WAIT after it,
 * on a connection that wrote before, waits its whole timeout; then the
 * script is loaded and sent again, with its own WAIT.  Both WAITs come
 * out of one wait: the acquire returns by its deadline.
 */
static void test_a_flushed_script_cache_keeps_the_acquire_within_its_deadline(void **state)
{
	dlock_client *client = client_at(master->port, "?min-replicas=1");
	dlock_lock *lock = test_lock(client, "replicas-faults/noscript");
	int64_t t0, took;
	int rc;

	/* A first hold makes the connection, and writes on it. */
	assert_int_equal(dlock_acquire(lock, 2000), DLOCK_OK);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	test_redis_signal(replica, SIGSTOP);
	freeReplyObject(test_redis_cmd(master, "SCRIPT FLUSH"));
	t0 = test_now_ms();
	rc = dlock_acquire(lock, 1000);
	took = test_now_ms() - t0;
	print_message("acquire with a 1000 ms wait returned after %" PRId64 " ms: %d %s\n", took, rc,
	              dlock_last_error_message());
	assert_true(rc == DLOCK_ETIMEDOUT || rc == DLOCK_EUNAVAILABLE);
	assert_true(took <= 1000 + test_slack(300));
	assert_true(test_wait_until(key_gone, (void *)"replicas-faults/noscript", 5000));
	dlock_lock_free(lock);
	dlock_client_free(client);
}

/*
 * A short wait with the replica frozen: the server ends a WAIT on its
 * timer (every 100 ms at the default hz of 10), so its answer may come
 * up to that much after its timeout.  The WAIT leaves room for it: the
 * acquire still says how many replicas acknowledged, and gives the grant
 * back itself.
 */
static void test_a_short_wait_still_says_how_many_replicas_acknowledged(void **state)
{
	const char *resource = "replicas-faults/short";
	dlock_client *client = client_at(master->port, "?min-replicas=1");
	dlock_lock *lock = test_lock(client, resource);
	int unavailable = 0;

	/* A first hold makes the connection, and writes on it. */
	assert_int_equal(dlock_acquire(lock, 2000), DLOCK_OK);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	test_redis_signal(replica, SIGSTOP);
	for (int i = 0; i < 10; i++) {
		int64_t t0 = test_now_ms(), took;
		int rc = dlock_acquire(lock, 150);

		took = test_now_ms() - t0;
		if (rc == DLOCK_EUNAVAILABLE && strstr(dlock_last_error_message(), "0 of the 1 replicas"))
			unavailable++;
		else
			print_message("wait 150 ms: %d after %" PRId64 " ms: %s\n", rc, took, dlock_last_error_message());
		assert_true(took <= 150 + test_slack(300));
		assert_true(test_wait_until(key_gone, (void *)resource, 5000));
	}
	print_message("%d of 10 waits of 150 ms said how many acknowledged\n", unavailable);
	assert_int_equal(unavailable, 10);
	dlock_lock_free(lock);
	dlock_client_free(client);
}

/*
 * A batch of renewals whose answers stop half way (the connection reset
 * after the first): no WAIT ran after it, so the renewal that did answer
 * is not acknowledged, and its lease keeps counting from the grant.
 * Three holds: the first one's renewal and its WAIT (the replica frozen:
 * WAIT waits its whole timeout) keep the watchdog busy until the other
 * two are both due, so they go out in one batch.
 */
static void test_a_renewal_batch_cut_short_counts_as_unacknowledged(void **state)
{
	test_proxy *proxy = test_proxy_start_proto(TEST_PROXY_REDIS, master->port);
	dlock_client *client = client_at(test_proxy_port(proxy), "?min-replicas=1&ttl=3s&replica-timeout=400ms");
	dlock_lock *first = test_lock(client, "replicas-faults/batch-first");
	dlock_lock *a = test_lock(client, "replicas-faults/batch-a");
	dlock_lock *b = test_lock(client, "replicas-faults/batch-b");
	test_states s;
	int64_t granted_ms;

	test_states_init(&s);
	wait_replica_ready();
	assert_int_equal(dlock_lock_set_state_callback(a, test_states_record, &s), DLOCK_OK);
	assert_int_equal(dlock_acquire(first, 2000), DLOCK_OK);
	g_usleep(150 * 1000);
	granted_ms = test_now_ms();
	assert_int_equal(dlock_acquire(a, 2000), DLOCK_OK);
	assert_int_equal(dlock_acquire(b, 2000), DLOCK_OK);
	/* The first hold's renewal, a's, then b's: b's answer is lost with
	 * the connection. */
	test_proxy_drop_replies_after(proxy, "EVALSHA", 2, 1, true);
	test_redis_signal(replica, SIGSTOP);
	assert_true(test_wait_until(test_states_has_lost, &s, 3000 + test_slack(3000)));
	print_message("a: LOST %" PRId64 " ms after its grant (ttl 3000 ms), %d replies dropped\n",
	              test_states_lost_at(&s) - granted_ms, test_proxy_dropped(proxy));
	assert_int_equal(test_proxy_dropped(proxy), 1);
	assert_true(test_states_lost_at(&s) - granted_ms <= 3000 + test_slack(200));
	test_redis_signal(replica, SIGCONT);
	wait_replica_ready();
	dlock_release(first);
	dlock_release(a);
	dlock_release(b);
	dlock_lock_free(first);
	dlock_lock_free(a);
	dlock_lock_free(b);
	dlock_client_free(client);
	test_proxy_stop(proxy);
	test_states_clear(&s);
}

/* Acknowledgement back within the lease: the hold is RECONNECTED. */
static void test_renewals_acknowledged_again_resume_the_hold(void **state)
{
	dlock_client *client = client_at(master->port, "?min-replicas=1&ttl=3s&replica-timeout=200ms");
	dlock_lock *lock = test_lock(client, "replicas-faults/resume");
	test_states s;
	int64_t t0;

	test_states_init(&s);
	wait_replica_ready();
	assert_int_equal(dlock_lock_set_state_callback(lock, test_states_record, &s), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, 2000), DLOCK_OK);
	t0 = test_now_ms();
	test_redis_signal(replica, SIGSTOP);
	g_usleep(1600 * 1000);
	test_redis_signal(replica, SIGCONT);
	assert_true(test_wait_until(test_states_has_resumed, &s, 3000));
	g_mutex_lock(&s.mu);
	print_message("resumed %" PRId64 " ms after the grant\n", s.resumed_at_ms - t0);
	g_mutex_unlock(&s.mu);
	assert_false(test_states_has_lost(&s));
	assert_int_equal(test_states_seen(&s, 0), DLOCK_STATE_SUSPENDED);
	assert_true(dlock_held(lock));
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	dlock_lock_free(lock);
	dlock_client_free(client);
	test_states_clear(&s);
}

static void timed_acquire_start(timed_acquire *t, dlock_lock *lock, int64_t wait_ms)
{
	t->lock = lock;
	t->wait_ms = wait_ms;
	t->started_ms = test_now_ms();
	t->returned_ms = 0;
	t->thread = g_thread_new("acquire", timed_acquire_main, t);
}

static long long queued(const char *resource)
{
	return test_redis_int(master, "ZCARD dlock:{%s}:q", resource);
}

static bool one_queued(void *resource)
{
	return queued(resource) == 1;
}

static bool two_queued(void *resource)
{
	return queued(resource) == 2;
}

/*
 * A release hands the lock to the first waiter, whose own try confirms
 * the grant (min-replicas) but gets no acknowledgement (the replica
 * frozen): the grant goes on to the next waiter at once, which holds
 * alone; the first waits on, and gets the lock once the replica is back.
 */
static void test_a_handed_over_grant_left_unacknowledged_goes_to_the_next_waiter(void **state)
{
	const char *resource = "replicas-faults/handoff";
	dlock_client *holder = client_at(master->port, "?ttl=10s");
	dlock_client *acked = client_at(master->port, "?min-replicas=1&replica-timeout=300ms&ttl=10s");
	dlock_client *plain = client_at(master->port, "?ttl=10s");
	dlock_lock *held = test_lock(holder, resource);
	dlock_lock *first = test_lock(acked, resource), *second = test_lock(plain, resource);
	timed_acquire a = { 0 }, b = { 0 };
	int64_t released_ms;

	assert_int_equal(dlock_lock_set_owner(first, DLOCK_OWNER_HANDLE), DLOCK_OK);
	assert_int_equal(dlock_lock_set_owner(second, DLOCK_OWNER_HANDLE), DLOCK_OK);
	assert_int_equal(dlock_acquire(held, 2000), DLOCK_OK);
	timed_acquire_start(&a, first, 15000);
	assert_true(test_wait_until(one_queued, (void *)resource, 5000));
	timed_acquire_start(&b, second, 15000);
	assert_true(test_wait_until(two_queued, (void *)resource, 5000));
	test_redis_signal(replica, SIGSTOP);
	released_ms = test_now_ms();
	assert_int_equal(dlock_release(held), DLOCK_OK);
	assert_true(test_wait_until(timed_acquire_returned, &b, 5000));
	g_thread_join(b.thread);
	print_message("the second waiter holds %" PRId64 " ms after the release\n", test_now_ms() - released_ms);
	assert_int_equal(b.rc, DLOCK_OK);
	assert_false(dlock_held(first));
	assert_false(test_poll_window(timed_acquire_returned, &a, 500));
	assert_int_equal(dlock_release(second), DLOCK_OK);
	/* Handed to the first again, unacknowledged again: it waits on. */
	assert_false(test_poll_window(timed_acquire_returned, &a, 800));
	test_redis_signal(replica, SIGCONT);
	assert_true(test_wait_until(timed_acquire_returned, &a, 8000));
	g_thread_join(a.thread);
	assert_int_equal(a.rc, DLOCK_OK);
	assert_int_equal(test_redis_int(replica, "EXISTS dlock:{%s}", resource), 1);
	assert_int_equal(dlock_release(first), DLOCK_OK);
	assert_int_equal(queued(resource), 0);
	dlock_lock_free(held);
	dlock_lock_free(first);
	dlock_lock_free(second);
	dlock_client_free(holder);
	dlock_client_free(acked);
	dlock_client_free(plain);
}

/* The ticket of the first entry in resource's queue, 0 for none. */
static long long first_ticket(const char *resource)
{
	redisReply *r = test_redis_cmd(master, "ZRANGE dlock:{%s}:q 0 0 WITHSCORES", resource);
	long long ticket = 0;

	if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2)
		ticket = g_ascii_strtoll(r->element[1]->str, NULL, 10);
	freeReplyObject(r);
	return ticket;
}

/*
 * A waiter keeps its place in the queue while its tries wait for the
 * replicas: each try renews its entry, and the next one comes after the
 * WAIT (here up to 6 s, the replica frozen) and a pause.  The entry must
 * outlive that, or a waiter that came later gets ahead of it.
 */
static void test_a_waiter_keeps_its_place_while_its_tries_wait_for_replicas(void **state)
{
	const char *resource = "replicas-faults/place";
	dlock_client *holder = client_at(master->port, NULL);
	dlock_client *slow = client_at(master->port, "?min-replicas=1&replica-timeout=6s");
	dlock_client *plain = client_at(master->port, NULL);
	dlock_lock *held = test_lock(holder, resource);
	dlock_lock *first = test_lock(slow, resource), *second = test_lock(plain, resource);
	timed_acquire a = { 0 }, b = { 0 };
	long long ticket;

	assert_int_equal(dlock_lock_set_owner(first, DLOCK_OWNER_HANDLE), DLOCK_OK);
	assert_int_equal(dlock_lock_set_owner(second, DLOCK_OWNER_HANDLE), DLOCK_OK);
	assert_int_equal(dlock_acquire(held, 2000), DLOCK_OK);
	test_redis_signal(replica, SIGSTOP);
	timed_acquire_start(&a, first, 20000);
	assert_true(test_wait_until(one_queued, (void *)resource, 10000));
	ticket = first_ticket(resource);
	timed_acquire_start(&b, second, 20000);
	assert_true(test_wait_until(two_queued, (void *)resource, 5000));
	/* Past the first waiter's next try (6 s of WAIT, then a pause), and
	 * the 5 s an entry lived without its WAIT. */
	g_usleep(7500 * 1000);
	print_message("first in the queue: ticket %lld, the first waiter's %lld\n",
	              first_ticket(resource), ticket);
	assert_int_equal(first_ticket(resource), ticket);
	test_redis_signal(replica, SIGCONT);
	assert_int_equal(dlock_release(held), DLOCK_OK);
	assert_true(test_wait_until(timed_acquire_returned, &a, 10000));
	g_thread_join(a.thread);
	assert_int_equal(a.rc, DLOCK_OK);
	assert_false(timed_acquire_returned(&b));
	assert_int_equal(dlock_release(first), DLOCK_OK);
	assert_true(test_wait_until(timed_acquire_returned, &b, 5000));
	g_thread_join(b.thread);
	assert_int_equal(b.rc, DLOCK_OK);
	assert_int_equal(dlock_release(second), DLOCK_OK);
	dlock_lock_free(held);
	dlock_lock_free(first);
	dlock_lock_free(second);
	dlock_client_free(holder);
	dlock_client_free(slow);
	dlock_client_free(plain);
}

/*
 * The promise: a master and a replica; a hold whose grant and first
 * renewals the replica acknowledged, then the replica frozen and dropped
 * while the master goes on applying renewals nobody acknowledges; the
 * master killed and the replica promoted by hand.  Another client gets
 * the lock on the promoted replica only after the first hold is LOST,
 * and with a larger token.
 */
static void test_a_promoted_replica_grants_nobody_else_while_the_hold_lasts(void **state)
{
	const char *resource = "replicas-faults/promoted";
	test_redis *m = test_redis_start((const char *const[]){ "--repl-diskless-sync-delay", "0", NULL },
	                                 NULL, false);
	char *port = g_strdup_printf("%d", m->port);
	test_redis *r = test_redis_start((const char *const[]){ "--replicaof", "127.0.0.1", port, NULL },
	                                 NULL, false);
	dlock_client *first_client = client_at(m->port, "?min-replicas=1&ttl=3s&replica-timeout=200ms");
	dlock_lock *first = test_lock(first_client, resource);
	dlock_client *other_client;
	dlock_lock *other;
	test_states s;
	int64_t other_ms;
	uint64_t token;
	int rc;

	test_states_init(&s);
	assert_true(test_wait_until(replica_acknowledges, m, 15000));
	assert_int_equal(dlock_lock_set_state_callback(first, test_states_record, &s), DLOCK_OK);
	assert_int_equal(dlock_acquire(first, 2000), DLOCK_OK);
	token = dlock_fencing_token(first);
	g_usleep(1500 * 1000); /* a renewal, acknowledged */
	test_redis_signal(r, SIGSTOP);
	assert_true(test_redis_int(m, "CLIENT KILL TYPE replica") >= 1);
	g_usleep(1200 * 1000); /* renewals on the master alone */
	test_redis_signal(m, SIGKILL);
	test_redis_halt(m);
	test_redis_signal(r, SIGCONT);
	freeReplyObject(test_redis_cmd(r, "REPLICAOF NO ONE"));
	other_client = client_at(r->port, "?ttl=3s");
	other = test_lock(other_client, resource);
	while ((rc = dlock_acquire(other, 0)) == DLOCK_EBUSY)
		g_usleep(5000);
	other_ms = test_now_ms();
	assert_int_equal(rc, DLOCK_OK);
	assert_true(test_wait_until(test_states_has_lost, &s, 5000));
	print_message("the first hold LOST %" PRId64 " ms before another got it; tokens %" PRIu64
	              " then %" PRIu64 "\n", other_ms - test_states_lost_at(&s), token, dlock_fencing_token(other));
	/* LOST is reported at the lease's end, a margin before the key ends
	 * on the promoted replica; the report itself may come a little late
	 * on a loaded machine. */
	assert_true(test_states_lost_at(&s) <= other_ms + test_slack(100));
	assert_true(dlock_fencing_token(other) > token);
	assert_int_equal(dlock_release(other), DLOCK_OK);
	dlock_release(first);
	dlock_lock_free(first);
	dlock_lock_free(other);
	dlock_client_free(first_client);
	dlock_client_free(other_client);
	test_redis_stop(r);
	test_redis_stop(m);
	g_free(port);
	test_states_clear(&s);
}

/* Runs last: a group teardown's failure would not fail the program. */
static void test_no_lock_key_of_this_suite_remains(void **state)
{
	assert_int_equal(test_redis_leftover_keys(master, "dlock:{replicas-faults/"), 0);
}

static int setup(void **state)
{
	char *port;

	master = test_redis_start((const char *const[]){ "--repl-diskless-sync-delay", "0", NULL }, NULL,
	                          false);
	port = g_strdup_printf("%d", master->port);
	replica = test_redis_start((const char *const[]){ "--replicaof", "127.0.0.1", port, NULL }, NULL,
	                           false);
	g_free(port);
	return 0;
}

/* Every test starts with the replica running and acknowledging. */
static int thaw(void **state)
{
	test_redis_signal(replica, SIGCONT);
	wait_replica_ready();
	return 0;
}

static int teardown(void **state)
{
	test_redis_stop(replica);
	test_redis_stop(master);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_a_late_script_answer_keeps_the_acquire_within_its_deadline, thaw),
		cmocka_unit_test_setup(test_a_flushed_script_cache_keeps_the_acquire_within_its_deadline, thaw),
		cmocka_unit_test_setup(test_a_short_wait_still_says_how_many_replicas_acknowledged, thaw),
		cmocka_unit_test_setup(test_a_renewal_batch_cut_short_counts_as_unacknowledged, thaw),
		cmocka_unit_test_setup(test_renewals_acknowledged_again_resume_the_hold, thaw),
		cmocka_unit_test_setup(test_a_handed_over_grant_left_unacknowledged_goes_to_the_next_waiter, thaw),
		cmocka_unit_test_setup(test_a_waiter_keeps_its_place_while_its_tries_wait_for_replicas, thaw),
		cmocka_unit_test(test_a_promoted_replica_grants_nobody_else_while_the_hold_lasts),
		cmocka_unit_test(test_no_lock_key_of_this_suite_remains),
	};

	test_init(argv[0]);
	return test_finish(cmocka_run_group_tests_name("redis-replicas-faults", tests, setup, teardown));
}
