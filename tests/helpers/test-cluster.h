/* SPDX-License-Identifier: MIT */
/*
 * Test helper: a throwaway Redis Cluster on loopback.  N masters that
 * split the 16384 slots evenly (master i serves slots
 * [i * 16384 / N, (i + 1) * 16384 / N)), each with R replicas, formed
 * directly with CLUSTER SET-CONFIG-EPOCH, ADDSLOTSRANGE, MEET and
 * REPLICATE (no redis-cli).  Every node is a test-redis.h server with
 * cluster-enabled yes, a fresh nodes.conf in its own directory,
 * cluster-node-timeout 1000 and an explicit free cluster bus port, so a
 * killed master's replica takes over in about 2.5 s.
 *
 * Nodes are numbered in start order: 0..N-1 the first masters, then the
 * replicas, N + m * R + r being replica r of master m.  Which node is a
 * master NOW is the cluster's word (test_cluster_owner,
 * test_cluster_replica_of): failovers move the roles, never the numbers.
 *
 * Everything is a test_redis: on free ports, in fresh temporary
 * directories, stopped by PID, SIGKILLed when the thread that started it
 * exits (start from the test's main thread), its log's tail printed by
 * test_finish() when the program fails.  A setup that does not get ready
 * fails the calling test (never a skip).
 *
 * The helper asks only the nodes that are running and not frozen; freeze
 * nodes with test_cluster_freeze() (not test_redis_signal directly), or
 * each question to a frozen node waits 5 s for its answer.
 */
#ifndef DLOCK_TEST_CLUSTER_H
#define DLOCK_TEST_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "test-redis.h"

#define TEST_CLUSTER_SLOTS 16384
#define TEST_CLUSTER_MAX_MASTERS 5
#define TEST_CLUSTER_MAX_REPLICAS 2
#define TEST_CLUSTER_MAX_NODES (TEST_CLUSTER_MAX_MASTERS * (1 + TEST_CLUSTER_MAX_REPLICAS))

typedef struct test_cluster {
	char *password; /* requirepass and masterauth of every node, or NULL */
	int n_masters;
	int replicas_per_master;
	int n_nodes;
	test_redis *nodes[TEST_CLUSTER_MAX_NODES];
	char ids[TEST_CLUSTER_MAX_NODES][41]; /* CLUSTER MYID, kept across restarts */
	bool frozen[TEST_CLUSTER_MAX_NODES];  /* SIGSTOPped: not asked */
	/* The slots test_cluster_migrate_begin() started to move and not
	 * yet ended: source and target node, -1 when none. */
	int16_t migrating_from[TEST_CLUSTER_SLOTS];
	int16_t migrating_to[TEST_CLUSTER_SLOTS];
} test_cluster;

/*
 * Start n_masters masters (1..TEST_CLUSTER_MAX_MASTERS) with
 * replicas_per_master replicas each (0..TEST_CLUSTER_MAX_REPLICAS) and
 * form the cluster.  password (or NULL): requirepass and masterauth of
 * every node.  Returns once test_cluster_wait_ok() holds, within 20 s
 * (scaled), or stops everything and fails the test.
 */
test_cluster *test_cluster_start(int n_masters, int replicas_per_master, const char *password);
/* Kill every node (kill -9: nothing is kept), remove their directories,
 * keep their logs' tails for test_finish(), free.  NULL is a no-op. */
void test_cluster_stop(test_cluster *tc);

/*
 * Whether the cluster is whole, polled for up to timeout_ms (scaled by
 * test_slack_factor()): every running, unfrozen node says
 * cluster_state:ok; their CLUSTER SLOTS are the same map, which gives
 * each of the 16384 slots to a running node at 127.0.0.1; and every such
 * node that answers ROLE as a replica receives its master's writes (SET
 * in one of the master's slots, then WAIT on the master acknowledged by
 * all of them: a link "connected" may not be receiving yet).  On false,
 * prints what was missing.
 */
bool test_cluster_wait_ok(test_cluster *tc, int64_t timeout_ms);

/* "redis+cluster://127.0.0.1:P1,127.0.0.1:P2,..." naming the first
 * masters (nodes 0..n_masters-1, whatever their role now), plus suffix
 * (e.g. "?ttl=2s"); g_free. */
char *test_cluster_uri(const test_cluster *tc, const char *suffix);
/* The same with userinfo ("user:password" or ":password", NULL for
 * none) before the hosts. */
char *test_cluster_uri_userinfo(const test_cluster *tc, const char *userinfo, const char *suffix);
/* "redis+cluster://127.0.0.1:P" naming node i only, as the one seed. */
char *test_cluster_uri_seed(const test_cluster *tc, int i, const char *suffix);

/* Node i (0 <= i < n_nodes): its port, pid (0 after test_cluster_kill),
 * directory; put a test-proxy.h proxy before r->port if need be. */
test_redis *test_cluster_node(const test_cluster *tc, int i);
int test_cluster_port(const test_cluster *tc, int i);
/* The node with this client port; -1 if none. */
int test_cluster_node_on(const test_cluster *tc, int port);
/* A command on node i (authenticated), hiredis format; the reply is freed
 * by the caller, NULL if the node did not answer. */
redisReply *test_cluster_cmd(test_cluster *tc, int i, const char *fmt, ...);

/* ---- slots (test-cluster-slots.c) ------------------------------------- */

/*
 * The slot of key, the test's own computation: CRC16-XMODEM (polynomial
 * 0x1021, initial value 0) of the hash tag, mod 16384.  The tag is what
 * lies between the first "{" and the first "}" after it, if that is not
 * empty; else the whole key.  "123456789" -> 12739, "dlock:{R}" -> 15031.
 */
int test_cluster_keyslot(const char *key);
/* The node that serves slot now, as the first running, unfrozen node's
 * CLUSTER SLOTS says; -1 if it names none of ours or no node answers. */
int test_cluster_owner(test_cluster *tc, int slot);
/*
 * Find a resource name R, prefix (no braces; NULL for "r") followed by a
 * number, such that "dlock:{R}" lands on a slot that node serves now;
 * into buf.  Returns the slot.  Fails the test if node serves no slot.
 */
int test_cluster_resource_on(test_cluster *tc, int node, const char *prefix, char *buf, size_t size);

/*
 * Move slot to node `to` (a master) the way an operator does, in three
 * steps a test can stop between, to hold the slot mid-migration:
 *  - begin: CLUSTER SETSLOT IMPORTING on the target, MIGRATING on the
 *    source (the slot's owner now).  From here the source answers -ASK
 *    for keys it does not have, and -TRYAGAIN to a command whose keys
 *    are split between the two.
 *  - keys: MIGRATE every key of the slot from the source to the target
 *    (CLUSTER GETKEYSINSLOT, MIGRATE ... KEYS, AUTH2 with the password);
 *    returns how many moved.  May run several times.
 *  - end: move the keys left, then CLUSTER SETSLOT NODE on the target,
 *    the source and every other running master, and wait (10 s, scaled)
 *    until every running, unfrozen node names the target as the owner.
 * Any refusal or timeout fails the test.  test_cluster_migrate_slot()
 * does all three.
 */
void test_cluster_migrate_begin(test_cluster *tc, int slot, int to);
int test_cluster_migrate_keys(test_cluster *tc, int slot);
void test_cluster_migrate_end(test_cluster *tc, int slot);
void test_cluster_migrate_slot(test_cluster *tc, int slot, int to);

/*
 * Poll until every running, unfrozen node names one owner of slot, not
 * old_owner, which runs and answers ROLE as master; for up to timeout_ms
 * (scaled).  Returns that node, or -1 on timeout.
 */
int test_cluster_wait_owner_change(test_cluster *tc, int slot, int old_owner, int64_t timeout_ms);

/* ---- roles and faults -------------------------------------------------- */

/* Whether node i runs, is not frozen and answers ROLE as master. */
bool test_cluster_is_master(test_cluster *tc, int i);
/* The first running, unfrozen node that answers ROLE as a replica of
 * master; -1 if none. */
int test_cluster_replica_of(test_cluster *tc, int master);
/*
 * CLUSTER FAILOVER on a replica of master (a manual failover: the master
 * stays up and hands over), then wait (15 s, scaled) until every
 * running, unfrozen node names the replica as the owner of all the
 * master's slots, the replica answers ROLE as master and the old master
 * as a replica.  Returns the promoted node; fails the test if master has
 * no replica or nothing changes.
 */
int test_cluster_failover(test_cluster *tc, int master);
/* kill -9 node i; its ports, directory and nodes.conf stay ours. */
void test_cluster_kill(test_cluster *tc, int i);
/* Start a killed node again on its ports, empty, with its nodes.conf: it
 * rejoins under its old id (a replaced master as a replica of its
 * replacement).  Returns once it answers; test_cluster_wait_ok() waits
 * for the cluster to take it back. */
void test_cluster_restart(test_cluster *tc, int i);
/* SIGSTOP / SIGCONT node i, remembering it so it is not asked. */
void test_cluster_freeze(test_cluster *tc, int i);
void test_cluster_thaw(test_cluster *tc, int i);

#endif
