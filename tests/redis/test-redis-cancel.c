/* SPDX-License-Identifier: MIT */
/*
 * Cancel and teardown reach a Redis waiter even while it is blocked in a
 * command on a server that stopped answering (SIGSTOP): dlock_lock_cancel,
 * dlock_lock_free and dlock_client_free end the wait at once rather than
 * after the command timeout (5 s here), and whatever the interrupted try
 * may have set on the server is removed once it answers again, even when
 * it reaches the server after the cleanup meant for it.
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

/* How long the waiter is given to get into its blocking command. */
#define BLOCK_SETTLE_MS 300

static test_redis *server;

typedef struct waiter_run {
	dlock_lock *lock;
	int rc;
	int64_t done_ms;
	gint done;
	GThread *thread;
} waiter_run;

static gpointer acquire_main(gpointer data)
{
	waiter_run *w = data;

	w->rc = dlock_acquire(w->lock, 20000);
	w->done_ms = test_now_ms();
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

/* A client whose pool holds one connection, so the waiter's first try is
 * a command on it; then the server freezes and the waiter starts. */
static void start_blocked_waiter(const char *resource, dlock_client **ret_client, waiter_run *w)
{
	char *uri = test_redis_uri(server, "?command-timeout=5s&connect-timeout=5s");

	assert_int_equal(dlock_client_new(uri, ret_client), DLOCK_OK);
	g_free(uri);
	assert_int_equal(dlock_lock_new(*ret_client, resource, &w->lock), DLOCK_OK);
	assert_int_equal(dlock_acquire(w->lock, 0), DLOCK_OK);
	assert_int_equal(dlock_release(w->lock), DLOCK_OK);
	test_redis_signal(server, SIGSTOP);
	w->thread = g_thread_new("waiter", acquire_main, w);
	g_usleep(BLOCK_SETTLE_MS * 1000);
	assert_false(waiter_done(w));
}

/* A waiter on a new client for uri whose first command hangs: freeze(arg)
 * stops the server from answering before the waiter starts. */
static void start_waiter_behind(const char *uri, const char *resource, void (*freeze)(void *),
                                void *arg, dlock_client **ret_client, waiter_run *w)
{
	assert_int_equal(dlock_client_new(uri, ret_client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(*ret_client, resource, &w->lock), DLOCK_OK);
	freeze(arg);
	w->thread = g_thread_new("waiter", acquire_main, w);
	g_usleep(BLOCK_SETTLE_MS * 1000);
	assert_false(waiter_done(w));
}

static void freeze_server(void *arg)
{
	test_redis_signal(arg, SIGSTOP);
}

/* The link stalls towards the server: what is sent is kept on the way. */
static void stall_link(void *arg)
{
	test_proxy_stall(arg, TEST_PROXY_UP);
}

static void thaw_and_check_clean(const char *key)
{
	test_redis_signal(server, SIGCONT);
	assert_true(test_wait_until(key_gone, (void *)key, 5000));
}

static void test_cancel_wakes_a_waiter_blocked_in_a_command(void **state)
{
	waiter_run w = { 0 };
	dlock_client *client;
	int64_t t0;

	start_blocked_waiter("cancel/cancel", &client, &w);
	t0 = test_now_ms();
	assert_int_equal(dlock_lock_cancel(w.lock), DLOCK_OK);
	/* The old code took two command timeouts (10 s) to give up. */
	test_wait_until(waiter_done, &w, 15000);
	g_thread_join(w.thread);
	thaw_and_check_clean("dlock:{cancel/cancel}");
	print_message("acquire returned %lld ms after the cancel\n", (long long)(w.done_ms - t0));
	assert_int_equal(w.rc, DLOCK_ECANCELED);
	assert_true(w.done_ms - t0 < test_slack(300));
	/* The interrupted connection was discarded: the next call works. */
	assert_int_equal(dlock_acquire(w.lock, 5000), DLOCK_OK);
	assert_int_equal(dlock_release(w.lock), DLOCK_OK);
	dlock_lock_free(w.lock);
	dlock_client_free(client);
}

static void test_lock_free_wakes_a_waiter_blocked_in_a_command(void **state)
{
	waiter_run w = { 0 };
	dlock_client *client;
	int64_t t0, elapsed;

	start_blocked_waiter("cancel/lock-free", &client, &w);
	t0 = test_now_ms();
	dlock_lock_free(w.lock);
	elapsed = test_now_ms() - t0;
	g_thread_join(w.thread);
	thaw_and_check_clean("dlock:{cancel/lock-free}");
	print_message("dlock_lock_free took %lld ms\n", (long long)elapsed);
	assert_int_equal(w.rc, DLOCK_ECANCELED);
	assert_true(elapsed < test_slack(300));
	assert_true(w.done_ms - t0 < test_slack(300));
	dlock_client_free(client);
}

static void test_client_free_wakes_a_waiter_blocked_in_a_command(void **state)
{
	waiter_run w = { 0 };
	dlock_client *client;
	int64_t t0, elapsed;

	start_blocked_waiter("cancel/client-free", &client, &w);
	t0 = test_now_ms();
	dlock_client_free(client);
	elapsed = test_now_ms() - t0;
	g_thread_join(w.thread);
	thaw_and_check_clean("dlock:{cancel/client-free}");
	print_message("dlock_client_free took %lld ms\n", (long long)elapsed);
	assert_int_equal(w.rc, DLOCK_ECANCELED);
	assert_true(w.done_ms - t0 < test_slack(300));
	/* The waiter leaves at once; teardown then still gives the delete of
	 * what its try may have set a bounded try or two (0.5 s each). */
	assert_true(elapsed < test_slack(2000));
	dlock_lock_free(w.lock);
}

/* A new connection's AUTH waits for its answer as a command does. */
static void test_cancel_wakes_a_waiter_blocked_in_authentication(void **state)
{
	test_redis *secured = test_redis_start(NULL, "cancel-secret", false);
	char *uri = g_strdup_printf("redis://:cancel-secret@127.0.0.1:%d?command-timeout=5s",
	                            secured->port);
	waiter_run w = { 0 };
	dlock_client *client;
	int64_t t0;

	start_waiter_behind(uri, "cancel/auth", freeze_server, secured, &client, &w);
	t0 = test_now_ms();
	assert_int_equal(dlock_lock_cancel(w.lock), DLOCK_OK);
	test_wait_until(waiter_done, &w, 15000);
	g_thread_join(w.thread);
	test_redis_signal(secured, SIGCONT);
	print_message("acquire returned %lld ms after the cancel\n", (long long)(w.done_ms - t0));
	assert_int_equal(w.rc, DLOCK_ECANCELED);
	assert_true(w.done_ms - t0 < test_slack(300));
	dlock_lock_free(w.lock);
	dlock_client_free(client);
	test_redis_stop(secured);
	g_free(uri);
}

static bool acquire_script_ran(void *arg)
{
	return test_redis_calls(server, "evalsha") > *(const long long *)arg;
}

/*
 * The server orders the commands of one connection, not of two: a try
 * still on its way when the cancel came (on a connection the server has
 * not read yet -- a fresh one, or one stalled on the link) can run after
 * the cleanup that the acquire queued for it on the watchdog's own
 * connection.  Here the link stalls with the try on it; when it resumes,
 * the proxy forwards the newer connection's bytes (the cleanup's) first.
 * The try sets the key with a 30 s lease; it must not stay set.
 */
static void test_a_canceled_try_landing_after_its_cleanup_leaves_nothing_held(void **state)
{
	test_proxy *proxy = test_proxy_start_proto(TEST_PROXY_REDIS, server->port);
	char *uri = g_strdup_printf("redis://127.0.0.1:%d?command-timeout=5s", test_proxy_port(proxy));
	const char *key = "dlock:{cancel/late-try}";
	long long evalsha_before = test_redis_calls(server, "evalsha");
	waiter_run w = { 0 };
	dlock_client *client;

	start_waiter_behind(uri, "cancel/late-try", stall_link, proxy, &client, &w);
	assert_int_equal(dlock_lock_cancel(w.lock), DLOCK_OK);
	assert_true(test_wait_until(waiter_done, &w, 2000));
	g_thread_join(w.thread);
	assert_int_equal(w.rc, DLOCK_ECANCELED);
	/* Give the cleanup its first attempt (well inside its 500 ms wait
	 * for an answer), then let everything through. */
	g_usleep(100 * 1000);
	test_proxy_unstall(proxy, TEST_PROXY_UP);
	assert_true(test_wait_until(acquire_script_ran, &evalsha_before, 2000));
	if (!test_wait_until(key_gone, (void *)key, 3000))
		fail_msg("the canceled try set %s after its cleanup had run; it is left held (%lld ms)",
		         key, test_redis_int(server, "PTTL %s", key));
	dlock_lock_free(w.lock);
	dlock_client_free(client);
	test_proxy_stop(proxy);
	g_free(uri);
}

static bool reply_dropped(void *arg)
{
	return test_proxy_dropped(arg) > 0;
}

static bool queue_gone(void *queue)
{
	return test_redis_int(server, "EXISTS %s", (const char *)queue) == 0;
}

/*
 * A cancel that lands while the waiter's queueing try is unanswered: the
 * server has queued the entry, but the waiter never learned its ticket.
 * Leaving the queue must still remove that entry, soon after the cancel
 * returned (the library does it in the background): left there,
 * the holder's release grants the lock to the canceled waiter, whose
 * channel may still be subscribed -- and then nobody releases it until
 * its lease runs out.
 */
static void test_cancel_with_the_queueing_try_unanswered_leaves_no_entry(void **state)
{
	test_proxy *proxy = test_proxy_start_proto(TEST_PROXY_REDIS, server->port);
	char *uri = g_strdup_printf("redis://127.0.0.1:%d?command-timeout=5s", test_proxy_port(proxy));
	const char *key = "dlock:{cancel/lost-ticket}";
	const char *queue = "dlock:{cancel/lost-ticket}:q";
	dlock_client *holder_client, *client;
	dlock_lock *holder;
	waiter_run w = { 0 };
	char *direct = test_redis_uri(server, NULL);

	assert_int_equal(dlock_client_new(direct, &holder_client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(holder_client, "cancel/lost-ticket", &holder), DLOCK_OK);
	assert_int_equal(dlock_acquire(holder, 0), DLOCK_OK);
	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "cancel/lost-ticket", &w.lock), DLOCK_OK);
	/* The first try finds the lock busy; the second queues, unanswered. */
	test_proxy_drop_replies_after(proxy, "EVALSHA", 1, 1, false);
	w.thread = g_thread_new("waiter", acquire_main, &w);
	assert_true(test_wait_until(reply_dropped, proxy, 5000));
	assert_int_equal(test_redis_int(server, "ZCARD %s", queue), 1);
	assert_int_equal(dlock_lock_cancel(w.lock), DLOCK_OK);
	assert_true(test_wait_until(waiter_done, &w, 2000));
	g_thread_join(w.thread);
	assert_int_equal(w.rc, DLOCK_ECANCELED);
	/* The cancel returns at once; the entry goes in the background, well
	 * before its own lease would end it. */
	if (!test_wait_until(queue_gone, (void *)queue, 2000))
		fail_msg("the canceled waiter's entry is still queued (%lld ms left)",
		         test_redis_int(server, "PTTL %s", queue));
	/* The release frees the lock: nobody is waiting for it. */
	assert_int_equal(dlock_release(holder), DLOCK_OK);
	assert_int_equal(test_redis_int(server, "EXISTS %s", key), 0);
	dlock_lock_free(w.lock);
	dlock_client_free(client);
	dlock_lock_free(holder);
	dlock_client_free(holder_client);
	test_proxy_stop(proxy);
	g_free(direct);
	g_free(uri);
}

static int setup(void **state)
{
	server = test_redis_start(NULL, NULL, false);
	return 0;
}

static void test_no_lock_key_of_this_suite_remains(void **state)
{
	assert_int_equal(test_redis_leftover_keys(server, "dlock:{cancel/"), 0);
}

static int teardown(void **state)
{
	test_redis_stop(server);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cancel_wakes_a_waiter_blocked_in_a_command),
		cmocka_unit_test(test_lock_free_wakes_a_waiter_blocked_in_a_command),
		cmocka_unit_test(test_client_free_wakes_a_waiter_blocked_in_a_command),
		cmocka_unit_test(test_cancel_wakes_a_waiter_blocked_in_authentication),
		cmocka_unit_test(test_a_canceled_try_landing_after_its_cleanup_leaves_nothing_held),
		cmocka_unit_test(test_cancel_with_the_queueing_try_unanswered_leaves_no_entry),
		cmocka_unit_test(test_no_lock_key_of_this_suite_remains),
	};

	test_init(argv[0]);
	return test_finish(cmocka_run_group_tests_name("redis-cancel", tests, setup, teardown));
}
