/* SPDX-License-Identifier: MIT */
/*
 * The fault-injection proxy in ZooKeeper mode, against a real server and
 * the ZooKeeper C client: the reply to a chosen request is discarded,
 * the request itself is applied (and counted), and with reset_after the
 * client sees the connection lost and reconnects to the same session; a
 * stalled watch event arrives on unstall; a held reply (and those after
 * it) waits in the proxy while the request is applied, and arrives on
 * unstall.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <pthread.h>

#include <cmocka.h>
#include <glib.h>
#include <zookeeper/zookeeper.h>

#include "test-proxy.h"
#include "test-zk.h"

/* Node-created events seen by the sessions of this test. */
static int created_events;

static void count_events(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
	(void)zh;
	(void)state;
	(void)path;
	(void)ctx;
	if (type == ZOO_CREATED_EVENT)
		g_atomic_int_inc(&created_events);
}

static void discard_log(const char *message)
{
	(void)message;
}

static bool is_connected(void *zh)
{
	return zoo_state(zh) == ZOO_CONNECTED_STATE;
}

static zhandle_t *connect_through(test_proxy *proxy)
{
	char *hosts = g_strdup_printf("127.0.0.1:%d", test_proxy_port(proxy));
	sigset_t all, old;
	zhandle_t *zh;

	/* The client's threads inherit this mask: signals meant for the
	 * test are never handled on them. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	zh = zookeeper_init2(hosts, count_events, 6000, NULL, NULL, 0, discard_log);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	assert_non_null(zh);
	assert_true(test_wait_until(is_connected, zh, 10000));
	g_free(hosts);
	return zh;
}

static bool proxy_accepted_two(void *proxy)
{
	return test_proxy_accepted(proxy) >= 2;
}

static void test_dropped_create_reply_loses_the_connection_but_the_node_exists(void **state)
{
	test_zk *zk = test_zk_start(1, 500, 0);
	test_proxy *proxy = test_proxy_start_proto(TEST_PROXY_ZK, zk->servers[0].port);
	zhandle_t *zh = connect_through(proxy);
	int64_t session = zoo_client_id(zh)->client_id;
	struct Stat st;
	int rc;

	/* A request of another kind first: its reply is untouched. */
	assert_int_equal(zoo_exists(zh, "/proxy-create", 0, &st), ZNONODE);
	test_proxy_drop_replies(proxy, "create", 1, true);
	rc = zoo_create(zh, "/proxy-create", "x", 1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
	assert_int_equal(rc, ZCONNECTIONLOSS);
	assert_int_equal(test_proxy_dropped(proxy), 1);
	assert_int_equal(test_proxy_requests(proxy, "create"), 1);
	assert_int_equal(test_proxy_requests(proxy, "delete"), 0);
	assert_true(test_zk_exists(zk, "/proxy-create"));
	/* The client reconnects through the proxy to the same session, and
	 * replies flow again. */
	assert_true(test_wait_until(proxy_accepted_two, proxy, 10000));
	assert_true(test_wait_until(is_connected, zh, 10000));
	assert_int_equal(zoo_client_id(zh)->client_id, session);
	assert_int_equal(zoo_exists(zh, "/proxy-create", 0, &st), ZOK);
	assert_int_equal(zoo_delete(zh, "/proxy-create", -1), ZOK);
	assert_int_equal(test_proxy_dropped(proxy), 1);
	assert_int_equal(test_proxy_requests(proxy, "create"), 1);
	assert_int_equal(test_proxy_requests(proxy, "delete"), 1);
	assert_true(test_proxy_requests(proxy, "exists") >= 2);
	zookeeper_close(zh);
	test_proxy_stop(proxy);
	test_zk_stop(zk);
}

static bool created_event_seen(void *unused)
{
	(void)unused;
	return g_atomic_int_get(&created_events) > 0;
}

static void test_stalled_watch_event_arrives_on_unstall(void **state)
{
	test_zk *zk = test_zk_start(1, 500, 0);
	test_proxy *proxy = test_proxy_start_proto(TEST_PROXY_ZK, zk->servers[0].port);
	zhandle_t *zh = connect_through(proxy);
	struct Stat st;

	g_atomic_int_set(&created_events, 0);
	assert_int_equal(zoo_exists(zh, "/proxy-watch", 1, &st), ZNONODE);
	test_proxy_stall(proxy, TEST_PROXY_DOWN);
	assert_int_equal(test_zk_create(zk, "/proxy-watch", "x"), 0);
	g_usleep(300 * 1000);
	assert_int_equal(g_atomic_int_get(&created_events), 0);
	test_proxy_unstall(proxy, TEST_PROXY_DOWN);
	assert_true(test_wait_until(created_event_seen, NULL, 5000));
	assert_int_equal(zoo_state(zh), ZOO_CONNECTED_STATE);
	zookeeper_close(zh);
	test_zk_delete(zk, "/proxy-watch");
	test_proxy_stop(proxy);
	test_zk_stop(zk);
}

typedef struct answer {
	int rc;
	int done;
} answer;

static void answer_stat(int rc, const struct Stat *stat, const void *data)
{
	answer *a = (answer *)data;

	(void)stat;
	a->rc = rc;
	g_atomic_int_set(&a->done, 1);
}

static void answer_strings(int rc, const struct String_vector *strings, const void *data)
{
	answer *a = (answer *)data;

	(void)strings;
	a->rc = rc;
	g_atomic_int_set(&a->done, 1);
}

static bool answered(void *data)
{
	return g_atomic_int_get(&((answer *)data)->done) != 0;
}

static bool one_held(void *proxy)
{
	return test_proxy_held(proxy) == 1;
}

static void test_held_reply_waits_while_the_request_is_applied(void **state)
{
	test_zk *zk = test_zk_start(1, 500, 0);
	test_proxy *proxy = test_proxy_start_proto(TEST_PROXY_ZK, zk->servers[0].port);
	zhandle_t *zh = connect_through(proxy);
	answer first = { 0 }, second = { 0 }, third = { 0 };

	assert_int_equal(test_zk_create(zk, "/proxy-hold", "x"), 0);
	/* The first getChildren passes; the second one's reply is held, and
	 * the exists sent behind it waits too. */
	test_proxy_hold_replies_after(proxy, "getChildren", 1);
	assert_int_equal(zoo_aget_children(zh, "/proxy-hold", 0, answer_strings, &first), ZOK);
	assert_true(test_wait_until(answered, &first, 5000));
	assert_int_equal(zoo_aget_children(zh, "/proxy-hold", 0, answer_strings, &second), ZOK);
	assert_int_equal(zoo_aexists(zh, "/proxy-hold", 0, answer_stat, &third), ZOK);
	assert_true(test_wait_until(one_held, proxy, 5000));
	assert_false(test_poll_window(answered, &second, 300));
	assert_false(answered(&third));
	assert_int_equal(test_proxy_requests(proxy, "getChildren"), 2);
	assert_int_equal(test_proxy_dropped(proxy), 0);
	test_proxy_unstall(proxy, TEST_PROXY_DOWN);
	assert_true(test_wait_until(answered, &second, 5000));
	assert_true(test_wait_until(answered, &third, 5000));
	assert_int_equal(second.rc, ZOK);
	assert_int_equal(third.rc, ZOK);
	assert_int_equal(test_proxy_held(proxy), 1);
	assert_int_equal(zoo_state(zh), ZOO_CONNECTED_STATE);
	zookeeper_close(zh);
	test_zk_delete(zk, "/proxy-hold");
	test_proxy_stop(proxy);
	test_zk_stop(zk);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_dropped_create_reply_loses_the_connection_but_the_node_exists),
		cmocka_unit_test(test_stalled_watch_event_arrives_on_unstall),
		cmocka_unit_test(test_held_reply_waits_while_the_request_is_applied),
	};

	test_init(argv[0]);
	return test_zk_finish(cmocka_run_group_tests_name("zk-proxy", tests, NULL, NULL));
}
