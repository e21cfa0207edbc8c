/* SPDX-License-Identifier: MIT */
/*
 * Setting up a connection (TCP connect, AUTH, SELECT) happens within the
 * deadline of the call that needed it, as a whole: a server that answers
 * each setup command slowly, but within one command timeout, must not
 * stretch an acquire past its wait.
 */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-proxy.h"
#include "test-redis.h"

#define PASSWORD "connect-pw"
#define WAIT_MS 600
#define STEP_MS 450
#define SLACK_MS 200

static test_redis *server;

typedef struct slow_link {
	test_proxy *proxy;
	int64_t start_ms;
	GThread *thread;
} slow_link;

/*
 * Let the one request kept in the stalled upstream through, deliver its
 * reply, and keep the next request: both directions are stalled while the
 * request goes up, so its reply is kept until the upstream is stalled
 * again, and the next request cannot slip through.
 */
static void let_one_request_through(test_proxy *proxy)
{
	test_proxy_stall(proxy, TEST_PROXY_DOWN);
	test_proxy_unstall(proxy, TEST_PROXY_UP);
	test_proxy_stall(proxy, TEST_PROXY_UP);
	test_proxy_unstall(proxy, TEST_PROXY_DOWN);
}

static void sleep_until_ms(int64_t at_ms)
{
	int64_t left = at_ms - test_now_ms();

	if (left > 0)
		g_usleep((gulong)left * 1000);
}

/* AUTH is answered STEP_MS after the start, SELECT STEP_MS after that. */
static gpointer slow_link_main(gpointer data)
{
	slow_link *link = data;

	sleep_until_ms(link->start_ms + STEP_MS);
	let_one_request_through(link->proxy);
	sleep_until_ms(link->start_ms + 2 * STEP_MS);
	let_one_request_through(link->proxy);
	return NULL;
}

/*
 * Each of AUTH and SELECT is answered 450 ms after it is sent, within the
 * 500 ms command timeout; the acquire's wait of 600 ms bounds the whole
 * connect, so the acquire returns by then (plus scheduling slack) instead
 * of after both answers, 900 ms in.
 */
static void test_acquire_on_fresh_connection_with_slow_auth_and_select_returns_within_its_wait(
	void **state)
{
	test_proxy *proxy = test_proxy_start_proto(TEST_PROXY_REDIS, server->port);
	char *uri = g_strdup_printf("redis://:" PASSWORD "@127.0.0.1:%d/2?command-timeout=500ms",
	                            test_proxy_port(proxy));
	dlock_client *client;
	dlock_lock *lock;
	slow_link link = { proxy, 0, NULL };
	int64_t took;
	int rc;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "connect/slow-setup", &lock), DLOCK_OK);
	test_proxy_stall(proxy, TEST_PROXY_UP);
	link.start_ms = test_now_ms();
	link.thread = g_thread_new("slow-link", slow_link_main, &link);
	rc = dlock_acquire(lock, WAIT_MS);
	took = test_now_ms() - link.start_ms;
	print_message("acquire: %s after %" PRId64 " ms: %s\n", dlock_code_name(rc), took,
	              rc == DLOCK_OK ? "" : dlock_last_error_message());
	g_thread_join(link.thread);
	test_proxy_unstall(proxy, TEST_PROXY_BOTH);

	assert_true(took <= WAIT_MS + SLACK_MS);
	assert_int_not_equal(rc, DLOCK_OK);
	assert_false(dlock_held(lock));
	/* The password never shows in a message. */
	assert_null(strstr(dlock_last_error_message(), PASSWORD));

	/* Once the link answers promptly, the same client connects. */
	assert_int_equal(dlock_acquire(lock, 5000), DLOCK_OK);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	dlock_lock_free(lock);
	dlock_client_free(client);
	test_proxy_stop(proxy);
	g_free(uri);
}

/* Runs last: a group teardown's failure would not fail the program. */
static void test_no_lock_key_of_this_suite_remains(void **state)
{
	assert_int_equal(test_redis_leftover_keys(server, "dlock:{connect/"), 0);
}

static int setup(void **state)
{
	server = test_redis_start(NULL, PASSWORD, false);
	return 0;
}

static int teardown(void **state)
{
	test_redis_stop(server);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(
			test_acquire_on_fresh_connection_with_slow_auth_and_select_returns_within_its_wait),
		cmocka_unit_test(test_no_lock_key_of_this_suite_remains),
	};

	test_init(argv[0]);
	return test_finish(cmocka_run_group_tests_name("redis-connect", tests, setup, teardown));
}
