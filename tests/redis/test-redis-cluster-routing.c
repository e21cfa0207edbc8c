/*
 * redis+cluster:// routing at its edges, against a real loopback cluster
 * of three masters (tests/helpers/test-cluster.h): a try (wait 0) in a
 * slot whose migration does not end.
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
	};

	(void)argc;
	test_init(argv[0]);
	return test_finish(cmocka_run_group_tests_name("redis-cluster-routing", tests, setup, teardown));
}
