/* SPDX-License-Identifier: MIT */
/*
 * The interleaved rounds of the modes that compare uncontended pairs
 * (latency, redlock): a warm-up that is not measured, then --rounds
 * rounds of --count operations of each subject, in an order reversed
 * every other round so that drift (another load on the machine, the JIT,
 * the server's allocator) hits every subject alike.
 */
#include "bench.h"

void bench_dlock_pair(dlock_lock *lock)
{
	int rc;

	if ((rc = dlock_acquire(lock, BENCH_ACQUIRE_WAIT_MS)) != DLOCK_OK)
		bench_fail_dlock("acquire", rc);
	if ((rc = dlock_release(lock)) != DLOCK_OK)
		bench_fail_dlock("release", rc);
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
