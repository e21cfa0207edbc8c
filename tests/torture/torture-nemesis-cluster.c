/* SPDX-License-Identifier: MIT */
/*
 * The nemesis's Redis Cluster faults, each aimed at a resource in use (one
 * held now if any): its slot moved to another master in steps, or the
 * master that serves it handing over to its replica (CLUSTER FAILOVER) or
 * killed.  Each ends once the cluster is whole again (test_cluster_wait_ok:
 * one map, every slot served, every replica fed), and the next server
 * fault waits until then: one fault at a time, never one on top of a
 * takeover still under way.
 */
#include "torture-run.h"

#include <inttypes.h>
#include <stdio.h>

#include "test-util.h"

/* How long a cluster that lost a master may take to be whole again. */
#define TORTURE_CLUSTER_RECOVER_MS 30000

static void sleep_ms(int64_t ms)
{
	int64_t until = g_get_monotonic_time() + ms * 1000;
	int64_t now;

	while ((now = g_get_monotonic_time()) < until)
		g_usleep((gulong)MIN(until - now, 50000));
}

static int64_t pick_ms(torture_run *run, int64_t lo, int64_t hi)
{
	return hi > lo ? g_rand_int_range(run->rand, (gint32)lo, (gint32)hi) : lo;
}

/* A lock or election resource, one that a worker holds now if any. */
static int pick_resource(torture_run *run)
{
	unsigned held = 0;
	int in_use[TORTURE_MAX_RESOURCES], n = 0, any = g_rand_int_range(run->rand, 0, run->resources);
	int which = g_rand_int_range(run->rand, 0, TORTURE_MAX_RESOURCES);

	g_mutex_lock(&run->lock);
	for (int s = 0; s < run->workers; s++)
		if (!run->slots[s].done)
			held |= run->slots[s].held;
	g_mutex_unlock(&run->lock);
	for (int res = 0; res < run->resources; res++)
		if (held & (1u << res))
			in_use[n++] = res;
	return n ? in_use[which % n] : any;
}

static int resource_slot(int res)
{
	char name[32], key[48];

	torture_resource_name(res, TORTURE_CLUSTER_MASTERS, name, sizeof(name));
	g_snprintf(key, sizeof(key), "dlock:{%s}", name);
	return test_cluster_keyslot(key);
}

/* The master that now serves the slots the resource's master served at
 * the start (the first of them; only resources' slots move). */
static int home_master(torture_run *run, int res)
{
	int m = res % TORTURE_CLUSTER_MASTERS;

	return test_cluster_owner(run->cluster, m * TEST_CLUSTER_SLOTS / TORTURE_CLUSTER_MASTERS);
}

/* A master other than not, seeded; -1 if none answers as one. */
static int other_master(torture_run *run, int not)
{
	int masters[TEST_CLUSTER_MAX_NODES], n = 0;

	for (int i = 0; i < run->cluster->n_nodes; i++)
		if (i != not && test_cluster_is_master(run->cluster, i))
			masters[n++] = i;
	return n ? masters[g_rand_int_range(run->rand, 0, n)] : -1;
}

/* The run cannot go on with server faults: a finding (a crash). */
static void not_whole(torture_run *run, const char *after)
{
	g_mutex_lock(&run->lock);
	run->crashes++;
	g_mutex_unlock(&run->lock);
	printf("torture: SETUP: the Redis Cluster is not whole again after a %s; no more server faults\n", after);
	run->server_fault_after = G_MAXINT64;
}

/*
 * migrate: the resource's slot to another master, the way an operator
 * moves it, with a pause after each step so that holds, renewals,
 * waiters and acquires meet every phase: after begin (IMPORTING on the
 * target, MIGRATING on the source: -ASK for keys the source lacks,
 * -TRYAGAIN for a script whose keys are split), after the keys' MIGRATE
 * (every key on the target, the source still the owner), then end (the
 * keys left moved, SETSLOT NODE everywhere).  A slot away from its first
 * master goes back there half the time.
 */
static void inject_migrate(torture_run *run, torture_fault *f, char *what, size_t len)
{
	test_cluster *tc = run->cluster;
	int res = pick_resource(run), slot = resource_slot(res);
	int from = test_cluster_owner(tc, slot), home = home_master(run, res), to, moved;
	bool back = from != home && home >= 0 && g_rand_boolean(run->rand);
	int64_t d1 = pick_ms(run, 200, 1500), d2 = pick_ms(run, 200, 1500);

	to = back ? home : other_master(run, from);
	f->server = from;
	if (from < 0 || to < 0) {
		g_snprintf(what, len, "r%d's slot %d: no owner (%d) or no other master (%d)", res, slot, from, to);
		return;
	}
	test_cluster_migrate_begin(tc, slot, to);
	sleep_ms(d1);
	moved = test_cluster_migrate_keys(tc, slot);
	sleep_ms(d2);
	test_cluster_migrate_end(tc, slot);
	g_snprintf(what, len, "r%d's slot %d from node %d to node %d%s: begun, %d keys moved after %" PRId64
	           " ms, ended %" PRId64 " ms later", res, slot, from, to, back ? " (back)" : "", moved, d1, d2);
	if (!test_cluster_wait_ok(tc, TORTURE_CLUSTER_RECOVER_MS))
		not_whole(run, "migrate");
	else
		run->server_fault_after = g_get_monotonic_time() + G_USEC_PER_SEC;
}

/*
 * switchover: CLUSTER FAILOVER on the replica of the master that serves
 * the resource; the master stays up, hands over and becomes its
 * successor's replica.
 */
static void inject_switchover(torture_run *run, torture_fault *f, char *what, size_t len)
{
	test_cluster *tc = run->cluster;
	int res = pick_resource(run), slot = resource_slot(res), promoted;
	int64_t done;

	f->server = test_cluster_owner(tc, slot);
	if (f->server < 0) {
		g_snprintf(what, len, "r%d's slot %d has no owner", res, slot);
		return;
	}
	promoted = test_cluster_failover(tc, f->server);
	done = g_get_monotonic_time();
	if (!test_cluster_wait_ok(tc, TORTURE_CLUSTER_RECOVER_MS))
		not_whole(run, "switchover");
	else
		run->server_fault_after = g_get_monotonic_time() + G_USEC_PER_SEC;
	g_snprintf(what, len, "CLUSTER FAILOVER of node %d (serves r%d's slot %d) to node %d, done after %.3f s, "
	           "whole after %.3f s", f->server, res, slot, promoted, (done - f->start) / 1e6,
	           (g_get_monotonic_time() - f->start) / 1e6);
}

/*
 * failover: kill -9 of the master that serves the resource; its replica
 * takes over (about 2.5 s with cluster-node-timeout 1000); the old one
 * stays down a while, then starts again, empty, and rejoins as the
 * replica of its successor.  Until then the successor has no replica,
 * and with min-replicas=1 no grant on its slots counts.
 */
static void inject_kill(torture_run *run, torture_fault *f, char *what, size_t len)
{
	test_cluster *tc = run->cluster;
	int res = pick_resource(run), slot = resource_slot(res), promoted;
	int64_t took = 0, down = 0;

	f->server = test_cluster_owner(tc, slot);
	if (f->server < 0) {
		g_snprintf(what, len, "r%d's slot %d has no owner", res, slot);
		return;
	}
	test_cluster_kill(tc, f->server);
	promoted = test_cluster_wait_owner_change(tc, slot, f->server, TORTURE_CLUSTER_RECOVER_MS);
	took = g_get_monotonic_time() - f->start;
	if (promoted >= 0) {
		down = pick_ms(run, 500, 3000);
		sleep_ms(down);
	}
	/* Back even when no replica took over: the cluster may heal. */
	test_cluster_restart(tc, f->server);
	if (promoted < 0 || !test_cluster_wait_ok(tc, TORTURE_CLUSTER_RECOVER_MS))
		not_whole(run, "failover");
	else
		run->server_fault_after = g_get_monotonic_time() + G_USEC_PER_SEC;
	g_snprintf(what, len, "kill -9 master node %d (serves r%d's slot %d), node %d took over after %.3f s, "
	           "restarted as a replica %" PRId64 " ms later, whole after %.3f s", f->server, res, slot, promoted,
	           took / 1e6, down, (g_get_monotonic_time() - f->start) / 1e6);
}

void torture_inject_cluster(torture_run *run, torture_fault_kind kind, torture_fault *f, char *what, size_t len)
{
	switch (kind) {
	case FAULT_MIGRATE:
		inject_migrate(run, f, what, len);
		break;
	case FAULT_SWITCHOVER:
		inject_switchover(run, f, what, len);
		break;
	default:
		inject_kill(run, f, what, len);
		break;
	}
}
