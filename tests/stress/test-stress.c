/* SPDX-License-Identifier: MIT */
/*
 * Invariant stress on every backend and recipe (stress.h):
 *
 *   test-stress redis|redlock|zk|file [TEST-NAME-PATTERN]
 *
 * For each recipe the backend serves -- mutex, read-write lock with
 * downgrades, a contended semaphore (2 permits), a semaphore with a permit
 * for every owner (tries and waits forever only, no cancel: no try may
 * ever be refused), election; Redlock serves
 * only the mutex and the election -- six owners with clients of their own
 * stress one resource for a few seconds with waits of 0, a few ms,
 * 100 ms and forever and random cancels, and the test fails on any
 * violation.  Afterwards nothing may be left: no key, queue entry,
 * member, permits key, lock, lease or mutex node, locked file, and no
 * library thread once every client is freed.
 */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "stress.h"
#include "test-redis.h"
#include "test-redlock.h"
#include "test-util.h"
#include "test-zk.h"

#define OWNERS 6
#define SECONDS 3

static const char *backend;
static test_redis *redis;
static test_redlock *redlock;
static test_zk *zk;
static char *dir;
static char *uri;

static int setup(void **state)
{
	(void)state;
	if (g_str_equal(backend, "redis")) {
		redis = test_redis_start(NULL, NULL, false);
		uri = test_redis_uri(redis, "?ttl=10s");
	} else if (g_str_equal(backend, "redlock")) {
		redlock = test_redlock_start(3);
		uri = test_redlock_uri(redlock, 3, "?ttl=10s&master-timeout=250ms");
	} else if (g_str_equal(backend, "zk")) {
		zk = test_zk_start(1, 200, 0);
		uri = test_zk_uri(zk, "?session-timeout=10s");
	} else {
		test_file_dir_make("dlock-stress", &dir, &uri);
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (redis)
		test_redis_stop(redis);
	if (redlock)
		test_redlock_stop(redlock);
	if (zk)
		test_zk_stop(zk);
	if (dir) {
		test_file_dir_remove(dir);
		g_free(dir);
	}
	g_free(uri);
	return 0;
}

/* Lock files some descriptor still locks (every client is freed). */
static long long locked_files(void)
{
	GDir *d = g_dir_open(dir, 0, NULL);
	const char *name;
	long long n = 0;

	assert_non_null(d);
	while ((name = g_dir_read_name(d))) {
		char *path = g_build_filename(dir, name, NULL);
		int fd = open(path, O_RDWR | O_CLOEXEC);
		struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };

		if (fd >= 0 && fcntl(fd, F_OFD_SETLK, &fl) != 0) {
			printf("stress: LEFTOVER lock file still locked: %s\n", path);
			n++;
		}
		if (fd >= 0)
			close(fd);
		g_free(path);
	}
	g_dir_close(d);
	return n;
}

static long long leftovers(void)
{
	if (redis)
		return test_redis_leftover_keys(redis, "dlock:");
	if (redlock)
		return test_redlock_leftover_keys(redlock, "dlock:");
	if (zk)
		return test_zk_leftover_nodes(zk, "/dlock");
	return locked_files();
}

static bool nothing_left(void *arg)
{
	(void)arg;
	return leftovers() == 0;
}

static int threads_now(void)
{
	return test_count_entries("/proc/self/task");
}

static bool threads_back(void *baseline)
{
	return threads_now() <= *(int *)baseline;
}

static void stress(const char *resource, stress_recipe recipe, uint32_t permits, bool never_give_up)
{
	stress_config cfg = { uri, resource, recipe, permits, OWNERS, SECONDS * 1000, 1, never_give_up };
	stress_report report;
	int baseline = threads_now();

	stress_run(&cfg, &report);
	assert_true(report.acquires > 0);
	if (report.violations)
		fail_msg("%lld violations of the %s's rules on %s (printed above)", (long long)report.violations,
		         stress_recipe_name(recipe), backend);
	/* Freeing the clients joined their threads; allow the C library's
	 * own helpers a moment to go. */
	if (!test_wait_until(threads_back, &baseline, 2000))
		fail_msg("%d threads left after every client was freed (%d before)", threads_now(), baseline);
	if (!test_wait_until(nothing_left, NULL, 2000))
		fail_msg("%lld things left on the server after every client was freed", leftovers());
}

static void test_mutex_results_exclusion_and_tokens_hold_under_stress(void **state)
{
	(void)state;
	stress("stress/mutex", STRESS_MUTEX, 1, false);
}

static void test_read_write_results_exclusion_downgrades_and_tokens_hold_under_stress(void **state)
{
	(void)state;
	stress("stress/rw", STRESS_RW, 1, false);
}

static void test_contended_semaphore_results_permits_and_tokens_hold_under_stress(void **state)
{
	(void)state;
	stress("stress/sem2", STRESS_SEMAPHORE, 2, false);
}

/* A permit for every owner, and no acquire ever gives up (tries and waits
 * forever, no cancel): no acquire may find the semaphore full. */
static void test_semaphore_with_a_permit_per_owner_never_refuses_a_try(void **state)
{
	(void)state;
	stress("stress/sem-all", STRESS_SEMAPHORE, OWNERS, true);
}

static void test_election_results_one_leader_tokens_and_events_hold_under_stress(void **state)
{
	(void)state;
	stress("stress/election", STRESS_ELECTION, 1, false);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest all[] = {
		cmocka_unit_test(test_mutex_results_exclusion_and_tokens_hold_under_stress),
		cmocka_unit_test(test_read_write_results_exclusion_downgrades_and_tokens_hold_under_stress),
		cmocka_unit_test(test_contended_semaphore_results_permits_and_tokens_hold_under_stress),
		cmocka_unit_test(test_semaphore_with_a_permit_per_owner_never_refuses_a_try),
		cmocka_unit_test(test_election_results_one_leader_tokens_and_events_hold_under_stress),
	};
	/* Redlock serves EXCLUSIVE holds only. */
	const struct CMUnitTest exclusive[] = {
		cmocka_unit_test(test_mutex_results_exclusion_and_tokens_hold_under_stress),
		cmocka_unit_test(test_election_results_one_leader_tokens_and_events_hold_under_stress),
	};
	char group[32];
	int failures;

	test_init(argv[0]);
	setvbuf(stdout, NULL, _IOLBF, 0);
	/* A GLib critical is a broken assertion (a reference dropped twice,
	 * say): a failure, not a line on stderr. */
	g_log_set_always_fatal(G_LOG_FATAL_MASK | G_LOG_LEVEL_CRITICAL);
	if (argc < 2 || argc > 3 ||
	    !(g_str_equal(argv[1], "redis") || g_str_equal(argv[1], "redlock") || g_str_equal(argv[1], "zk") ||
	      g_str_equal(argv[1], "file"))) {
		fprintf(stderr, "usage: test-stress redis|redlock|zk|file [TEST-NAME-PATTERN]\n");
		return 64;
	}
	backend = argv[1];
	if (argc == 3)
		cmocka_set_test_filter(argv[2]); /* e.g. "*semaphore*" */
	if (g_str_equal(backend, "redlock"))
		failures = cmocka_run_group_tests_name("stress-redlock", exclusive, setup, teardown);
	else
		failures = cmocka_run_group_tests_name((g_snprintf(group, sizeof(group), "stress-%s", backend), group), all,
		                                       setup, teardown);
	return test_zk_finish(test_finish(failures));
}
