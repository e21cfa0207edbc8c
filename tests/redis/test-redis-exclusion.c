/* SPDX-License-Identifier: MIT */
/*
 * Mutual exclusion across processes and threads, crash recovery by lease
 * expiry, and wake-up of waiters by the release notification.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-exclusion.h"
#include "test-handoff.h"
#include "test-redis.h"

#define PROCESSES 3
#define THREADS 4
#define ROUNDS 25

static test_redis *server;

/* ---- worker side ------------------------------------------------------ */

/* Acquire, say so with the token, then hang until killed. */
static int worker_hold(char **argv)
{
	dlock_client *client;
	dlock_lock *lock;

	if (dlock_client_new(argv[0], &client) != DLOCK_OK ||
	    dlock_lock_new(client, argv[1], &lock) != DLOCK_OK ||
	    dlock_lock_set_ttl(lock, 1000) != DLOCK_OK || dlock_acquire(lock, 5000) != DLOCK_OK)
		return 2;
	printf("held %" PRIu64 "\n", dlock_fencing_token(lock));
	fflush(stdout);
	for (;;)
		pause();
}

static int worker_main(int argc, char **argv)
{
	if (argc >= 9 && strcmp(argv[2], "counter") == 0)
		return test_exclusion_worker(argv + 3);
	if (argc >= 5 && strcmp(argv[2], "hold") == 0)
		return worker_hold(argv + 3);
	if (argc >= 6 && strcmp(argv[2], "handoff") == 0)
		return test_handoff_worker(argv[3], argv[4], atoi(argv[5]));
	return 64;
}

/* ---- tests ------------------------------------------------------------ */

static void test_processes_and_threads_never_overlap_and_tokens_increase(void **state)
{
	char *uri = test_redis_uri(server, NULL);

	test_exclusion_run(uri, "excl/counter", PROCESSES, THREADS, ROUNDS);
	assert_int_equal(test_redis_int(server, "EXISTS %s", "dlock:{excl/counter}"), 0);
	g_free(uri);
}

static void test_killed_holder_is_replaced_after_its_lease_with_larger_token(void **state)
{
	char *uri = test_redis_uri(server, NULL);
	const char *args[] = { "hold", uri, "excl/crash", NULL };
	dlock_client *client;
	dlock_lock *lock;
	uint64_t dead_token;
	char line[64];
	int64_t killed_ms, waited_ms;
	long long left_ms;
	int fd;
	pid_t pid = test_spawn_worker(args, &fd);

	assert_true(test_read_line(fd, line, sizeof(line), 10000));
	assert_true(g_str_has_prefix(line, "held "));
	dead_token = g_ascii_strtoull(line + 5, NULL, 10);

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "excl/crash", &lock), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_EBUSY);
	/* What is left of the lease when the holder dies bounds the wait from
	 * below: nobody may get the lock before the server lets it expire. */
	left_ms = test_redis_int(server, "PTTL %s", "dlock:{excl/crash}");
	assert_true(left_ms > 0 && left_ms <= 1000);
	kill(pid, SIGKILL);
	killed_ms = test_now_ms();
	test_wait_worker(pid);
	close(fd);

	assert_int_equal(dlock_acquire(lock, 10000), DLOCK_OK);
	waited_ms = test_now_ms() - killed_ms;
	print_message("lease left %lld ms at the kill, acquired after %" PRId64 " ms\n", left_ms, waited_ms);
	assert_true(waited_ms >= left_ms - 20);
	/* The lease (1 s, renewed every 1/3 s) had at most 1 s left. */
	assert_true(waited_ms <= 1000 + test_slack(500));
	assert_true(dlock_fencing_token(lock) > dead_token);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_free(uri);
}

static void test_waiter_in_another_process_is_woken_by_release(void **state)
{
	char *uri = test_redis_uri(server, NULL);
	int64_t max_us;
	/* The waiter is subscribed and asleep after 150 ms; its lease is 30 s,
	 * so only the release notification can wake it this soon. */
	int64_t median_us = test_handoff_median_us(uri, "excl/handoff", 20, 150000, &max_us);

	print_message("handoff median %" PRId64 " us, max %" PRId64 " us\n", median_us, max_us);
	assert_true(median_us < 5000);
	g_free(uri);
}

static void test_no_lock_key_of_this_suite_remains(void **state)
{
	assert_int_equal(test_redis_leftover_keys(server, "dlock:{excl/"), 0);
}

static int setup(void **state)
{
	server = test_redis_start(NULL, NULL, false);
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
		cmocka_unit_test(test_processes_and_threads_never_overlap_and_tokens_increase),
		cmocka_unit_test(test_killed_holder_is_replaced_after_its_lease_with_larger_token),
		cmocka_unit_test(test_waiter_in_another_process_is_woken_by_release),
		cmocka_unit_test(test_no_lock_key_of_this_suite_remains),
	};

	test_init(argv[0]);
	if (argc > 1 && strcmp(argv[1], "--worker") == 0)
		return worker_main(argc, argv);
	return test_finish(cmocka_run_group_tests_name("redis-exclusion", tests, setup, teardown));
}
