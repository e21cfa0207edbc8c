/* SPDX-License-Identifier: MIT */
/*
 * redis+cluster:// across failovers inside a real cluster of three masters
 * with a replica each (tests/helpers/test-cluster.h): a held lock and its
 * waiter follow a manual failover (CLUSTER FAILOVER) without a loss, and
 * a master killed under a held lock hands over to its replica: the holder
 * is told LOST by its lease's end, the waiter holds on the promoted
 * replica after that, with a larger token.
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

static dlock_client *client_with(const char *suffix)
{
	char *uri = test_cluster_uri(tc, suffix);
	dlock_client *client = test_client(uri);

	g_free(uri);
	return client;
}

typedef struct queue_seen {
	int node;
	const char *resource;
} queue_seen;

static bool queued(void *data)
{
	queue_seen *q = data;

	return test_redis_int(test_cluster_node(tc, q->node), "ZCARD dlock:{%s}:q", q->resource) > 0;
}

/* The master of resource's slot now, as the cluster says. */
static int owner_of(const char *resource)
{
	char key[96];

	g_snprintf(key, sizeof(key), "dlock:{%s}", resource);
	return test_cluster_owner(tc, test_cluster_keyslot(key));
}

/*
 * CLUSTER FAILOVER of the master of a held lock, with a waiter queued:
 * the hold is renewed on the promoted replica and never lost, status names
 * the new master, and the release hands the lock to the waiter.
 */
static void test_a_held_lock_and_its_waiter_follow_a_manual_failover(void **state)
{
	char resource[64], master[32];
	char *uri = test_cluster_uri(tc, "?ttl=1500ms&min-replicas=1");
	dlock_client *client = client_with("?ttl=1500ms&min-replicas=1");
	dlock_lock *held;
	test_states s;
	test_rw_waiter w;
	queue_seen q;
	dlock_info *info;
	int old, promoted;

	(void)state;
	test_states_init(&s);
	test_cluster_resource_on(tc, 0, "manual/", resource, sizeof(resource));
	held = test_lock(client, resource);
	assert_int_equal(dlock_lock_set_state_callback(held, test_states_record, &s), DLOCK_OK);
	assert_int_equal(dlock_acquire(held, 5000), DLOCK_OK);
	test_rw_waiter_start(&w, uri, resource, DLOCK_MODE_EXCLUSIVE, 30000);
	old = owner_of(resource);
	q = (queue_seen){ old, resource };
	assert_true(test_wait_until(queued, &q, 10000));

	promoted = test_cluster_failover(tc, old);
	/* Several renewals on the promoted replica. */
	g_usleep(3000 * 1000);
	assert_int_equal(test_states_lost_at(&s), 0);
	assert_false(test_rw_waiter_done(&w));
	g_snprintf(master, sizeof(master), "127.0.0.1:%d", test_cluster_port(tc, promoted));
	assert_int_equal(dlock_lock_query(held, &info), DLOCK_OK);
	assert_true(dlock_info_locked(info));
	assert_string_equal(dlock_info_master(info), master);
	dlock_info_free(info);

	assert_int_equal(dlock_release(held), DLOCK_OK);
	assert_true(test_wait_until(test_rw_waiter_done, &w, 10000));
	test_rw_waiter_join(&w);
	assert_int_equal(w.rc, DLOCK_OK);
	assert_true(dlock_fencing_token(w.owner.lock) > dlock_fencing_token(held));
	assert_int_equal(dlock_release(w.owner.lock), DLOCK_OK);
	test_rw_owner_close(&w.owner);
	dlock_lock_free(held);
	dlock_client_free(client);
	test_states_clear(&s);
	g_free(uri);
}

/*
 * kill -9 of the master of a held lock, granted with the replica's
 * acknowledgement, while a waiter waits, with a lease shorter than the
 * takeover: the holder is told LOST by its lease's end; the waiter holds
 * on the promoted replica within seconds, never before the holder's LOST,
 * with a larger token.  (The waiter asks for no acknowledgement: the
 * promoted replica has no replica of its own until the old master is
 * back, and a grant that needs one waits for that.)  The old master comes
 * back as a replica.
 */
static void test_a_master_killed_under_a_held_lock_hands_over_to_its_replica(void **state)
{
	char resource[64];
	char *uri = test_cluster_uri(tc, "?ttl=1500ms");
	dlock_client *client = client_with("?ttl=1500ms&min-replicas=1");
	dlock_lock *held;
	test_states s;
	test_rw_waiter w;
	queue_seen q;
	int64_t killed_ms, granted_ms;
	uint64_t token;
	int old, promoted;

	(void)state;
	test_states_init(&s);
	test_cluster_resource_on(tc, 1, "killed/", resource, sizeof(resource));
	held = test_lock(client, resource);
	assert_int_equal(dlock_lock_set_state_callback(held, test_states_record, &s), DLOCK_OK);
	assert_int_equal(dlock_acquire(held, 5000), DLOCK_OK);
	token = dlock_fencing_token(held);
	test_rw_waiter_start(&w, uri, resource, DLOCK_MODE_EXCLUSIVE, 30000);
	old = owner_of(resource);
	q = (queue_seen){ old, resource };
	assert_true(test_wait_until(queued, &q, 10000));

	killed_ms = test_now_ms();
	test_cluster_kill(tc, old);
	{
		char key[96];

		g_snprintf(key, sizeof(key), "dlock:{%s}", resource);
		promoted = test_cluster_wait_owner_change(tc, test_cluster_keyslot(key), old, 20000);
	}
	assert_true(promoted >= 0);
	assert_true(test_wait_until(test_rw_waiter_done, &w, 20000));
	granted_ms = test_now_ms();
	test_rw_waiter_join(&w);
	print_message("killed at 0; holder LOST at %" PRId64 " ms; waiter returned %d by %" PRId64
	              " ms with token %" PRIu64 " (holder's %" PRIu64 ")\n",
	              test_states_lost_at(&s) - killed_ms, w.rc, granted_ms - killed_ms,
	              dlock_fencing_token(w.owner.lock), token);
	assert_int_equal(w.rc, DLOCK_OK);
	assert_true(test_states_lost_at(&s) > 0);
	assert_true(test_states_lost_at(&s) - killed_ms <= 1500 + test_slack(300));
	assert_true(granted_ms >= test_states_lost_at(&s));
	assert_true(dlock_fencing_token(w.owner.lock) > token);
	assert_int_equal(dlock_release(held), DLOCK_ELOST);
	assert_int_equal(dlock_release(w.owner.lock), DLOCK_OK);
	test_rw_owner_close(&w.owner);
	dlock_lock_free(held);
	dlock_client_free(client);
	test_states_clear(&s);
	g_free(uri);

	test_cluster_restart(tc, old);
	assert_true(test_cluster_wait_ok(tc, 20000));
}

static int setup(void **state)
{
	(void)state;
	tc = test_cluster_start(3, 1, NULL);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	test_cluster_stop(tc);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_a_held_lock_and_its_waiter_follow_a_manual_failover),
		cmocka_unit_test(test_a_master_killed_under_a_held_lock_hands_over_to_its_replica),
	};

	(void)argc;
	test_init(argv[0]);
	return test_finish(cmocka_run_group_tests_name("redis-cluster-failover", tests, setup, teardown));
}
