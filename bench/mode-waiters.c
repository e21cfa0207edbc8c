/* SPDX-License-Identifier: MIT */
/*
 * waiters: what happens when many wait on one resource.
 *
 * For each W of --waiters: W waiter threads in one child process (this
 * program re-executed as "waiters-child"), each with its own client — its
 * own connections or session, so the server sees W separate contenders —
 * and the holder in the parent.  Every contender loops: acquire, hold
 * --hold-us, release, and reports (acquire time, release time) on the
 * monotonic clock.  Sorting the holds by acquire time gives the handoffs:
 * the next acquire minus the previous release.
 *
 * The measured window starts when every waiter has connected, queued, and
 * the parent releases for the first time, and ends after --count
 * handoffs.  The server's counters (server-stats.c) are read at both ends
 * of the window, so the work per handoff excludes connecting, queueing
 * and tearing down; the handoffs counted are those whose acquire falls
 * between the two readings (within one handoff of exact).
 *
 * The same window bounds the clients' CPU time (user + system, from
 * getrusage): the child's, read when the parent marks the start and the
 * stop, and the parent's own (the holder with the dlock threads of its
 * client).  Per handoff it is the work of the lock's clients, the one
 * measure of work the file backend has (no server); it includes the
 * benchmark's own pipe traffic, one record per hold.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

typedef struct hold_record {
	int64_t acq_ns, rel_ns;
} hold_record;

/* Records the child writes that are not holds: ready (and marked), and
 * its CPU time over the window in rel_ns, the last record it writes. */
#define RECORD_READY (-1)
#define RECORD_CPU (-3)

/* User + system CPU time of this process so far. */
static int64_t cpu_ns(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_SELF, &ru) != 0)
		bench_fail("getrusage failed");
	return ((int64_t)ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000 +
	       ((int64_t)ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000;
}

/* Acquire, hold, release; the record of the hold.  false when canceled. */
static bool hold_once(dlock_lock *lock, int hold_us, hold_record *rec)
{
	int rc = dlock_acquire(lock, BENCH_ACQUIRE_WAIT_MS);

	if (rc == DLOCK_ECANCELED)
		return false;
	if (rc != DLOCK_OK)
		bench_fail_dlock("waiters acquire", rc);
	rec->acq_ns = bench_now_ns();
	bench_sleep_ns((int64_t)hold_us * 1000);
	rec->rel_ns = bench_now_ns();
	if ((rc = dlock_release(lock)) != DLOCK_OK)
		bench_fail_dlock("waiters release", rc);
	return true;
}

/* ---- the child: W waiters ---- */

typedef struct waiter_thread {
	pthread_t thread;
	const char *uri, *resource;
	int hold_us;
	pthread_barrier_t *warm, *go;
	atomic_bool *stop;
	atomic_bool done;
	dlock_client *client;
	dlock_lock *lock;
} waiter_thread;

static void *waiter_loop(void *arg)
{
	waiter_thread *t = arg;
	hold_record rec;
	int rc;

	if ((rc = dlock_client_new(t->uri, &t->client)) != DLOCK_OK)
		bench_fail_dlock("client", rc);
	if ((rc = dlock_lock_new(t->client, t->resource, &t->lock)) != DLOCK_OK)
		bench_fail_dlock("lock", rc);
	/* Connect (and warm up) before the parent holds the lock. */
	hold_once(t->lock, 0, &rec);
	pthread_barrier_wait(t->warm);
	pthread_barrier_wait(t->go);
	while (!atomic_load(t->stop) && hold_once(t->lock, t->hold_us, &rec))
		if (bench_write_full(BENCH_FD_OUT, &rec, sizeof(rec)) != 0)
			break;
	atomic_store(&t->done, true);
	return NULL;
}

/* waiters-child URI RESOURCE W HOLD_US */
int bench_waiters_worker(int argc, char **argv)
{
	int n, hold_us;
	waiter_thread *t;
	pthread_barrier_t warm, go;
	atomic_bool stop = false;
	hold_record ready = { RECORD_READY, RECORD_READY }, cpu = { RECORD_CPU, 0 };
	int64_t until, cpu_start;
	char cmd;

	if (argc != 5)
		bench_fail("waiters-child: wrong arguments");
	n = atoi(argv[3]);
	hold_us = atoi(argv[4]);
	t = calloc((size_t)n, sizeof(*t));
	if (!t || n < 1)
		bench_fail("waiters-child: bad count");
	pthread_barrier_init(&warm, NULL, (unsigned)n + 1);
	pthread_barrier_init(&go, NULL, (unsigned)n + 1);
	for (int i = 0; i < n; i++) {
		t[i].uri = argv[1];
		t[i].resource = argv[2];
		t[i].hold_us = hold_us;
		t[i].warm = &warm;
		t[i].go = &go;
		t[i].stop = &stop;
		if (pthread_create(&t[i].thread, NULL, waiter_loop, &t[i]) != 0)
			bench_fail("pthread_create failed");
	}
	pthread_barrier_wait(&warm);
	if (bench_write_full(BENCH_FD_OUT, &ready, sizeof(ready)) != 0 ||
	    bench_read_full(BENCH_FD_IN, &cmd, 1, BENCH_PIPE_TIMEOUT_MS) != 0)
		bench_fail("waiters-child: lost the parent");
	pthread_barrier_wait(&go);
	/* The parent marks the start of the window once everyone is queued,
	 * then says stop (or goes away). */
	if (bench_read_full(BENCH_FD_IN, &cmd, 1, BENCH_PIPE_TIMEOUT_MS) != 0)
		bench_fail("waiters-child: lost the parent");
	cpu_start = cpu_ns();
	if (bench_write_full(BENCH_FD_OUT, &ready, sizeof(ready)) != 0)
		bench_fail("waiters-child: lost the parent");
	bench_read_full(BENCH_FD_IN, &cmd, 1, BENCH_PIPE_TIMEOUT_MS);
	cpu.rel_ns = cpu_ns() - cpu_start;
	atomic_store(&stop, true);
	/* Cancel until every waiter is out: an acquire that starts just after
	 * a cancel waits normally, so cancel again. */
	until = bench_now_ns() + (int64_t)BENCH_ACQUIRE_WAIT_MS * 1000000;
	for (bool all = false; !all && bench_now_ns() < until; bench_sleep_ns(10000000)) {
		all = true;
		for (int i = 0; i < n; i++) {
			if (!atomic_load(&t[i].done)) {
				all = false;
				dlock_lock_cancel(t[i].lock);
			}
		}
	}
	for (int i = 0; i < n; i++) {
		pthread_join(t[i].thread, NULL);
		dlock_lock_free(t[i].lock);
		dlock_client_free(t[i].client);
	}
	pthread_barrier_destroy(&warm);
	pthread_barrier_destroy(&go);
	free(t);
	if (bench_write_full(BENCH_FD_OUT, &cpu, sizeof(cpu)) != 0)
		bench_fail("waiters-child: lost the parent");
	return 0;
}

/* ---- the parent: the holder, the records, the window ---- */

typedef struct waiters_run {
	const bench_opts *o;
	int waiters;
	pthread_mutex_t mu;
	hold_record *recs;
	size_t n, cap;
	size_t in_window; /* holds acquired after the first release */
	int64_t start_ns; /* the first release */
	bool stopping;
	atomic_bool stop;
	int64_t before_ns, after_ns; /* midpoints of the two readings */
	int64_t cpu_before_ns, cpu_after_ns; /* the parent's CPU time */
	int64_t child_cpu_ns;                /* the child's in the window, -1 until known */
	bench_server_stats before, after;
	dlock_lock *lock;
	bench_worker w;
} waiters_run;

/* Read the server's counters; *mid_ns is the middle of the reading. */
static void read_stats(waiters_run *run, bench_server_stats *st, int64_t *mid_ns)
{
	int64_t t0 = bench_now_ns();

	bench_server_stats_read(&run->o->target, st);
	*mid_ns = t0 + (bench_now_ns() - t0) / 2;
}

/* Once --count handoffs are in: read the counters, stop everyone. */
static void stop_all(waiters_run *run)
{
	char cmd = 'S';

	run->cpu_after_ns = cpu_ns();
	read_stats(run, &run->after, &run->after_ns);
	atomic_store(&run->stop, true);
	bench_write_full(run->w.in_fd, &cmd, 1);
	dlock_lock_cancel(run->lock);
}

static void add_record(waiters_run *run, const hold_record *rec)
{
	bool trigger = false;

	pthread_mutex_lock(&run->mu);
	if (run->n == run->cap) {
		size_t cap = run->cap ? run->cap * 2 : 1024;
		hold_record *bigger = realloc(run->recs, cap * sizeof(*bigger));

		if (!bigger)
			bench_fail("out of memory");
		run->recs = bigger;
		run->cap = cap;
	}
	run->recs[run->n++] = *rec;
	if (run->start_ns && rec->acq_ns > run->start_ns)
		run->in_window++;
	if (!run->stopping && run->in_window >= (size_t)run->o->count) {
		run->stopping = true;
		trigger = true;
	}
	pthread_mutex_unlock(&run->mu);
	if (trigger)
		stop_all(run);
}

static void *reader(void *arg)
{
	waiters_run *run = arg;
	hold_record rec;

	while (bench_read_full(run->w.out_fd, &rec, sizeof(rec), BENCH_PIPE_TIMEOUT_MS) == 0) {
		if (rec.acq_ns == RECORD_CPU)
			run->child_cpu_ns = rec.rel_ns;
		else
			add_record(run, &rec);
	}
	/* The child is gone: if that was early, the holder must stop too. */
	atomic_store(&run->stop, true);
	dlock_lock_cancel(run->lock);
	return NULL;
}

static int cmp_acq(const void *a, const void *b)
{
	const hold_record *x = a, *y = b;

	return (x->acq_ns > y->acq_ns) - (x->acq_ns < y->acq_ns);
}

static void report(waiters_run *run)
{
	const bench_opts *o = run->o;
	bench_samples lat = { 0 };
	bench_summary s;
	bench_result r;
	size_t overlaps = 0;

	qsort(run->recs, run->n, sizeof(*run->recs), cmp_acq);
	for (size_t i = 0; i + 1 < run->n; i++) {
		const hold_record *prev = &run->recs[i], *next = &run->recs[i + 1];

		if (prev->rel_ns < run->start_ns || next->acq_ns > run->after_ns)
			continue;
		if (next->acq_ns < prev->rel_ns)
			overlaps++;
		else
			bench_samples_add(&lat, next->acq_ns - prev->rel_ns);
	}
	s = bench_summarize(&lat);
	printf("waiters on %s (%s): %d waiters (each its own client, in one process) + the holder, "
	       "hold %d us, %zu handoffs\n",
	       o->target.label, o->target.uri, run->waiters, o->hold_us, s.n);
	bench_print_header();
	bench_print_row("handoff", &s);
	if (overlaps)
		printf("  WARNING: %zu holds overlapped the previous one (mutual exclusion broken?)\n", overlaps);
	bench_result_begin(&r, o, "waiters", "dlock");
	bench_result_int(&r, "waiters", run->waiters);
	bench_result_int(&r, "hold_us", o->hold_us);
	bench_result_int(&r, "handoffs", (int64_t)s.n);
	bench_result_int(&r, "overlaps", (int64_t)overlaps);
	bench_result_summary(&r, &s);
	bench_server_stats_report(&o->target, &run->before, &run->after, (double)(s.n + overlaps), "handoff",
	                          &r);
	if (run->child_cpu_ns >= 0 && s.n + overlaps > 0) {
		double cpu_us = (double)(run->child_cpu_ns + run->cpu_after_ns - run->cpu_before_ns) / 1000.0 /
		                (double)(s.n + overlaps);

		bench_result_num(&r, "cpu_us_per_handoff", cpu_us);
		printf("  client CPU per handoff (user + system, the waiters' process and the holder's): %.1f us\n",
		       cpu_us);
	}
	bench_result_emit(&r, o);
	bench_samples_free(&lat);
}

static void run_one(const bench_opts *o, int waiters)
{
	waiters_run run;
	dlock_client *client;
	pthread_t reader_thread;
	hold_record rec, ready;
	char resource[160], base[128], w_text[16], hold_text[16], go = 'G';
	int rc, status;

	memset(&run, 0, sizeof(run));
	run.o = o;
	run.waiters = waiters;
	run.child_cpu_ns = -1;
	pthread_mutex_init(&run.mu, NULL);
	bench_resource(base, sizeof(base), "waiters", getpid());
	snprintf(resource, sizeof(resource), "%s/%d", base, waiters);
	snprintf(w_text, sizeof(w_text), "%d", waiters);
	snprintf(hold_text, sizeof(hold_text), "%d", o->hold_us);
	{
		char *argv[] = { "waiters-child", (char *)o->target.uri, resource, w_text, hold_text, NULL };

		bench_worker_start(argv, &run.w);
	}
	if (bench_read_full(run.w.out_fd, &ready, sizeof(ready), BENCH_PIPE_TIMEOUT_MS) != 0)
		bench_fail("waiters: the child failed to start (see above)");
	if ((rc = dlock_client_new(o->target.uri, &client)) != DLOCK_OK)
		bench_fail_dlock("client", rc);
	if ((rc = dlock_lock_new(client, resource, &run.lock)) != DLOCK_OK)
		bench_fail_dlock("lock", rc);
	if ((rc = dlock_acquire(run.lock, BENCH_ACQUIRE_WAIT_MS)) != DLOCK_OK)
		bench_fail_dlock("acquire", rc);
	rec.acq_ns = bench_now_ns();
	if (bench_write_full(run.w.in_fd, &go, 1) != 0)
		bench_fail("waiters: the child is gone");
	/* Let every waiter queue up behind the holder: until the server sees
	 * them all (subscribed, or watching), at most 30 s; where it cannot
	 * tell (file), a time long enough for inotify watches. */
	bench_sleep_ns(100000000LL);
	for (int64_t until = bench_now_ns() + 30000000000LL;;) {
		int queued = bench_server_waiters(&o->target, resource);

		if (queued < 0 || queued >= waiters)
			break;
		if (bench_now_ns() > until)
			bench_fail("waiters: only %d of %d waiters queued within 30 s", queued, waiters);
		bench_sleep_ns(20000000LL);
	}
	bench_sleep_ns(o->target.kind == BENCH_FILE ? 100000000LL + (int64_t)waiters * 2000000LL : 50000000LL);
	if (bench_write_full(run.w.in_fd, &go, 1) != 0 ||
	    bench_read_full(run.w.out_fd, &ready, sizeof(ready), BENCH_PIPE_TIMEOUT_MS) != 0 ||
	    ready.acq_ns != RECORD_READY)
		bench_fail("waiters: the child did not mark the window");
	read_stats(&run, &run.before, &run.before_ns);
	run.cpu_before_ns = cpu_ns();
	if (pthread_create(&reader_thread, NULL, reader, &run) != 0)
		bench_fail("pthread_create failed");

	pthread_mutex_lock(&run.mu);
	rec.rel_ns = run.start_ns = bench_now_ns();
	pthread_mutex_unlock(&run.mu);
	if ((rc = dlock_release(run.lock)) != DLOCK_OK)
		bench_fail_dlock("release", rc);
	add_record(&run, &rec);
	while (!atomic_load(&run.stop) && hold_once(run.lock, o->hold_us, &rec))
		add_record(&run, &rec);

	pthread_join(reader_thread, NULL);
	status = bench_worker_finish(&run.w, 60000);
	if (status < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		bench_fail("waiters: the child did not exit cleanly");
	if (!run.stopping)
		bench_fail("waiters: the records stopped before %d handoffs", o->count);
	report(&run);
	dlock_lock_free(run.lock);
	dlock_client_free(client);
	{
		const char *resources[1] = { resource };

		bench_forget(&o->target, resources, 1);
	}
	free(run.recs);
	pthread_mutex_destroy(&run.mu);
}

int bench_waiters(const bench_opts *o)
{
	for (int i = 0; i < o->n_waiter_sets; i++)
		run_one(o, o->waiters[i]);
	return 0;
}
