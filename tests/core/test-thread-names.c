/* SPDX-License-Identifier: MIT */
/*
 * Every library thread carries its name where tools look for it
 * (/proc/<pid>/task/<tid>/comm, shown by top -H, ps -L, gdb): the kernel
 * takes at most 15 characters, and a longer name is refused outright, so
 * the thread would show as the host program.
 *
 * Run with one argument, the backend whose threads to start: redis, file
 * or zk.
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
#include "test-zk.h"

/* Whether a thread of this process has this name now. */
static bool thread_named(void *arg)
{
	const char *name = arg;
	GDir *tasks = g_dir_open("/proc/self/task", 0, NULL);
	const char *tid;
	bool found = false;

	assert_non_null(tasks);
	while (!found && (tid = g_dir_read_name(tasks))) {
		char *path = g_strdup_printf("/proc/self/task/%s/comm", tid);
		char *comm = NULL;

		if (g_file_get_contents(path, &comm, NULL, NULL))
			found = strcmp(g_strchomp(comm), name) == 0;
		g_free(comm);
		g_free(path);
	}
	g_dir_close(tasks);
	return found;
}

static void assert_thread_named(const char *name)
{
	bool found = test_wait_until(thread_named, (void *)name, 5000);

	print_message("thread %s: %s\n", name, found ? "present" : "missing");
	if (!found)
		fail_msg("no thread of this process is named %s", name);
}

/* A lock waiting on another thread, until the holder lets go. */
typedef struct waiter {
	dlock_lock *lock;
	int rc;
	GThread *thread;
} waiter;

static gpointer wait_main(gpointer data)
{
	waiter *w = data;

	w->rc = dlock_acquire(w->lock, 10000);
	if (w->rc == DLOCK_OK)
		dlock_release(w->lock);
	return NULL;
}

static void waiter_start(waiter *w, dlock_lock *lock)
{
	w->lock = lock;
	w->rc = -1;
	w->thread = g_thread_new("waiter", wait_main, w);
}

static int states_seen;

static void count_state(dlock_lock *lock, dlock_state state, void *user_data)
{
	g_atomic_int_inc(&states_seen);
}

static bool some_state_seen(void *arg)
{
	return g_atomic_int_get(&states_seen) > 0;
}

/*
 * A Redis hold with the watchdog on (dlock-watchdog, dlock-expiry), a
 * waiter on the same lock (dlock-subscribe), a state event when the
 * hold's renewal goes unanswered (dlock-callback), and an election's
 * leader announced (dlock-announce).
 */
static void test_redis_threads_are_named(void **state)
{
	test_redis *server = test_redis_start(NULL, NULL, false);
	test_proxy *proxy = test_proxy_start_proto(TEST_PROXY_REDIS, server->port);
	char *proxied = g_strdup_printf("redis://127.0.0.1:%d?command-timeout=200ms", test_proxy_port(proxy));
	char *direct = test_redis_uri(server, NULL);
	dlock_client *holder_client, *waiter_client;
	dlock_lock *holder, *waiting;
	dlock_election *e;
	waiter w;
	int rc;

	assert_int_equal(dlock_client_new(proxied, &holder_client), DLOCK_OK);
	assert_int_equal(dlock_client_new(direct, &waiter_client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(holder_client, "names/redis", &holder), DLOCK_OK);
	assert_int_equal(dlock_lock_set_ttl(holder, 3000), DLOCK_OK);
	assert_int_equal(dlock_lock_set_state_callback(holder, count_state, NULL), DLOCK_OK);
	assert_int_equal(dlock_lock_new(waiter_client, "names/redis", &waiting), DLOCK_OK);

	assert_int_equal(dlock_acquire(holder, 5000), DLOCK_OK);
	assert_thread_named("dlock-watchdog");
	assert_thread_named("dlock-expiry");
	waiter_start(&w, waiting);
	assert_thread_named("dlock-subscribe");

	/* The first renewal (1 s in) gets no answer: SUSPENDED. */
	test_proxy_stall(proxy, TEST_PROXY_BOTH);
	assert_true(test_wait_until(some_state_seen, NULL, 5000));
	assert_thread_named("dlock-callback");
	test_proxy_unstall(proxy, TEST_PROXY_BOTH);

	rc = dlock_release(holder);
	assert_true(rc == DLOCK_OK || rc == DLOCK_ELOST);
	g_thread_join(w.thread);
	assert_int_equal(w.rc, DLOCK_OK);
	dlock_lock_free(waiting);

	/* An election's leader is announced from a thread of its own. */
	assert_int_equal(dlock_election_new(waiter_client, "names/elect", "a", &e), DLOCK_OK);
	assert_int_equal(dlock_election_campaign(e, 5000), DLOCK_OK);
	assert_thread_named("dlock-announce");
	dlock_election_free(e);
	dlock_lock_free(holder);
	dlock_client_free(waiter_client);
	dlock_client_free(holder_client);
	test_proxy_stop(proxy);
	g_free(direct);
	g_free(proxied);
	test_redis_stop(server);
}

/* A file lock waiter watches the lock file (dlock-filewatch). */
static void test_file_threads_are_named(void **state)
{
	char *dir = g_dir_make_tmp("dlock-names-XXXXXX", NULL);
	char *uri = g_strdup_printf("file://%s", dir);
	dlock_client *a, *b;
	dlock_lock *holder, *waiting;
	waiter w;

	assert_non_null(dir);
	assert_int_equal(dlock_client_new(uri, &a), DLOCK_OK);
	assert_int_equal(dlock_client_new(uri, &b), DLOCK_OK);
	assert_int_equal(dlock_lock_new(a, "names/file", &holder), DLOCK_OK);
	assert_int_equal(dlock_lock_new(b, "names/file", &waiting), DLOCK_OK);
	assert_int_equal(dlock_acquire(holder, 0), DLOCK_OK);
	waiter_start(&w, waiting);
	assert_thread_named("dlock-filewatch");
	assert_int_equal(dlock_release(holder), DLOCK_OK);
	g_thread_join(w.thread);
	assert_int_equal(w.rc, DLOCK_OK);
	dlock_lock_free(waiting);
	dlock_lock_free(holder);
	dlock_client_free(b);
	dlock_client_free(a);
	test_remove_tree(dir);
	g_free(uri);
	g_free(dir);
}

/* A ZooKeeper session has its own thread (dlock-zksession). */
static void test_zk_threads_are_named(void **state)
{
	test_zk *zk = test_zk_start(1, 200, 20000);
	char *uri = test_zk_uri(zk, NULL);
	dlock_client *client;
	dlock_lock *lock;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "names/zk", &lock), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, 10000), DLOCK_OK);
	assert_thread_named("dlock-zksession");
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_free(uri);
	test_zk_stop(zk);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest redis_tests[] = { cmocka_unit_test(test_redis_threads_are_named) };
	const struct CMUnitTest file_tests[] = { cmocka_unit_test(test_file_threads_are_named) };
	const struct CMUnitTest zk_tests[] = { cmocka_unit_test(test_zk_threads_are_named) };
	const char *backend = argc > 1 ? argv[1] : "";

	test_init(argv[0]);
	if (strcmp(backend, "redis") == 0)
		return test_finish(cmocka_run_group_tests_name("thread-names-redis", redis_tests, NULL, NULL));
	if (strcmp(backend, "file") == 0)
		return cmocka_run_group_tests_name("thread-names-file", file_tests, NULL, NULL);
	if (strcmp(backend, "zk") == 0)
		return cmocka_run_group_tests_name("thread-names-zk", zk_tests, NULL, NULL);
	fprintf(stderr, "usage: %s redis|file|zk\n", argv[0]);
	return 2;
}
