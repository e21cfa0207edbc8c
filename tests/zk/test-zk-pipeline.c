/* SPDX-License-Identifier: MIT */
/*
 * The uncontended ZooKeeper acquire in one round trip: the create of the
 * lock node and the listing of the resource's children go out back to
 * back, before the create's answer, and the protected create still finds
 * its node when the connection drops with either answer.  The library
 * talks to a real server through the proxy (ZooKeeper mode), which counts
 * the requests it passes on, holds the replies, or drops one and resets
 * the connection.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-proxy.h"
#include "test-zk.h"

/* A fresh server and a client through a proxy to it, its session opened
 * by a first lock. */
typedef struct via_proxy {
	test_zk *zk;
	test_proxy *proxy;
	dlock_client *client;
	dlock_lock *lock;
} via_proxy;

static void via_proxy_open(via_proxy *v, const char *resource)
{
	char *uri;
	char *dir = g_strconcat("/dlock/", resource, NULL);
	dlock_lock *warm;

	v->zk = test_zk_start(1, 500, 0);
	/* The resource's node exists, so the acquire is one create and one
	 * listing, not the containers' creates first.  Neither is a
	 * container: they stay while the warm-up lock's node is reaped. */
	assert_int_equal(test_zk_create(v->zk, "/dlock", ""), 0);
	assert_int_equal(test_zk_create(v->zk, dir, ""), 0);
	v->proxy = test_proxy_start_proto(TEST_PROXY_ZK, v->zk->servers[0].port);
	uri = g_strdup_printf("zk://127.0.0.1:%d?session-timeout=10s", test_proxy_port(v->proxy));
	assert_int_equal(dlock_client_new(uri, &v->client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(v->client, resource, &v->lock), DLOCK_OK);
	assert_int_equal(dlock_lock_new(v->client, "pipeline-warm", &warm), DLOCK_OK);
	assert_int_equal(dlock_acquire(warm, 10000), DLOCK_OK);
	assert_int_equal(dlock_release(warm), DLOCK_OK);
	dlock_lock_free(warm);
	g_free(dir);
	g_free(uri);
}

/* Close the client (no lock node may remain) and stop the server. */
static void via_proxy_close(via_proxy *v)
{
	dlock_lock_free(v->lock);
	dlock_client_free(v->client);
	test_proxy_stop(v->proxy);
	assert_int_equal(test_zk_leftover_nodes(v->zk, "/dlock"), 0);
	test_zk_stop(v->zk);
}

/* Requests of each kind the proxy had passed on when a test began. */
typedef struct counts {
	test_proxy *proxy;
	int create2;
	int children;
	int get;
} counts;

static void counts_take(counts *c, test_proxy *proxy)
{
	c->proxy = proxy;
	c->create2 = test_proxy_requests(proxy, "create2");
	c->children = test_proxy_requests(proxy, "getChildren");
	c->get = test_proxy_requests(proxy, "getData");
}

static int creates_since(const counts *c)
{
	return test_proxy_requests(c->proxy, "create2") - c->create2;
}

static int listings_since(const counts *c)
{
	return test_proxy_requests(c->proxy, "getChildren") - c->children;
}

static bool create_and_listing_sent(void *arg)
{
	return creates_since(arg) == 1 && listings_since(arg) == 1;
}

/* Acquire and release on a thread of its own (the hold is the thread's);
 * the acquire's result. */
static gpointer acquire_release_thread(gpointer lock)
{
	int rc = dlock_acquire(lock, 20000);

	if (rc == DLOCK_OK && dlock_release(lock) != DLOCK_OK)
		rc = -1000;
	return GINT_TO_POINTER(rc);
}

/*
 * With every reply held back, the create and the listing both reach the
 * server: the acquire does not wait for the create's answer before it
 * lists.  Once the replies flow, that one create and one listing grant
 * the lock, with no further request of either kind and no watch, and the
 * release leaves nothing behind.
 */
static void test_uncontended_acquire_lists_before_the_create_is_answered(void **state)
{
	via_proxy v;
	counts before;
	GThread *t;
	bool both;

	via_proxy_open(&v, "pipeline-one-trip");
	counts_take(&before, v.proxy);
	test_proxy_stall(v.proxy, TEST_PROXY_DOWN);
	t = g_thread_new("acquire", acquire_release_thread, v.lock);
	both = test_wait_until(create_and_listing_sent, &before, 3000);
	print_message("with replies held: %d create(s), %d listing(s) sent\n", creates_since(&before),
	              listings_since(&before));
	/* The create did reach the server. */
	assert_int_equal(test_zk_count_children(v.zk, "/dlock/pipeline-one-trip"), 1);
	test_proxy_unstall(v.proxy, TEST_PROXY_DOWN);
	assert_int_equal(GPOINTER_TO_INT(g_thread_join(t)), DLOCK_OK);
	assert_true(both);
	assert_int_equal(creates_since(&before), 1);
	assert_int_equal(listings_since(&before), 1);
	assert_int_equal(test_proxy_requests(v.proxy, "getData") - before.get, 0);
	assert_int_equal(test_zk_count_children(v.zk, "/dlock/pipeline-one-trip"), 0);
	via_proxy_close(&v);
}

/* The acquire holds exactly one node, the one its fencing token names. */
static void assert_one_node_and_it_is_ours(test_zk *zk, const char *dir, dlock_lock *lock)
{
	char **children = test_zk_children(zk, dir);
	char *path;
	int64_t czxid = 0;
	char *data;

	assert_non_null(children);
	assert_int_equal(g_strv_length(children), 1);
	path = g_strconcat(dir, "/", children[0], NULL);
	data = test_zk_get(zk, path, &czxid);
	assert_non_null(data);
	assert_int_equal((uint64_t)czxid, dlock_fencing_token(lock));
	g_free(data);
	g_free(path);
	g_strfreev(children);
}

/*
 * Acquire resource through a proxy that drops the answer to the next
 * request of kind and resets the connection.  The acquire must hold
 * exactly one node, made by its one create, and its release must leave
 * none.  Returns how many listings it sent.
 */
static int acquire_losing_an_answer(const char *resource, const char *kind)
{
	char *dir = g_strconcat("/dlock/", resource, NULL);
	via_proxy v;
	counts before;
	int listings;

	via_proxy_open(&v, resource);
	counts_take(&before, v.proxy);
	test_proxy_drop_replies(v.proxy, kind, 1, true);
	assert_int_equal(dlock_acquire(v.lock, 15000), DLOCK_OK);
	assert_int_equal(test_proxy_dropped(v.proxy), 1);
	assert_int_equal(creates_since(&before), 1);
	assert_one_node_and_it_is_ours(v.zk, dir, v.lock);
	listings = listings_since(&before);
	assert_int_equal(dlock_release(v.lock), DLOCK_OK);
	assert_int_equal(test_zk_count_children(v.zk, dir), 0);
	via_proxy_close(&v);
	g_free(dir);
	return listings;
}

/*
 * The server makes the node, but the create's answer is lost with the
 * connection (so is the listing's behind it).  After reconnecting, the
 * acquire finds its node by its uuid and creates no other: a second node
 * would sit behind the first, which nobody would ever delete, and the
 * acquire would wait behind itself.
 */
static void test_lost_create_answer_in_the_pipeline_is_found_by_uuid(void **state)
{
	acquire_losing_an_answer("pipeline-lost-create", "create2");
}

/*
 * The create's answer arrives, the listing's is lost with the connection:
 * the acquire knows its node and only lists again.
 */
static void test_lost_listing_answer_in_the_pipeline_lists_again(void **state)
{
	assert_true(acquire_losing_an_answer("pipeline-lost-listing", "getChildren") >= 2);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_uncontended_acquire_lists_before_the_create_is_answered),
		cmocka_unit_test(test_lost_create_answer_in_the_pipeline_is_found_by_uuid),
		cmocka_unit_test(test_lost_listing_answer_in_the_pipeline_lists_again),
	};

	test_init(argv[0]);
	return test_zk_finish(cmocka_run_group_tests_name("zk-pipeline", tests, NULL, NULL));
}
