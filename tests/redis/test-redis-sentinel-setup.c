/* SPDX-License-Identifier: MIT */
/*
 * The Sentinel test setup itself (tests/helpers/test-sentinel.h), looked
 * at with hiredis only: once started, the sentinels name the master and
 * its writes reach the replicas; a master killed with kill -9 is replaced
 * by a replica within seconds and comes back as a replica; SENTINEL
 * FAILOVER promotes a replica and the old master, alive, becomes one;
 * passwords guard the data servers and the sentinels.  Prints how long
 * each step took, for the tests that build on it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <glib.h>

#include "test-sentinel.h"

#define SERVICE "mymaster"

/* ROLE's first element ("master", "slave"); g_free. */
static char *role(test_redis *r)
{
	redisReply *reply = test_redis_cmd(r, "ROLE");
	char *name = NULL;

	if (reply && reply->type == REDIS_REPLY_ARRAY && reply->elements > 0 &&
	    reply->element[0]->type == REDIS_REPLY_STRING)
		name = g_strdup(reply->element[0]->str);
	if (reply)
		freeReplyObject(reply);
	return name;
}

static void assert_role(test_redis *r, const char *want)
{
	char *name = role(r);

	assert_non_null(name);
	assert_string_equal(name, want);
	g_free(name);
}

/* A write on master, acknowledged by replicas replicas, is read back on
 * replica. */
static void assert_write_reaches(test_redis *master, test_redis *replica, int replicas, const char *value)
{
	redisReply *reply = test_redis_cmd(master, "SET sentinel-setup:key %s", value);
	char *seen;

	assert_non_null(reply);
	assert_int_equal(reply->type, REDIS_REPLY_STATUS);
	freeReplyObject(reply);
	assert_int_equal(test_redis_int(master, "WAIT %d 5000", replicas), replicas);
	seen = test_redis_str(replica, "GET sentinel-setup:key");
	assert_non_null(seen);
	assert_string_equal(seen, value);
	g_free(seen);
}

/* A write on r is refused with -READONLY. */
static void assert_read_only(test_redis *r)
{
	redisReply *reply = test_redis_cmd(r, "SET sentinel-setup:key refused");

	assert_non_null(reply);
	assert_int_equal(reply->type, REDIS_REPLY_ERROR);
	print_message("a write on the replica on port %d: %s\n", r->port, reply->str);
	assert_true(g_str_has_prefix(reply->str, "READONLY"));
	freeReplyObject(reply);
}

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

/* A write on master is acknowledged by one replica. */
static bool fed_one(void *master)
{
	return test_redis_int(master, "WAIT 1 100") == 1;
}

static test_sentinel *start(const char *password, const char *sentinel_password, int replicas)
{
	int64_t t0 = test_now_ms();
	test_sentinel *ts = test_sentinel_start(SERVICE, replicas, password, sentinel_password);

	print_message("a master, %d replica(s) and %d sentinels ready %lld ms after the start\n", replicas,
	              TEST_SENTINEL_COUNT, (long long)(test_now_ms() - t0));
	return ts;
}

static int start_plain(void **state)
{
	*state = start(NULL, NULL, 1);
	return 0;
}

static int start_with_passwords(void **state)
{
	*state = start("data-secret", "sentinel-secret", 2);
	return 0;
}

static int stop(void **state)
{
	test_sentinel_stop(*state);
	return 0;
}

static void test_the_sentinels_name_the_master_and_its_writes_reach_the_replica(void **state)
{
	test_sentinel *ts = *state;
	char *want = g_strdup_printf("redis+sentinel://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/" SERVICE "?ttl=2s",
	                             test_sentinel_port(ts, 0), test_sentinel_port(ts, 1), test_sentinel_port(ts, 2));
	char *uri = test_sentinel_uri(ts, "?ttl=2s");
	char *want_userinfo = g_strdup_printf("redis+sentinel://user:pw@127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/" SERVICE,
	                                      test_sentinel_port(ts, 0), test_sentinel_port(ts, 1),
	                                      test_sentinel_port(ts, 2));
	char *uri_userinfo = test_sentinel_uri_userinfo(ts, "user:pw", NULL);

	assert_string_equal(uri, want);
	assert_string_equal(uri_userinfo, want_userinfo);
	for (int i = 0; i < TEST_SENTINEL_COUNT; i++) {
		redisReply *reply = test_sentinel_cmd(ts, i, "SENTINEL GET-MASTER-ADDR-BY-NAME %s", SERVICE);

		assert_non_null(reply);
		assert_int_equal(reply->type, REDIS_REPLY_ARRAY);
		assert_int_equal(reply->elements, 2);
		assert_string_equal(reply->element[0]->str, "127.0.0.1");
		assert_int_equal(atoi(reply->element[1]->str), ts->servers[0]->port);
		freeReplyObject(reply);
	}
	assert_ptr_equal(test_sentinel_master(ts), ts->servers[0]);
	assert_ptr_equal(test_sentinel_replica(ts, 0), ts->servers[1]);
	assert_role(ts->servers[0], "master");
	assert_role(ts->servers[1], "slave");
	assert_write_reaches(ts->servers[0], ts->servers[1], 1, "first");
	assert_read_only(ts->servers[1]);
	g_free(uri_userinfo);
	g_free(want_userinfo);
	g_free(uri);
	g_free(want);
}

/* A connection to port is refused. */
static bool refused(int port)
{
	struct timeval tv = { 1, 0 };
	redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
	bool refused = c && c->err;

	if (c)
		redisFree(c);
	return refused;
}

static void test_a_frozen_or_killed_sentinel_is_passed_over_and_a_restarted_one_rejoins(void **state)
{
	test_sentinel *ts = *state;
	test_redis *master = test_sentinel_master(ts);
	int64_t t0;

	/* Asked first, frozen: not asked, so no 5 s timeout on it. */
	test_sentinel_freeze(ts, 0);
	t0 = test_now_ms();
	assert_ptr_equal(test_sentinel_master(ts), master);
	assert_true(test_now_ms() - t0 < test_slack(1000));
	test_sentinel_thaw(ts, 0);

	test_sentinel_halt(ts, 1);
	assert_int_equal(ts->sentinels[1]->pid, 0);
	assert_true(refused(test_sentinel_port(ts, 1)));
	assert_ptr_equal(test_sentinel_master(ts), master);

	/* Back on its port with a fresh configuration and a new id: ready
	 * once the others have heard its hello and it theirs. */
	t0 = test_now_ms();
	test_sentinel_resume(ts, 1);
	assert_true(test_sentinel_wait_ready(ts, 20000));
	print_message("a killed sentinel restarted, ready %lld ms after its restart\n",
	              (long long)(test_now_ms() - t0));
	assert_ptr_equal(test_sentinel_master(ts), master);
}

static void test_a_replica_is_promoted_when_the_master_is_killed_and_it_returns_as_a_replica(void **state)
{
	test_sentinel *ts = *state;
	test_redis *old = test_sentinel_master(ts);
	int64_t t0 = test_now_ms();
	int old_port = test_sentinel_kill_master(ts);
	test_redis *promoted;

	assert_int_equal(old_port, old->port);
	assert_true(test_sentinel_wait_promoted(ts, old_port, 15000));
	print_message("a replica promoted %lld ms after kill -9 of the master\n", (long long)(test_now_ms() - t0));
	promoted = test_sentinel_master(ts);
	assert_ptr_equal(promoted, ts->servers[1]);
	assert_role(promoted, "master");

	/* Back, empty, on its port: the new master feeds it at once (the
	 * sentinels take some 5 s more to list it and each other as
	 * reachable again, which test_sentinel_wait_ready() would wait for). */
	t0 = test_now_ms();
	test_sentinel_restart_as_replica(ts, old);
	assert_true(test_wait_until(fed_one, promoted, 10000));
	print_message("the old master back as a replica, fed %lld ms after its restart\n",
	              (long long)(test_now_ms() - t0));
	assert_ptr_equal(test_sentinel_replica(ts, 0), old);
	assert_role(old, "slave");
	assert_write_reaches(promoted, old, 1, "after the promotion");
}

static void test_sentinel_failover_promotes_a_replica_and_the_old_master_becomes_one(void **state)
{
	test_sentinel *ts = *state;
	test_redis *old = test_sentinel_master(ts);
	char *refused;
	int64_t t0;
	int old_port;

	/* The passwords are on: neither kind of server answers a stranger. */
	refused = unauthenticated_ping(test_sentinel_port(ts, 0));
	assert_non_null(refused);
	assert_true(g_str_has_prefix(refused, "NOAUTH"));
	g_free(refused);
	refused = unauthenticated_ping(old->port);
	assert_non_null(refused);
	assert_true(g_str_has_prefix(refused, "NOAUTH"));
	g_free(refused);

	t0 = test_now_ms();
	old_port = test_sentinel_failover(ts);
	print_message("SENTINEL FAILOVER: a replica promoted after %lld ms\n", (long long)(test_now_ms() - t0));
	assert_int_equal(old_port, old->port);
	assert_true(old->pid > 0);
	assert_ptr_not_equal(test_sentinel_master(ts), old);

	/* The old master is told to follow only about 10 s later. */
	t0 = test_now_ms();
	assert_true(test_sentinel_wait_ready(ts, 30000));
	print_message("the old master a replica, ready %lld ms after the promotion\n",
	              (long long)(test_now_ms() - t0));
	assert_role(old, "slave");
	assert_read_only(old);
	assert_write_reaches(test_sentinel_master(ts), old, 2, "after the failover");
}

int main(int argc, char **argv)
{
	/* One setup for these, in this order: a start costs 2 s. */
	const struct CMUnitTest plain[] = {
		cmocka_unit_test(test_the_sentinels_name_the_master_and_its_writes_reach_the_replica),
		cmocka_unit_test(test_a_frozen_or_killed_sentinel_is_passed_over_and_a_restarted_one_rejoins),
		cmocka_unit_test(test_a_replica_is_promoted_when_the_master_is_killed_and_it_returns_as_a_replica),
	};
	const struct CMUnitTest guarded[] = {
		cmocka_unit_test(test_sentinel_failover_promotes_a_replica_and_the_old_master_becomes_one),
	};
	int failures;

	test_init(argv[0]);
	failures = cmocka_run_group_tests_name("redis-sentinel-setup", plain, start_plain, stop);
	failures += cmocka_run_group_tests_name("redis-sentinel-setup-passwords", guarded, start_with_passwords, stop);
	return test_finish(failures);
}
