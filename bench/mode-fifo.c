/* SPDX-License-Identifier: MIT */
/*
 * fifo: are waiters granted the lock in the order they arrived?
 *
 * The parent holds the lock and starts W waiter processes (this program
 * re-executed as "fifo-waiter"), each with its own client.  Once all are
 * connected it lets them queue one at a time: waiter i is told to acquire
 * only after the server shows waiter i-1 queued — Redis: the entries of
 * dlock's wait queue, or the subscribers of its release channel where
 * there is no queue (bench_redis_queued()); ZooKeeper: the children of
 * the lock node.  Where the server shows nothing (the file backend, or a
 * Redis on which neither count moves within QUEUE_WAIT_NS) a generous
 * delay stands in for the check, and the result says so ("arrival":
 * "delay").  Then the parent releases.  Each waiter reads the monotonic
 * clock when its acquire returns, holds HOLD_NS, releases and exits; the
 * holds cannot overlap, so sorting the waiters by those times gives the
 * grant order.  An inversion is a pair of waiters granted in the opposite
 * order of their arrival; none means first come, first served.
 *
 * --waiters gives W (16 unless given), --count the trials per W (3).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

#define HOLD_NS 1000000LL            /* each waiter's hold */
#define POLL_NS 5000000LL            /* between two looks at the queue */
#define SETTLE_NS 50000000LL         /* a channel count must hold this long */
#define QUEUE_WAIT_NS 5000000000LL   /* before falling back to the delay */
#define ARRIVAL_DELAY_NS 200000000LL /* the delay between two arrivals */

/* fifo-waiter URI RESOURCE: connect, say ready, wait for the go, acquire,
 * report when, hold, release. */
int bench_fifo_worker(int argc, char **argv)
{
	dlock_client *client;
	dlock_lock *lock;
	int64_t t = 0;
	char go;
	int rc;

	if (argc != 3)
		bench_fail("fifo-waiter: wrong arguments");
	/* Connected before the parent starts counting arrivals. */
	bench_lock_open(argv[1], argv[2], true, &client, &lock);
	if (bench_write_full(BENCH_FD_OUT, &t, sizeof(t)) != 0 ||
	    bench_read_full(BENCH_FD_IN, &go, 1, BENCH_PIPE_TIMEOUT_MS) != 0)
		bench_fail("fifo-waiter: lost the parent");
	if ((rc = dlock_acquire(lock, BENCH_ACQUIRE_WAIT_MS)) != DLOCK_OK)
		bench_fail_dlock("fifo-waiter acquire", rc);
	t = bench_now_ns();
	bench_sleep_ns(HOLD_NS);
	if ((rc = dlock_release(lock)) != DLOCK_OK)
		bench_fail_dlock("fifo-waiter release", rc);
	if (bench_write_full(BENCH_FD_OUT, &t, sizeof(t)) != 0)
		bench_fail("fifo-waiter: lost the parent");
	dlock_lock_free(lock);
	dlock_client_free(client);
	return 0;
}

/* How the arrivals of a run are told apart: by a count on the server
 * (what bench_floor.queued names), or by a delay where it shows none. */
typedef struct fifo_arrivals {
	bench_floor *floor;
	const char *resource;
	const char *how; /* "queue", "channel", "children" or "delay" */
} fifo_arrivals;

/* Wait until the server shows n waiters queued.  A count of channel
 * subscribers must hold for SETTLE_NS: a dlock with a wait queue may
 * subscribe before it queues, and its queue then takes over the count. */
static void await_queued(fifo_arrivals *a, int n)
{
	int64_t until = bench_now_ns() + QUEUE_WAIT_NS;
	int64_t held_since = 0;

	if (!a->floor->queued || strcmp(a->how, "delay") == 0) {
		a->how = "delay";
		bench_sleep_ns(ARRIVAL_DELAY_NS);
		return;
	}
	for (;;) {
		const char *how = "";
		int queued = a->floor->queued(a->floor, a->resource, &how);
		int64_t now = bench_now_ns();

		if (queued >= n && strcmp(how, "channel") != 0) {
			a->how = how;
			return;
		}
		if (queued >= n && held_since && now - held_since >= SETTLE_NS) {
			a->how = how;
			return;
		}
		if (queued >= n && !held_since)
			held_since = now;
		if (queued < n)
			held_since = 0;
		if (now > until) {
			fprintf(stderr, "dlock-bench: fifo: the server shows %d of %d waiters queued after %lld s; "
			                "a delay of %lld ms between arrivals stands in from now on\n",
			        queued, n, QUEUE_WAIT_NS / 1000000000, ARRIVAL_DELAY_NS / 1000000);
			a->how = "delay";
			return;
		}
		bench_sleep_ns(POLL_NS);
	}
}

/* Pairs granted in the opposite order of their arrival. */
static int inversions(const int64_t *granted, int n)
{
	int count = 0;

	for (int i = 0; i < n; i++)
		for (int j = i + 1; j < n; j++)
			if (granted[j] < granted[i])
				count++;
	return count;
}

/* The arrival numbers in grant order, "0 1 2 ...". */
static void grant_order(const int64_t *granted, int n, char *buf, size_t len)
{
	size_t used = 0;
	bool *taken = calloc((size_t)n, sizeof(*taken));

	if (!taken)
		bench_fail("out of memory");
	buf[0] = '\0';
	for (int k = 0; k < n; k++) {
		int first = -1;

		for (int i = 0; i < n; i++)
			if (!taken[i] && (first < 0 || granted[i] < granted[first]))
				first = i;
		taken[first] = true;
		if (used < len)
			used += (size_t)snprintf(buf + used, len - used, k ? " %d" : "%d", first);
	}
	free(taken);
}

/* One trial with w waiters on the held lock; returns its inversions. */
static int trial(const bench_opts *o, dlock_lock *lock, fifo_arrivals *a, int w, int number)
{
	bench_worker *workers = calloc((size_t)w, sizeof(*workers));
	int64_t *granted = calloc((size_t)w, sizeof(*granted));
	char order[1024];
	bench_result r;
	int rc, inv;

	if (!workers || !granted)
		bench_fail("out of memory");
	for (int i = 0; i < w; i++) {
		char *argv[] = { "fifo-waiter", (char *)o->target.uri, (char *)a->resource, NULL };
		int64_t ready;

		bench_worker_start(argv, &workers[i]);
		if (bench_read_full(workers[i].out_fd, &ready, sizeof(ready), BENCH_PIPE_TIMEOUT_MS) != 0)
			bench_fail("fifo: waiter %d failed to start (see above)", i);
	}
	for (int i = 0; i < w; i++) {
		char go = 'G';

		if (bench_write_full(workers[i].in_fd, &go, 1) != 0)
			bench_fail("fifo: waiter %d is gone", i);
		await_queued(a, i + 1);
	}
	if ((rc = dlock_release(lock)) != DLOCK_OK)
		bench_fail_dlock("release", rc);
	for (int i = 0; i < w; i++) {
		int status;

		if (bench_read_full(workers[i].out_fd, &granted[i], sizeof(granted[i]), BENCH_PIPE_TIMEOUT_MS) != 0)
			bench_fail("fifo: waiter %d failed (see above)", i);
		status = bench_worker_finish(&workers[i], 30000);
		if (status < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
			bench_fail("fifo: waiter %d did not exit cleanly", i);
	}
	inv = inversions(granted, w);
	grant_order(granted, w, order, sizeof(order));
	printf("  trial %d: %d waiters, arrival told by %s; in order: %s, %d inversions; grant order %s\n", number,
	       w, a->how, inv ? "no" : "yes", inv, order);
	bench_result_begin(&r, o, "fifo", "dlock");
	bench_result_int(&r, "waiters", w);
	bench_result_int(&r, "trial", number);
	bench_result_str(&r, "arrival", a->how);
	bench_result_int(&r, "inversions", inv);
	bench_result_int(&r, "max_inversions", (int64_t)w * (w - 1) / 2);
	bench_result_str(&r, "in_order", inv ? "no" : "yes");
	bench_result_str(&r, "grant_order", order);
	bench_result_emit(&r, o);
	free(workers);
	free(granted);
	/* The lock back, for the next trial. */
	if ((rc = dlock_acquire(lock, BENCH_ACQUIRE_WAIT_MS)) != DLOCK_OK)
		bench_fail_dlock("re-acquire", rc);
	return inv;
}

int bench_fifo(const bench_opts *o)
{
	dlock_client *client;
	dlock_lock *lock;
	char resource[128];
	const char *resources[1] = { resource };
	fifo_arrivals a = { .resource = resource, .how = "" };
	int rc;

	bench_resource(resource, sizeof(resource), "fifo", getpid());
	/* The floor's connection or session asks the server for the queue. */
	a.floor = bench_floor_open(&o->target, (int)getpid(), true);
	bench_lock_open(o->target.uri, resource, false, &client, &lock);
	if ((rc = dlock_acquire(lock, BENCH_ACQUIRE_WAIT_MS)) != DLOCK_OK)
		bench_fail_dlock("acquire", rc);
	printf("fifo on %s (%s): waiters in separate processes queue one after another; grant order against "
	       "arrival order\n",
	       o->target.label, o->target.uri);
	for (int k = 0; k < o->n_waiter_sets; k++) {
		int total = 0;

		for (int t = 1; t <= o->count; t++)
			total += trial(o, lock, &a, o->waiters[k], t);
		printf("  %d waiters, %d trials: in order: %s, %d inversions in all\n", o->waiters[k], o->count,
		       total ? "no" : "yes", total);
	}
	if ((rc = dlock_release(lock)) != DLOCK_OK)
		bench_fail_dlock("release", rc);
	dlock_lock_free(lock);
	dlock_client_free(client);
	bench_floor_close(a.floor);
	bench_forget(&o->target, resources, 1);
	return 0;
}
