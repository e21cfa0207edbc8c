/* SPDX-License-Identifier: MIT */
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
#include <signal.h>
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

int test_permit_hold_worker(char **argv)
{
	dlock_client *client;
	dlock_lock *lock;
	char buf[16];

	if (dlock_client_new(argv[0], &client) != DLOCK_OK || dlock_lock_new(client, argv[1], &lock) != DLOCK_OK ||
	    dlock_lock_set_permits(lock, (uint32_t)atoi(argv[2])) != DLOCK_OK)
		return 2;
	if (dlock_acquire(lock, 30000) != DLOCK_OK)
		return 3;
	printf("held %" PRIu64 "\n", dlock_fencing_token(lock));
	fflush(stdout);
	while (fgets(buf, sizeof(buf), stdin))
		;
	dlock_release(lock);
	dlock_lock_free(lock);
	dlock_client_free(client);
	return 0;
}

/* One participant: a client and a handle of its own. */
typedef struct permit_owner {
	dlock_client *client;
	dlock_lock *lock;
	dlock_lock *lock_2;     /* a second handle of the same client, if any */
	int rc;                 /* of a waiting acquire on a thread */
	int64_t done_ms;
} permit_owner;

static void owner_open(permit_owner *o, const char *uri, const char *resource, uint32_t permits)
{
	memset(o, 0, sizeof(*o));
	assert_int_equal(dlock_client_new(uri, &o->client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(o->client, resource, &o->lock), DLOCK_OK);
	/* Acquired on a thread, looked at and released from the test's. */
	assert_int_equal(dlock_lock_set_owner(o->lock, DLOCK_OWNER_HANDLE), DLOCK_OK);
	if (permits)
		assert_int_equal(dlock_lock_set_permits(o->lock, permits), DLOCK_OK);
}

static void owner_close(permit_owner *o)
{
	dlock_lock_free(o->lock);
	dlock_client_free(o->client);
}

static void *owner_wait(void *data)
{
	permit_owner *o = data;

	o->rc = dlock_acquire(o->lock, 30000);
	__atomic_store_n(&o->done_ms, test_now_ms(), __ATOMIC_SEQ_CST);
	return NULL;
}

static void assert_taken(const permit_owner *o, size_t taken, uint32_t permits)
{
	dlock_info *info;

	assert_int_equal(dlock_lock_query(o->lock, &info), DLOCK_OK);
	assert_int_equal(dlock_info_locked(info), taken > 0);
	assert_int_equal(dlock_info_holders(info), taken);
	if (taken > 0) {
		assert_int_equal(dlock_info_permits(info), permits);
		assert_int_equal(dlock_info_mode(info), DLOCK_HELD_SHARED);
		for (size_t i = 0; i < taken; i++)
			assert_true(dlock_info_holder_pid_at(info, i) == getpid());
	}
	dlock_info_free(info);
}

void test_permits_basics(const char *uri, const char *resource, int64_t wake_bound_ms,
                         bool locks_excluded)
{
	permit_owner o[4], other, again, plain;
	uint64_t last = 0;
	pthread_t t;
	int64_t t0;

	for (int i = 0; i < 4; i++)
		owner_open(&o[i], uri, resource, 3);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(dlock_acquire(o[i].lock, 5000), DLOCK_OK);
		assert_true(dlock_held(o[i].lock));
		assert_true(dlock_fencing_token(o[i].lock) > last);
		last = dlock_fencing_token(o[i].lock);
	}
	assert_int_equal(dlock_acquire(o[3].lock, 0), DLOCK_EBUSY);
	assert_taken(&o[0], 3, 3);

	/* Another N while in use: refused, naming both. */
	owner_open(&other, uri, resource, 4);
	assert_int_equal(dlock_acquire(other.lock, 0), DLOCK_EINVAL);
	assert_non_null(strstr(dlock_last_error_message(), "3"));
	assert_non_null(strstr(dlock_last_error_message(), "4"));
	/* A lock on the resource is kept out while permits are taken, where
	 * the backend keeps the two in one place. */
	owner_open(&plain, uri, resource, 0);
	if (locks_excluded)
		assert_int_equal(dlock_acquire(plain.lock, 0), DLOCK_EBUSY);

	/* A waiter gets a released permit, woken by the release. */
	pthread_create(&t, NULL, owner_wait, &o[3]);
	g_usleep(300 * 1000);
	assert_int_equal(__atomic_load_n(&o[3].done_ms, __ATOMIC_SEQ_CST), 0);
	t0 = test_now_ms();
	assert_int_equal(dlock_release(o[1].lock), DLOCK_OK);
	pthread_join(t, NULL);
	assert_int_equal(o[3].rc, DLOCK_OK);
	print_message("a waiter got the released permit after %" PRId64 " ms\n", o[3].done_ms - t0);
	assert_true(o[3].done_ms - t0 <= wake_bound_ms * test_slack_factor());
	assert_true(dlock_fencing_token(o[3].lock) > last);
	assert_taken(&o[0], 3, 3);

	/* A thread holding a permit through one handle and acquiring through
	 * another of the same client: a re-entry, not a second permit. */
	assert_int_equal(dlock_release(o[0].lock), DLOCK_OK);
	assert_int_equal(dlock_lock_new(o[0].client, resource, &again.lock), DLOCK_OK);
	assert_int_equal(dlock_lock_set_permits(again.lock, 3), DLOCK_OK);
	assert_int_equal(dlock_lock_new(o[0].client, resource, &again.lock_2), DLOCK_OK);
	assert_int_equal(dlock_lock_set_permits(again.lock_2, 3), DLOCK_OK);
	assert_int_equal(dlock_acquire(again.lock, 0), DLOCK_OK);
	assert_int_equal(dlock_acquire(again.lock_2, 0), DLOCK_OK);
	assert_int_equal(dlock_fencing_token(again.lock_2), dlock_fencing_token(again.lock));
	assert_taken(&o[2], 3, 3);
	assert_int_equal(dlock_release(again.lock_2), DLOCK_OK);
	assert_int_equal(dlock_release(again.lock), DLOCK_OK);
	dlock_lock_free(again.lock_2);
	dlock_lock_free(again.lock);

	assert_int_equal(dlock_release(o[2].lock), DLOCK_OK);
	assert_int_equal(dlock_release(o[3].lock), DLOCK_OK);
	assert_taken(&o[0], 0, 3);
	/* Nobody holds: a new N is taken, and then holds. */
	assert_int_equal(dlock_acquire(other.lock, 0), DLOCK_OK);
	assert_taken(&other, 1, 4);
	if (locks_excluded)
		assert_int_equal(dlock_acquire(plain.lock, 0), DLOCK_EBUSY);
	assert_int_equal(dlock_release(other.lock), DLOCK_OK);
	if (locks_excluded) {
		assert_int_equal(dlock_acquire(plain.lock, 0), DLOCK_OK);
		assert_int_equal(dlock_acquire(o[0].lock, 0), DLOCK_EBUSY);
		assert_int_equal(dlock_release(plain.lock), DLOCK_OK);
	}
	for (int i = 0; i < 4; i++)
		owner_close(&o[i]);
	owner_close(&other);
	owner_close(&plain);
}

int64_t test_permits_killed_holder(const char *uri, const char *resource, int64_t bound_ms)
{
	const char *args[] = { "permit-hold", uri, resource, "2", NULL };
	permit_owner mine, waiter;
	char line[64];
	uint64_t dead_token;
	int in_fd, out_fd;
	int64_t t0, took;
	pthread_t t;
	pid_t pid;

	owner_open(&mine, uri, resource, 2);
	owner_open(&waiter, uri, resource, 2);
	pid = test_spawn_worker_io(args, &in_fd, &out_fd);
	assert_true(test_read_line(out_fd, line, sizeof(line), 10000));
	assert_true(g_str_has_prefix(line, "held "));
	dead_token = g_ascii_strtoull(line + 5, NULL, 10);
	assert_int_equal(dlock_acquire(mine.lock, 5000), DLOCK_OK);
	assert_int_equal(dlock_acquire(waiter.lock, 0), DLOCK_EBUSY);
	pthread_create(&t, NULL, owner_wait, &waiter);
	g_usleep(300 * 1000);
	t0 = test_now_ms();
	kill(pid, SIGKILL);
	assert_int_equal(test_wait_worker(pid), -1);
	pthread_join(t, NULL);
	took = waiter.done_ms - t0;
	print_message("permit holder killed: its permit went to the waiter after %" PRId64 " ms (bound %"
	              PRId64 " ms)\n", took, bound_ms);
	assert_int_equal(waiter.rc, DLOCK_OK);
	assert_true(took <= bound_ms * test_slack_factor());
	assert_true(dlock_fencing_token(waiter.lock) > dead_token);
	assert_taken(&mine, 2, 2);
	assert_int_equal(dlock_release(waiter.lock), DLOCK_OK);
	assert_int_equal(dlock_release(mine.lock), DLOCK_OK);
	close(in_fd);
	close(out_fd);
	owner_close(&mine);
	owner_close(&waiter);
	return took;
}

int test_permits_worker_main(int argc, char **argv)
{
	if (argc >= 10 && strcmp(argv[2], "permits") == 0)
		return test_permits_worker(argv + 3);
	if (argc >= 6 && strcmp(argv[2], "permit-hold") == 0)
		return test_permit_hold_worker(argv + 3);
	return 64;
}
