/* SPDX-License-Identifier: MIT */
/*
 * Replica acknowledgement (min-replicas, replica-timeout): a grant or a
 * renewal counts only once that many replicas have it, against a real
 * master and replica; a replica frozen with SIGSTOP stops acknowledging.
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
#include "test-redis.h"

static test_redis *master;
static test_redis *replica;

/* Writes reach the replica: master_link_status:up alone does not say so. */
static bool replica_acknowledges(void *data)
{
	(void)data;
	freeReplyObject(test_redis_cmd(master, "SET replicas-probe 1"));
	return test_redis_int(master, "WAIT 1 200") == 1;
}

static void wait_replica_ready(void)
{
	assert_true(test_wait_until(replica_acknowledges, NULL, 15000));
}

static dlock_client *client_with(const char *suffix)
{
	char *uri = test_redis_uri(master, suffix);
	dlock_client *client = test_client(uri);

	g_free(uri);
	return client;
}

/* The grant is on the replica when the acquire returns. */
static void test_a_grant_is_on_the_replica_when_the_acquire_returns(void **state)
{
	dlock_client *client = client_with("?min-replicas=1");
	dlock_lock *lock = test_lock(client, "replicas/acked");

	wait_replica_ready();
	for (int i = 0; i < 20; i++) {
		assert_int_equal(dlock_acquire(lock, 5000), DLOCK_OK);
		assert_int_equal(test_redis_int(replica, "EXISTS dlock:{replicas/acked}"), 1);
		assert_int_equal(dlock_release(lock), DLOCK_OK);
	}
	dlock_lock_free(lock);
	dlock_client_free(client);
}

typedef struct waiter {
	dlock_lock *lock;
	int rc;
} waiter;

static gpointer wait_for_it(gpointer data)
{
	waiter *w = data;

	w->rc = dlock_acquire(w->lock, 20000);
	return NULL;
}

static bool queued(void *resource)
{
	return test_redis_int(master, "ZCARD dlock:{%s}:q", (const char *)resource) > 0;
}

/* A grant handed over by a release is the releaser's write: the waiter
 * waits for the replicas itself before it holds. */
static void test_a_handed_over_grant_is_on_the_replica_when_the_wait_returns(void **state)
{
	dlock_client *holder = client_with("?min-replicas=1"), *other = client_with("?min-replicas=1");
	dlock_lock *held = test_lock(holder, "replicas/handoff");
	waiter w = { test_lock(other, "replicas/handoff"), 99 };
	char *on_master, *on_replica;
	GThread *t;

	wait_replica_ready();
	assert_int_equal(dlock_lock_set_owner(w.lock, DLOCK_OWNER_HANDLE), DLOCK_OK);
	for (int i = 0; i < 5; i++) {
		assert_int_equal(dlock_acquire(held, 5000), DLOCK_OK);
		t = g_thread_new("waiter", wait_for_it, &w);
		assert_true(test_wait_until(queued, (void *)"replicas/handoff", 10000));
		assert_int_equal(dlock_release(held), DLOCK_OK);
		g_thread_join(t);
		assert_int_equal(w.rc, DLOCK_OK);
		assert_true(dlock_fencing_token(w.lock) > 0);
		on_master = test_redis_str(master, "GET dlock:{replicas/handoff}");
		on_replica = test_redis_str(replica, "GET dlock:{replicas/handoff}");
		assert_non_null(on_master);
		assert_non_null(on_replica);
		assert_string_equal(on_replica, on_master);
		g_free(on_master);
		g_free(on_replica);
		assert_int_equal(dlock_release(w.lock), DLOCK_OK);
	}
	dlock_lock_free(w.lock);
	dlock_lock_free(held);
	dlock_client_free(other);
	dlock_client_free(holder);
}

static bool key_gone(void *resource)
{
	return test_redis_int(master, "EXISTS dlock:{%s}", (const char *)resource) == 0;
}

/*
 * With the replica frozen nothing is acknowledged: the acquire keeps
 * trying until its deadline, then fails with DLOCK_EUNAVAILABLE saying how
 * many acknowledged, and leaves no lock key behind; a try makes one
 * attempt.
 */
static void test_an_unacknowledged_grant_is_given_back_and_the_acquire_fails(void **state)
{
	dlock_client *client = client_with("?min-replicas=1&replica-timeout=200ms");
	dlock_lock *lock = test_lock(client, "replicas/frozen");
	int64_t t0, took;
	long long evals;

	wait_replica_ready();
	test_redis_signal(replica, SIGSTOP);
	t0 = test_now_ms();
	assert_int_equal(dlock_acquire(lock, 1500), DLOCK_EUNAVAILABLE);
	took = test_now_ms() - t0;
	print_message("acquire with a 1500 ms wait returned after %" PRId64 " ms: %s\n", took,
	              dlock_last_error_message());
	test_assert_message_has("0 of the 1 replicas");
	assert_true(took >= 1400 && took < 1500 + test_slack(1000));
	/* Given back at once, or, when the last try's WAIT was still
	 * unanswered at the deadline, by the cleanup once it is answered. */
	assert_true(test_wait_until(key_gone, (void *)"replicas/frozen", 3000));
	assert_false(dlock_held(lock));

	evals = test_redis_calls(master, "evalsha");
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_EUNAVAILABLE);
	test_assert_message_has("0 of the 1 replicas");
	/* One try, and the release that gave its grant back. */
	assert_int_equal(test_redis_calls(master, "evalsha") - evals, 2);
	assert_true(test_wait_until(key_gone, (void *)"replicas/frozen", 3000));

	test_redis_signal(replica, SIGCONT);
	wait_replica_ready();
	assert_int_equal(dlock_acquire(lock, 5000), DLOCK_OK);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	dlock_lock_free(lock);
	dlock_client_free(client);
}

/*
 * A renewal the replica does not acknowledge counts as unanswered: the
 * hold is SUSPENDED, and LOST by the end of the lease counted from the
 * last renewal that reached the replica.
 */
static void test_an_unacknowledged_renewal_suspends_and_the_lease_runs_out(void **state)
{
	dlock_client *client = client_with("?min-replicas=1&ttl=2s");
	dlock_lock *lock = test_lock(client, "replicas/renewal");
	test_states s;
	int64_t frozen_ms;

	test_states_init(&s);
	wait_replica_ready();
	assert_int_equal(dlock_lock_set_state_callback(lock, test_states_record, &s), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, 5000), DLOCK_OK);
	frozen_ms = test_now_ms();
	test_redis_signal(replica, SIGSTOP);
	assert_true(test_wait_until(test_states_has_lost, &s, 2000 + test_slack(3000)));
	print_message("LOST %" PRId64 " ms after the replica froze\n", test_states_lost_at(&s) - frozen_ms);
	/* The last acknowledged renewal was the grant, at most just before
	 * the freeze: LOST by its lease's end. */
	assert_true(test_states_lost_at(&s) - frozen_ms <= 2000 + test_slack(200));
	assert_true(test_states_count(&s) >= 2);
	assert_int_equal(test_states_seen(&s, 0), DLOCK_STATE_SUSPENDED);
	assert_int_equal(test_states_seen(&s, test_states_count(&s) - 1), DLOCK_STATE_LOST);
	test_redis_signal(replica, SIGCONT);
	assert_int_equal(dlock_release(lock), DLOCK_ELOST);
	dlock_lock_free(lock);
	dlock_client_free(client);
	test_states_clear(&s);
}

/* A server that refuses writes without enough replicas (its own
 * min-replicas-to-write) says NOREPLICAS: unavailable, not a backend error. */
static void test_a_server_refusing_writes_without_replicas_is_unavailable(void **state)
{
	dlock_client *client = client_with(NULL);
	dlock_lock *lock = test_lock(client, "replicas/noreplicas");

	freeReplyObject(test_redis_cmd(master, "CONFIG SET min-replicas-to-write 2"));
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_EUNAVAILABLE);
	test_assert_message_has("min-replicas-to-write");
	freeReplyObject(test_redis_cmd(master, "CONFIG SET min-replicas-to-write 0"));
	if (dlock_acquire(lock, 0) != DLOCK_OK)
		fail_msg("after the server takes writes again: %s", dlock_last_error_message());
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	dlock_lock_free(lock);
	dlock_client_free(client);
}

/* The options: a count, bounded; not on a Redlock. */
static void test_the_options_are_checked(void **state)
{
	dlock_client *client = NULL;
	char *uri;

	uri = test_redis_uri(master, "?min-replicas=two");
	assert_int_equal(dlock_client_new(uri, &client), DLOCK_ECONFIG);
	test_assert_message_has("min-replicas");
	g_free(uri);
	uri = g_strdup_printf("redis://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:1?min-replicas=1", master->port,
	                      replica->port);
	assert_int_equal(dlock_client_new(uri, &client), DLOCK_ECONFIG);
	test_assert_message_has("does not apply");
	g_free(uri);
}

/* Runs last: a group teardown's failure would not fail the program. */
static void test_no_lock_key_of_this_suite_remains(void **state)
{
	assert_int_equal(test_redis_leftover_keys(master, "dlock:{replicas/"), 0);
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

static int teardown(void **state)
{
	test_redis_stop(replica);
	test_redis_stop(master);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_a_grant_is_on_the_replica_when_the_acquire_returns),
		cmocka_unit_test(test_a_handed_over_grant_is_on_the_replica_when_the_wait_returns),
		cmocka_unit_test(test_an_unacknowledged_grant_is_given_back_and_the_acquire_fails),
		cmocka_unit_test(test_an_unacknowledged_renewal_suspends_and_the_lease_runs_out),
		cmocka_unit_test(test_a_server_refusing_writes_without_replicas_is_unavailable),
		cmocka_unit_test(test_the_options_are_checked),
		cmocka_unit_test(test_no_lock_key_of_this_suite_remains),
	};

	test_init(argv[0]);
	return test_finish(cmocka_run_group_tests_name("redis-replicas", tests, setup, teardown));
}
