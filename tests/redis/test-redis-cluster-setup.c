/* SPDX-License-Identifier: MIT */
/*
 * The Redis Cluster test setup itself (tests/helpers/test-cluster.h),
 * looked at with hiredis only: once started, the masters split the slots
 * and every node says so; the helper's slot hashing agrees with the
 * server's; a resource found for a node lands on it; a slot moves with
 * its keys, in steps or at once; CLUSTER FAILOVER and a killed master
 * hand the slots to the replica; a password guards every node and the
 * migration passes it on.  Prints how long each step took, for the tests
 * that build on it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <glib.h>

#include "test-cluster.h"

#define PASSWORD "cluster-secret"

static test_cluster *start(int masters, int replicas, const char *password)
{
	int64_t t0 = test_now_ms();
	test_cluster *tc = test_cluster_start(masters, replicas, password);
	int64_t took = test_now_ms() - t0;

	print_message("%d masters with %d replica(s) each%s whole %lld ms after the start\n", masters, replicas,
	              password ? ", with a password," : "", (long long)took);
	assert_true(took < test_slack(20000));
	return tc;
}

static int start_masters(void **state)
{
	*state = start(3, 0, NULL);
	return 0;
}

static int start_with_replicas(void **state)
{
	*state = start(3, 1, NULL);
	return 0;
}

static int start_with_password(void **state)
{
	*state = start(3, 1, PASSWORD);
	return 0;
}

static int stop(void **state)
{
	test_cluster_stop(*state);
	return 0;
}

/* ---- looking at the nodes ----------------------------------------------- */

/* The text of the error node i answers to a command; NULL if it answers
 * no error.  g_free. */
static char *error_of(test_cluster *tc, int i, const char *fmt, ...)
{
	redisReply *reply;
	char *text = NULL;
	va_list ap;

	va_start(ap, fmt);
	reply = test_redis_vcmd(test_cluster_node(tc, i), fmt, ap);
	va_end(ap);
	assert_non_null(reply);
	if (reply->type == REDIS_REPLY_ERROR)
		text = g_strdup(reply->str);
	freeReplyObject(reply);
	return text;
}

/* Node i answers GET key with -MOVED (or -ASK, as redirect says) to the
 * node to. */
static void assert_redirects(test_cluster *tc, int i, const char *redirect, const char *key, int to)
{
	char *error = error_of(tc, i, "GET %s", key);
	char *want = g_strdup_printf("%s %d 127.0.0.1:%d", redirect, test_cluster_keyslot(key),
	                             test_cluster_port(tc, to));

	assert_non_null(error);
	assert_string_equal(error, want);
	g_free(want);
	g_free(error);
}

/* Node i answers GET key with value. */
static void assert_value(test_cluster *tc, int i, const char *key, const char *value)
{
	char *seen = test_redis_str(test_cluster_node(tc, i), "GET %s", key);

	assert_non_null(seen);
	assert_string_equal(seen, value);
	g_free(seen);
}

/* Every running node sends GET key to `to` (replicas too, on a
 * connection that has not asked to read), which has value, and the helper
 * names `to` as the slot's owner. */
static void assert_every_node_sends_to(test_cluster *tc, const char *key, int to, const char *value)
{
	for (int i = 0; i < tc->n_nodes; i++) {
		if (test_cluster_node(tc, i)->pid <= 0)
			continue;
		if (i == to)
			assert_value(tc, i, key, value);
		else
			assert_redirects(tc, i, "MOVED", key, to);
	}
	assert_int_equal(test_cluster_owner(tc, test_cluster_keyslot(key)), to);
}

/* A string field of CLUSTER INFO on node i, e.g. "cluster_state"; g_free. */
static char *info_field(test_cluster *tc, int i, const char *field)
{
	char *info = test_redis_str(test_cluster_node(tc, i), "CLUSTER INFO");
	char *needle = g_strdup_printf("%s:", field);
	char *at = info ? strstr(info, needle) : NULL;
	char *value = at ? g_strndup(at + strlen(needle), strcspn(at + strlen(needle), "\r\n")) : NULL;

	g_free(needle);
	g_free(info);
	return value;
}

static void assert_info(test_cluster *tc, int i, const char *field, const char *want)
{
	char *value = info_field(tc, i, field);

	assert_non_null(value);
	assert_string_equal(value, want);
	g_free(value);
}

/* SET key value on node i, acknowledged by replicas replicas. */
static void set_replicated(test_cluster *tc, int i, const char *key, const char *value, int replicas)
{
	redisReply *reply = test_cluster_cmd(tc, i, "SET %s %s", key, value);

	assert_non_null(reply);
	assert_int_equal(reply->type, REDIS_REPLY_STATUS);
	freeReplyObject(reply);
	assert_int_equal(test_redis_int(test_cluster_node(tc, i), "WAIT %d 5000", replicas), replicas);
}

/* ---- three masters -------------------------------------------------------- */

static void test_three_masters_split_the_slots_and_the_uris_name_them(void **state)
{
	test_cluster *tc = *state;
	static const int edges[][2] = { { 0, 0 }, { 5460, 0 }, { 5461, 1 }, { 10922, 2 }, { 16383, 2 } };
	char *want = g_strdup_printf("redis+cluster://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d?ttl=2s",
	                             test_cluster_port(tc, 0), test_cluster_port(tc, 1), test_cluster_port(tc, 2));
	char *uri = test_cluster_uri(tc, "?ttl=2s");
	char *want_userinfo = g_strdup_printf("redis+cluster://:pw@127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d",
	                                      test_cluster_port(tc, 0), test_cluster_port(tc, 1),
	                                      test_cluster_port(tc, 2));
	char *uri_userinfo = test_cluster_uri_userinfo(tc, ":pw", NULL);
	char *want_seed = g_strdup_printf("redis+cluster://127.0.0.1:%d?ttl=2s", test_cluster_port(tc, 1));
	char *uri_seed = test_cluster_uri_seed(tc, 1, "?ttl=2s");

	assert_string_equal(uri, want);
	assert_string_equal(uri_userinfo, want_userinfo);
	assert_string_equal(uri_seed, want_seed);
	assert_int_equal(tc->n_nodes, 3);
	for (int i = 0; i < 3; i++) {
		assert_true(test_cluster_is_master(tc, i));
		assert_int_equal(test_cluster_replica_of(tc, i), -1);
		assert_int_equal(test_cluster_node_on(tc, test_cluster_port(tc, i)), i);
		assert_true(test_cluster_node(tc, i)->cluster_port > 0);
		assert_info(tc, i, "cluster_state", "ok");
		assert_info(tc, i, "cluster_known_nodes", "3");
		assert_info(tc, i, "cluster_slots_assigned", "16384");
		assert_info(tc, i, "cluster_slots_ok", "16384");
	}
	for (size_t k = 0; k < G_N_ELEMENTS(edges); k++)
		assert_int_equal(test_cluster_owner(tc, edges[k][0]), edges[k][1]);
	g_free(uri_seed);
	g_free(want_seed);
	g_free(uri_userinfo);
	g_free(want_userinfo);
	g_free(uri);
	g_free(want);
}

static void test_the_keyslot_agrees_with_cluster_keyslot(void **state)
{
	test_cluster *tc = *state;
	/* Braces are frequent, so tags, empty tags and unclosed ones all
	 * come up; bytes above 127 check the hashing is unsigned. */
	static const char alphabet[] = "{}{}{}abcdefghijklmnopqrstuvwxyz0123456789:-_ \x7f\x80\xc3\xa9\xff";
	guint32 seed = (guint32)test_now_us();
	GRand *rand = g_rand_new_with_seed(seed);

	assert_int_equal(test_cluster_keyslot("123456789"), 12739);
	assert_int_equal(test_cluster_keyslot("dlock:{R}"), 15031);
	assert_int_equal(test_redis_int(test_cluster_node(tc, 0), "CLUSTER KEYSLOT 123456789"), 12739);
	assert_int_equal(test_redis_int(test_cluster_node(tc, 0), "CLUSTER KEYSLOT dlock:{R}"), 15031);
	print_message("200 random keys, seed %u\n", seed);
	for (int n = 0; n < 200; n++) {
		char key[33];
		int len = g_rand_int_range(rand, 0, (gint32)sizeof(key));
		long long server;

		for (int k = 0; k < len; k++)
			key[k] = alphabet[g_rand_int_range(rand, 0, (gint32)sizeof(alphabet) - 1)];
		key[len] = '\0';
		server = test_redis_int(test_cluster_node(tc, n % 3), "CLUSTER KEYSLOT %b", key, (size_t)len);
		if (server != test_cluster_keyslot(key))
			fail_msg("key '%s' (%d bytes): CLUSTER KEYSLOT %lld, the helper %d", key, len, server,
			         test_cluster_keyslot(key));
	}
	g_rand_free(rand);
}

static void test_a_resource_found_for_each_master_lands_on_it(void **state)
{
	test_cluster *tc = *state;

	for (int m = 0; m < 3; m++) {
		char name[64];
		char *key;
		int slot = test_cluster_resource_on(tc, m, "spread-", name, sizeof(name));

		assert_true(g_str_has_prefix(name, "spread-"));
		key = g_strdup_printf("dlock:{%s}", name);
		assert_int_equal(test_cluster_keyslot(key), slot);
		assert_int_equal(test_redis_int(test_cluster_node(tc, (m + 1) % 3), "CLUSTER KEYSLOT %s", key), slot);
		assert_int_equal(test_cluster_owner(tc, slot), m);
		set_replicated(tc, m, key, "here", 0);
		assert_every_node_sends_to(tc, key, m, "here");
		freeReplyObject(test_cluster_cmd(tc, m, "DEL %s", key));
		g_free(key);
	}
}

static void test_a_slot_mid_migration_asks_and_its_keys_move_to_the_target(void **state)
{
	test_cluster *tc = *state;
	char name[64];
	int slot = test_cluster_resource_on(tc, 0, "moving-", name, sizeof(name));
	char *lock = g_strdup_printf("dlock:{%s}", name);
	char *fence = g_strdup_printf("dlock:{%s}:fence", name);
	char *absent = g_strdup_printf("dlock:{%s}:released", name);
	char *error;
	int64_t t0;

	set_replicated(tc, 0, lock, "holder", 0);
	set_replicated(tc, 0, fence, "7", 0);

	t0 = test_now_ms();
	test_cluster_migrate_begin(tc, slot, 1);
	/* Mid-migration: the source keeps what it has, sends the rest on. */
	assert_int_equal(test_cluster_owner(tc, slot), 0);
	assert_value(tc, 0, lock, "holder");
	assert_redirects(tc, 0, "ASK", absent, 1);
	assert_redirects(tc, 1, "MOVED", lock, 0);
	/* A command whose keys are split between the two must wait. */
	error = error_of(tc, 0, "MGET %s %s", lock, absent);
	assert_non_null(error);
	assert_true(g_str_has_prefix(error, "TRYAGAIN"));
	g_free(error);

	assert_int_equal(test_cluster_migrate_keys(tc, slot), 2);
	assert_int_equal(test_cluster_migrate_keys(tc, slot), 0);
	assert_redirects(tc, 0, "ASK", lock, 1);
	assert_int_equal(test_redis_int(test_cluster_node(tc, 1), "CLUSTER COUNTKEYSINSLOT %d", slot), 2);
	/* The target serves the slot to a client that was sent with -ASK. */
	freeReplyObject(test_cluster_cmd(tc, 1, "ASKING"));
	assert_value(tc, 1, lock, "holder");
	test_cluster_migrate_end(tc, slot);
	print_message("slot %d with 2 keys migrated in steps, every node agreeing %lld ms after the start\n", slot,
	              (long long)(test_now_ms() - t0));

	assert_int_equal(test_redis_int(test_cluster_node(tc, 0), "CLUSTER COUNTKEYSINSLOT %d", slot), 0);
	assert_every_node_sends_to(tc, lock, 1, "holder");
	assert_value(tc, 1, fence, "7");
	g_free(absent);
	g_free(fence);
	g_free(lock);
}

static void test_a_slot_migrated_in_one_call_comes_back_with_its_keys(void **state)
{
	test_cluster *tc = *state;
	char name[64];
	int slot = test_cluster_resource_on(tc, 1, "moving-", name, sizeof(name));
	char *lock = g_strdup_printf("dlock:{%s}", name);
	int64_t t0;

	set_replicated(tc, 1, lock, "back", 0);
	t0 = test_now_ms();
	test_cluster_migrate_slot(tc, slot, 2);
	print_message("slot %d migrated in one call, every node agreeing after %lld ms\n", slot,
	              (long long)(test_now_ms() - t0));
	assert_every_node_sends_to(tc, lock, 2, "back");
	test_cluster_migrate_slot(tc, slot, 1);
	assert_every_node_sends_to(tc, lock, 1, "back");
	assert_true(test_cluster_wait_ok(tc, 5000));
	g_free(lock);
}

/* ---- three masters with a replica each -------------------------------- */

static void test_each_master_has_a_replica_that_receives_its_writes(void **state)
{
	test_cluster *tc = *state;

	assert_int_equal(tc->n_nodes, 6);
	for (int m = 0; m < 3; m++) {
		char name[64];
		char *key;
		int replica = test_cluster_replica_of(tc, m);
		redisReply *reply;

		assert_int_equal(replica, 3 + m);
		assert_false(test_cluster_is_master(tc, replica));
		test_cluster_resource_on(tc, m, "replicated-", name, sizeof(name));
		key = g_strdup_printf("dlock:{%s}", name);
		set_replicated(tc, m, key, "copied", 1);
		/* A replica redirects, unless the connection asks to read. */
		assert_redirects(tc, replica, "MOVED", key, m);
		reply = test_cluster_cmd(tc, replica, "READONLY");
		freeReplyObject(reply);
		assert_value(tc, replica, key, "copied");
		freeReplyObject(test_cluster_cmd(tc, replica, "READWRITE"));
		g_free(key);
	}
}

static void test_cluster_failover_makes_the_replica_the_owner(void **state)
{
	test_cluster *tc = *state;
	char name[64];
	int slot = test_cluster_resource_on(tc, 0, "handed-over-", name, sizeof(name));
	char *key = g_strdup_printf("dlock:{%s}", name);
	int64_t t0;
	int promoted;

	set_replicated(tc, 0, key, "kept", 1);
	t0 = test_now_ms();
	promoted = test_cluster_failover(tc, 0);
	print_message("CLUSTER FAILOVER: the replica owns the slots %lld ms after it was asked\n",
	              (long long)(test_now_ms() - t0));
	assert_int_equal(promoted, 3);
	assert_int_equal(test_cluster_owner(tc, slot), 3);
	assert_int_equal(test_cluster_owner(tc, 0), 3);
	assert_true(test_cluster_is_master(tc, 3));
	assert_false(test_cluster_is_master(tc, 0));
	assert_int_equal(test_cluster_replica_of(tc, 3), 0);
	assert_every_node_sends_to(tc, key, 3, "kept");
	assert_true(test_cluster_wait_ok(tc, 10000));
	g_free(key);
}

static void test_a_killed_master_is_replaced_by_its_replica_within_10_s(void **state)
{
	test_cluster *tc = *state;
	char name[64];
	int slot = test_cluster_resource_on(tc, 1, "taken-over-", name, sizeof(name));
	char *key = g_strdup_printf("dlock:{%s}", name);
	int64_t t0, took;
	int owner;

	set_replicated(tc, 1, key, "survives", 1);
	t0 = test_now_ms();
	test_cluster_kill(tc, 1);
	assert_int_equal(test_cluster_node(tc, 1)->pid, 0);
	owner = test_cluster_wait_owner_change(tc, slot, 1, 10000);
	took = test_now_ms() - t0;
	print_message("kill -9 of a master: its replica owns its slots %lld ms later\n", (long long)took);
	assert_int_equal(owner, 4);
	assert_true(took < test_slack(10000));
	assert_true(test_cluster_wait_ok(tc, 10000));
	print_message("kill -9 of a master: the cluster whole again %lld ms after the kill\n",
	              (long long)(test_now_ms() - t0));
	assert_every_node_sends_to(tc, key, 4, "survives");

	/* Back under its old id, it follows the node that replaced it. */
	t0 = test_now_ms();
	test_cluster_restart(tc, 1);
	assert_true(test_cluster_wait_ok(tc, 20000));
	print_message("the killed master restarted, a replica of its replacement %lld ms later\n",
	              (long long)(test_now_ms() - t0));
	assert_int_equal(test_cluster_replica_of(tc, 4), 1);
	assert_int_equal(test_cluster_owner(tc, slot), 4);
	g_free(key);
}

/* ---- a password ----------------------------------------------------------- */

/* The first reply to PING on a fresh, unauthenticated connection to
 * port; g_free. */
static char *unauthenticated_ping(int port)
{
	struct timeval tv = { 5, 0 };
	redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
	redisReply *reply;
	char *text = NULL;

	assert_non_null(c);
	assert_int_equal(c->err, 0);
	redisSetTimeout(c, tv);
	reply = redisCommand(c, "PING");
	if (reply && reply->str)
		text = g_strdup(reply->str);
	if (reply)
		freeReplyObject(reply);
	redisFree(c);
	return text;
}

static void test_a_password_guards_every_node_and_the_migration_passes_it_on(void **state)
{
	test_cluster *tc = *state;
	char name[64];
	int slot = test_cluster_resource_on(tc, 0, "guarded-", name, sizeof(name));
	char *key = g_strdup_printf("dlock:{%s}", name);

	for (int i = 0; i < tc->n_nodes; i++) {
		char *refused = unauthenticated_ping(test_cluster_port(tc, i));

		assert_non_null(refused);
		assert_true(g_str_has_prefix(refused, "NOAUTH"));
		g_free(refused);
	}
	/* masterauth: every replica was fed before the start returned. */
	for (int m = 0; m < 3; m++)
		assert_int_equal(test_cluster_replica_of(tc, m), 3 + m);
	set_replicated(tc, 0, key, "guarded", 1);
	test_cluster_migrate_slot(tc, slot, 2);
	assert_every_node_sends_to(tc, key, 2, "guarded");
	assert_int_equal(test_redis_int(test_cluster_node(tc, 2), "WAIT 1 5000"), 1);
	assert_true(test_cluster_wait_ok(tc, 5000));
	g_free(key);
}

int main(int argc, char **argv)
{
	/* One cluster per group, in this order: a start costs 2.5 s. */
	const struct CMUnitTest masters[] = {
		cmocka_unit_test(test_three_masters_split_the_slots_and_the_uris_name_them),
		cmocka_unit_test(test_the_keyslot_agrees_with_cluster_keyslot),
		cmocka_unit_test(test_a_resource_found_for_each_master_lands_on_it),
		cmocka_unit_test(test_a_slot_mid_migration_asks_and_its_keys_move_to_the_target),
		cmocka_unit_test(test_a_slot_migrated_in_one_call_comes_back_with_its_keys),
	};
	const struct CMUnitTest replicas[] = {
		cmocka_unit_test(test_each_master_has_a_replica_that_receives_its_writes),
		cmocka_unit_test(test_cluster_failover_makes_the_replica_the_owner),
		cmocka_unit_test(test_a_killed_master_is_replaced_by_its_replica_within_10_s),
	};
	const struct CMUnitTest guarded[] = {
		cmocka_unit_test(test_a_password_guards_every_node_and_the_migration_passes_it_on),
	};
	int failures;

	(void)argc;
	test_init(argv[0]);
	failures = cmocka_run_group_tests_name("redis-cluster-setup", masters, start_masters, stop);
	failures += cmocka_run_group_tests_name("redis-cluster-setup-replicas", replicas, start_with_replicas, stop);
	failures += cmocka_run_group_tests_name("redis-cluster-setup-password", guarded, start_with_password, stop);
	return test_finish(failures);
}
