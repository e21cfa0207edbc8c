/* SPDX-License-Identifier: MIT */
/*
 * throughput: acquisitions per second with many contenders.
 *
 * --procs worker processes (this program re-executed as "tp-worker"),
 * each with one client and --threads threads.  Each thread has its own
 * lock handle on every resource "bench/tp/<pid>/<k>", k < --resources, and
 * loops acquire (waiting) + release, visiting resources i, i+1, i+2, ...
 * (mod R) where i is its index among all threads of all processes — the
 * workload of the peer drivers in bench/peers/, so the counts compare.  The
 * parent starts every worker at the same instant on the monotonic clock
 * (shared by all processes of the machine); each counts the pairs it
 * completes in the --seconds that follow a 1 s warm-up, and writes its
 * count through a pipe.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

#define WARMUP_NS 1000000000LL

/* ---- the worker ---- */

typedef struct tp_thread {
	pthread_t thread;
	dlock_lock **locks; /* one per resource */
	int n_locks, next;
	int64_t start_ns, measure_ns, end_ns;
	int64_t count;
} tp_thread;

static void *tp_loop(void *arg)
{
	tp_thread *t = arg;
	int64_t now = bench_now_ns();

	bench_sleep_ns(t->start_ns - now);
	do {
		dlock_lock *lock = t->locks[t->next];
		int rc;

		t->next = (t->next + 1) % t->n_locks;
		if ((rc = dlock_acquire(lock, BENCH_ACQUIRE_WAIT_MS)) != DLOCK_OK)
			bench_fail_dlock("throughput acquire", rc);
		if ((rc = dlock_release(lock)) != DLOCK_OK)
			bench_fail_dlock("throughput release", rc);
		now = bench_now_ns();
		if (now >= t->measure_ns && now < t->end_ns)
			t->count++;
	} while (now < t->end_ns);
	return NULL;
}

/* tp-worker URI PREFIX PROC THREADS RESOURCES SECONDS */
int bench_throughput_worker(int argc, char **argv)
{
	const char *uri, *prefix;
	int proc, threads, resources;
	double seconds;
	dlock_client *client;
	tp_thread *t;
	int64_t start = 0, total = 0;
	char ready = 'R';
	int rc;

	if (argc != 7)
		bench_fail("tp-worker: wrong arguments");
	uri = argv[1];
	prefix = argv[2];
	proc = atoi(argv[3]);
	threads = atoi(argv[4]);
	resources = atoi(argv[5]);
	seconds = atof(argv[6]);
	t = calloc((size_t)threads, sizeof(*t));
	if (!t)
		bench_fail("out of memory");
	if ((rc = dlock_client_new(uri, &client)) != DLOCK_OK)
		bench_fail_dlock("client", rc);
	for (int i = 0; i < threads; i++) {
		t[i].locks = calloc((size_t)resources, sizeof(*t[i].locks));
		if (!t[i].locks)
			bench_fail("out of memory");
		t[i].n_locks = resources;
		t[i].next = (proc * threads + i) % resources;
		for (int k = 0; k < resources; k++) {
			char resource[128];

			snprintf(resource, sizeof(resource), "%s/%d", prefix, k);
			if ((rc = dlock_lock_new(client, resource, &t[i].locks[k])) != DLOCK_OK)
				bench_fail_dlock("lock", rc);
		}
	}
	if (bench_write_full(BENCH_FD_OUT, &ready, 1) != 0 ||
	    bench_read_full(BENCH_FD_IN, &start, sizeof(start), BENCH_PIPE_TIMEOUT_MS) != 0)
		bench_fail("tp-worker: lost the parent");
	for (int i = 0; i < threads; i++) {
		t[i].start_ns = start;
		t[i].measure_ns = start + WARMUP_NS;
		t[i].end_ns = t[i].measure_ns + (int64_t)(seconds * 1e9);
		if (pthread_create(&t[i].thread, NULL, tp_loop, &t[i]) != 0)
			bench_fail("pthread_create failed");
	}
	for (int i = 0; i < threads; i++) {
		pthread_join(t[i].thread, NULL);
		total += t[i].count;
		for (int k = 0; k < resources; k++)
			dlock_lock_free(t[i].locks[k]);
		free(t[i].locks);
	}
	dlock_client_free(client);
	free(t);
	if (bench_write_full(BENCH_FD_OUT, &total, sizeof(total)) != 0)
		bench_fail("tp-worker: lost the parent");
	return 0;
}

/* ---- the parent ---- */

int bench_throughput(const bench_opts *o)
{
	bench_worker *w = calloc((size_t)o->procs, sizeof(*w));
	char prefix[128], threads[16], resources[16], seconds[32];
	int64_t start, total = 0;
	double per_s;
	bench_result r;

	if (!w)
		bench_fail("out of memory");
	bench_resource(prefix, sizeof(prefix), "tp", getpid());
	snprintf(threads, sizeof(threads), "%d", o->threads);
	snprintf(resources, sizeof(resources), "%d", o->resources);
	snprintf(seconds, sizeof(seconds), "%g", o->seconds);
	for (int p = 0; p < o->procs; p++) {
		char proc[16];
		char *argv[] = { "tp-worker", (char *)o->target.uri, prefix, proc, threads, resources, seconds,
			         NULL };

		snprintf(proc, sizeof(proc), "%d", p);
		bench_worker_start(argv, &w[p]);
	}
	for (int p = 0; p < o->procs; p++) {
		char ready;

		if (bench_read_full(w[p].out_fd, &ready, 1, BENCH_PIPE_TIMEOUT_MS) != 0)
			bench_fail("throughput: worker %d failed to start", p);
	}
	start = bench_now_ns() + 50000000; /* 50 ms: time for every worker to read it */
	for (int p = 0; p < o->procs; p++)
		if (bench_write_full(w[p].in_fd, &start, sizeof(start)) != 0)
			bench_fail("throughput: worker %d is gone", p);
	for (int p = 0; p < o->procs; p++) {
		int64_t count;
		int timeout_ms = (int)(o->seconds * 1000) + BENCH_PIPE_TIMEOUT_MS;

		if (bench_read_full(w[p].out_fd, &count, sizeof(count), timeout_ms) != 0)
			bench_fail("throughput: worker %d failed (see above)", p);
		total += count;
	}
	for (int p = 0; p < o->procs; p++) {
		int status = bench_worker_finish(&w[p], 30000);

		if (status < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
			bench_fail("throughput: worker %d did not exit cleanly", p);
	}
	{
		char(*names)[160] = calloc((size_t)o->resources, sizeof(*names));
		const char **list = calloc((size_t)o->resources, sizeof(*list));

		if (!names || !list)
			bench_fail("out of memory");
		for (int k = 0; k < o->resources; k++) {
			snprintf(names[k], sizeof(names[k]), "%s/%d", prefix, k);
			list[k] = names[k];
		}
		bench_forget(&o->target, list, o->resources);
		free(names);
		free(list);
	}
	per_s = (double)total / o->seconds;
	printf("throughput on %s (%s): %d processes x %d threads over %d resources, %g s after 1 s "
	       "warm-up\n  %lld acquisitions, %.0f per second\n",
	       o->target.label, o->target.uri, o->procs, o->threads, o->resources, o->seconds,
	       (long long)total, per_s);
	bench_result_begin(&r, o, "throughput", "dlock");
	bench_result_int(&r, "procs", o->procs);
	bench_result_int(&r, "threads", o->threads);
	bench_result_int(&r, "resources", o->resources);
	bench_result_num(&r, "seconds", o->seconds);
	bench_result_int(&r, "ops", total);
	bench_result_num(&r, "ops_per_s", per_s);
	bench_result_emit(&r, o);
	free(w);
	return 0;
}
