/* SPDX-License-Identifier: MIT */
/*
 * An uncontended acquire and release wake no library thread: the Redis
 * watchdog and expiry threads and the ZooKeeper session thread sleep on
 * their own timers while a program takes and drops a lock in a loop.  A
 * wake-up per acquire costs a thread switch on the caller's path, and
 * the caller's core when the machine is busy.
 *
 * Measured by the threads' context switches (/proc/self/task/<tid>/status)
 * over rounds of pairs, against what their timers allow for the time the
 * rounds took: a thread woken on every acquire would switch at least once
 * per pair.  Each round starts after a pause with no lock held, long
 * enough for the threads to settle into their idle sleep, from which the
 * round's first lock may wake them once.
 *
 * Run with one argument, the backend: redis or zk.
 */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-redis.h"
#include "test-zk.h"

#define ROUNDS 5
#define PAIRS 300 /* per round */
#define PAUSE_MS 300 /* longer than any of the threads' timed sleeps */

/* Context switches, voluntary and not, of this process's threads named
 * name, summed; -1 if there is none. */
static long long thread_switches(const char *name)
{
	GDir *tasks = g_dir_open("/proc/self/task", 0, NULL);
	const char *tid;
	long long total = -1;

	assert_non_null(tasks);
	while ((tid = g_dir_read_name(tasks))) {
		char *path = g_strdup_printf("/proc/self/task/%s/comm", tid);
		char *text = NULL;

		if (g_file_get_contents(path, &text, NULL, NULL) && strcmp(g_strchomp(text), name) == 0) {
			char **lines;

			g_free(text);
			text = NULL;
			g_free(path);
			path = g_strdup_printf("/proc/self/task/%s/status", tid);
			if (g_file_get_contents(path, &text, NULL, NULL)) {
				lines = g_strsplit(text, "\n", -1);
				total = MAX(total, 0);
				for (char **l = lines; *l; l++)
					if (g_str_has_prefix(*l, "voluntary_ctxt_switches:") ||
					    g_str_has_prefix(*l, "nonvoluntary_ctxt_switches:"))
						total += strtoll(strchr(*l, ':') + 1, NULL, 10);
				g_strfreev(lines);
			}
		}
		g_free(text);
		g_free(path);
	}
	g_dir_close(tasks);
	return total;
}

static bool thread_is_named(void *name)
{
	return thread_switches(name) >= 0;
}

/*
 * ROUNDS rounds of PAIRS acquire+release pairs on a lock of the backend
 * at uri, after a warm-up that starts the threads; each thread named in
 * names may wake only as often as a timer of period_ms allows over the
 * rounds, plus twice a round (the first lock and release after a pause
 * may each wake it once), and each wake-up may count two switches: the
 * thread may block again on the way back to sleep (on its mutex, or
 * under valgrind on the lock that runs one thread at a time, which
 * measured up to 31 switches where 24 single ones were allowed).  Under
 * valgrind (a slack factor above 1) the bound is doubled: there a woken
 * thread may wait for that lock more than once on its way back to sleep,
 * which measured 43 and 44 switches where 40 and 42 were allowed.  A
 * thread woken on every acquire switches at least ROUNDS * PAIRS times,
 * far above either bound.
 */
static void assert_pairs_leave_threads_asleep(const char *uri, const char *const *names,
                                              const int64_t *period_ms)
{
	long long before[4], after[4];
	int64_t start, elapsed_ms;
	dlock_client *client;
	dlock_lock *lock;
	size_t n = 0;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "quiet/pairs", &lock), DLOCK_OK);
	for (int i = 0; i < 20; i++) {
		assert_int_equal(dlock_acquire(lock, 10000), DLOCK_OK);
		assert_int_equal(dlock_release(lock), DLOCK_OK);
	}
	for (; names[n]; n++) {
		/* A new thread names itself once it first runs, which a loaded
		 * machine may put off. */
		if (!test_wait_until(thread_is_named, (void *)names[n], 5000))
			fail_msg("no thread named %s", names[n]);
		before[n] = thread_switches(names[n]);
	}
	start = test_now_ms();
	for (int r = 0; r < ROUNDS; r++) {
		g_usleep(PAUSE_MS * 1000);
		for (int i = 0; i < PAIRS; i++) {
			assert_int_equal(dlock_acquire(lock, 10000), DLOCK_OK);
			assert_int_equal(dlock_release(lock), DLOCK_OK);
		}
	}
	elapsed_ms = test_now_ms() - start;
	for (size_t i = 0; i < n; i++) {
		long long allowed = (2 * (elapsed_ms / period_ms[i] + 1 + 2 * ROUNDS) + 2) *
		                    (test_slack_factor() > 1 ? 2 : 1);

		after[i] = thread_switches(names[i]);
		print_message("%s: %lld switches over %d pairs in %" PRId64 " ms (timers allow %lld)\n",
		              names[i], after[i] - before[i], ROUNDS * PAIRS, elapsed_ms, allowed);
		assert_true(after[i] - before[i] <= allowed);
	}
	dlock_lock_free(lock);
	dlock_client_free(client);
}

static void test_redis_pairs_wake_no_library_thread(void **state)
{
	test_redis *server = test_redis_start(NULL, NULL, false);
	char *uri = test_redis_uri(server, NULL);
	const char *const names[] = { "dlock-watchdog", "dlock-expiry", NULL };
	/* Both sleep at most 250 ms at a time while a lease is held. */
	const int64_t periods[] = { 250, 250 };

	assert_pairs_leave_threads_asleep(uri, names, periods);
	g_free(uri);
	test_redis_stop(server);
}

static void test_zk_pairs_wake_no_library_thread(void **state)
{
	test_zk *zk = test_zk_start(1, 200, 20000);
	char *uri = test_zk_uri(zk, NULL);
	const char *const names[] = { "dlock-zksession", NULL };
	/* It looks at each session at least once a second. */
	const int64_t periods[] = { 1000 };

	assert_pairs_leave_threads_asleep(uri, names, periods);
	g_free(uri);
	test_zk_stop(zk);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest redis_tests[] = {
		cmocka_unit_test(test_redis_pairs_wake_no_library_thread),
	};
	const struct CMUnitTest zk_tests[] = { cmocka_unit_test(test_zk_pairs_wake_no_library_thread) };
	const char *backend = argc > 1 ? argv[1] : "";

	test_init(argv[0]);
	if (strcmp(backend, "redis") == 0)
		return test_finish(cmocka_run_group_tests_name("quiet-threads-redis", redis_tests, NULL, NULL));
	if (strcmp(backend, "zk") == 0)
		return cmocka_run_group_tests_name("quiet-threads-zk", zk_tests, NULL, NULL);
	fprintf(stderr, "usage: %s redis|zk\n", argv[0]);
	return 2;
}
