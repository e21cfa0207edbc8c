/* SPDX-License-Identifier: MIT */
/*
 * failover: how long an election goes without a leader.
 *
 *   killed   a leader in another process (this program re-executed as
 *            the hidden mode failover-leader) is killed with SIGKILL while
 *            a participant here waits in its campaign: the time from the
 *            kill to the participant's campaign returning.  The backend's
 *            bound is the leader's lease (Redis: the URI's ttl, plus a
 *            waiter's backoff), its session (ZooKeeper: the negotiated
 *            session timeout), or nothing (file: the kernel drops the
 *            lock; a waiter's nap finds it).
 *   resigned a leader here resigns while another participant waits: the
 *            hand-over, one release-to-grant (compare handoff's figure).
 *
 * --count rounds of each (default 5: each killed round waits out a lease
 * or a session).
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

typedef struct participant {
	dlock_client *client;
	dlock_election *e;
	int rc;
	int64_t done_ns; /* atomic */
} participant;

static void participant_open(participant *p, const char *uri, const char *name, const char *id)
{
	int rc;

	memset(p, 0, sizeof(*p));
	if ((rc = dlock_client_new(uri, &p->client)) != DLOCK_OK)
		bench_fail_dlock("client", rc);
	if ((rc = dlock_election_new(p->client, name, id, &p->e)) != DLOCK_OK)
		bench_fail_dlock("election", rc);
}

static void participant_close(participant *p)
{
	dlock_election_free(p->e);
	dlock_client_free(p->client);
}

static void *campaign(void *data)
{
	participant *p = data;

	p->rc = dlock_election_campaign(p->e, BENCH_ACQUIRE_WAIT_MS);
	__atomic_store_n(&p->done_ns, bench_now_ns(), __ATOMIC_SEQ_CST);
	return NULL;
}

/* The hidden mode: lead NAME until killed (or the parent goes). */
int bench_failover_worker(int argc, char **argv)
{
	participant p;
	uint64_t token;
	char c;
	int rc;

	if (argc < 3)
		return BENCH_EX_USAGE;
	participant_open(&p, argv[1], argv[2], "doomed");
	if ((rc = dlock_election_campaign(p.e, BENCH_ACQUIRE_WAIT_MS)) != DLOCK_OK)
		bench_fail_dlock("campaign", rc);
	token = dlock_election_fencing_token(p.e);
	if (bench_write_full(BENCH_FD_OUT, &token, sizeof(token)) != 0)
		return 1;
	while (read(BENCH_FD_IN, &c, 1) > 0)
		;
	participant_close(&p);
	return 0;
}

/* One killed round: ns from the kill to the next leader. */
static int64_t killed_round(const bench_opts *o, const char *name)
{
	char *argv[] = { "failover-leader", (char *)o->target.uri, (char *)name, NULL };
	bench_worker w;
	participant heir;
	uint64_t dead = 0;
	pthread_t t;
	int64_t t0;

	bench_worker_start(argv, &w);
	if (bench_read_full(w.out_fd, &dead, sizeof(dead), BENCH_PIPE_TIMEOUT_MS) != 0)
		bench_fail("failover: the leader process did not lead");
	participant_open(&heir, o->target.uri, name, "heir");
	pthread_create(&t, NULL, campaign, &heir);
	bench_sleep_ns(300000000); /* queued behind the leader */
	t0 = bench_now_ns();
	kill(w.pid, SIGKILL);
	pthread_join(t, NULL);
	bench_worker_finish(&w, 5000);
	if (heir.rc != DLOCK_OK)
		bench_fail_dlock("failover: the waiting participant's campaign", heir.rc);
	if (dlock_election_fencing_token(heir.e) <= dead)
		bench_fail("failover: the new leader's token is not larger than the dead one's");
	dlock_election_resign(heir.e);
	participant_close(&heir);
	return heir.done_ns - t0;
}

/* One resigned round: ns from the resignation to the next leader. */
static int64_t resigned_round(const bench_opts *o, const char *name)
{
	participant leader, next;
	pthread_t t;
	int64_t t0;
	int rc;

	participant_open(&leader, o->target.uri, name, "leader");
	participant_open(&next, o->target.uri, name, "next");
	if ((rc = dlock_election_campaign(leader.e, BENCH_ACQUIRE_WAIT_MS)) != DLOCK_OK)
		bench_fail_dlock("campaign", rc);
	pthread_create(&t, NULL, campaign, &next);
	bench_sleep_ns(200000000);
	t0 = bench_now_ns();
	if ((rc = dlock_election_resign(leader.e)) != DLOCK_OK)
		bench_fail_dlock("resign", rc);
	pthread_join(t, NULL);
	if (next.rc != DLOCK_OK)
		bench_fail_dlock("resigned: the waiting participant's campaign", next.rc);
	dlock_election_resign(next.e);
	participant_close(&leader);
	participant_close(&next);
	return next.done_ns - t0;
}

static void emit(const bench_opts *o, const char *subject, bench_samples *s)
{
	bench_summary sum = bench_summarize(s);
	bench_result r;

	bench_print_row(subject, &sum);
	bench_result_begin(&r, o, "failover", subject);
	bench_result_summary(&r, &sum);
	bench_result_emit(&r, o);
}

int bench_failover(const bench_opts *o)
{
	char name[128];
	const char *names[1] = { name };
	bench_samples killed = { 0 }, resigned = { 0 };

	bench_resource(name, sizeof(name), "failover", getpid());
	for (int i = 0; i < o->count; i++) {
		bench_samples_add(&killed, killed_round(o, name));
		bench_samples_add(&resigned, resigned_round(o, name));
	}
	printf("failover on %s (%s): %d rounds of each\n", o->target.label, o->target.uri, o->count);
	bench_print_header();
	emit(o, "killed", &killed);
	emit(o, "resigned", &resigned);
	bench_forget(&o->target, names, 1);
	bench_samples_free(&killed);
	bench_samples_free(&resigned);
	return 0;
}
