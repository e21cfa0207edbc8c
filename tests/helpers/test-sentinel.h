/* SPDX-License-Identifier: MIT */
/*
 * Test helper: a throwaway Redis Sentinel setup on loopback.  A master and
 * N replicas (test-redis.h servers, each with --repl-diskless-sync-delay 0
 * so a replica links at once) and three sentinels (redis-server CONF
 * --sentinel, CONF written afresh at every start, since Sentinel rewrites
 * it) that monitor one service with quorum 2, down-after-milliseconds 1000
 * and failover-timeout 4000: a killed master is replaced in about 2.5 s.
 *
 * Everything is a test_redis: on free ports, in fresh temporary
 * directories, stopped by PID, SIGKILLed when the thread that started it
 * exits (start from the test's main thread), its log's tail printed by
 * test_finish() when the program fails.  A setup that does not get ready
 * fails the calling test (never a skip).
 *
 * The helper talks only to the sentinels it has not frozen and to the
 * data servers the sentinels name; a test that freezes a data server
 * itself (test_redis_signal) should not wait for readiness until it is
 * thawed.
 */
#ifndef DLOCK_TEST_SENTINEL_H
#define DLOCK_TEST_SENTINEL_H

#include <stdbool.h>
#include <stdint.h>

#include "test-redis.h"

#define TEST_SENTINEL_COUNT 3
#define TEST_SENTINEL_MAX_REPLICAS 4

typedef struct test_sentinel {
	char *service;
	char *password;          /* the data servers' requirepass, or NULL */
	char *sentinel_password; /* the sentinels' own requirepass, or NULL */
	/* Data servers in start order: servers[0] is the first master.  Which
	 * one is master now is the sentinels' word: test_sentinel_master(). */
	int n_servers;
	test_redis *servers[1 + TEST_SENTINEL_MAX_REPLICAS];
	test_redis *sentinels[TEST_SENTINEL_COUNT];
	bool frozen[TEST_SENTINEL_COUNT]; /* SIGSTOPped: not asked */
} test_sentinel;

/*
 * Start a master, n_replicas replicas (1..TEST_SENTINEL_MAX_REPLICAS) and
 * three sentinels monitoring it as service (e.g. "mymaster").  password
 * (or NULL): requirepass and masterauth on the data servers, auth-pass on
 * the sentinels (plain words: they go into a configuration file).
 * sentinel_password (or NULL): requirepass on the sentinels.  Returns
 * once the setup is ready (test_sentinel_wait_ready), within 20 s
 * (scaled), or stops it and fails the test.
 */
test_sentinel *test_sentinel_start(const char *service, int n_replicas, const char *password,
                                   const char *sentinel_password);
/* Configuration lines (several, separated by "\n") that every sentinel of
 * the starts after this call gets at the end of its file, e.g. an ACL
 * "user" line; NULL for none. */
void test_sentinel_set_extra_conf(const char *lines);
/* Kill every sentinel and server (kill -9: nothing is kept), remove
 * their directories, keep their logs' tails for test_finish(), free.
 * NULL is a no-op. */
void test_sentinel_stop(test_sentinel *ts);

/*
 * Whether the setup is ready, polled for up to timeout_ms (scaled by
 * test_slack_factor()): a majority of the sentinels name one running data
 * server, which answers ROLE as master; every other running data server
 * receives its writes (SET then WAIT on the master acknowledged by all of
 * them: a replica whose link is "up" may not be receiving yet); and every
 * sentinel neither halted nor frozen names that master and lists every
 * running replica and every other such sentinel as reachable, as a
 * failover needs.  On false, prints what was missing.
 */
bool test_sentinel_wait_ready(test_sentinel *ts, int64_t timeout_ms);

/* "redis+sentinel://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/SERVICE" plus
 * suffix (e.g. "?ttl=2s"); g_free. */
char *test_sentinel_uri(const test_sentinel *ts, const char *suffix);
/* The same with userinfo ("user:password" or ":password", NULL for
 * none) before the sentinels. */
char *test_sentinel_uri_userinfo(const test_sentinel *ts, const char *userinfo, const char *suffix);

/* Sentinel i's port (0 <= i < TEST_SENTINEL_COUNT). */
int test_sentinel_port(const test_sentinel *ts, int i);
/* A command on sentinel i (authenticated), hiredis format; the reply is
 * freed by the caller, NULL if the sentinel did not answer. */
redisReply *test_sentinel_cmd(test_sentinel *ts, int i, const char *fmt, ...);

/*
 * The data server the first answering sentinel names as master (it may
 * be halted, if it was just killed); fails the test if no sentinel
 * answers or it names a port that is none of ours.
 */
test_redis *test_sentinel_master(test_sentinel *ts);
/* The i-th data server, in start order, that is not the current master
 * (it may be halted: look at ->pid); fails the test if there is none. */
test_redis *test_sentinel_replica(test_sentinel *ts, int i);

/* kill -9 the current master; its port and directory stay ours (see
 * test_sentinel_restart_as_replica).  Returns its port. */
int test_sentinel_kill_master(test_sentinel *ts);
/*
 * Poll until a majority of the sentinels name a master other than
 * old_port and that server answers ROLE as master, for up to timeout_ms
 * (scaled by test_slack_factor()).
 */
bool test_sentinel_wait_promoted(test_sentinel *ts, int old_port, int64_t timeout_ms);
/*
 * SENTINEL FAILOVER on the first answering sentinel, then wait (15 s,
 * scaled) until a replica is promoted as above; fails the test if the
 * sentinel refuses or nothing is promoted.  Returns the old master's
 * port.  The old master stays up, and a master, until a sentinel turns
 * it into a replica: about 10 s after the switch with Redis 7.0, which
 * waits 8 s after it first reports itself master and asks it every 10 s.
 * test_sentinel_wait_ready() waits for that too.
 */
int test_sentinel_failover(test_sentinel *ts);
/* Start a halted data server again, empty, on its port, as a replica of
 * the current master. */
void test_sentinel_restart_as_replica(test_sentinel *ts, test_redis *server);

/* SIGSTOP / SIGCONT sentinel i, remembering it so it is not asked. */
void test_sentinel_freeze(test_sentinel *ts, int i);
void test_sentinel_thaw(test_sentinel *ts, int i);
/* kill -9 sentinel i; its port and directory stay ours. */
void test_sentinel_halt(test_sentinel *ts, int i);
/* Start a halted sentinel i again on its port with a fresh configuration
 * that monitors the current master (a new sentinel id to the others). */
void test_sentinel_resume(test_sentinel *ts, int i);

#endif
