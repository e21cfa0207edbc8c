/* SPDX-License-Identifier: MIT */
/*
 * readers: what a read-write lock's readers cost, for each R of --waiters
 * (default 1, 16, 64).
 *
 * First the read path as readers pile up: R - 1 clients hold READ on one
 * resource while one more acquires and releases READ --count times: the
 * latency of that pair and the server's work per pair (Redis commands,
 * ZooKeeper packets), which should not grow with R.  Then the mix: R
 * reader threads and one writer thread (each its own client, so its own
 * owner) loop acquire + release on one resource for --seconds after a 1 s
 * warm-up: reads and writes per second, which shows whether the writer
 * gets its turns among the readers.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "bench.h"

#define WARMUP_NS 1000000000LL
#define PAIR_WARMUP 50

typedef struct owner {
	dlock_client *client;
	dlock_lock *lock;
} owner;

static void owner_open(owner *w, const bench_opts *o, const char *resource, dlock_mode mode)
{
	int rc;

	if ((rc = dlock_client_new(o->target.uri, &w->client)) != DLOCK_OK)
		bench_fail_dlock("client", rc);
	if ((rc = dlock_lock_new(w->client, resource, &w->lock)) != DLOCK_OK)
		bench_fail_dlock("lock", rc);
	if ((rc = dlock_lock_set_mode(w->lock, mode)) != DLOCK_OK)
		bench_fail_dlock("mode", rc);
	/* Acquired on one thread and released on another in the mix. */
	if ((rc = dlock_lock_set_owner(w->lock, DLOCK_OWNER_HANDLE)) != DLOCK_OK)
		bench_fail_dlock("owner", rc);
}

static void owner_close(owner *w)
{
	dlock_lock_free(w->lock);
	dlock_client_free(w->client);
}

static void pair(dlock_lock *lock, const char *what)
{
	int rc;

	if ((rc = dlock_acquire(lock, BENCH_ACQUIRE_WAIT_MS)) != DLOCK_OK)
		bench_fail_dlock(what, rc);
	if ((rc = dlock_release(lock)) != DLOCK_OK)
		bench_fail_dlock(what, rc);
}

/* The read pair with r - 1 other readers holding. */
static void read_path(const bench_opts *o, const char *resource, int r)
{
	owner *held = calloc((size_t)r, sizeof(*held));
	owner reader;
	bench_samples samples = { 0 };
	bench_server_stats before, after;
	bench_summary s;
	bench_result res;

	if (!held)
		bench_fail("out of memory");
	for (int i = 0; i < r - 1; i++) {
		int rc;

		owner_open(&held[i], o, resource, DLOCK_MODE_READ);
		if ((rc = dlock_acquire(held[i].lock, BENCH_ACQUIRE_WAIT_MS)) != DLOCK_OK)
			bench_fail_dlock("background reader", rc);
	}
	owner_open(&reader, o, resource, DLOCK_MODE_READ);
	for (int i = 0; i < PAIR_WARMUP; i++)
		pair(reader.lock, "read pair");
	bench_server_stats_read(&o->target, &before);
	for (int i = 0; i < o->count; i++) {
		int64_t t0 = bench_now_ns();

		pair(reader.lock, "read pair");
		bench_samples_add(&samples, bench_now_ns() - t0);
	}
	bench_server_stats_read(&o->target, &after);
	s = bench_summarize(&samples);
	printf("  R=%-3d read pair: mean %.1f us, p50 %.1f us, p99 %.1f us\n", r, s.mean_us, s.p50_us,
	       s.p99_us);
	bench_result_begin(&res, o, "readers", "dlock");
	bench_result_str(&res, "part", "read-pair");
	bench_result_int(&res, "readers", r);
	bench_result_summary(&res, &s);
	bench_server_stats_report(&o->target, &before, &after, (double)s.n, "pair", &res);
	bench_result_emit(&res, o);

	owner_close(&reader);
	for (int i = 0; i < r - 1; i++) {
		dlock_release(held[i].lock);
		owner_close(&held[i]);
	}
	free(held);
	bench_samples_free(&samples);
}

typedef struct mix_thread {
	pthread_t thread;
	owner owner;
	int64_t start_ns, measure_ns, end_ns;
	int64_t count;
} mix_thread;

static void *mix_loop(void *arg)
{
	mix_thread *t = arg;
	int64_t now = bench_now_ns();

	bench_sleep_ns(t->start_ns - now);
	do {
		pair(t->owner.lock, "mix pair");
		now = bench_now_ns();
		if (now >= t->measure_ns && now < t->end_ns)
			t->count++;
	} while (now < t->end_ns);
	return NULL;
}

/* R readers and one writer (the last thread) at once. */
static void mix(const bench_opts *o, const char *resource, int r)
{
	mix_thread *t = calloc((size_t)r + 1, sizeof(*t));
	int64_t start = bench_now_ns() + 200000000LL, reads = 0;
	bench_result res;

	if (!t)
		bench_fail("out of memory");
	for (int i = 0; i <= r; i++) {
		owner_open(&t[i].owner, o, resource, i < r ? DLOCK_MODE_READ : DLOCK_MODE_WRITE);
		t[i].start_ns = start;
		t[i].measure_ns = start + WARMUP_NS;
		t[i].end_ns = t[i].measure_ns + (int64_t)(o->seconds * 1e9);
		if (pthread_create(&t[i].thread, NULL, mix_loop, &t[i]) != 0)
			bench_fail("cannot start a thread");
	}
	for (int i = 0; i <= r; i++)
		pthread_join(t[i].thread, NULL);
	for (int i = 0; i < r; i++)
		reads += t[i].count;
	printf("  R=%-3d with one writer: %.0f reads/s, %.0f writes/s\n", r, reads / o->seconds,
	       t[r].count / o->seconds);
	bench_result_begin(&res, o, "readers", "dlock");
	bench_result_str(&res, "part", "mix");
	bench_result_int(&res, "readers", r);
	bench_result_num(&res, "seconds", o->seconds);
	bench_result_num(&res, "reads_per_s", reads / o->seconds);
	bench_result_num(&res, "writes_per_s", t[r].count / o->seconds);
	bench_result_emit(&res, o);
	for (int i = 0; i <= r; i++)
		owner_close(&t[i].owner);
	free(t);
}

dlock_lock *bench_read_handle(dlock_client *client, const char *resource)
{
	dlock_lock *lock;
	int rc;

	if ((rc = dlock_lock_new(client, resource, &lock)) != DLOCK_OK)
		bench_fail_dlock("lock", rc);
	if ((rc = dlock_lock_set_mode(lock, DLOCK_MODE_READ)) != DLOCK_OK)
		bench_fail_dlock("mode", rc);
	rc = dlock_acquire(lock, BENCH_ACQUIRE_WAIT_MS);
	if (rc == DLOCK_EINVAL) {
		dlock_lock_free(lock);
		return NULL; /* refused before any I/O: no shared holds here */
	}
	if (rc != DLOCK_OK || (rc = dlock_release(lock)) != DLOCK_OK)
		bench_fail_dlock("read", rc);
	return lock;
}

int bench_readers(const bench_opts *o)
{
	char resource[128];
	const char *resources[1] = { resource };
	dlock_client *client;
	dlock_lock *probe;
	int rc;

	bench_resource(resource, sizeof(resource), "readers", getpid());
	if ((rc = dlock_client_new(o->target.uri, &client)) != DLOCK_OK)
		bench_fail_dlock("client", rc);
	probe = bench_read_handle(client, resource);
	dlock_lock_free(probe);
	dlock_client_free(client);
	if (!probe) {
		bench_result res;

		printf("readers on %s: the backend has no shared holds\n", o->target.label);
		bench_result_begin(&res, o, "readers", "dlock");
		bench_result_str(&res, "part", "unsupported");
		bench_result_emit(&res, o);
		return 0;
	}
	printf("readers on %s (%s): %d read pairs per R, then R readers + 1 writer for %.0f s\n",
	       o->target.label, o->target.uri, o->count, o->seconds);
	for (int i = 0; i < o->n_waiter_sets; i++)
		read_path(o, resource, o->waiters[i]);
	for (int i = 0; i < o->n_waiter_sets; i++)
		mix(o, resource, o->waiters[i]);
	bench_forget(&o->target, resources, 1);
	return 0;
}
