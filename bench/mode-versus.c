/* SPDX-License-Identifier: MIT */
/*
 * versus: the same lock on two or more dlock URIs, side by side in one
 * process — one Redis server against a Redis Cluster, or against the same
 * server with min-replicas=1 — so that what a topology or an option costs
 * comes out as a ratio that holds on a noisy machine.
 *
 * Two measures, each interleaved across the URIs:
 *
 *   pair     an uncontended acquire+release: after the warm-up, --rounds
 *            rounds of --count pairs on each URI, the order reversed
 *            every other round, as the latency mode does (rounds.c)
 *   handoff  the holder here releases to a waiter in another process (the
 *            handoff mode's handoff-waiter, mode-handoff.c): one handoff
 *            on each URI per round, the order reversed every other round,
 *            --handoffs of them after 5 not counted
 *
 * Each URI gets resources of its own, so that two URIs on one server (with
 * and without min-replicas) never wait on each other.  The first URI is
 * the reference: every line names its URI's label as the subject, and the
 * ratios to the first are printed here and computed again from the lines
 * by scripts/bench-report.py.  No floor: a cluster has none (the bare
 * client would need the routing dlock does), and the comparison is
 * between dlock and dlock.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "bench.h"

typedef struct versus_uri {
	bench_target target;
	char pair_resource[128], handoff_resource[128];
	dlock_client *client;
	dlock_lock *pair, *handoff;
	bench_worker waiter;
	bench_samples pairs, handoffs;
	bench_summary pair_sum, handoff_sum;
} versus_uri;

static void run_pair(void *ctx, int subject)
{
	versus_uri *u = ctx;

	bench_dlock_pair(u[subject].pair);
}

static void open_uri(const bench_opts *o, int k, versus_uri *u)
{
	char what[64];
	int rc;

	/* main() parsed every URI already; the target's label is the URI's. */
	if (bench_target_parse(o->uris[k], o->labels[k], &u->target) != 0)
		bench_fail("versus: '%s' is not a URI", o->uris[k]);
	snprintf(what, sizeof(what), "versus-pair-%d", k);
	bench_resource(u->pair_resource, sizeof(u->pair_resource), what, getpid());
	snprintf(what, sizeof(what), "versus-handoff-%d", k);
	bench_resource(u->handoff_resource, sizeof(u->handoff_resource), what, getpid());
	bench_lock_open(o->uris[k], u->pair_resource, true, &u->client, &u->pair);
	if ((rc = dlock_lock_new(u->client, u->handoff_resource, &u->handoff)) != DLOCK_OK)
		bench_fail_dlock("lock", rc);
}

/* The handoffs: every URI's lock held here, its waiter started, then one
 * handoff on each per round. */
static void handoffs(const bench_opts *o, versus_uri *u, int n)
{
	int total = o->handoffs + BENCH_HANDOFF_WARMUP;
	int rc;

	for (int k = 0; k < n; k++) {
		if ((rc = dlock_acquire(u[k].handoff, BENCH_ACQUIRE_WAIT_MS)) != DLOCK_OK)
			bench_fail_dlock("acquire", rc);
		bench_handoff_waiter_start(o->uris[k], u[k].handoff_resource, total, &u[k].waiter);
	}
	for (int k = 0; k < n; k++) {
		int64_t ready;

		if (bench_read_full(u[k].waiter.out_fd, &ready, sizeof(ready), BENCH_PIPE_TIMEOUT_MS) != 0)
			bench_fail("versus: the waiter on %s failed to start (see above)", o->labels[k]);
	}
	for (int i = 0; i < total; i++) {
		bool measure = i >= BENCH_HANDOFF_WARMUP;

		for (int j = 0; j < n; j++) {
			versus_uri *v = &u[i % 2 == 0 ? j : n - 1 - j];
			int64_t ns = bench_handoff_dlock(v->handoff, &v->waiter, NULL, NULL, NULL, false);

			if (measure)
				bench_samples_add(&v->handoffs, ns);
		}
	}
	for (int k = 0; k < n; k++) {
		if ((rc = dlock_release(u[k].handoff)) != DLOCK_OK)
			bench_fail_dlock("release", rc);
		bench_handoff_finish(&u[k].waiter, "the waiter");
	}
}

static void emit(const bench_opts *o, int k, const char *measure, const bench_summary *s)
{
	bench_result r;

	bench_result_begin(&r, o, "versus", o->labels[k]);
	bench_result_str(&r, "measure", measure);
	bench_result_str(&r, "uri", o->uris[k]);
	bench_result_int(&r, "position", k);
	bench_result_summary(&r, s);
	if (measure[0] == 'p') {
		bench_result_int(&r, "rounds", o->rounds);
		bench_result_int(&r, "pairs_per_round", o->count);
	}
	bench_result_emit(&r, o);
}

static void report(const bench_opts *o, const versus_uri *u, int n)
{
	printf("versus on %s: %d rounds x %d pairs per URI, then %d handoffs per URI, interleaved\n",
	       o->target.label, o->rounds, o->count, o->handoffs);
	for (int k = 0; k < n; k++)
		printf("  %-15s %s\n", o->labels[k], o->uris[k]);
	printf("acquire+release, uncontended:\n");
	bench_print_header();
	for (int k = 0; k < n; k++)
		bench_print_row(o->labels[k], &u[k].pair_sum);
	printf("handoff to a waiter in another process:\n");
	bench_print_header();
	for (int k = 0; k < n; k++)
		bench_print_row(o->labels[k], &u[k].handoff_sum);
	for (int k = 1; k < n; k++)
		printf("  ratio %s/%s: pair mean %.2f, p50 %.2f; handoff mean %.2f, p50 %.2f\n", o->labels[k],
		       o->labels[0], u[k].pair_sum.mean_us / u[0].pair_sum.mean_us,
		       u[k].pair_sum.p50_us / u[0].pair_sum.p50_us,
		       u[k].handoff_sum.mean_us / u[0].handoff_sum.mean_us,
		       u[k].handoff_sum.p50_us / u[0].handoff_sum.p50_us);
}

int bench_versus(const bench_opts *o)
{
	versus_uri *u = calloc((size_t)o->n_uris, sizeof(*u));
	int subjects[BENCH_MAX_URIS] = { 0 };
	bench_samples *samples = calloc((size_t)o->n_uris, sizeof(*samples));
	int n = o->n_uris;

	if (!u || !samples)
		bench_fail("out of memory");
	for (int k = 0; k < n; k++) {
		open_uri(o, k, &u[k]);
		subjects[k] = k;
	}
	bench_rounds(o, subjects, n, run_pair, u, samples);
	for (int k = 0; k < n; k++) {
		u[k].pairs = samples[k];
		u[k].pair_sum = bench_summarize(&u[k].pairs);
	}
	handoffs(o, u, n);
	for (int k = 0; k < n; k++)
		u[k].handoff_sum = bench_summarize(&u[k].handoffs);

	report(o, u, n);
	for (int k = 0; k < n; k++)
		emit(o, k, "pair", &u[k].pair_sum);
	for (int k = 0; k < n; k++)
		emit(o, k, "handoff", &u[k].handoff_sum);

	for (int k = 0; k < n; k++) {
		const char *resources[2] = { u[k].pair_resource, u[k].handoff_resource };

		dlock_lock_free(u[k].pair);
		dlock_lock_free(u[k].handoff);
		dlock_client_free(u[k].client);
		bench_forget(&u[k].target, resources, 2);
		bench_samples_free(&u[k].pairs);
		bench_samples_free(&u[k].handoffs);
	}
	free(samples);
	free(u);
	return 0;
}
