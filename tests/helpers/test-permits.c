/* Semaphore check: see test-permits.h. */
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-permits.h"
#include "test-util.h"

/* The shared count file: how many hold now, the most that ever did. */
typedef struct census {
	int64_t now;
	int64_t most;
} census;

typedef struct permits_job {
	dlock_client *client;
	const char *resource;
	uint32_t permits;
	const char *count_path;
	const char *tokens_path;
	int rounds;
	int failures; /* atomic */
} permits_job;

static void failed(permits_job *job)
{
	__atomic_add_fetch(&job->failures, 1, __ATOMIC_SEQ_CST);
}

/* Add delta to the count under an exclusive flock of the file, and return
 * the count afterwards (-1 on an I/O failure). */
static int64_t census_add(const char *path, int delta)
{
	census c = { 0, 0 };
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	int64_t now = -1;

	if (fd < 0)
		return -1;
	if (flock(fd, LOCK_EX) == 0) {
		ssize_t n = pread(fd, &c, sizeof(c), 0);

		if (n == 0 || n == (ssize_t)sizeof(c)) {
			c.now += delta;
			if (c.now > c.most)
				c.most = c.now;
			if (pwrite(fd, &c, sizeof(c), 0) == (ssize_t)sizeof(c))
				now = c.now;
		}
	}
	close(fd); /* drops the flock */
	return now;
}

static bool census_read(const char *path, census *ret)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	bool ok = false;

	if (fd < 0)
		return false;
	if (flock(fd, LOCK_SH) == 0)
		ok = pread(fd, ret, sizeof(*ret), 0) == (ssize_t)sizeof(*ret);
	close(fd);
	return ok;
}

/* In the first round: stay until permits holders were in at once, so
 * the run sees N reached whatever the start-up skew of the workers. */
static void wait_for_full_house(const permits_job *job)
{
	gint64 until = g_get_monotonic_time() + 10 * G_USEC_PER_SEC;
	census c;

	while (g_get_monotonic_time() < until) {
		if (census_read(job->count_path, &c) && c.most >= job->permits)
			return;
		g_usleep(1000);
	}
}

static void *permits_thread(void *data)
{
	permits_job *job = data;
	dlock_lock *lock;

	if (dlock_lock_new(job->client, job->resource, &lock) != DLOCK_OK ||
	    dlock_lock_set_permits(lock, job->permits) != DLOCK_OK) {
		failed(job);
		return NULL;
	}
	for (int i = 0; i < job->rounds; i++) {
		if (dlock_acquire(lock, 60000) != DLOCK_OK) {
			failed(job);
			continue;
		}
		if (census_add(job->count_path, 1) < 0 ||
		    !test_append_token(job->tokens_path, dlock_fencing_token(lock)))
			failed(job);
		if (i == 0)
			wait_for_full_house(job);
		else
			g_usleep(2000);
		if (census_add(job->count_path, -1) < 0)
			failed(job);
		if (dlock_release(lock) != DLOCK_OK)
			failed(job);
	}
	dlock_lock_free(lock);
	return NULL;
}

int test_permits_worker(char **argv)
{
	permits_job job = { NULL, argv[1], (uint32_t)atoi(argv[2]), argv[3], argv[4], atoi(argv[6]), 0 };
	int threads = atoi(argv[5]);

	if (threads <= 0 || job.rounds <= 0 || dlock_client_new(argv[0], &job.client) != DLOCK_OK)
		return 2;
	test_run_threads(threads, permits_thread, &job);
	dlock_client_free(job.client);
	return job.failures ? 3 : 0;
}

void test_permits_run(const char *uri, const char *resource, uint32_t permits, int processes,
                      int threads, int rounds)
{
	char *dir = g_dir_make_tmp("dlock-permits-XXXXXX", NULL);
	char *count_path = g_build_filename(dir, "count", NULL);
	char *tokens_path = g_build_filename(dir, "tokens", NULL);
	char *permits_text = g_strdup_printf("%" PRIu32, permits);
	char *threads_text = g_strdup_printf("%d", threads);
	char *rounds_text = g_strdup_printf("%d", rounds);
	const char *args[] = { "permits", uri, resource, permits_text, count_path, tokens_path,
		               threads_text, rounds_text, NULL };
	pid_t *pids = g_new(pid_t, processes);
	int *fds = g_new(int, processes);
	GHashTable *seen = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, NULL);
	census c = { -1, -1 };
	char *text = NULL;
	gchar **lines;
	int count = 0;

	assert_non_null(dir);
	assert_true(census_add(count_path, 0) == 0);
	for (int i = 0; i < processes; i++)
		pids[i] = test_spawn_worker(args, &fds[i]);
	for (int i = 0; i < processes; i++) {
		assert_int_equal(test_wait_worker(pids[i]), 0);
		close(fds[i]);
	}
	assert_true(census_read(count_path, &c));
	assert_int_equal(c.now, 0);
	assert_int_equal(c.most, permits);
	assert_true(g_file_get_contents(tokens_path, &text, NULL, NULL));
	lines = g_strsplit(text, "\n", -1);
	for (int i = 0; lines[i] && *lines[i]; i++, count++) {
		gint64 *token = g_new(gint64, 1);

		*token = (gint64)g_ascii_strtoull(lines[i], NULL, 10);
		assert_true(*token > 0);
		assert_false(g_hash_table_contains(seen, token));
		g_hash_table_add(seen, token);
	}
	assert_int_equal(count, processes * threads * rounds);
	print_message("%d processes x %d threads x %d rounds on %" PRIu32 " permits: at most %" PRId64
	              " at once, %d distinct tokens\n", processes, threads, rounds, permits, c.most, count);
	g_hash_table_unref(seen);
	g_strfreev(lines);
	g_free(text);
	unlink(count_path);
	unlink(tokens_path);
	rmdir(dir);
	g_free(pids);
	g_free(fds);
	g_free(permits_text);
	g_free(threads_text);
	g_free(rounds_text);
	g_free(count_path);
	g_free(tokens_path);
	g_free(dir);
}
