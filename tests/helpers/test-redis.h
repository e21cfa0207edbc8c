/*
 * Test helper: throwaway redis-server instances on free loopback ports in
 * temporary directories, stopped by PID; plus the small utilities the
 * integration tests share (polling, clocks, worker processes).
 *
 * Failures to start a server fail the calling test: a missing server is
 * never a skip.
 */
#ifndef DLOCK_TEST_REDIS_H
#define DLOCK_TEST_REDIS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>

typedef struct test_redis {
	pid_t pid;
	int port;
	char *dir;
	char *unix_path;     /* set when started with a unix socket */
	char *password;      /* requirepass, or NULL */
	char **extra;        /* extra server arguments, NULL-terminated */
	redisContext *ctx;   /* inspection connection (authenticated) */
} test_redis;

/*
 * Start redis-server (or $DLOCK_TEST_REDIS_SERVER).  extra: further
 * arguments, NULL-terminated (may be NULL).  password: passed as
 * --requirepass and used by the inspection connection.  unix_socket:
 * also listen on a socket in the temporary directory.
 * Aborts the test (cmocka fail) if the server does not answer in 10 s.
 */
test_redis *test_redis_start(const char *const *extra, const char *password, bool unix_socket);
void test_redis_stop(test_redis *r);
/* Kill the server (SIGKILL) and start it again on the same port, empty. */
void test_redis_restart(test_redis *r);
void test_redis_signal(test_redis *r, int sig);

/* "redis://127.0.0.1:PORT" plus suffix (e.g. "?ttl=1s"); g_free. */
char *test_redis_uri(const test_redis *r, const char *suffix);

/* Run a command on the inspection connection (printf-style, hiredis
 * format).  Reconnects as needed.  The reply is freed by the caller
 * (freeReplyObject); NULL if the server did not answer. */
redisReply *test_redis_cmd(test_redis *r, const char *fmt, ...);
/* The integer reply of a command, or -999 on any other reply. */
long long test_redis_int(test_redis *r, const char *fmt, ...);
/* The string reply of a command (g_free), or NULL for nil or an error. */
char *test_redis_str(test_redis *r, const char *fmt, ...);
/* calls=N from INFO commandstats for one command (e.g. "evalsha"). */
long long test_redis_calls(test_redis *r, const char *command);
/* Number of keys matching pattern. */
long long test_redis_count_keys(test_redis *r, const char *pattern);

/* ---- utilities ---- */

int64_t test_now_ms(void);
int64_t test_now_us(void);
/* Poll cond(arg) every 5 ms until true or timeout_ms passes. */
bool test_wait_until(bool (*cond)(void *), void *arg, int64_t timeout_ms);

/* Remember the test program's own path (call first in main): under
 * valgrind /proc/self/exe is valgrind, not the test. */
void test_init(const char *argv0);

/*
 * Start this test program again as a worker: PROGRAM --worker ARGS.
 * Its stdout is readable through *ret_out_fd.  The worker gets SIGKILL if
 * the test process dies.
 */
pid_t test_spawn_worker(const char *const *args, int *ret_out_fd);
/* Read one line (without '\n') from fd into buf; false at EOF or after
 * timeout_ms. */
bool test_read_line(int fd, char *buf, size_t len, int64_t timeout_ms);
/* Wait for a worker; its exit status (-1 if killed). */
int test_wait_worker(pid_t pid);

#endif
