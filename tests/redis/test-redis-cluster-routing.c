/* SPDX-License-Identifier: MIT */
/*
 * redis+cluster:// routing at its edges, against a real loopback cluster
 * of three masters (tests/helpers/test-cluster.h): a try (wait 0) in a
 * slot whose migration does not end, and a waiter whose slot has no
 * master for a while.
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
#include "test-cluster.h"
#include "test-holds.h"
#include "test-rw.h"

static test_cluster *tc;
static char *uri;

/* A migration begun and never ended (an operator's tool that stopped
 * half way) for the slot of a resource on node from; the slot is handed
 * back to from with SETSLOT STABLE by migration_abort(). */
static void migration_abort(int slot, int from, int to)
{
	int nodes[2] = { from, to };

	for (int i = 0; i < 2; i++) {
		redisReply *r = test_cluster_cmd(tc, nodes[i], "CLUSTER SETSLOT %d STABLE", slot);

		assert_non_null(r);
		assert_int_not_equal(r->type, REDIS_REPLY_ERROR);
		freeReplyObject(r);
	}
	tc->migrating_from[slot] = tc->migrating_to[slot] = -1;
}

/*
 * While a slot migrates, the acquire script gets TRYAGAIN (its keys are
 * split between the nodes, or some are missing on the target), which a
 * wait rides out until its deadline.  A try (wait 0) has no deadline of
 * its own: it must still come back, DLOCK_EUNAVAILABLE, within the
 * backend's connect and command timeouts, not wait for a migration that
 * may never end.  So must a try of a read hold.
 */
static void test_a_try_in_a_slot_whose_migration_does_not_end_comes_back(void **state)
{
	char resource[64];
	char *fast = test_cluster_uri(tc, "?connect-timeout=1s&command-timeout=1s");
	dlock_client *client = test_client(fast);
	dlock_lock *lock;
	int from = 0, to = 1, slot;
	int64_t start, took;
	int rc;

	(void)state;
	slot = test_cluster_resource_on(tc, from, "try/", resource, sizeof(resource));
	test_cluster_migrate_begin(tc, slot, to);
	for (int read = 0; read < 2; read++) {
		lock = test_lock(client, resource);
		if (read)
			assert_int_equal(dlock_lock_set_mode(lock, DLOCK_MODE_READ), DLOCK_OK);
		start = test_now_ms();
		rc = dlock_acquire(lock, 0);
		took = test_now_ms() - start;
		print_message("a %s try in a migrating slot: %d after %" PRId64 " ms: %s\n",
		              read ? "read" : "exclusive", rc, took, dlock_last_error_message());
		assert_int_equal(rc, DLOCK_EUNAVAILABLE);
		test_assert_message_has("TRYAGAIN");
		assert_true(took <= 2000 + test_slack(500));
		dlock_lock_free(lock);
	}
	migration_abort(slot, from, to);
	lock = test_lock(client, resource);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_OK);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_free(fast);
}

/* ---- a slot without a master -------------------------------------------- */

typedef struct queue_seen {
	int node;
	const char *resource;
} queue_seen;

static bool queued(void *data)
{
	queue_seen *q = data;

	return test_redis_int(test_cluster_node(tc, q->node), "ZCARD dlock:{%s}:q", q->resource) == 1;
}

/* The CLUSTER SHARDS the masters have answered, in all. */
static long long map_requests(void)
{
	long long n = 0;

	for (int i = 0; i < tc->n_masters; i++)
		n += test_redis_calls(test_cluster_node(tc, i), "cluster|shards");
	return n;
}

/* Every master forgets slot (no master serves it, the cluster is down),
 * or node takes it back. */
static void slot_unassign(int slot)
{
	for (int i = 0; i < tc->n_masters; i++) {
		redisReply *r = test_cluster_cmd(tc, i, "CLUSTER DELSLOTS %d", slot);

		assert_non_null(r);
		assert_int_not_equal(r->type, REDIS_REPLY_ERROR);
		freeReplyObject(r);
	}
}

static void slot_assign(int slot, int node)
{
	redisReply *r = test_cluster_cmd(tc, node, "CLUSTER ADDSLOTS %d", slot);

	assert_non_null(r);
	assert_int_not_equal(r->type, REDIS_REPLY_ERROR);
	freeReplyObject(r);
	assert_true(test_cluster_wait_ok(tc, 20000));
}

/*
 * A waiter's slot has no master for a while (a failover under way, or a
 * slot an operator unassigned): the slot map, asked for again, still
 * names none.  The subscriber, which must subscribe the waiter's channels
 * on that master, asks for the map again after a pause that grows, as
 * the routing does -- not in a loop, each time over a new connection.
 * The waiter is served once a master serves the slot again.
 */
static void test_a_slot_without_a_master_is_asked_for_at_a_growing_pace(void **state)
{
	char resource[64];
	int owner = 1, slot;
	dlock_client *holder = test_client(uri);
	dlock_lock *held;
	test_rw_waiter w;
	queue_seen q;
	long long asked;

	(void)state;
	slot = test_cluster_resource_on(tc, owner, "unowned/", resource, sizeof(resource));
	held = test_lock(holder, resource);
	assert_int_equal(dlock_acquire(held, 5000), DLOCK_OK);
	test_rw_waiter_start(&w, uri, resource, DLOCK_MODE_EXCLUSIVE, 30000);
	q = (queue_seen){ owner, resource };
	assert_true(test_wait_until(queued, &q, 10000));
	slot_unassign(slot);
	/* The subscriber hears the slot go (a pushed sunsubscribe) and asks
	 * for the map; so do the waiter's tries, each after a pause. */
	g_usleep(300 * 1000);
	asked = map_requests();
	g_usleep(2000 * 1000);
	asked = map_requests() - asked;
	print_message("the map asked for %lld times in 2 s while slot %d had no master\n", asked, slot);
	assert_true(asked <= 60);
	slot_assign(slot, owner);
	assert_false(test_rw_waiter_done(&w));
	assert_int_equal(dlock_release(held), DLOCK_OK);
	assert_true(test_wait_until(test_rw_waiter_done, &w, 10000));
	test_rw_waiter_join(&w);
	assert_int_equal(w.rc, DLOCK_OK);
	assert_int_equal(dlock_release(w.owner.lock), DLOCK_OK);
	test_rw_owner_close(&w.owner);
	dlock_lock_free(held);
	dlock_client_free(holder);
}

/* ---- a query while the slot migrates ---------------------------------- */

/* What a query of resource says now: whether it is locked, and its token. */
static void query_of(dlock_lock *lock, int *ret_locked, uint64_t *ret_token)
{
	dlock_info *info = NULL;

	assert_int_equal(dlock_lock_query(lock, &info), DLOCK_OK);
	*ret_locked = dlock_info_locked(info);
	*ret_token = dlock_info_fencing_token(info);
	dlock_info_free(info);
}

/*
 * A held lock queried at each step of its slot's migration: begun (every
 * key still on the source, but not every key of the query exists, and the
 * missing ones answer ASK), its keys moved (the target has them), ended.
 * Each time the query says locked, with the holder's fencing token.
 */
static void test_a_held_lock_is_seen_held_at_each_step_of_a_migration(void **state)
{
	char resource[64];
	int from = 2, to = 0, slot, locked;
	dlock_client *holder = test_client(uri), *asker = test_client(uri);
	dlock_lock *held, *looker;
	uint64_t token, seen;
	static const char *const steps[] = { "begun", "keys moved", "ended" };

	(void)state;
	slot = test_cluster_resource_on(tc, from, "query/", resource, sizeof(resource));
	held = test_lock(holder, resource);
	looker = test_lock(asker, resource);
	assert_int_equal(dlock_acquire(held, 5000), DLOCK_OK);
	token = dlock_fencing_token(held);
	for (int step = 0; step < 3; step++) {
		if (step == 0)
			test_cluster_migrate_begin(tc, slot, to);
		else if (step == 1)
			assert_true(test_cluster_migrate_keys(tc, slot) > 0);
		else
			test_cluster_migrate_end(tc, slot);
		query_of(looker, &locked, &seen);
		print_message("migration %s: the query says locked %d, token %" PRIu64 " (the holder's %" PRIu64
		              ")\n", steps[step], locked, seen, token);
		assert_int_equal(locked, 1);
		assert_true(seen == token);
	}
	assert_int_equal(dlock_release(held), DLOCK_OK);
	dlock_lock_free(held);
	dlock_lock_free(looker);
	dlock_client_free(holder);
	dlock_client_free(asker);
}

static int setup(void **state)
{
	(void)state;
	tc = test_cluster_start(3, 0, NULL);
	uri = test_cluster_uri(tc, NULL);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	test_cluster_stop(tc);
	g_free(uri);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_a_try_in_a_slot_whose_migration_does_not_end_comes_back),
		cmocka_unit_test(test_a_slot_without_a_master_is_asked_for_at_a_growing_pace),
		cmocka_unit_test(test_a_held_lock_is_seen_held_at_each_step_of_a_migration),
	};

	(void)argc;
	test_init(argv[0]);
	return test_finish(cmocka_run_group_tests_name("redis-cluster-routing", tests, setup, teardown));
}
