/* SPDX-License-Identifier: MIT */
/*
 * Test helper: throwaway ZooKeeper servers (one, or a 3-node ensemble) on
 * free loopback ports in fresh temporary directories, started as a JVM
 * directly (QuorumPeerMain) with a bounded heap and stopped by PID, and
 * four-letter-word queries.
 *
 * A server that cannot be started fails the calling test: a missing
 * ZooKeeper is never a skip.  Servers get SIGKILL when the thread that
 * started them exits (PR_SET_PDEATHSIG), so start them from the test's
 * main thread.
 *
 * Every server runs with -Dznode.container.checkIntervalMs=500, so empty
 * container nodes are reaped within a test.
 */
#ifndef DLOCK_TEST_ZK_SERVER_H
#define DLOCK_TEST_ZK_SERVER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "test-util.h"

#define TEST_ZK_MAX_SERVERS 3

typedef struct test_zk_server {
	pid_t pid;         /* 0 while stopped */
	int port;          /* client port */
	int peer_port;     /* ensemble only */
	int election_port; /* ensemble only */
	char *dir;         /* this server's directory: zoo.cfg, data/, zk.log */
} test_zk_server;

typedef struct test_zk {
	int count;         /* 1 or 3 */
	int tick_ms;
	int max_session_ms;
	char *dir;         /* temporary directory holding every server's */
	test_zk_server servers[TEST_ZK_MAX_SERVERS];
	void *inspect;     /* zhandle_t * of the inspection session, or NULL */
} test_zk;

/*
 * Start count (1 or 3) servers with tickTime tick_ms and maxSessionTimeout
 * max_session_ms (0: ZooKeeper's default, 20 ticks), and wait until every
 * one answers "srvr" with a Mode line (an ensemble: one leader), bounded.
 */
test_zk *test_zk_start(int count, int tick_ms, int max_session_ms);
/* Stop every server (SIGCONT, SIGTERM, SIGKILL after 5 s), remove the
 * directory, free. */
void test_zk_stop(test_zk *z);

/* "127.0.0.1:P1,127.0.0.1:P2,..." (the C client's, kazoo's and Curator's
 * connect string); g_free. */
char *test_zk_hosts(const test_zk *z);
/* "zk://127.0.0.1:P1,...[suffix]" (suffix may be NULL, "/chroot?x=y" or
 * "?session-timeout=2s"); g_free. */
char *test_zk_uri(const test_zk *z, const char *suffix);

/* Send a signal to server i (SIGSTOP, SIGCONT).  SIGKILL and SIGTERM also
 * reap the process (pid becomes 0). */
void test_zk_signal(test_zk *z, int i, int sig);
/* Start server i again with its configuration and data; wait until it
 * answers.  wipe: remove its data first (every session it knew is gone). */
void test_zk_restart_server(test_zk *z, int i, bool wipe);
/* The index of the ensemble's current leader (or 0 for a single server),
 * waiting up to timeout_ms for one; -1 if none. */
int test_zk_leader(test_zk *z, int64_t timeout_ms);

/* A four-letter word to server i; its answer (g_free) or NULL if none
 * came within timeout_ms (a frozen JVM still accepts connections). */
char *test_zk_4lw(test_zk *z, int i, const char *word, int64_t timeout_ms);
/* One numeric field of "mntr" on server i (e.g. "zk_watch_count",
 * "zk_sum_node_deleted_watch_count"); -1 if absent or no answer. */
long long test_zk_mntr(test_zk *z, int i, const char *key);

/* Print the log tails of every server seen by this process if failures is
 * not 0, and return failures (as test_finish() does for Redis). */
int test_zk_finish(int failures);

#endif
