/* SPDX-License-Identifier: MIT */
/*
 * redis+cluster:// against a real loopback cluster of three masters
 * (tests/helpers/test-cluster.h): resources spread over every master
 * through one seed, every recipe (exclusion across processes, read-write,
 * semaphores, elections, the wait queue's grants), wake-ups by sharded
 * pub/sub on the slot's master, a slot migrated while a lock is held and
 * waiters wait, what a bad URI and a master gone say.
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
#include "test-election.h"
#include "test-exclusion.h"
#include "test-holds.h"
#include "test-permits.h"
#include "test-rw.h"

static test_cluster *tc;
static char *uri;

/* A resource name "PREFIX<n>" whose key "dlock:{R}" is in slot; into buf. */
static void resource_in_slot(int slot, const char *prefix, char *buf, size_t size)
{
	for (int n = 0;; n++) {
		char key[128];

		g_snprintf(buf, size, "%s%d", prefix, n);
		g_snprintf(key, sizeof(key), "dlock:{%s}", buf);
		if (test_cluster_keyslot(key) == slot)
			return;
	}
}

/* ---- configuration ------------------------------------------------------ */

static void test_a_cluster_uri_that_cannot_work_is_refused_at_creation(void **state)
{
	static const char *const bad[] = {
		"redis+cluster://127.0.0.1:7000/0",           /* a cluster has database 0 alone */
		"redis+cluster://127.0.0.1:7000/",
		"redis+cluster://127.0.0.1:7000?key-format=plain", /* keys would spread over slots */
		"redis+cluster://127.0.0.1:7000?prefix=a%7Bb", /* a brace in the prefix, percent-encoded */
		"redis+cluster://127.0.0.1:7000?master-timeout=1s", /* Redlock's */
		"redis+cluster://127.0.0.1:7000?sentinel-password=x",
		"redis+cluster://",
	};
	dlock_client *client = NULL;

	(void)state;
	for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
		int rc = dlock_client_new(bad[i], &client);

		if (rc != DLOCK_ECONFIG)
			fail_msg("%s: %d (%s), not DLOCK_ECONFIG", bad[i], rc, dlock_last_error_message());
		assert_null(client);
	}
	/* The client makes no connection: a seed that is not there is
	 * found out by the first call that needs the map. */
	client = test_client("redis+cluster://127.0.0.1:1,127.0.0.1:2?connect-timeout=500ms");
	{
		dlock_lock *lock = test_lock(client, "cluster/nowhere");

		assert_int_equal(dlock_acquire(lock, 3000), DLOCK_EUNAVAILABLE);
		test_assert_message_has("127.0.0.1:1");
		test_assert_message_has("127.0.0.1:2");
		dlock_lock_free(lock);
	}
	dlock_client_free(client);
}

/*
 * The cluster's nodes named as a Redlock's masters (redis://, several
 * hosts), or one of them as a single server: refused by the first call
 * that meets a node's redirection, saying to use redis+cluster://.
 */
static void test_cluster_nodes_as_redlock_or_one_server_are_a_configuration_error(void **state)
{
	char *redlock = g_strdup_printf("redis://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d",
	                                test_cluster_port(tc, 0), test_cluster_port(tc, 1),
	                                test_cluster_port(tc, 2));
	char *single = g_strdup_printf("redis://127.0.0.1:%d", test_cluster_port(tc, 0));
	char resource[64];
	dlock_client *client;
	dlock_lock *lock;

	(void)state;
	client = test_client(redlock);
	lock = test_lock(client, "cluster/as-redlock");
	assert_int_equal(dlock_acquire(lock, 3000), DLOCK_ECONFIG);
	test_assert_message_has("redis+cluster://");
	dlock_lock_free(lock);
	dlock_client_free(client);

	client = test_client(single);
	test_cluster_resource_on(tc, 1, "as-single/", resource, sizeof(resource));
	lock = test_lock(client, resource);
	assert_int_equal(dlock_acquire(lock, 3000), DLOCK_ECONFIG);
	test_assert_message_has("redis+cluster://");
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_free(redlock);
	g_free(single);
}

/* ---- routing ------------------------------------------------------------ */

/*
 * Through one seed, a resource of each master is held there: its key is
 * on that master and no other, status names that master, the token is
 * of the server's clock (failover-proof), and the release removes it.
 */
static void test_resources_land_on_every_master_through_one_seed(void **state)
{
	char *seed = test_cluster_uri_seed(tc, 0, NULL);
	dlock_client *client = test_client(seed);

	(void)state;
	for (int node = 0; node < tc->n_masters; node++) {
		char resource[64], key[96], master[32];
		dlock_lock *lock;
		dlock_info *info;

		test_cluster_resource_on(tc, node, "spread/", resource, sizeof(resource));
		g_snprintf(key, sizeof(key), "dlock:{%s}", resource);
		g_snprintf(master, sizeof(master), "127.0.0.1:%d", test_cluster_port(tc, node));
		lock = test_lock(client, resource);
		assert_int_equal(dlock_acquire(lock, 5000), DLOCK_OK);
		assert_true(dlock_fencing_token(lock) > (uint64_t)test_wall_ms() * 1000 - 60 * 1000000ull);
		for (int other = 0; other < tc->n_masters; other++)
			assert_int_equal(test_redis_int(test_cluster_node(tc, other), "CLUSTER COUNTKEYSINSLOT %d",
			                                test_cluster_keyslot(key)),
			                 other == node ? 2 : 0); /* the lock and its counter */
		assert_int_equal(dlock_lock_query(lock, &info), DLOCK_OK);
		assert_true(dlock_info_locked(info));
		assert_string_equal(dlock_info_master(info), master);
		dlock_info_free(info);
		assert_int_equal(dlock_release(lock), DLOCK_OK);
		assert_int_equal(test_redis_int(test_cluster_node(tc, node), "EXISTS %s", key), 0);
		dlock_lock_free(lock);
	}
	dlock_client_free(client);
	g_free(seed);
}

/* ---- every recipe --------------------------------------------------------- */

static void test_exclusion_across_processes_with_increasing_tokens(void **state)
{
	(void)state;
	test_exclusion_run(uri, "cluster/counter", 3, 2, 5);
}

static void test_read_write_locks(void **state)
{
	(void)state;
	test_rw_share_and_exclude(uri, "cluster/rw");
	test_rw_downgrade(uri, "cluster/downgrade", true);
}

static void test_semaphores(void **state)
{
	(void)state;
	test_permits_run(uri, "cluster/sem", 2, 2, 2, 4);
	test_permits_basics(uri, "cluster/sem-basics", 1000, true);
}

static void test_elections(void **state)
{
	(void)state;
	test_election_handover(uri, "cluster/elect", 1000);
}

/* ---- wake-ups ----------------------------------------------------------- */

typedef struct channels_seen {
	int node;
	const char *pattern;
	long want;
} channels_seen;

/* Whether node lists `want` sharded channels matching pattern. */
static bool shard_channels_are(void *data)
{
	channels_seen *c = data;
	redisReply *r = test_cluster_cmd(tc, c->node, "PUBSUB SHARDCHANNELS %s", c->pattern);
	bool yes = r && r->type == REDIS_REPLY_ARRAY && (long)r->elements == c->want;

	if (r)
		freeReplyObject(r);
	return yes;
}

/*
 * A waiter listens on its resource's slot's master, by sharded pub/sub
 * (SSUBSCRIBE: the release channel and its own), and nowhere by classic
 * pub/sub, whose PUBLISH counts only the node's own subscribers; the
 * release's grant reaches it there, within a moment.
 */
static void test_waiters_listen_on_the_slots_master_by_sharded_pubsub(void **state)
{
	char resource[64], pattern[96];
	int node = 1;
	dlock_client *holder = test_client(uri);
	dlock_lock *held;
	test_rw_waiter w;
	int64_t released_ms;
	channels_seen seen;

	(void)state;
	test_cluster_resource_on(tc, node, "wake/", resource, sizeof(resource));
	g_snprintf(pattern, sizeof(pattern), "dlock:{%s}*", resource);
	held = test_lock(holder, resource);
	assert_int_equal(dlock_acquire(held, 5000), DLOCK_OK);
	test_rw_waiter_start(&w, uri, resource, DLOCK_MODE_EXCLUSIVE, 30000);
	seen = (channels_seen){ node, pattern, 2 };
	assert_true(test_wait_until(shard_channels_are, &seen, 10000));
	for (int other = 0; other < tc->n_masters; other++) {
		redisReply *r = test_cluster_cmd(tc, other, "PUBSUB CHANNELS *");

		assert_non_null(r);
		assert_int_equal(r->elements, 0);
		freeReplyObject(r);
		seen = (channels_seen){ other, pattern, 2 };
		if (other != node)
			assert_false(shard_channels_are(&seen));
	}
	released_ms = test_now_ms();
	assert_int_equal(dlock_release(held), DLOCK_OK);
	assert_true(test_wait_until(test_rw_waiter_done, &w, 5000));
	print_message("the waiter held %" PRId64 " ms after the release\n", test_now_ms() - released_ms);
	assert_true(test_now_ms() - released_ms < test_slack(1000));
	test_rw_waiter_join(&w);
	assert_int_equal(w.rc, DLOCK_OK);
	assert_true(dlock_fencing_token(w.owner.lock) > dlock_fencing_token(held));
	assert_int_equal(dlock_release(w.owner.lock), DLOCK_OK);
	test_rw_owner_close(&w.owner);
	dlock_lock_free(held);
	dlock_client_free(holder);
	/* Nobody waits: the channels are let go. */
	seen = (channels_seen){ node, pattern, 0 };
	assert_true(test_wait_until(shard_channels_are, &seen, 10000));
}

/* ---- migration ---------------------------------------------------------- */

/*
 * A slot moved from one master to another (IMPORTING/MIGRATING, MIGRATE,
 * SETSLOT NODE) while a lock on it is held with a short lease and two
 * waiters wait: the hold is renewed throughout (never LOST), an acquire of
 * a fresh resource of the same slot started mid-migration succeeds within
 * its wait, and after the move the waiters get the lock in turn, one at
 * a time, with increasing tokens; the keys are on the new master alone.
 */
typedef struct queue_seen {
	int node;
	const char *resource;
	long want;
} queue_seen;

static bool queued(void *data)
{
	queue_seen *q = data;

	return test_redis_int(test_cluster_node(tc, q->node), "ZCARD dlock:{%s}:q", q->resource) == q->want;
}

static bool either_done(void *data)
{
	test_rw_waiter *w = data;

	return test_rw_waiter_done(&w[0]) || test_rw_waiter_done(&w[1]);
}

static void test_a_slot_migrated_under_a_held_lock_and_its_waiters(void **state)
{
	char resource[64], fresh[64], key[96];
	int from = 0, to = 2, slot;
	char *short_uri = test_cluster_uri(tc, "?ttl=1s");
	dlock_client *holder = test_client(short_uri);
	dlock_lock *held;
	test_states s;
	test_rw_waiter w[2], late;
	queue_seen q;
	uint64_t tokens[3];
	int first;

	(void)state;
	slot = test_cluster_resource_on(tc, from, "migrate/", resource, sizeof(resource));
	resource_in_slot(slot, "migrate-fresh/", fresh, sizeof(fresh));
	g_snprintf(key, sizeof(key), "dlock:{%s}", resource);
	held = test_lock(holder, resource);
	test_states_init(&s);
	assert_int_equal(dlock_lock_set_state_callback(held, test_states_record, &s), DLOCK_OK);
	assert_int_equal(dlock_acquire(held, 5000), DLOCK_OK);
	tokens[0] = dlock_fencing_token(held);
	for (int i = 0; i < 2; i++)
		test_rw_waiter_start(&w[i], uri, resource, DLOCK_MODE_EXCLUSIVE, 60000);
	q = (queue_seen){ from, resource, 2 };
	assert_true(test_wait_until(queued, &q, 10000));

	/* Begun: renewals go on at the source while the keys are there. */
	test_cluster_migrate_begin(tc, slot, to);
	g_usleep(1500 * 1000);
	assert_true(test_cluster_migrate_keys(tc, slot) > 0);
	/* Moved, not yet handed over: the source answers ASK for them. */
	test_rw_waiter_start(&late, uri, fresh, DLOCK_MODE_EXCLUSIVE, 20000);
	g_usleep(1500 * 1000);
	test_cluster_migrate_end(tc, slot);
	assert_true(test_wait_until(test_rw_waiter_done, &late, 20000));
	test_rw_waiter_join(&late);
	if (late.rc != DLOCK_OK)
		fail_msg("an acquire during the migration: %d", late.rc);
	assert_int_equal(dlock_release(late.owner.lock), DLOCK_OK);
	test_rw_owner_close(&late.owner);

	/* Renewed on the new master since, through another lease or two. */
	g_usleep(1500 * 1000);
	assert_int_equal(test_states_lost(&s), 0);
	assert_int_equal(test_redis_int(test_cluster_node(tc, to), "EXISTS %s", key), 1);
	assert_int_equal(test_redis_int(test_cluster_node(tc, from), "CLUSTER COUNTKEYSINSLOT %d", slot), 0);
	assert_false(either_done(w));

	/* Released: the waiters, one after the other. */
	assert_int_equal(dlock_release(held), DLOCK_OK);
	assert_true(test_wait_until(either_done, w, 10000));
	first = test_rw_waiter_done(&w[0]) ? 0 : 1;
	test_rw_waiter_join(&w[first]);
	assert_int_equal(w[first].rc, DLOCK_OK);
	tokens[1] = dlock_fencing_token(w[first].owner.lock);
	/* The other still waits while this one holds. */
	assert_false(test_poll_window(test_rw_waiter_done, &w[1 - first], 300));
	assert_int_equal(dlock_release(w[first].owner.lock), DLOCK_OK);
	assert_true(test_wait_until(test_rw_waiter_done, &w[1 - first], 10000));
	test_rw_waiter_join(&w[1 - first]);
	assert_int_equal(w[1 - first].rc, DLOCK_OK);
	tokens[2] = dlock_fencing_token(w[1 - first].owner.lock);
	assert_int_equal(dlock_release(w[1 - first].owner.lock), DLOCK_OK);
	for (int i = 0; i < 2; i++)
		test_rw_owner_close(&w[i].owner);
	print_message("tokens %" PRIu64 " < %" PRIu64 " < %" PRIu64 "\n", tokens[0], tokens[1], tokens[2]);
	assert_true(tokens[0] < tokens[1] && tokens[1] < tokens[2]);
	dlock_lock_free(held);
	dlock_client_free(holder);
	test_states_clear(&s);
	g_free(short_uri);
}

/*
 * A read hold and a semaphore's permit, with a short lease, in a slot
 * migrated in steps: renewed throughout (their renewals name only the
 * keys such a hold always has), never LOST, still held after it.
 */
static void test_read_and_permit_holds_outlive_a_migration(void **state)
{
	char reader_res[64], permit_res[64];
	int from = 1, to = 0, slot;
	char *short_uri = test_cluster_uri(tc, "?ttl=1s");
	dlock_client *client = test_client(short_uri);
	dlock_lock *reader, *permit;
	test_states rs, ps;

	(void)state;
	slot = test_cluster_resource_on(tc, from, "migrate-read/", reader_res, sizeof(reader_res));
	resource_in_slot(slot, "migrate-permit/", permit_res, sizeof(permit_res));
	reader = test_lock(client, reader_res);
	permit = test_lock(client, permit_res);
	test_states_init(&rs);
	test_states_init(&ps);
	assert_int_equal(dlock_lock_set_mode(reader, DLOCK_MODE_READ), DLOCK_OK);
	assert_int_equal(dlock_lock_set_permits(permit, 3), DLOCK_OK);
	assert_int_equal(dlock_lock_set_state_callback(reader, test_states_record, &rs), DLOCK_OK);
	assert_int_equal(dlock_lock_set_state_callback(permit, test_states_record, &ps), DLOCK_OK);
	assert_int_equal(dlock_acquire(reader, 5000), DLOCK_OK);
	assert_int_equal(dlock_acquire(permit, 5000), DLOCK_OK);

	test_cluster_migrate_begin(tc, slot, to);
	g_usleep(1500 * 1000);
	assert_true(test_cluster_migrate_keys(tc, slot) > 0);
	g_usleep(1500 * 1000);
	test_cluster_migrate_end(tc, slot);
	g_usleep(1500 * 1000);
	print_message("read hold: %d SUSPENDED, %d LOST; permit: %d SUSPENDED, %d LOST\n",
	              test_states_suspended(&rs), test_states_lost(&rs), test_states_suspended(&ps),
	              test_states_lost(&ps));
	assert_int_equal(test_states_lost(&rs), 0);
	assert_int_equal(test_states_lost(&ps), 0);
	assert_true(dlock_held(reader));
	assert_true(dlock_held(permit));
	assert_int_equal(dlock_release(reader), DLOCK_OK);
	assert_int_equal(dlock_release(permit), DLOCK_OK);
	dlock_lock_free(reader);
	dlock_lock_free(permit);
	dlock_client_free(client);
	test_states_clear(&rs);
	test_states_clear(&ps);
	g_free(short_uri);
}

/* ---- a master gone -------------------------------------------------------- */

/* How many times the running masters were asked for the map since their
 * counters were reset. */
static long long map_questions(void)
{
	long long n = 0;

	for (int i = 0; i < tc->n_masters; i++) {
		char *info;
		const char *at;

		if (test_cluster_node(tc, i)->pid == 0)
			continue;
		info = test_redis_str(test_cluster_node(tc, i), "INFO commandstats");
		for (const char *name = "cmdstat_cluster|shards:calls="; info && (at = strstr(info, name));) {
			n += atoll(at + strlen(name));
			break;
		}
		g_free(info);
	}
	return n;
}

/*
 * The only master of a slot killed (no replica takes over; the cluster
 * then answers CLUSTERDOWN everywhere): an acquire of a resource there
 * ends DLOCK_EUNAVAILABLE within its wait, and a waiter that listened
 * there asks the other masters for the map now and then, not in a loop.
 * Last: the cluster stays broken.
 */
static void test_a_slot_without_a_master_is_unavailable_within_the_wait(void **state)
{
	char resource[64];
	dlock_client *client = test_client(uri), *holder = test_client(uri);
	dlock_lock *lock, *held;
	test_rw_waiter w;
	int64_t start, took;
	long long asked;
	int rc;

	(void)state;
	test_cluster_resource_on(tc, 2, "down/", resource, sizeof(resource));
	lock = test_lock(client, resource);
	held = test_lock(holder, resource);
	assert_int_equal(dlock_acquire(held, 5000), DLOCK_OK);
	test_rw_waiter_start(&w, uri, resource, DLOCK_MODE_EXCLUSIVE, 6000);
	{
		queue_seen q = { 2, resource, 1 };

		assert_true(test_wait_until(queued, &q, 10000));
	}
	test_cluster_kill(tc, 2);
	for (int i = 0; i < 2; i++)
		freeReplyObject(test_cluster_cmd(tc, i, "CONFIG RESETSTAT"));
	start = test_now_ms();
	rc = dlock_acquire(lock, 3000);
	took = test_now_ms() - start;
	print_message("acquire on a slot without a master: %d after %" PRId64 " ms: %s\n", rc, took,
	              dlock_last_error_message());
	assert_int_equal(rc, DLOCK_EUNAVAILABLE);
	assert_true(took <= 3000 + test_slack(500));
	asked = map_questions();
	print_message("the map was asked for %lld times in %" PRId64 " ms\n", asked, test_now_ms() - start);
	assert_true(asked <= 40);
	assert_true(test_wait_until(test_rw_waiter_done, &w, 10000));
	test_rw_waiter_join(&w);
	assert_int_not_equal(w.rc, DLOCK_OK);
	test_rw_owner_close(&w.owner);
	dlock_lock_free(lock);
	dlock_lock_free(held);
	dlock_client_free(client);
	dlock_client_free(holder);
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
		cmocka_unit_test(test_a_cluster_uri_that_cannot_work_is_refused_at_creation),
		cmocka_unit_test(test_cluster_nodes_as_redlock_or_one_server_are_a_configuration_error),
		cmocka_unit_test(test_resources_land_on_every_master_through_one_seed),
		cmocka_unit_test(test_exclusion_across_processes_with_increasing_tokens),
		cmocka_unit_test(test_read_write_locks),
		cmocka_unit_test(test_semaphores),
		cmocka_unit_test(test_elections),
		cmocka_unit_test(test_waiters_listen_on_the_slots_master_by_sharded_pubsub),
		cmocka_unit_test(test_a_slot_migrated_under_a_held_lock_and_its_waiters),
		cmocka_unit_test(test_read_and_permit_holds_outlive_a_migration),
		cmocka_unit_test(test_a_slot_without_a_master_is_unavailable_within_the_wait),
	};

	test_init(argv[0]);
	if (argc > 2 && strcmp(argv[1], "--worker") == 0 && g_str_has_prefix(argv[2], "permit"))
		return test_permits_worker_main(argc, argv);
	if (argc > 1 && strcmp(argv[1], "--worker") == 0)
		return test_election_worker_main(argc, argv);
	return test_finish(cmocka_run_group_tests_name("redis-cluster", tests, setup, teardown));
}
