/* SPDX-License-Identifier: MIT */
/*
 * handoff: how fast a waiting process gets the lock after a release.
 *
 * The parent holds the lock; a waiter in another process (this program
 * re-executed as "handoff-waiter") is blocked in dlock_acquire().  Each
 * round the parent reads the monotonic clock and releases; the waiter
 * reads the same clock (shared by all processes) the moment its acquire
 * returns and writes it through a pipe, then releases, while the parent
 * takes the lock back.  The waiter queues again only when the parent says
 * so, holding the lock again — on a loaded machine a parent slower to
 * take the lock back than any fixed pause would otherwise find the
 * waiter ahead of it, and the next handoff would be measured from a
 * release that came after the acquire.  The first handoffs warm up and
 * are not counted.
 *
 * Interleaved with dlock's, round by round, the same handoff through the
 * backend's bare floor (floor-*.c: a pub/sub release message, a watch on
 * the predecessor node, a blocking F_OFD_SETLKW), with its own waiter
 * process ("handoff-floor-waiter").
 *
 * The parent leaves a waiter 25 ms to be asleep on the lock before each
 * release, and spends part of that time measuring the round-trip floor
 * (PING, exists) on its own connection, so that the handoff can be
 * expressed in round trips measured in the same run: a burst back to back
 * ("rtt": warm client and server), and one alone after 8 ms of quiet
 * ("rtt-idle": threads and server asleep, as a handoff finds them).
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

#define GAP_NS 25000000LL        /* before each release */
#define RTT_WINDOW_NS 10000000LL /* of which measuring a burst, at most */
#define RTT_PER_GAP 20
#define IDLE_NS 8000000LL        /* quiet before the lone round trip */

/* handoff-waiter URI RESOURCE COUNT */
int bench_handoff_worker(int argc, char **argv)
{
	dlock_client *client;
	dlock_lock *lock;
	int64_t ready = 0;
	int count, rc;

	if (argc != 4)
		bench_fail("handoff-waiter: wrong arguments");
	count = atoi(argv[3]);
	bench_lock_open(argv[1], argv[2], true, &client, &lock);
	if (bench_write_full(BENCH_FD_OUT, &ready, sizeof(ready)) != 0)
		bench_fail("handoff-waiter: lost the parent");
	for (int i = 0; i < count; i++) {
		int64_t t;
		char go;

		if (bench_read_full(BENCH_FD_IN, &go, 1, BENCH_PIPE_TIMEOUT_MS) != 0)
			bench_fail("handoff-waiter: lost the parent");
		if ((rc = dlock_acquire(lock, BENCH_ACQUIRE_WAIT_MS)) != DLOCK_OK)
			bench_fail_dlock("waiter acquire", rc);
		t = bench_now_ns();
		if (bench_write_full(BENCH_FD_OUT, &t, sizeof(t)) != 0)
			bench_fail("handoff-waiter: lost the parent");
		if ((rc = dlock_release(lock)) != DLOCK_OK)
			bench_fail_dlock("waiter release", rc);
	}
	dlock_lock_free(lock);
	dlock_client_free(client);
	return 0;
}

/* handoff-floor-waiter URI ID COUNT: per round, wait for the parent's
 * go (it holds the floor's lock then), queue, and report when taken. */
int bench_handoff_floor_worker(int argc, char **argv)
{
	bench_target t;
	bench_floor *floor;
	int64_t ready = 0;
	int count;

	if (argc != 4 || bench_target_parse(argv[1], NULL, &t) != 0)
		bench_fail("handoff-floor-waiter: wrong arguments");
	count = atoi(argv[3]);
	floor = bench_floor_open(&t, atoi(argv[2]), false);
	if (bench_write_full(BENCH_FD_OUT, &ready, sizeof(ready)) != 0)
		bench_fail("handoff-floor-waiter: lost the parent");
	for (int i = 0; i < count; i++) {
		char go;
		int64_t when;

		if (bench_read_full(BENCH_FD_IN, &go, 1, BENCH_PIPE_TIMEOUT_MS) != 0)
			bench_fail("handoff-floor-waiter: lost the parent");
		when = floor->wait_acquire(floor);
		if (bench_write_full(BENCH_FD_OUT, &when, sizeof(when)) != 0)
			bench_fail("handoff-floor-waiter: lost the parent");
	}
	bench_floor_close(floor);
	return 0;
}

/* Wait out the gap before a release, measuring round trips in it where
 * there is a floor and it has them. */
static void gap(bench_floor *floor, bench_samples *rtt, bench_samples *rtt_idle, bool measure)
{
	int64_t start = bench_now_ns();
	int64_t t0;

	if (floor && floor->rtt) {
		for (int i = 0; i < RTT_PER_GAP && bench_now_ns() - start < RTT_WINDOW_NS; i++) {
			t0 = bench_now_ns();
			floor->rtt(floor);
			if (measure && rtt)
				bench_samples_add(rtt, bench_now_ns() - t0);
		}
		bench_sleep_ns(IDLE_NS);
		t0 = bench_now_ns();
		floor->rtt(floor);
		if (measure && rtt_idle)
			bench_samples_add(rtt_idle, bench_now_ns() - t0);
	}
	bench_sleep_ns(start + GAP_NS - bench_now_ns());
}

static void emit(const bench_opts *o, const char *subject, const bench_summary *s,
                 const bench_summary *floor, const bench_summary *rtt, const bench_summary *rtt_idle)
{
	bench_result r;

	bench_result_begin(&r, o, "handoff", subject);
	bench_result_summary(&r, s);
	if (floor && floor->n > 0)
		bench_result_num(&r, "ratio_mean_to_floor", s->mean_us / floor->mean_us);
	if (rtt && rtt->n > 0) {
		bench_result_num(&r, "round_trips_mean", s->mean_us / rtt->mean_us);
		bench_result_num(&r, "round_trips_idle_mean", s->mean_us / rtt_idle->mean_us);
	}
	bench_result_emit(&r, o);
}

/* A handoff's time; one that ends before it starts means the waiter held
 * the lock while the parent thought it did: the measurement is void. */
static int64_t handoff_ns(int64_t released, int64_t acquired, const char *who)
{
	if (acquired < released)
		bench_fail("handoff: %s acquired %.1f us before the release (two holders?)", who,
		           (double)(released - acquired) / 1000.0);
	return acquired - released;
}

/* Tell a waiter to queue on the lock the parent holds. */
static void let_queue(bench_worker *w, const char *who)
{
	char go = 'G';

	if (bench_write_full(w->in_fd, &go, 1) != 0)
		bench_fail("handoff: %s is gone", who);
}

/* One floor handoff: the floor's waiter queues, the parent releases and
 * takes the lock back once the waiter is done.  Returns the handoff time. */
static int64_t floor_handoff(bench_floor *floor, bench_worker *w)
{
	int64_t released, acquired;

	let_queue(w, "the floor's waiter");
	gap(floor, NULL, NULL, false);
	released = bench_now_ns();
	floor->unhold(floor);
	if (bench_read_full(w->out_fd, &acquired, sizeof(acquired), BENCH_PIPE_TIMEOUT_MS) != 0)
		bench_fail("handoff: the floor's waiter failed (see above)");
	floor->hold(floor);
	return handoff_ns(released, acquired, "the floor's waiter");
}

void bench_handoff_finish(bench_worker *w, const char *who)
{
	int status = bench_worker_finish(w, 30000);

	if (status < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		bench_fail("handoff: %s did not exit cleanly", who);
}

void bench_handoff_waiter_start(const char *uri, const char *resource, int count, bench_worker *ret)
{
	char count_text[16];
	char *argv[] = { "handoff-waiter", (char *)uri, (char *)resource, count_text, NULL };

	snprintf(count_text, sizeof(count_text), "%d", count);
	bench_worker_start(argv, ret);
}

int64_t bench_handoff_dlock(dlock_lock *lock, bench_worker *w, bench_floor *floor, bench_samples *rtt,
                            bench_samples *rtt_idle, bool measure)
{
	int64_t released, acquired;
	int rc;

	let_queue(w, "the waiter");
	gap(floor, rtt, rtt_idle, measure);
	released = bench_now_ns();
	if ((rc = dlock_release(lock)) != DLOCK_OK)
		bench_fail_dlock("release", rc);
	if (bench_read_full(w->out_fd, &acquired, sizeof(acquired), BENCH_PIPE_TIMEOUT_MS) != 0)
		bench_fail("handoff: the waiter failed (see above)");
	if ((rc = dlock_acquire(lock, BENCH_ACQUIRE_WAIT_MS)) != DLOCK_OK)
		bench_fail_dlock("re-acquire", rc);
	return handoff_ns(released, acquired, "the waiter");
}

int bench_handoff(const bench_opts *o)
{
	int total = o->count + BENCH_HANDOFF_WARMUP;
	dlock_client *client;
	dlock_lock *lock;
	bench_floor *floor;
	bench_worker w, fw;
	bench_samples handoffs = { 0 }, floor_handoffs = { 0 }, rtt = { 0 }, rtt_idle = { 0 };
	bench_summary hs, fs, rs, ris;
	char resource[128], count_text[16], id_text[16];
	const char *resources[1] = { resource };
	int64_t ready;
	int rc;

	bench_resource(resource, sizeof(resource), "handoff", getpid());
	snprintf(count_text, sizeof(count_text), "%d", total);
	snprintf(id_text, sizeof(id_text), "%d", (int)getpid());
	/* The floor first (its owner creates what its waiter needs), holding. */
	floor = bench_floor_open(&o->target, (int)getpid(), true);
	floor->hold(floor);
	{
		char *argv[] = { "handoff-floor-waiter", (char *)o->target.uri, id_text, count_text, NULL };

		bench_worker_start(argv, &fw);
	}
	bench_lock_open(o->target.uri, resource, false, &client, &lock);
	if ((rc = dlock_acquire(lock, BENCH_ACQUIRE_WAIT_MS)) != DLOCK_OK)
		bench_fail_dlock("acquire", rc);
	bench_handoff_waiter_start(o->target.uri, resource, total, &w);
	if (bench_read_full(w.out_fd, &ready, sizeof(ready), BENCH_PIPE_TIMEOUT_MS) != 0 ||
	    bench_read_full(fw.out_fd, &ready, sizeof(ready), BENCH_PIPE_TIMEOUT_MS) != 0)
		bench_fail("handoff: a waiter failed to start (see above)");
	for (int i = 0; i < total; i++) {
		bool measure = i >= BENCH_HANDOFF_WARMUP;
		int64_t dlock_ns, floor_ns;

		/* Alternate which goes first, so drift hits both alike. */
		if (i % 2 == 1) {
			floor_ns = floor_handoff(floor, &fw);
			if (measure)
				bench_samples_add(&floor_handoffs, floor_ns);
		}
		dlock_ns = bench_handoff_dlock(lock, &w, floor, &rtt, &rtt_idle, measure);
		if (measure)
			bench_samples_add(&handoffs, dlock_ns);
		if (i % 2 == 0) {
			floor_ns = floor_handoff(floor, &fw);
			if (measure)
				bench_samples_add(&floor_handoffs, floor_ns);
		}
	}
	if ((rc = dlock_release(lock)) != DLOCK_OK)
		bench_fail_dlock("release", rc);
	floor->unhold(floor);
	bench_handoff_finish(&w, "the waiter");
	bench_handoff_finish(&fw, "the floor's waiter");

	hs = bench_summarize(&handoffs);
	fs = bench_summarize(&floor_handoffs);
	rs = bench_summarize(&rtt);
	ris = bench_summarize(&rtt_idle);
	printf("handoff on %s (%s): release in one process to acquisition in another, %d handoffs\n",
	       o->target.label, o->target.uri, o->count);
	bench_print_header();
	bench_print_row("dlock", &hs);
	bench_print_row("floor", &fs);
	printf("  ratio dlock/floor: mean %.2f, p50 %.2f\n", hs.mean_us / fs.mean_us, hs.p50_us / fs.p50_us);
	if (rs.n > 0) {
		bench_print_row("rtt", &rs);
		bench_print_row("rtt-idle", &ris);
		printf("  in round trips (mean), back to back / after idle: dlock %.2f / %.2f, floor %.2f / %.2f\n",
		       hs.mean_us / rs.mean_us, hs.mean_us / ris.mean_us, fs.mean_us / rs.mean_us,
		       fs.mean_us / ris.mean_us);
	}
	emit(o, "dlock", &hs, &fs, &rs, &ris);
	emit(o, "floor", &fs, NULL, &rs, &ris);
	if (rs.n > 0) {
		emit(o, "rtt", &rs, NULL, NULL, NULL);
		emit(o, "rtt-idle", &ris, NULL, NULL, NULL);
	}

	dlock_lock_free(lock);
	dlock_client_free(client);
	bench_floor_close(floor);
	bench_forget(&o->target, resources, 1);
	bench_samples_free(&handoffs);
	bench_samples_free(&floor_handoffs);
	bench_samples_free(&rtt);
	bench_samples_free(&rtt_idle);
	return 0;
}
