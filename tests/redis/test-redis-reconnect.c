/* SPDX-License-Identifier: MIT */
/*
 * How often a Redis client connects: an idle client keeps its subscriber
 * connection (the PING that checks it is answered outside subscribed mode
 * too), and a far end that accepts and at once closes every connection (a
 * proxy or load balancer before a down server) is retried with backoff,
 * not in a tight loop.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-proxy.h"
#include "test-redis.h"

/* The subscriber checks a connection after 15 s without input. */
#define SUBSCRIBER_PING_IDLE_MS 15000

static test_redis *server;

typedef struct waiter_run {
	dlock_lock *lock;
	int64_t wait_ms;
	int rc;
	gint done;
	GThread *thread;
} waiter_run;

static gpointer acquire_main(gpointer data)
{
	waiter_run *w = data;

	w->rc = dlock_acquire(w->lock, w->wait_ms);
	g_atomic_int_set(&w->done, 1);
	return NULL;
}

static bool waiter_done(void *arg)
{
	return g_atomic_int_get(&((waiter_run *)arg)->done) != 0;
}

static bool subscribed(void *arg)
{
	return test_redis_numsub(server, arg) == 1;
}

static bool unsubscribed(void *arg)
{
	return test_redis_numsub(server, arg) == 0;
}

static long long connections_baseline;

static bool server_saw_a_new_connection(void *arg)
{
	return test_redis_info_int(server, "total_connections_received") > connections_baseline;
}

static void test_idle_subscriber_keeps_its_connection(void **state)
{
	char *uri = test_redis_uri(server, "?command-timeout=300ms");
	const char *channel = "dlock:{reconnect/idle}:released";
	dlock_client *holder, *client;
	dlock_lock *held;
	waiter_run w = { .wait_ms = 10000 };

	assert_int_equal(dlock_client_new(uri, &holder), DLOCK_OK);
	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(holder, "reconnect/idle", &held), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "reconnect/idle", &w.lock), DLOCK_OK);
	/* Acquired by the waiter thread, released here. */
	assert_int_equal(dlock_lock_set_owner(w.lock, DLOCK_OWNER_HANDLE), DLOCK_OK);
	assert_int_equal(dlock_acquire(held, 0), DLOCK_OK);
	w.thread = g_thread_new("waiter", acquire_main, &w);
	assert_true(test_wait_until(subscribed, (void *)channel, 5000));
	assert_int_equal(dlock_release(held), DLOCK_OK);
	assert_true(test_wait_until(waiter_done, &w, 5000));
	g_thread_join(w.thread);
	assert_int_equal(w.rc, DLOCK_OK);
	assert_int_equal(dlock_release(w.lock), DLOCK_OK);
	dlock_lock_free(held);
	dlock_client_free(holder);
	/* Now idle, out of subscribed mode; the subscriber connection stays. */
	assert_true(test_wait_until(unsubscribed, (void *)channel, 5000));
	connections_baseline = test_redis_info_int(server, "total_connections_received");
	assert_true(connections_baseline > 0);
	/* Past the idle PING and many command timeouts after it. */
	assert_false(test_poll_window(server_saw_a_new_connection, NULL, SUBSCRIBER_PING_IDLE_MS + 2500));
	dlock_lock_free(w.lock);
	dlock_client_free(client);
	g_free(uri);
}

static long long rejected_baseline;

static bool server_rejected_many(void *arg)
{
	return test_redis_info_int(server, "rejected_connections") - rejected_baseline >= 50;
}

static void set_maxclients(long long n)
{
	redisReply *reply = test_redis_cmd(server, "CONFIG SET maxclients %lld", n);

	assert_non_null(reply);
	assert_int_equal(reply->type, REDIS_REPLY_STATUS);
	freeReplyObject(reply);
}

/*
 * A server at maxclients accepts each new connection, says so and closes
 * it: the subscriber's connection is made, and ends at once.  It must back
 * off as from a refused connection, not reconnect in a tight loop.
 */
static void test_subscriber_backs_off_when_each_new_connection_is_closed(void **state)
{
	char *uri = test_redis_uri(server, NULL);
	dlock_client *holder, *client;
	dlock_lock *held;
	waiter_run w = { .wait_ms = 20000 };
	long long rejected;
	redisReply *reply;

	assert_int_equal(dlock_client_new(uri, &holder), DLOCK_OK);
	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(holder, "reconnect/full", &held), DLOCK_OK);
	assert_int_equal(dlock_lock_set_ttl(held, 30000), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "reconnect/full", &w.lock), DLOCK_OK);
	assert_int_equal(dlock_acquire(held, 0), DLOCK_OK);
	w.thread = g_thread_new("waiter", acquire_main, &w);
	assert_true(test_wait_until(subscribed, "dlock:{reconnect/full}:released", 5000));

	/* The subscriber loses its connection, and there is no room for
	 * another one. */
	set_maxclients(test_redis_info_int(server, "connected_clients") - 1);
	rejected_baseline = test_redis_info_int(server, "rejected_connections");
	reply = test_redis_cmd(server, "CLIENT KILL TYPE pubsub");
	assert_non_null(reply);
	assert_int_equal(reply->type, REDIS_REPLY_INTEGER);
	assert_int_equal(reply->integer, 1);
	freeReplyObject(reply);
	/* A rate over a fixed window: under valgrind a scaled one would also
	 * starve the holder's watchdog, whose connection opens at its first
	 * renewal. */
	test_poll_window(server_rejected_many, NULL, 2000);
	rejected = test_redis_info_int(server, "rejected_connections") - rejected_baseline;
	set_maxclients(10000);

	assert_false(waiter_done(&w));
	assert_int_equal(dlock_lock_cancel(w.lock), DLOCK_OK);
	assert_true(test_wait_until(waiter_done, &w, 5000));
	g_thread_join(w.thread);
	assert_int_equal(dlock_release(held), DLOCK_OK);
	dlock_lock_free(held);
	dlock_lock_free(w.lock);
	dlock_client_free(holder);
	dlock_client_free(client);
	g_free(uri);
	print_message("connections closed at once in 2 s: %lld\n", rejected);
	assert_true(rejected > 0);
	assert_true(rejected < 50);
	assert_int_equal(w.rc, DLOCK_ECANCELED);
}

static test_proxy *slam_proxy;
static int accepted_baseline;

/* With backoff the subscriber reconnects about 5 times in 2 s and the
 * waiter tries about 6 times (a connection each). */
#define SLAM_CONNECTIONS_MAX 25

static bool proxy_accepted_many(void *arg)
{
	return test_proxy_accepted(slam_proxy) - accepted_baseline >= SLAM_CONNECTIONS_MAX;
}

/*
 * A waiting client whose server is behind a proxy that, from some moment,
 * accepts every connection and closes it at once (a load balancer before
 * a down server): its subscriber and its waiter both back off.
 */
static void test_waiter_backs_off_from_a_proxy_that_closes_each_connection(void **state)
{
	char *direct_uri = test_redis_uri(server, NULL);
	char *proxy_uri;
	dlock_client *holder, *client;
	dlock_lock *held;
	waiter_run w = { .wait_ms = 20000 };
	int accepted;

	slam_proxy = test_proxy_start(server->port);
	proxy_uri = g_strdup_printf("redis://127.0.0.1:%d", test_proxy_port(slam_proxy));
	assert_int_equal(dlock_client_new(direct_uri, &holder), DLOCK_OK);
	assert_int_equal(dlock_client_new(proxy_uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(holder, "reconnect/slam", &held), DLOCK_OK);
	assert_int_equal(dlock_lock_set_ttl(held, 30000), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "reconnect/slam", &w.lock), DLOCK_OK);
	assert_int_equal(dlock_acquire(held, 0), DLOCK_OK);
	w.thread = g_thread_new("waiter", acquire_main, &w);
	assert_true(test_wait_until(subscribed, "dlock:{reconnect/slam}:released", 5000));

	accepted_baseline = test_proxy_accepted(slam_proxy);
	test_proxy_admit_mode(slam_proxy, TEST_PROXY_SLAM);
	test_proxy_reset_all(slam_proxy);
	/* A rate over a fixed window, which a scaled one would stretch. */
	test_poll_window(proxy_accepted_many, NULL, 2000);
	accepted = test_proxy_accepted(slam_proxy) - accepted_baseline;

	assert_false(waiter_done(&w));
	assert_int_equal(dlock_lock_cancel(w.lock), DLOCK_OK);
	assert_true(test_wait_until(waiter_done, &w, 5000));
	g_thread_join(w.thread);
	assert_int_equal(dlock_release(held), DLOCK_OK);
	dlock_lock_free(held);
	dlock_lock_free(w.lock);
	dlock_client_free(holder);
	dlock_client_free(client);
	test_proxy_stop(slam_proxy);
	g_free(proxy_uri);
	g_free(direct_uri);
	print_message("connections accepted and closed in 2 s: %d\n", accepted);
	assert_true(accepted > 0);
	assert_true(accepted < SLAM_CONNECTIONS_MAX);
	assert_int_equal(w.rc, DLOCK_ECANCELED);
}

static int setup(void **state)
{
	server = test_redis_start(NULL, NULL, false);
	return 0;
}

static void test_no_lock_key_of_this_suite_remains(void **state)
{
	assert_int_equal(test_redis_leftover_keys(server, "dlock:{reconnect/"), 0);
}

static int teardown(void **state)
{
	test_redis_stop(server);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_idle_subscriber_keeps_its_connection),
		cmocka_unit_test(test_subscriber_backs_off_when_each_new_connection_is_closed),
		cmocka_unit_test(test_waiter_backs_off_from_a_proxy_that_closes_each_connection),
		cmocka_unit_test(test_no_lock_key_of_this_suite_remains),
	};

	test_init(argv[0]);
	return test_finish(cmocka_run_group_tests_name("redis-reconnect", tests, setup, teardown));
}
