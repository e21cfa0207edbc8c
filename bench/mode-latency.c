/* SPDX-License-Identifier: MIT */
/*
 * latency: what one uncontended lock costs.
 *
 * Up to four subjects, measured in one process on the same server: dlock
 * (acquire + release on one handle), the floor (the backend's bare
 * acquire + release, see floor-*.c), on ZooKeeper the pipelined floor (the
 * same pair with create and get_children in flight together: the best a
 * pipelining client can do), on Redis the fenced floor (the pair with a
 * fencing token drawn in the acquire's script: the least a fenced lock
 * costs), one round trip (PING, exists; none for files), and where the
 * backend serves read-write locks dlock's READ acquire+release on a second
 * handle ("dlock-read"), and the same pair with the calls that do not
 * block on a handle-owned lock: done on the callback thread
 * ("dlock-async"), and dispatched from a poll() of a second client's
 * event fd ("dlock-dispatch"), each against the blocking pair.  After a warm-up that is not measured — at least --warmup pairs
 * of each subject and, on ZooKeeper, at least 2 s, since a JVM runs
 * several times slower in its first seconds — come --rounds rounds of
 * --count pairs of each subject, in an order that is reversed every other
 * round so that drift (another load on the machine, the JIT, the server's
 * allocator) hits every subject alike.
 */
#include <stdio.h>
#include <unistd.h>

#include "bench.h"

enum { SUBJECT_DLOCK, SUBJECT_READ, SUBJECT_ASYNC, SUBJECT_DISPATCH, SUBJECT_FLOOR, SUBJECT_PIPELINED,
       SUBJECT_FENCED, SUBJECT_RTT, SUBJECTS };

static const char *const subject_names[SUBJECTS] = { "dlock", "dlock-read", "dlock-async", "dlock-dispatch",
	                                             "floor", "floor-pipelined", "floor-fenced", "rtt" };

typedef struct latency_run {
	dlock_lock *lock;
	dlock_lock *read; /* READ handle, NULL where the backend has none */
	dlock_client *client;
	dlock_lock *async;    /* handle-owned, of client */
	dlock_client *loop;   /* DLOCK_DELIVER_DISPATCH */
	dlock_lock *dispatch; /* handle-owned, of loop */
	bench_floor *floor;
} latency_run;

/* One operation of a subject. */
static void run_one(void *ctx, int subject)
{
	latency_run *run = ctx;

	switch (subject) {
	case SUBJECT_DLOCK:
		bench_dlock_pair(run->lock);
		break;
	case SUBJECT_READ:
		bench_dlock_pair(run->read);
		break;
	case SUBJECT_ASYNC:
		bench_dlock_pair_async(run->async, run->client, -1);
		break;
	case SUBJECT_DISPATCH:
		bench_dlock_pair_async(run->dispatch, run->loop, dlock_client_event_fd(run->loop));
		break;
	case SUBJECT_FLOOR:
		run->floor->pair(run->floor);
		break;
	case SUBJECT_PIPELINED:
		run->floor->pair_pipelined(run->floor);
		break;
	case SUBJECT_FENCED:
		run->floor->pair_fenced(run->floor);
		break;
	default:
		run->floor->rtt(run->floor);
		break;
	}
}

static void emit(const bench_opts *o, int subject, const bench_summary *s, const bench_summary *floor,
                 const bench_summary *pipelined, const bench_summary *fenced, const bench_summary *blocking)
{
	bench_result r;

	bench_result_begin(&r, o, "latency", subject_names[subject]);
	bench_result_summary(&r, s);
	bench_result_int(&r, "rounds", o->rounds);
	bench_result_int(&r, "pairs_per_round", o->count);
	if (subject == SUBJECT_ASYNC || subject == SUBJECT_DISPATCH) {
		bench_result_num(&r, "ratio_mean_to_blocking", s->mean_us / blocking->mean_us);
		bench_result_num(&r, "ratio_p50_to_blocking", s->p50_us / blocking->p50_us);
	}
	if (subject == SUBJECT_DLOCK || subject == SUBJECT_READ || subject == SUBJECT_ASYNC ||
	    subject == SUBJECT_DISPATCH) {
		bench_result_num(&r, "ratio_mean_to_floor", s->mean_us / floor->mean_us);
		bench_result_num(&r, "ratio_p50_to_floor", s->p50_us / floor->p50_us);
		if (pipelined->n > 0)
			bench_result_num(&r, "ratio_mean_to_pipelined", s->mean_us / pipelined->mean_us);
		if (fenced->n > 0)
			bench_result_num(&r, "ratio_mean_to_fenced", s->mean_us / fenced->mean_us);
	}
	bench_result_emit(&r, o);
}

int bench_latency(const bench_opts *o)
{
	latency_run run;
	dlock_client *client;
	bench_samples samples[SUBJECTS] = { { 0 } };
	bench_summary sum[SUBJECTS] = { { 0 } };
	char resource[128];
	const char *resources[1] = { resource };
	int subjects[SUBJECTS], n = 0;
	int rc;

	bench_resource(resource, sizeof(resource), "latency", getpid());
	if ((rc = dlock_client_new(o->target.uri, &client)) != DLOCK_OK)
		bench_fail_dlock("client", rc);
	if ((rc = dlock_lock_new(client, resource, &run.lock)) != DLOCK_OK)
		bench_fail_dlock("lock", rc);
	run.client = client;
	run.async = bench_owned_handle(client, resource);
	if ((rc = dlock_client_new(o->target.uri, &run.loop)) != DLOCK_OK ||
	    (rc = dlock_client_set_delivery(run.loop, DLOCK_DELIVER_DISPATCH)) != DLOCK_OK)
		bench_fail_dlock("dispatching client", rc);
	run.dispatch = bench_owned_handle(run.loop, resource);
	run.floor = bench_floor_open(&o->target, (int)getpid(), true);
	run.read = bench_read_handle(client, resource);
	subjects[n++] = SUBJECT_DLOCK;
	if (run.read)
		subjects[n++] = SUBJECT_READ;
	subjects[n++] = SUBJECT_ASYNC;
	subjects[n++] = SUBJECT_DISPATCH;
	subjects[n++] = SUBJECT_FLOOR;
	if (run.floor->pair_pipelined)
		subjects[n++] = SUBJECT_PIPELINED;
	if (run.floor->pair_fenced)
		subjects[n++] = SUBJECT_FENCED;
	if (run.floor->rtt)
		subjects[n++] = SUBJECT_RTT;

	bench_rounds(o, subjects, n, run_one, &run, samples);
	for (int k = 0; k < n; k++)
		sum[subjects[k]] = bench_summarize(&samples[subjects[k]]);

	printf("latency on %s (%s): %d rounds x %d pairs per subject, interleaved, after %d warm-up pairs\n",
	       o->target.label, o->target.uri, o->rounds, o->count, o->warmup);
	bench_print_header();
	for (int k = 0; k < n; k++)
		bench_print_row(subject_names[subjects[k]], &sum[subjects[k]]);
	printf("  ratio dlock/floor: mean %.2f, p50 %.2f\n", sum[SUBJECT_DLOCK].mean_us / sum[SUBJECT_FLOOR].mean_us,
	       sum[SUBJECT_DLOCK].p50_us / sum[SUBJECT_FLOOR].p50_us);
	if (sum[SUBJECT_PIPELINED].n > 0)
		printf("  ratio dlock/pipelined floor: mean %.2f; pipelined/sequential floor: mean %.2f\n",
		       sum[SUBJECT_DLOCK].mean_us / sum[SUBJECT_PIPELINED].mean_us,
		       sum[SUBJECT_PIPELINED].mean_us / sum[SUBJECT_FLOOR].mean_us);
	if (sum[SUBJECT_READ].n > 0)
		printf("  ratio dlock-read/floor: mean %.2f, p50 %.2f\n",
		       sum[SUBJECT_READ].mean_us / sum[SUBJECT_FLOOR].mean_us,
		       sum[SUBJECT_READ].p50_us / sum[SUBJECT_FLOOR].p50_us);
	printf("  ratio dlock-async/dlock: mean %.2f, p50 %.2f; dlock-dispatch/dlock: mean %.2f, p50 %.2f\n",
	       sum[SUBJECT_ASYNC].mean_us / sum[SUBJECT_DLOCK].mean_us,
	       sum[SUBJECT_ASYNC].p50_us / sum[SUBJECT_DLOCK].p50_us,
	       sum[SUBJECT_DISPATCH].mean_us / sum[SUBJECT_DLOCK].mean_us,
	       sum[SUBJECT_DISPATCH].p50_us / sum[SUBJECT_DLOCK].p50_us);
	if (sum[SUBJECT_FENCED].n > 0)
		printf("  ratio dlock/fenced floor: mean %.2f; fenced/plain floor: mean %.2f\n",
		       sum[SUBJECT_DLOCK].mean_us / sum[SUBJECT_FENCED].mean_us,
		       sum[SUBJECT_FENCED].mean_us / sum[SUBJECT_FLOOR].mean_us);
	for (int k = 0; k < n; k++)
		emit(o, subjects[k], &sum[subjects[k]], &sum[SUBJECT_FLOOR], &sum[SUBJECT_PIPELINED],
		     &sum[SUBJECT_FENCED], &sum[SUBJECT_DLOCK]);

	dlock_lock_free(run.lock);
	dlock_lock_free(run.read);
	dlock_lock_free(run.async);
	dlock_lock_free(run.dispatch);
	dlock_client_free(run.loop);
	dlock_client_free(client);
	bench_floor_close(run.floor);
	bench_forget(&o->target, resources, 1);
	for (int s = 0; s < SUBJECTS; s++)
		bench_samples_free(&samples[s]);
	return 0;
}
