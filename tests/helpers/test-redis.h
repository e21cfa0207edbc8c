/* SPDX-License-Identifier: MIT */
/*
 * Test helper: throwaway redis-server instances on free loopback ports in
 * fresh temporary directories, stopped by PID, plus an inspection
 * connection for looking at what the library left on the server.
 *
 * A server that cannot be started fails the calling test: a missing
 * redis-server is never a skip.  $DLOCK_TEST_REDIS_SERVER overrides the
 * binary (default: redis-server from PATH, else /usr/bin/redis-server).
 *
 * Servers get SIGKILL when the thread that started them exits
 * (PR_SET_PDEATHSIG), so start them from the test's main thread.
 */
#ifndef DLOCK_TEST_REDIS_H
#define DLOCK_TEST_REDIS_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>

#include "test-util.h"

typedef struct test_redis {
	pid_t pid;           /* 0 while stopped */
	int port;
	int cluster_port;    /* the cluster bus port, or 0 (not a cluster node) */
	char *dir;           /* temporary directory: log, socket */
	char *unix_path;     /* set when started with a unix socket */
	char *password;      /* requirepass, or NULL */
	char **extra;        /* extra server arguments, NULL-terminated */
	char *conf;          /* configuration file text, or NULL */
	redisContext *ctx;   /* inspection connection (authenticated, db 0) */
} test_redis;

/*
 * Start redis-server --port P --bind 127.0.0.1 --save '' --appendonly no
 * --dir TMP, wait until it answers PING (bounded).  extra: further
 * arguments, NULL-terminated (may be NULL), e.g. an ACL user.  password:
 * --requirepass, also used by the inspection connection.  unix_socket:
 * also listen on TMP/redis.sock.
 */
test_redis *test_redis_start(const char *const *extra, const char *password, bool unix_socket);
/*
 * The same with a configuration file: conf is written afresh to
 * TMP/redis.conf before every start (a server may rewrite its file, as
 * Sentinel does) and named first on the command line, before the
 * options, e.g. with extra { "--sentinel", NULL }.  Change r->conf
 * (g_free'd) before test_redis_resume() to start with other text.
 */
test_redis *test_redis_start_conf(const char *conf, const char *const *extra, const char *password);
/*
 * The same for a Redis Cluster node: also --cluster-port Q, Q a second
 * free port chosen with P at each start attempt (the default, P + 10000,
 * may be another process's port or no port at all), kept across
 * test_redis_resume().  extra names the cluster options.
 */
test_redis *test_redis_start_cluster_node(const char *const *extra, const char *password);
/* Stop (SIGTERM, SIGKILL after 5 s), remove the directory, free. */
void test_redis_stop(test_redis *r);
/* Stop the server process only; the port and directory stay ours. */
void test_redis_halt(test_redis *r);
/* Start it again, empty (no persistence), on the same port. */
void test_redis_resume(test_redis *r);
/* test_redis_halt() then test_redis_resume(). */
void test_redis_restart(test_redis *r);
/* Send a signal to the server process (SIGSTOP, SIGCONT...). */
void test_redis_signal(test_redis *r, int sig);

/* "redis://127.0.0.1:PORT" plus suffix (e.g. "?ttl=1s"); g_free. */
char *test_redis_uri(const test_redis *r, const char *suffix);
/* "redis+unix://SOCKET" plus suffix; g_free. */
char *test_redis_unix_uri(const test_redis *r, const char *suffix);

/* Run a command on the inspection connection (printf-style, hiredis
 * format).  Reconnects as needed, and sends the command once more on a
 * new connection if the server had closed the idle one (CLIENT KILL).
 * The reply is freed by the caller (freeReplyObject); NULL if the server
 * did not answer. */
redisReply *test_redis_cmd(test_redis *r, const char *fmt, ...);
/* The same, with a va_list. */
redisReply *test_redis_vcmd(test_redis *r, const char *fmt, va_list ap);
/* The same, with the command as argc arguments (binary-safe strings). */
redisReply *test_redis_cmd_argv(test_redis *r, int argc, const char *const *argv);
/* The integer reply of a command, or -999 on any other reply. */
long long test_redis_int(test_redis *r, const char *fmt, ...);
/* The string reply of a command (g_free), or NULL for nil or an error. */
char *test_redis_str(test_redis *r, const char *fmt, ...);
/* calls=N from INFO commandstats for one command (e.g. "evalsha"). */
long long test_redis_calls(test_redis *r, const char *command);
/* A numeric field of INFO (e.g. "total_connections_received"); -1 if
 * absent. */
long long test_redis_info_int(test_redis *r, const char *field);
/* Subscribers of a channel (PUBSUB NUMSUB); -1 on error. */
long long test_redis_numsub(test_redis *r, const char *channel);
/* Number of keys matching pattern (KEYS). */
long long test_redis_count_keys(test_redis *r, const char *pattern);
/*
 * Keys starting with prefix, in every database, that are not fencing
 * counters ("...:fence", which outlive their locks by design, so tokens
 * keep increasing).  Prints each one found.  Uses SCAN.
 */
long long test_redis_leftover_keys(test_redis *r, const char *prefix);
/* The same count, each key unnamed: for polling until none is left. */
long long test_redis_leftover_count(test_redis *r, const char *prefix);

/*
 * Print the tail of every server log seen by this process if failures is
 * not 0, and return failures.  Use as
 *   return test_finish(cmocka_run_group_tests_name(...));
 */
int test_finish(int failures);

#endif
