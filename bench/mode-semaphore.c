/* SPDX-License-Identifier: MIT */
/*
 * semaphore: what a semaphore's permit costs, and what N permits carry.
 *
 *   1. Uncontended: interleaved rounds (rounds.c) of acquire+release of a
 *      permit of a semaphore of 4 ("semaphore"), of a lock on the same
 *      backend ("mutex"), and of the floor the mutex is measured against
 *      (the fenced floor on Redis, the pipelined one on ZooKeeper, the
 *      bare one for files): semaphore/mutex is the figure.
 *   2. Contended: N = 4 permits and 2N threads (one client, each thread
 *      an owner of its own) acquiring and releasing for --seconds after a
 *      1 s warm-up, each holding for --hold us: acquisitions per second,
 *      and the most holders seen at once, which must be N exactly (more
 *      fails the run).
 */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#include "bench.h"

#define PERMITS 4

enum { SUBJECT_SEMAPHORE, SUBJECT_MUTEX, SUBJECT_FLOOR, SUBJECTS };

static const char *const subject_names[SUBJECTS] = { "semaphore", "mutex", "floor" };

typedef struct sem_run {
	dlock_lock *sem, *mutex;
	bench_floor *floor;
	void (*floor_pair)(bench_floor *f);
} sem_run;

static void run_one(void *ctx, int subject)
{
	sem_run *run = ctx;

	if (subject == SUBJECT_SEMAPHORE)
		bench_dlock_pair(run->sem);
	else if (subject == SUBJECT_MUTEX)
		bench_dlock_pair(run->mutex);
	else
		run->floor_pair(run->floor);
}

/* The contended part's shared state. */
typedef struct contended {
	dlock_client *client;
	const char *resource;
	int hold_us;
	int64_t start_ns, end_ns;   /* the measured window */
	int inside, most;           /* atomic */
	long acquisitions;          /* atomic, within the window */
} contended;

static void *contender(void *data)
{
	contended *c = data;
	dlock_lock *lock;
	int rc;

	if ((rc = dlock_lock_new(c->client, c->resource, &lock)) != DLOCK_OK ||
	    (rc = dlock_lock_set_permits(lock, PERMITS)) != DLOCK_OK)
		bench_fail_dlock("semaphore handle", rc);
	while (bench_now_ns() < c->end_ns) {
		int now;

		if ((rc = dlock_acquire(lock, BENCH_ACQUIRE_WAIT_MS)) != DLOCK_OK)
			bench_fail_dlock("acquire", rc);
		now = __atomic_add_fetch(&c->inside, 1, __ATOMIC_SEQ_CST);
		for (int most = __atomic_load_n(&c->most, __ATOMIC_SEQ_CST); now > most &&
		     !__atomic_compare_exchange_n(&c->most, &most, now, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);)
			;
		if (bench_now_ns() >= c->start_ns)
			__atomic_add_fetch(&c->acquisitions, 1, __ATOMIC_SEQ_CST);
		if (c->hold_us > 0)
			bench_sleep_ns((int64_t)c->hold_us * 1000);
		__atomic_sub_fetch(&c->inside, 1, __ATOMIC_SEQ_CST);
		if ((rc = dlock_release(lock)) != DLOCK_OK)
			bench_fail_dlock("release", rc);
	}
	dlock_lock_free(lock);
	return NULL;
}

static void run_contended(const bench_opts *o, const char *resource)
{
	contended c = { 0 };
	pthread_t threads[2 * PERMITS];
	bench_result r;
	double rate;

	if (dlock_client_new(o->target.uri, &c.client) != DLOCK_OK)
		bench_fail("client: %s", dlock_last_error_message());
	c.resource = resource;
	c.hold_us = o->hold_us;
	c.start_ns = bench_now_ns() + 1000000000;
	c.end_ns = c.start_ns + (int64_t)(o->seconds * 1e9);
	for (int i = 0; i < 2 * PERMITS; i++)
		pthread_create(&threads[i], NULL, contender, &c);
	for (int i = 0; i < 2 * PERMITS; i++)
		pthread_join(threads[i], NULL);
	dlock_client_free(c.client);
	rate = (double)c.acquisitions / o->seconds;
	printf("  contended: %d permits, %d threads, hold %d us, %.1f s: %.0f acquisitions/s, at most %d "
	       "holders at once\n", PERMITS, 2 * PERMITS, o->hold_us, o->seconds, rate, c.most);
	bench_result_begin(&r, o, "semaphore", "contended");
	bench_result_int(&r, "permits", PERMITS);
	bench_result_int(&r, "threads", 2 * PERMITS);
	bench_result_int(&r, "hold_us", o->hold_us);
	bench_result_num(&r, "seconds", o->seconds);
	bench_result_num(&r, "acquisitions_per_s", rate);
	bench_result_int(&r, "most_holders", c.most);
	bench_result_emit(&r, o);
	if (c.most > PERMITS)
		bench_fail("semaphore: %d holders at once on %d permits", c.most, PERMITS);
}

int bench_semaphore(const bench_opts *o)
{
	static const int subjects[SUBJECTS] = { SUBJECT_SEMAPHORE, SUBJECT_MUTEX, SUBJECT_FLOOR };
	char sem_resource[128], mutex_resource[128], contended_resource[128];
	const char *resources[3] = { sem_resource, mutex_resource, contended_resource };
	bench_samples samples[SUBJECTS] = { { 0 } };
	bench_summary sum[SUBJECTS];
	dlock_client *client, *client2;
	sem_run run;
	int rc;

	bench_resource(sem_resource, sizeof(sem_resource), "semaphore", getpid());
	bench_resource(mutex_resource, sizeof(mutex_resource), "semaphore-mutex", getpid());
	bench_resource(contended_resource, sizeof(contended_resource), "semaphore-contended", getpid());
	bench_lock_open(o->target.uri, sem_resource, true, &client, &run.sem);
	if ((rc = dlock_lock_set_permits(run.sem, PERMITS)) != DLOCK_OK)
		bench_fail_dlock("permits", rc);
	bench_lock_open(o->target.uri, mutex_resource, true, &client2, &run.mutex);
	run.floor = bench_floor_open(&o->target, (int)getpid(), true);
	run.floor_pair = run.floor->pair_fenced ? run.floor->pair_fenced
	                 : run.floor->pair_pipelined ? run.floor->pair_pipelined : run.floor->pair;

	bench_rounds(o, subjects, SUBJECTS, run_one, &run, samples);
	for (int k = 0; k < SUBJECTS; k++)
		sum[k] = bench_summarize(&samples[k]);
	printf("semaphore on %s (%s): %d rounds x %d pairs per subject, interleaved, after %d warm-up "
	       "pairs\n", o->target.label, o->target.uri, o->rounds, o->count, o->warmup);
	bench_print_header();
	for (int k = 0; k < SUBJECTS; k++)
		bench_print_row(subject_names[k], &sum[k]);
	printf("  ratio semaphore/mutex: mean %.2f, p50 %.2f; semaphore/floor: mean %.2f\n",
	       sum[SUBJECT_SEMAPHORE].mean_us / sum[SUBJECT_MUTEX].mean_us,
	       sum[SUBJECT_SEMAPHORE].p50_us / sum[SUBJECT_MUTEX].p50_us,
	       sum[SUBJECT_SEMAPHORE].mean_us / sum[SUBJECT_FLOOR].mean_us);
	for (int k = 0; k < SUBJECTS; k++) {
		bench_result r;

		bench_result_begin(&r, o, "semaphore", subject_names[k]);
		bench_result_summary(&r, &sum[k]);
		bench_result_int(&r, "permits", k == SUBJECT_SEMAPHORE ? PERMITS : 1);
		if (k == SUBJECT_SEMAPHORE) {
			bench_result_num(&r, "ratio_mean_to_mutex", sum[k].mean_us / sum[SUBJECT_MUTEX].mean_us);
			bench_result_num(&r, "ratio_mean_to_floor", sum[k].mean_us / sum[SUBJECT_FLOOR].mean_us);
		}
		bench_result_emit(&r, o);
	}
	dlock_lock_free(run.sem);
	dlock_lock_free(run.mutex);
	dlock_client_free(client);
	dlock_client_free(client2);
	bench_floor_close(run.floor);
	run_contended(o, contended_resource);
	bench_forget(&o->target, resources, 3);
	for (int k = 0; k < SUBJECTS; k++)
		bench_samples_free(&samples[k]);
	return 0;
}
