/* SPDX-License-Identifier: MIT */
/* Mutual exclusion check: see test-exclusion.h. */
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
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
#include "test-exclusion.h"
#include "test-util.h"

typedef struct counter_job {
	dlock_client *client;
	const char *resource;
	const char *counter_path;
	const char *tokens_path;
	int rounds;
	bool elect;   /* leaders of an election rather than lock holders */
	int failures; /* atomic */
} counter_job;

static void failed(counter_job *job)
{
	__atomic_add_fetch(&job->failures, 1, __ATOMIC_SEQ_CST);
}

/* Read-modify-write of a number in a file, slowly: not atomic, so any
 * overlap of two holders loses an increment. */
static bool bump(const char *path)
{
	char buf[32] = "0";
	FILE *f = fopen(path, "r");
	long value;

	if (f) {
		if (!fgets(buf, sizeof(buf), f))
			buf[0] = '\0';
		fclose(f);
	}
	value = strtol(buf, NULL, 10);
	g_usleep(200);
	if (!(f = fopen(path, "w")))
		return false;
	fprintf(f, "%ld\n", value + 1);
	return fclose(f) == 0;
}

/* One turn in the critical section: the count bumped and the token
 * appended while holding (the file's order is the entry order). */
static void turn(counter_job *job, uint64_t token)
{
	if (!bump(job->counter_path) || !test_append_token(job->tokens_path, token))
		failed(job);
}

static void *counter_thread(void *data)
{
	counter_job *job = data;
	dlock_lock *lock;

	if (dlock_lock_new(job->client, job->resource, &lock) != DLOCK_OK) {
		failed(job);
		return NULL;
	}
	for (int i = 0; i < job->rounds; i++) {
		if (dlock_acquire(lock, 60000) != DLOCK_OK) {
			failed(job);
			continue;
		}
		turn(job, dlock_fencing_token(lock));
		if (dlock_release(lock) != DLOCK_OK)
			failed(job);
	}
	dlock_lock_free(lock);
	return NULL;
}

/* The same with an election: a leader at a time, each with its id. */
static void *leader_thread(void *data)
{
	counter_job *job = data;
	dlock_election *e;
	char id[64];

	snprintf(id, sizeof(id), "p%d-t%p", (int)getpid(), (void *)&id);
	if (dlock_election_new(job->client, job->resource, id, &e) != DLOCK_OK) {
		failed(job);
		return NULL;
	}
	for (int i = 0; i < job->rounds; i++) {
		if (dlock_election_campaign(e, 60000) != DLOCK_OK) {
			failed(job);
			continue;
		}
		turn(job, dlock_election_fencing_token(e));
		if (dlock_election_resign(e) != DLOCK_OK)
			failed(job);
	}
	dlock_election_free(e);
	return NULL;
}

int test_exclusion_worker(char **argv)
{
	counter_job job = { NULL, argv[1], argv[2], argv[3], atoi(argv[5]),
		            argv[6] && strcmp(argv[6], "elect") == 0, 0 };
	int threads = atoi(argv[4]);

	if (threads <= 0 || job.rounds <= 0 || dlock_client_new(argv[0], &job.client) != DLOCK_OK)
		return 2;
	test_run_threads(threads, job.elect ? leader_thread : counter_thread, &job);
	dlock_client_free(job.client);
	return job.failures ? 3 : 0;
}

static void run(const char *uri, const char *resource, int processes, int threads, int rounds,
                bool elect)
{
	char *dir = g_dir_make_tmp("dlock-excl-XXXXXX", NULL);
	char *counter_path = g_build_filename(dir, "counter", NULL);
	char *tokens_path = g_build_filename(dir, "tokens", NULL);
	char *threads_text = g_strdup_printf("%d", threads);
	char *rounds_text = g_strdup_printf("%d", rounds);
	const char *args[] = { "counter", uri, resource, counter_path, tokens_path, threads_text, rounds_text,
		               elect ? "elect" : NULL, NULL };
	pid_t *pids = g_new(pid_t, processes);
	int *fds = g_new(int, processes);
	char *text = NULL;
	gchar **lines;
	uint64_t last = 0;
	int count = 0;

	assert_non_null(dir);
	for (int i = 0; i < processes; i++)
		pids[i] = test_spawn_worker(args, &fds[i]);
	for (int i = 0; i < processes; i++) {
		assert_int_equal(test_wait_worker(pids[i]), 0);
		close(fds[i]);
	}
	assert_true(g_file_get_contents(counter_path, &text, NULL, NULL));
	assert_int_equal(strtol(text, NULL, 10), processes * threads * rounds);
	g_free(text);
	assert_true(g_file_get_contents(tokens_path, &text, NULL, NULL));
	lines = g_strsplit(text, "\n", -1);
	for (int i = 0; lines[i] && *lines[i]; i++, count++) {
		uint64_t token = g_ascii_strtoull(lines[i], NULL, 10);

		assert_true(token > last);
		last = token;
	}
	assert_int_equal(count, processes * threads * rounds);
	print_message("%d processes x %d threads x %d rounds%s: count exact, %d increasing tokens\n",
	              processes, threads, rounds, elect ? " of leaders" : "", count);
	g_strfreev(lines);
	g_free(text);
	unlink(counter_path);
	unlink(tokens_path);
	rmdir(dir);
	g_free(pids);
	g_free(fds);
	g_free(threads_text);
	g_free(rounds_text);
	g_free(counter_path);
	g_free(tokens_path);
	g_free(dir);
}

void test_exclusion_run(const char *uri, const char *resource, int processes, int threads, int rounds)
{
	run(uri, resource, processes, threads, rounds, false);
}

void test_exclusion_run_elections(const char *uri, const char *name, int processes, int threads,
                                  int rounds)
{
	run(uri, name, processes, threads, rounds, true);
}
