/* SPDX-License-Identifier: MIT */
/*
 * The interleaved rounds of the modes that compare uncontended pairs
 * (latency, redlock): a warm-up that is not measured, then --rounds
 * rounds of --count operations of each subject, in an order reversed
 * every other round so that drift (another load on the machine, the JIT,
 * the server's allocator) hits every subject alike.
 */
#include <poll.h>
#include <pthread.h>

#include "bench.h"

void bench_dlock_pair(dlock_lock *lock)
{
	int rc;

	if ((rc = dlock_acquire(lock, BENCH_ACQUIRE_WAIT_MS)) != DLOCK_OK)
		bench_fail_dlock("acquire", rc);
	if ((rc = dlock_release(lock)) != DLOCK_OK)
		bench_fail_dlock("release", rc);
}

/* A call's end, told by its done. */
typedef struct bench_done {
	pthread_mutex_t mu;
	pthread_cond_t cond;
	int rc;
	bool done;
} bench_done;

static void on_done(dlock_lock *lock, int rc, uint64_t token, void *data)
{
	bench_done *d = data;

	(void)lock;
	(void)token;
	pthread_mutex_lock(&d->mu);
	d->rc = rc;
	d->done = true;
	pthread_cond_signal(&d->cond);
	pthread_mutex_unlock(&d->mu);
}

/* Wait for the done of a started call: on the condition, or by
 * dispatching the client's callbacks as fd becomes readable. */
static int await_done(bench_done *d, dlock_client *client, int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	if (fd >= 0) {
		while (!d->done)
			if (poll(&p, 1, -1) > 0)
				dlock_client_dispatch(client, 0);
		return d->rc;
	}
	pthread_mutex_lock(&d->mu);
	while (!d->done)
		pthread_cond_wait(&d->cond, &d->mu);
	pthread_mutex_unlock(&d->mu);
	return d->rc;
}

void bench_dlock_pair_async(dlock_lock *lock, dlock_client *client, int fd)
{
	/* Static: a done signaled from the callback thread may still be
	 * unlocking it as the waiter returns. */
	static bench_done d = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, false };
	int rc;

	/* A done seen may not have returned yet, and until it has the handle
	 * refuses its next call: started again then, as a loop would. */
	d.done = false;
	while ((rc = dlock_acquire_async(lock, BENCH_ACQUIRE_WAIT_MS, on_done, &d)) == DLOCK_EBUSY)
		;
	if (rc != DLOCK_OK || (rc = await_done(&d, client, fd)) != DLOCK_OK)
		bench_fail_dlock("acquire (async)", rc);
	d.done = false;
	while ((rc = dlock_release_async(lock, on_done, &d)) == DLOCK_EBUSY)
		;
	if (rc != DLOCK_OK || (rc = await_done(&d, client, fd)) != DLOCK_OK)
		bench_fail_dlock("release (async)", rc);
}

dlock_lock *bench_owned_handle(dlock_client *client, const char *resource)
{
	dlock_lock *lock;
	int rc;

	if ((rc = dlock_lock_new(client, resource, &lock)) != DLOCK_OK ||
	    (rc = dlock_lock_set_owner(lock, DLOCK_OWNER_HANDLE)) != DLOCK_OK)
		bench_fail_dlock("handle-owned lock", rc);
	return lock;
}

void bench_rounds(const bench_opts *o, const int *subjects, int n, bench_run_fn run, void *ctx,
                  bench_samples *samples)
{
	/* ZooKeeper's JVM runs several times slower in its first seconds. */
	int64_t min_ns = o->target.kind == BENCH_ZK ? 2000000000 : 200000000;
	int64_t until = bench_now_ns() + min_ns;
	int done = 0;

	/* Bounded: the time floor ends, and the pair count is finite. */
	while (done < o->warmup || bench_now_ns() < until) {
		for (int k = 0; k < n; k++)
			run(ctx, subjects[k]);
		done++;
	}
	for (int round = 0; round < o->rounds; round++) {
		for (int k = 0; k < n; k++) {
			int subject = subjects[round % 2 == 0 ? k : n - 1 - k];

			for (int i = 0; i < o->count; i++) {
				int64_t t0 = bench_now_ns();

				run(ctx, subject);
				bench_samples_add(&samples[subject], bench_now_ns() - t0);
			}
		}
	}
}
