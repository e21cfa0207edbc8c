/* SPDX-License-Identifier: MIT */
/* Handoff measurement: see test-handoff.h. */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-handoff.h"
#include "test-util.h"

int test_handoff_worker(const char *uri, const char *resource, int count)
{
	dlock_client *client;
	dlock_lock *lock;

	if (dlock_client_new(uri, &client) != DLOCK_OK || dlock_lock_new(client, resource, &lock) != DLOCK_OK)
		return 2;
	for (int i = 0; i < count; i++) {
		if (dlock_acquire(lock, 30000) != DLOCK_OK)
			return 3;
		printf("%" PRId64 "\n", test_now_us());
		fflush(stdout);
		dlock_release(lock);
		g_usleep(30000);
	}
	dlock_lock_free(lock);
	dlock_client_free(client);
	return 0;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

int64_t test_handoff_median_us(const char *uri, const char *resource, int count, int64_t pause_us,
                               int64_t *ret_max_us)
{
	char count_text[16];
	const char *args[] = { "handoff", uri, resource, count_text, NULL };
	int64_t *samples = g_new0(int64_t, count);
	dlock_client *client;
	dlock_lock *lock;
	int64_t median;
	pid_t pid;
	int fd;

	g_snprintf(count_text, sizeof(count_text), "%d", count);
	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, resource, &lock), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_OK);
	pid = test_spawn_worker(args, &fd);
	for (int i = 0; i < count; i++) {
		char line[64];
		int64_t released;

		g_usleep((gulong)pause_us);
		released = test_now_us();
		assert_int_equal(dlock_release(lock), DLOCK_OK);
		assert_true(test_read_line(fd, line, sizeof(line), 10000));
		samples[i] = g_ascii_strtoll(line, NULL, 10) - released;
		assert_int_equal(dlock_acquire(lock, 10000), DLOCK_OK);
	}
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	assert_int_equal(test_wait_worker(pid), 0);
	close(fd);
	qsort(samples, (size_t)count, sizeof(samples[0]), cmp_i64);
	median = samples[count / 2];
	if (ret_max_us)
		*ret_max_us = samples[count - 1];
	g_free(samples);
	dlock_lock_free(lock);
	dlock_client_free(client);
	return median;
}
