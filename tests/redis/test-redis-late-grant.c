/* SPDX-License-Identifier: MIT */
/*
 * A grant whose answer arrives after the lease could have run out (the
 * server paused, or the link stalled, between the send and the answer) is
 * not a grant: the lease is counted from the send, so such a hold would be
 * dead, or lost a moment later.  Acquire must not return it as DLOCK_OK: it
 * goes on within its deadline and returns a live hold, or fails, and
 * leaves no key behind either way.
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

#define TTL_MS 300
#define PAUSE_MS 600

static test_redis *server;

typedef struct waiter_run {
	dlock_lock *lock;
	int rc;
	uint64_t token;
	int held;
	gint done;
	GThread *thread;
} waiter_run;

static gint lost_reports;

static void on_state(dlock_lock *lock, dlock_state state, void *user_data)
{
	if (state == DLOCK_STATE_LOST)
		g_atomic_int_inc(&lost_reports);
}

static gpointer acquire_main(gpointer data)
{
	waiter_run *w = data;

	w->rc = dlock_acquire(w->lock, 5000);
	w->token = dlock_fencing_token(w->lock);
	w->held = dlock_held(w->lock);
	g_atomic_int_set(&w->done, 1);
	return NULL;
}

static bool waiter_done(void *arg)
{
	return g_atomic_int_get(&((waiter_run *)arg)->done) != 0;
}

static bool key_gone(void *arg)
{
	return test_redis_int(server, "EXISTS %s", (const char *)arg) == 0;
}

/* What a late grant may end in: a live hold of its own, or ETIMEDOUT;
 * never a dead hold reported as DLOCK_OK. */
static void check_outcome(waiter_run *w, uint64_t warm_token, const char *key)
{
	print_message("acquire after the delay: %s\n", dlock_code_name(w->rc));
	if (w->rc == DLOCK_OK) {
		/* Only a live hold: a token of its own, held, and kept. */
		assert_int_equal(w->held, 1);
		assert_true(w->token > warm_token);
		g_usleep(2 * TTL_MS * 1000);
		assert_int_equal(dlock_held(w->lock), 1);
		assert_int_equal(g_atomic_int_get(&lost_reports), 0);
		assert_int_equal(dlock_release(w->lock), DLOCK_OK);
	} else {
		assert_int_equal(w->rc, DLOCK_ETIMEDOUT);
		assert_int_equal(dlock_held(w->lock), 0);
	}
	assert_true(test_wait_until(key_gone, (void *)key, 5000));
}

/* A handle with a short lease, whose client has a warm pool and script
 * cache, so the next try is one EVALSHA; returns the token it got. */
static uint64_t warm_lock(const char *uri, const char *resource, dlock_client **ret_client,
                          waiter_run *w)
{
	uint64_t token;

	g_atomic_int_set(&lost_reports, 0);
	assert_int_equal(dlock_client_new(uri, ret_client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(*ret_client, resource, &w->lock), DLOCK_OK);
	assert_int_equal(dlock_lock_set_ttl(w->lock, TTL_MS), DLOCK_OK);
	assert_int_equal(dlock_lock_set_owner(w->lock, DLOCK_OWNER_HANDLE), DLOCK_OK);
	assert_int_equal(dlock_lock_set_state_callback(w->lock, on_state, NULL), DLOCK_OK);
	assert_int_equal(dlock_acquire(w->lock, 0), DLOCK_OK);
	token = dlock_fencing_token(w->lock);
	assert_int_equal(dlock_release(w->lock), DLOCK_OK);
	return token;
}

/* The server sleeps through the acquire's send and answers only after
 * twice the TTL (it then sets the key from its own clock). */
static void test_grant_answered_after_its_lease_ran_out_is_not_returned(void **state)
{
	char *uri = test_redis_uri(server, "?command-timeout=5s");
	dlock_client *client;
	waiter_run w = { 0 };
	uint64_t warm_token = warm_lock(uri, "late/paused", &client, &w);

	test_redis_signal(server, SIGSTOP);
	w.thread = g_thread_new("acquire", acquire_main, &w);
	g_usleep(PAUSE_MS * 1000);
	test_redis_signal(server, SIGCONT);
	assert_true(test_wait_until(waiter_done, &w, 10000));
	g_thread_join(w.thread);
	check_outcome(&w, warm_token, "dlock:{late/paused}");
	dlock_lock_free(w.lock);
	dlock_client_free(client);
	g_free(uri);
}

/* The server answers at once, but the answer is held up on the way back
 * for twice the TTL (the key has expired on the server by then). */
static void test_grant_delayed_on_a_stalled_link_is_not_returned(void **state)
{
	test_proxy *proxy = test_proxy_start(server->port);
	char *uri = g_strdup_printf("redis://127.0.0.1:%d?command-timeout=5s", test_proxy_port(proxy));
	dlock_client *client;
	waiter_run w = { 0 };
	uint64_t warm_token = warm_lock(uri, "late/stalled", &client, &w);

	test_proxy_stall(proxy, TEST_PROXY_DOWN);
	w.thread = g_thread_new("acquire", acquire_main, &w);
	g_usleep(PAUSE_MS * 1000);
	test_proxy_unstall(proxy, TEST_PROXY_DOWN);
	assert_true(test_wait_until(waiter_done, &w, 10000));
	g_thread_join(w.thread);
	check_outcome(&w, warm_token, "dlock:{late/stalled}");
	dlock_lock_free(w.lock);
	dlock_client_free(client);
	test_proxy_stop(proxy);
	g_free(uri);
}

static gpointer try_main(gpointer data)
{
	waiter_run *w = data;

	w->rc = dlock_acquire(w->lock, 0);
	w->held = dlock_held(w->lock);
	g_atomic_int_set(&w->done, 1);
	return NULL;
}

/* A try-lock has no deadline to go on within: a late grant fails it as a
 * server that did not answer in time would. */
static void test_try_lock_with_a_late_grant_fails_unavailable(void **state)
{
	test_proxy *proxy = test_proxy_start(server->port);
	char *uri = g_strdup_printf("redis://127.0.0.1:%d?command-timeout=5s", test_proxy_port(proxy));
	dlock_client *client;
	waiter_run w = { 0 };

	warm_lock(uri, "late/try", &client, &w);
	test_proxy_stall(proxy, TEST_PROXY_DOWN);
	w.thread = g_thread_new("try", try_main, &w);
	g_usleep(PAUSE_MS * 1000);
	test_proxy_unstall(proxy, TEST_PROXY_DOWN);
	assert_true(test_wait_until(waiter_done, &w, 10000));
	g_thread_join(w.thread);
	print_message("try-lock after the delay: %s\n", dlock_code_name(w.rc));
	assert_int_equal(w.rc, DLOCK_EUNAVAILABLE);
	assert_int_equal(w.held, 0);
	assert_int_equal(g_atomic_int_get(&lost_reports), 0);
	assert_true(test_wait_until(key_gone, "dlock:{late/try}", 5000));
	dlock_lock_free(w.lock);
	dlock_client_free(client);
	test_proxy_stop(proxy);
	g_free(uri);
}

static int setup(void **state)
{
	server = test_redis_start(NULL, NULL, false);
	return 0;
}

static void test_no_lock_key_of_this_suite_remains(void **state)
{
	assert_int_equal(test_redis_leftover_keys(server, "dlock:{late/"), 0);
}

static int teardown(void **state)
{
	test_redis_stop(server);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_grant_answered_after_its_lease_ran_out_is_not_returned),
		cmocka_unit_test(test_grant_delayed_on_a_stalled_link_is_not_returned),
		cmocka_unit_test(test_try_lock_with_a_late_grant_fails_unavailable),
		cmocka_unit_test(test_no_lock_key_of_this_suite_remains),
	};

	test_init(argv[0]);
	return test_finish(cmocka_run_group_tests_name("redis-late-grant", tests, setup, teardown));
}
