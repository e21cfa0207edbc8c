/* SPDX-License-Identifier: MIT */
/*
 * The nemesis: one fault at a time, a seeded choice of kind, target and
 * duration, each logged with its times relative to the run's start.
 * Faults aimed at a worker prefer one that holds a lock now; a Redlock
 * run's server faults hit one master at a time; a Sentinel run's server
 * faults are failovers, a Cluster run's failovers and slot migrations
 * (torture-nemesis-cluster.c), each begun once the setup is whole again.
 * Runs on the main thread, which started the servers (they die with it).
 */
#include "torture-run.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>

#include "test-util.h"

static double rel(torture_run *run, int64_t t)
{
	return (t - run->limits.run_start) / 1e6;
}

static void sleep_until(int64_t t)
{
	int64_t now;

	while ((now = g_get_monotonic_time()) < t)
		g_usleep((gulong)MIN(t - now, 50000));
}

static int64_t pick_ms(torture_run *run, int64_t lo, int64_t hi)
{
	return hi > lo ? g_rand_int_range(run->rand, (gint32)lo, (gint32)hi) : lo;
}

/* A worker slot, a holder if any holds (seeded choice among them). */
static torture_slot *pick_slot(torture_run *run, bool *ret_holder)
{
	int holders[TORTURE_MAX_WORKERS], n = 0, any = g_rand_int_range(run->rand, 0, run->workers);
	int which = g_rand_int_range(run->rand, 0, TORTURE_MAX_WORKERS);

	g_mutex_lock(&run->lock);
	for (int s = 0; s < run->workers; s++)
		if (run->slots[s].held && !run->slots[s].done)
			holders[n++] = s;
	g_mutex_unlock(&run->lock);
	*ret_holder = n > 0;
	return &run->slots[n ? holders[which % n] : any];
}

static void proxies(torture_run *run, torture_slot *s, void (*fn)(test_proxy *, int), int arg)
{
	for (int i = 0; i < run->nservers; i++)
		fn(s->proxies[i], arg);
}

static void stall(test_proxy *p, int dirs)
{
	test_proxy_stall(p, dirs);
}

static void unstall(test_proxy *p, int dirs)
{
	test_proxy_unstall(p, dirs);
}

static void admit(test_proxy *p, int mode)
{
	test_proxy_admit_mode(p, (test_proxy_admit)mode);
}

static void reset(test_proxy *p, int unused)
{
	(void)unused;
	test_proxy_reset_all(p);
}

static int dropped(torture_run *run, torture_slot *s)
{
	int n = 0;

	for (int i = 0; i < run->nservers; i++)
		n += test_proxy_dropped(s->proxies[i]);
	return n;
}

/*
 * The answer to the worker's next request of one kind is lost with its
 * connection: Redis EVALSHA (acquire, renew or release), ZooKeeper
 * create2 (the lock node), getChildren or delete.  Armed on the proxies
 * with a connection open; waits up to 3 s for it to happen.  An armed
 * drop that did not happen stays armed.
 */
static void inject_drop(torture_run *run, torture_slot *s, bool holder, char *what, size_t len)
{
	static const char *const zk_kinds[] = { "create2", "getChildren", "delete" };
	const char *kind = run->backend != BACKEND_ZK ? "EVALSHA" : zk_kinds[g_rand_int_range(run->rand, 0, 3)];
	int before = dropped(run, s), armed = 0;
	int64_t until = g_get_monotonic_time() + 3 * G_USEC_PER_SEC;

	for (int i = 0; i < run->nservers; i++)
		if (test_proxy_open(s->proxies[i]) > 0) {
			test_proxy_drop_replies(s->proxies[i], kind, 1, true);
			armed++;
		}
	int64_t refuse_ms = g_rand_boolean(run->rand) ? pick_ms(run, 1000, 1800) : 0;

	while (armed && dropped(run, s) == before && g_get_monotonic_time() < until)
		g_usleep(5000);
	/* Sometimes the reconnect is refused a while, so an acquire whose
	 * answer was lost may reach its deadline before it can look. */
	if (refuse_ms) {
		proxies(run, s, admit, TEST_PROXY_REFUSE);
		sleep_until(g_get_monotonic_time() + refuse_ms * 1000);
		proxies(run, s, admit, TEST_PROXY_ADMIT);
	}
	g_snprintf(what, len, "drop the answer to worker %d.%d's next %s%s and reset, refuse reconnects %" PRId64 " ms: %s",
	           s->index, s->life, kind, holder ? " (a holder)" : "", refuse_ms,
	           !armed ? "no connection open" : dropped(run, s) > before ? "dropped" : "not yet (stays armed)");
}

/*
 * A fault of one Redlock master (f->server), from f->start: frozen for
 * about a lease (the fault Redlock exists to survive); killed and restarted
 * empty once a lease and a margin have passed (Redlock's own assumption:
 * a master that lost its keys stays out until they would have expired);
 * or it drops connection attempts -- every worker's connections to it
 * reset, new ones accepted and never answered, as behind a dead link.
 */
static void inject_master(torture_run *run, torture_fault_kind kind, torture_fault *f, char *what, size_t len)
{
	int64_t lease_ms = run->limits.lease_us / 1000, d;
	int i = f->server = g_rand_int_range(run->rand, 0, run->redlock->n);

	switch (kind) {
	case FAULT_MASTER_FREEZE:
		d = pick_ms(run, lease_ms / 2, lease_ms * 3 / 2);
		test_redlock_freeze(run->redlock, i);
		sleep_until(f->start + d * 1000);
		test_redlock_thaw(run->redlock, i);
		g_snprintf(what, len, "SIGSTOP master %d for %" PRId64 " ms", i, d);
		break;
	case FAULT_MASTER_KILL:
		d = lease_ms + pick_ms(run, 300, 1500);
		test_redis_signal(run->redlock->masters[i], SIGKILL);
		test_redis_halt(run->redlock->masters[i]);
		sleep_until(f->start + d * 1000);
		test_redis_resume(run->redlock->masters[i]);
		g_snprintf(what, len, "kill -9 master %d, restarted empty after %" PRId64 " ms", i, d);
		break;
	default:
		d = pick_ms(run, lease_ms / 2, lease_ms * 3 / 2);
		for (int s = 0; s < run->workers; s++) {
			test_proxy_admit_mode(run->slots[s].proxies[i], TEST_PROXY_BLACKHOLE);
			test_proxy_reset_all(run->slots[s].proxies[i]);
		}
		sleep_until(f->start + d * 1000);
		for (int s = 0; s < run->workers; s++) {
			test_proxy_admit_mode(run->slots[s].proxies[i], TEST_PROXY_ADMIT);
			test_proxy_reset_all(run->slots[s].proxies[i]);
		}
		g_snprintf(what, len, "master %d drops connection attempts (accepted, never answered) for %" PRId64 " ms",
		           i, d);
		break;
	}
}

/* The data server that is the old master of a failover, as its index. */
static int server_index(const test_sentinel *ts, const test_redis *r)
{
	for (int i = 0; i < ts->n_servers; i++)
		if (ts->servers[i] == r)
			return i;
	return -1;
}

static bool names_other_master(void *arg)
{
	void **a = arg;

	return test_sentinel_master(a[0]) != a[1];
}

/*
 * A Sentinel failover (f->server: the old master).  failover: kill -9 of
 * the master, a replica promoted (about 2.5 s), the old one kept down a
 * while, then started again, empty, as a replica of the new master.
 * switchover: SENTINEL FAILOVER with the old master alive -- it stays a
 * master of its own (about 10 s) until a sentinel reconfigures it, and a
 * grant taken there is one its replica-less WAIT does not count.  Either
 * ends once the setup is ready again (the fault's window covers all of
 * it); the next server fault waits until then and until the sentinels can
 * elect a leader for another failover (about 5 s after a switch).  A
 * setup that does not recover is a finding of the run (a crash).
 */
static void inject_failover(torture_run *run, torture_fault_kind kind, torture_fault *f, char *what, size_t len)
{
	test_sentinel *ts = run->sentinel;
	test_redis *old = test_sentinel_master(ts);
	int64_t promoted, down = 0;
	bool ok = true;

	f->server = server_index(ts, old);
	if (kind == FAULT_FAILOVER) {
		int old_port = test_sentinel_kill_master(ts);
		void *arg[2] = { ts, old };

		ok = test_sentinel_wait_promoted(ts, old_port, 30000);
		promoted = g_get_monotonic_time();
		if (ok) {
			down = pick_ms(run, 500, 3000);
			sleep_until(promoted + down * 1000);
			/* Every sentinel that answers names the new master. */
			ok = test_wait_until(names_other_master, arg, 10000);
		}
		if (ok)
			test_sentinel_restart_as_replica(ts, old);
	} else {
		test_sentinel_failover(ts);
		promoted = g_get_monotonic_time();
	}
	ok = ok && test_sentinel_wait_ready(ts, 30000);
	run->server_fault_after = MAX(g_get_monotonic_time(), promoted + 6 * G_USEC_PER_SEC);
	if (!ok) {
		g_mutex_lock(&run->lock);
		run->crashes++;
		g_mutex_unlock(&run->lock);
		printf("torture: SETUP: the Sentinel setup did not recover from a %s; no more server faults\n",
		       torture_fault_name(kind));
		run->server_fault_after = G_MAXINT64;
	}
	if (kind == FAULT_FAILOVER)
		g_snprintf(what, len, "kill -9 master (server %d), promoted after %.3f s, restarted as a replica %" PRId64
		           " ms later, ready after %.3f s", f->server, (promoted - f->start) / 1e6, down,
		           (g_get_monotonic_time() - f->start) / 1e6);
	else
		g_snprintf(what, len, "SENTINEL FAILOVER from master (server %d), promoted after %.3f s, old master a "
		           "replica and ready after %.3f s", f->server, (promoted - f->start) / 1e6,
		           (g_get_monotonic_time() - f->start) / 1e6);
}

/* Inject one fault of this kind; fills f (start, end, target). */
static void inject(torture_run *run, torture_fault_kind kind, torture_fault *f)
{
	int64_t lease_ms = run->limits.lease_us / 1000, d;
	bool holder = false;
	torture_slot *s = NULL;
	char what[200] = "";
	int i;

	if (kind <= FAULT_REFUSE || kind == FAULT_DROP) {
		s = pick_slot(run, &holder);
		f->slot = s->index;
		f->life = s->life;
	}
	f->start = g_get_monotonic_time();
	switch (kind) {
	case FAULT_KILL:
		if (s->done) {
			g_snprintf(what, sizeof(what), "worker %d.%d had already exited", f->slot, f->life);
			break;
		}
		g_mutex_lock(&run->lock);
		s->nemesis_killed = true;
		g_mutex_unlock(&run->lock);
		kill(s->pid, SIGKILL);
		torture_join(run, s);
		torture_spawn(run, s, s->mode);
		g_snprintf(what, sizeof(what), "kill -9 worker %d.%d%s, started %d.%d", f->slot, f->life,
		           holder ? " (a holder)" : "", s->index, s->life);
		break;
	case FAULT_PAUSE:
		d = run->backend == BACKEND_FILE ? pick_ms(run, 300, 1500) : lease_ms * 3 / 2 + pick_ms(run, 0, lease_ms);
		kill(s->pid, SIGSTOP);
		sleep_until(f->start + d * 1000);
		kill(s->pid, SIGCONT);
		g_snprintf(what, sizeof(what), "SIGSTOP worker %d.%d%s for %" PRId64 " ms", f->slot, f->life,
		           holder ? " (a holder)" : "", d);
		break;
	case FAULT_STALL:
		/* Both ways, or only the answers (requests still applied). */
		i = g_rand_int_range(run->rand, 0, 5) < 3 ? TEST_PROXY_BOTH : TEST_PROXY_DOWN;
		d = lease_ms * 3 / 2 + pick_ms(run, 0, lease_ms);
		proxies(run, s, stall, i);
		sleep_until(f->start + d * 1000);
		proxies(run, s, unstall, i);
		g_snprintf(what, sizeof(what), "partition worker %d.%d%s (stall %s) for %" PRId64 " ms", f->slot,
		           f->life, holder ? " (a holder)" : "", i == TEST_PROXY_BOTH ? "both ways" : "answers only", d);
		break;
	case FAULT_RESET:
		proxies(run, s, reset, 0);
		g_snprintf(what, sizeof(what), "reset the connections of worker %d.%d%s", f->slot, f->life,
		           holder ? " (a holder)" : "");
		break;
	case FAULT_REFUSE:
		d = pick_ms(run, 500, lease_ms * 2);
		proxies(run, s, admit, TEST_PROXY_REFUSE);
		proxies(run, s, reset, 0);
		sleep_until(f->start + d * 1000);
		proxies(run, s, admit, TEST_PROXY_ADMIT);
		g_snprintf(what, sizeof(what), "reset worker %d.%d%s and refuse its reconnects for %" PRId64 " ms",
		           f->slot, f->life, holder ? " (a holder)" : "", d);
		break;
	case FAULT_SERVER_RESTART:
		test_redis_restart(run->redis);
		g_snprintf(what, sizeof(what), "restart redis-server (empty)");
		break;
	case FAULT_SERVER_FREEZE:
		d = pick_ms(run, 300, lease_ms * 2);
		if (run->redis) {
			test_redis_signal(run->redis, SIGSTOP);
			sleep_until(f->start + d * 1000);
			test_redis_signal(run->redis, SIGCONT);
			g_snprintf(what, sizeof(what), "SIGSTOP redis-server for %" PRId64 " ms", d);
		} else {
			i = g_rand_int_range(run->rand, 0, run->nservers);
			test_zk_signal(run->zk, i, SIGSTOP);
			sleep_until(f->start + d * 1000);
			test_zk_signal(run->zk, i, SIGCONT);
			g_snprintf(what, sizeof(what), "SIGSTOP ZooKeeper server %d for %" PRId64 " ms", i, d);
		}
		break;
	case FAULT_DROP:
		inject_drop(run, s, holder, what, sizeof(what));
		break;
	case FAULT_MASTER_FREEZE:
	case FAULT_MASTER_KILL:
	case FAULT_MASTER_BLACKHOLE:
		inject_master(run, kind, f, what, sizeof(what));
		break;
	case FAULT_FAILOVER:
	case FAULT_SWITCHOVER:
	case FAULT_MIGRATE:
		if (run->cluster)
			torture_inject_cluster(run, kind, f, what, sizeof(what));
		else
			inject_failover(run, kind, f, what, sizeof(what));
		break;
	case FAULT_LEADER_KILL:
		i = test_zk_leader(run->zk, 5000);
		if (i < 0) {
			g_snprintf(what, sizeof(what), "no leader to kill");
			break;
		}
		d = pick_ms(run, 500, 2000);
		test_zk_signal(run->zk, i, SIGKILL);
		sleep_until(f->start + d * 1000);
		test_zk_restart_server(run->zk, i, false);
		g_snprintf(what, sizeof(what), "kill -9 ZooKeeper leader (server %d), restarted after %" PRId64 " ms", i,
		           d);
		break;
	default:
		break;
	}
	f->end = g_get_monotonic_time();
	printf("nemesis: +%.3fs..+%.3fs %s: %s\n", rel(run, f->start), rel(run, f->end), torture_fault_name(kind), what);
	fflush(stdout);
}

/* How long a server fault of a Sentinel or Cluster run takes, at most,
 * until the setup is whole again, in s. */
static int64_t server_fault_needs(const torture_run *run, torture_fault_kind kind)
{
	/* Sentinel: a failover is whole again within some 6 s, a
	 * switchover within some 12 s (the old master's reconfiguration). */
	if (run->backend == BACKEND_SENTINEL)
		return kind == FAULT_SWITCHOVER ? 14 : 9;
	/* Cluster: a takeover (about 2.5 s), the old master down up to 3 s,
	 * its rejoining; a migration's steps up to 3 s; a switchover. */
	return kind == FAULT_FAILOVER ? 12 : 7;
}

/* A fault kind among the n enabled; on Redlock every other fault is one
 * of a master's, the faults Redlock is there to survive.  On Sentinel and
 * Cluster every other fault is the servers', when one may begin: the
 * setup is whole again, and enough of the run is left for it to end
 * before the run does.  A Cluster run takes each server kind once, in a
 * seeded order, before any of them again, so that a short run has seen
 * a migration, a switchover and a failover. */
static torture_fault_kind pick_kind(torture_run *run, const torture_fault_kind *kinds, int n, int64_t until_us)
{
	torture_fault_kind masters[FAULT_KINDS], others[FAULT_KINDS];
	int m = 0, o = 0;
	int64_t now = g_get_monotonic_time();

	if (run->backend == BACKEND_SENTINEL || run->backend == BACKEND_CLUSTER) {
		bool may = now >= run->server_fault_after;

		unsigned all = 0;

		for (int i = 0; i < n; i++) {
			if (!torture_fault_is_server(kinds[i]))
				others[o++] = kinds[i];
			else if (until_us - now > server_fault_needs(run, kinds[i]) * G_USEC_PER_SEC)
				all |= 1u << kinds[i];
		}
		if (run->backend == BACKEND_CLUSTER && (all & ~run->server_kinds_done))
			all &= ~run->server_kinds_done;
		for (int k = 0; k < FAULT_KINDS; k++)
			if (all & (1u << k))
				masters[m++] = (torture_fault_kind)k;
		if (m > 0 && may && (o == 0 || g_rand_boolean(run->rand))) {
			torture_fault_kind k = masters[g_rand_int_range(run->rand, 0, m)];

			run->server_kinds_done |= 1u << k;
			if (all == 1u << k)
				run->server_kinds_done = 0;
			return k;
		}
		/* No worker fault enabled: wait for the next failover. */
		return o > 0 ? others[g_rand_int_range(run->rand, 0, o)] : FAULT_KINDS;
	}
	for (int i = 0; i < n; i++)
		if (torture_fault_is_master(kinds[i]))
			masters[m++] = kinds[i];
	if (m > 0 && m < n && g_rand_boolean(run->rand))
		return masters[g_rand_int_range(run->rand, 0, m)];
	return kinds[g_rand_int_range(run->rand, 0, n)];
}

void torture_nemesis(torture_run *run, int64_t until_us)
{
	torture_fault_kind kinds[FAULT_KINDS];
	int n = 0;

	for (int k = 0; k < FAULT_KINDS; k++)
		if (run->enabled[k])
			kinds[n++] = (torture_fault_kind)k;
	/* Let every worker connect and settle first. */
	sleep_until(MIN(until_us, run->limits.run_start + 2 * G_USEC_PER_SEC));
	while (n > 0 && g_get_monotonic_time() < until_us) {
		torture_fault f = { .slot = -1, .server = -1 };

		f.kind = pick_kind(run, kinds, n, until_us);
		sleep_until(MIN(until_us, g_get_monotonic_time() + pick_ms(run, 500, 2000) * 1000));
		if (g_get_monotonic_time() >= until_us)
			break;
		if (f.kind == FAULT_KINDS)
			continue;
		inject(run, f.kind, &f);
		g_mutex_lock(&run->lock);
		g_array_append_val(run->faults, f);
		g_mutex_unlock(&run->lock);
	}
	sleep_until(until_us);
}
