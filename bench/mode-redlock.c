/* SPDX-License-Identifier: MIT */
/*
 * redlock: what a lock on several Redis masters costs beside one master.
 *
 * Given a Redlock URI (redis://h1:p1,h2:p2,h3:p3), measured in one
 * process, interleaved round by round as the latency mode does
 * (rounds.c), each an uncontended acquire+release:
 *
 *   redlock                dlock on the Redlock URI
 *   single                 dlock on the first master alone
 *   floor-redlock          bare hiredis, dlock's Redlock scripts sent to
 *                          every master at once: acquire round, fencing
 *                          round, release round (floor-redlock.c)
 *   floor-redlock-nofence  the same without the fencing round
 *   floor-single           the single-master floor on the first master
 *                          (SET NX PX + compare-and-delete, floor-redis.c)
 *   rtt-round, rtt         a PING to every master at once; to the first
 *
 * The masters are contacted in parallel, so Redlock should cost about as
 * much as one master, not N times one: redlock/single is the figure to
 * judge.  floor-redlock minus floor-redlock-nofence is what the fencing
 * round costs, reported on its own, in microseconds and as a share of the
 * redlock pair.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

/* The ratio redlock/single that an uncontended pair should stay within. */
#define TARGET_RATIO 1.3

enum { SUBJECT_REDLOCK, SUBJECT_SINGLE, SUBJECT_FLOOR, SUBJECT_NOFENCE, SUBJECT_FLOOR_SINGLE,
       SUBJECT_RTT_ROUND, SUBJECT_RTT, SUBJECTS };

static const char *const subject_names[SUBJECTS] = { "redlock", "single", "floor-redlock",
	                                             "floor-redlock-nofence", "floor-single",
	                                             "rtt-round", "rtt" };

typedef struct redlock_run {
	dlock_lock *redlock, *single;
	bench_floor *floor, *floor_single;
} redlock_run;

static void run_one(void *ctx, int subject)
{
	redlock_run *run = ctx;

	switch (subject) {
	case SUBJECT_REDLOCK:
		bench_dlock_pair(run->redlock);
		break;
	case SUBJECT_SINGLE:
		bench_dlock_pair(run->single);
		break;
	case SUBJECT_FLOOR:
		run->floor->pair_fenced(run->floor);
		break;
	case SUBJECT_NOFENCE:
		run->floor->pair(run->floor);
		break;
	case SUBJECT_FLOOR_SINGLE:
		run->floor_single->pair(run->floor_single);
		break;
	case SUBJECT_RTT_ROUND:
		run->floor->rtt(run->floor);
		break;
	default:
		run->floor_single->rtt(run->floor_single);
		break;
	}
}

static void emit(const bench_opts *o, int subject, const bench_summary *sum)
{
	const bench_summary *s = &sum[subject];
	bench_result r;

	bench_result_begin(&r, o, "redlock", subject_names[subject]);
	bench_result_summary(&r, s);
	bench_result_int(&r, "rounds", o->rounds);
	bench_result_int(&r, "pairs_per_round", o->count);
	bench_result_int(&r, "masters", o->target.n_hosts);
	if (subject == SUBJECT_REDLOCK) {
		double fence_us = sum[SUBJECT_FLOOR].mean_us - sum[SUBJECT_NOFENCE].mean_us;

		bench_result_num(&r, "ratio_mean_to_single", s->mean_us / sum[SUBJECT_SINGLE].mean_us);
		bench_result_num(&r, "ratio_p50_to_single", s->p50_us / sum[SUBJECT_SINGLE].p50_us);
		bench_result_num(&r, "ratio_mean_to_floor", s->mean_us / sum[SUBJECT_FLOOR].mean_us);
		bench_result_num(&r, "target_ratio_to_single", TARGET_RATIO);
		bench_result_num(&r, "fence_round_mean_us", fence_us);
		bench_result_num(&r, "fence_round_p50_us", sum[SUBJECT_FLOOR].p50_us - sum[SUBJECT_NOFENCE].p50_us);
		bench_result_num(&r, "fence_round_share", fence_us / s->mean_us);
		bench_result_num(&r, "round_trips_mean", s->mean_us / sum[SUBJECT_RTT_ROUND].mean_us);
	} else if (subject == SUBJECT_SINGLE) {
		bench_result_num(&r, "ratio_mean_to_floor", s->mean_us / sum[SUBJECT_FLOOR_SINGLE].mean_us);
		bench_result_num(&r, "round_trips_mean", s->mean_us / sum[SUBJECT_RTT].mean_us);
	} else if (subject == SUBJECT_FLOOR) {
		bench_result_num(&r, "ratio_mean_to_floor_single", s->mean_us / sum[SUBJECT_FLOOR_SINGLE].mean_us);
	}
	bench_result_emit(&r, o);
}

static void report(const bench_opts *o, const bench_summary *sum)
{
	const bench_summary *rl = &sum[SUBJECT_REDLOCK], *one = &sum[SUBJECT_SINGLE];
	double ratio = rl->mean_us / one->mean_us;
	double fence_us = sum[SUBJECT_FLOOR].mean_us - sum[SUBJECT_NOFENCE].mean_us;

	printf("redlock on %s (%s, %d masters): %d rounds x %d pairs per subject, interleaved, after %d "
	       "warm-up pairs\n",
	       o->target.label, o->target.uri, o->target.n_hosts, o->rounds, o->count, o->warmup);
	printf("  %-21s %8s %10s %10s %10s %10s %10s\n", "", "n", "mean_us", "p50_us", "p99_us", "p99.9_us",
	       "max_us");
	for (int k = 0; k < SUBJECTS; k++)
		printf("  %-21s %8zu %10.1f %10.1f %10.1f %10.1f %10.1f\n", subject_names[k], sum[k].n,
		       sum[k].mean_us, sum[k].p50_us, sum[k].p99_us, sum[k].p999_us, sum[k].max_us);
	printf("  ratio redlock/single: mean %.2f, p50 %.2f (target <= %.2f: %s)\n", ratio,
	       rl->p50_us / one->p50_us, TARGET_RATIO, ratio <= TARGET_RATIO ? "met" : "missed");
	printf("  ratio redlock/floor-redlock: mean %.2f; single/floor-single: mean %.2f\n",
	       rl->mean_us / sum[SUBJECT_FLOOR].mean_us, one->mean_us / sum[SUBJECT_FLOOR_SINGLE].mean_us);
	printf("  floor-redlock/floor-single: mean %.2f; rtt-round/rtt: mean %.2f\n",
	       sum[SUBJECT_FLOOR].mean_us / sum[SUBJECT_FLOOR_SINGLE].mean_us,
	       sum[SUBJECT_RTT_ROUND].mean_us / sum[SUBJECT_RTT].mean_us);
	printf("  in round trips (mean): redlock %.2f of rtt-round, single %.2f of rtt; were a round one round "
	       "trip, its 3 rounds against 2 would still make redlock/single 1.5\n",
	       rl->mean_us / sum[SUBJECT_RTT_ROUND].mean_us, one->mean_us / sum[SUBJECT_RTT].mean_us);
	printf("  fencing round (floor-redlock - floor-redlock-nofence): mean %.1f us, p50 %.1f us, "
	       "%.0f%% of the redlock pair\n",
	       fence_us, sum[SUBJECT_FLOOR].p50_us - sum[SUBJECT_NOFENCE].p50_us, 100.0 * fence_us / rl->mean_us);
}

int bench_redlock(const bench_opts *o)
{
	static bench_target single; /* the first master alone; a floor keeps a pointer */
	static const int subjects[SUBJECTS] = { SUBJECT_REDLOCK, SUBJECT_SINGLE, SUBJECT_FLOOR, SUBJECT_NOFENCE,
		                                SUBJECT_FLOOR_SINGLE, SUBJECT_RTT_ROUND, SUBJECT_RTT };
	char single_uri[128], resource[128], single_resource[128];
	const char *resources[2] = { resource, single_resource };
	dlock_client *client, *single_client;
	bench_samples samples[SUBJECTS] = { { 0 } };
	bench_summary sum[SUBJECTS];
	redlock_run run;

	if (o->target.kind != BENCH_REDIS || o->target.n_hosts < 2) {
		fprintf(stderr, "dlock-bench: redlock: expected a Redlock URI, "
		                "redis://HOST:PORT,HOST:PORT[,HOST:PORT...]\n");
		return BENCH_EX_USAGE;
	}
	snprintf(single_uri, sizeof(single_uri), "redis://%s:%d", o->target.host[0], o->target.port[0]);
	if (bench_target_parse(single_uri, NULL, &single) != 0)
		return BENCH_EX_USAGE;
	bench_resource(resource, sizeof(resource), "redlock", getpid());
	bench_resource(single_resource, sizeof(single_resource), "redlock-single", getpid());
	bench_lock_open(o->target.uri, resource, true, &client, &run.redlock);
	bench_lock_open(single_uri, single_resource, true, &single_client, &run.single);
	bench_dlock_pair(run.redlock);
	if (!bench_redlock_scripts_match(&o->target)) {
		bench_forget(&o->target, resources, 2);
		bench_fail("redlock: the floor's copies of dlock's Redlock scripts (floor-redlock.c) are not "
		           "the texts of src/redis/lua/redlock-*.lua");
	}
	/* Two floors on the first master: ids apart, so keys apart. */
	run.floor = bench_floor_open(&o->target, (int)getpid(), true);
	run.floor_single = bench_floor_open(&single, -(int)getpid(), true);

	bench_rounds(o, subjects, SUBJECTS, run_one, &run, samples);
	for (int k = 0; k < SUBJECTS; k++)
		sum[k] = bench_summarize(&samples[k]);
	report(o, sum);
	for (int k = 0; k < SUBJECTS; k++)
		emit(o, k, sum);

	dlock_lock_free(run.redlock);
	dlock_lock_free(run.single);
	dlock_client_free(client);
	dlock_client_free(single_client);
	bench_floor_close(run.floor);
	bench_floor_close(run.floor_single);
	bench_forget(&o->target, resources, 2);
	for (int k = 0; k < SUBJECTS; k++)
		bench_samples_free(&samples[k]);
	return 0;
}
