/* SPDX-License-Identifier: MIT */
/*
 * Generic utilities for the integration tests: clocks, polling, timing
 * slack, worker processes started by re-executing the test program, and
 * small fake network peers (a closed port, a listener that never answers;
 * the fault-injection proxy is in test-proxy.h).
 *
 * Nothing here skips a test: a helper that cannot do its job fails the
 * calling test through cmocka.
 */
#ifndef DLOCK_TEST_UTIL_H
#define DLOCK_TEST_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ---- time ---- */

int64_t test_now_ms(void);
int64_t test_now_us(void);
/* Wall-clock milliseconds since the Unix epoch (for holder info). */
int64_t test_wall_ms(void);

/*
 * Poll cond(arg) every 5 ms until it returns true or timeout_ms passes.
 * Timing tests wait for conditions this way, with generous bounds, rather
 * than sleeping a fixed time and assuming.  The timeout is scaled by
 * test_slack_factor().
 */
bool test_wait_until(bool (*cond)(void *), void *arg, int64_t timeout_ms);

/*
 * Poll cond(arg) the same way for exactly window_ms, not scaled: for rates
 * and "this does not happen within T" checks, where T is the library's
 * own real-time behaviour (a reconnect rate, an idle probe), which a
 * slower test process does not stretch.
 */
bool test_poll_window(bool (*cond)(void *), void *arg, int64_t window_ms);

/*
 * How much slower than native the tests run: 1 normally, more under
 * valgrind or when $DLOCK_TEST_SLACK_FACTOR says so.  test_slack(ms)
 * scales a scheduling margin (never a bound the library promises, such as
 * a lease end, which holds at any speed).
 */
int test_slack_factor(void);
/* Whether the test runs under valgrind. */
bool test_under_valgrind(void);
int64_t test_slack(int64_t margin_ms);

/* Whether thread tid of this process is asleep (state S in
 * /proc/self/task/TID/stat); false if it does not exist. */
bool test_thread_sleeps(int tid);

/* Stop one thread tid of a worker process (the caller its parent), its
 * other threads running on: ptrace, seized and interrupted; thaw detaches.
 * A worker's main thread's id is its process id. */
void test_thread_freeze(pid_t tid);
void test_thread_thaw(pid_t tid);

/* ---- files ---- */

/* Remove dir and everything below it (symbolic links, not their targets). */
void test_remove_tree(const char *dir);

/* A private lock directory for the file backend, "locks" inside a fresh
 * temporary directory named after prefix: its path and its file:// URI
 * (g_free both, after test_file_dir_remove()). */
void test_file_dir_make(const char *prefix, char **ret_dir, char **ret_uri);
/* Remove the temporary directory around dir. */
void test_file_dir_remove(const char *dir);

/* How many entries dir has (not counting "." and ".."); fails the test if
 * it cannot be read.  Also counts descriptors and threads, in /proc/self. */
int test_count_entries(const char *dir);

/* The last 3000 bytes of a server's log at path, headed by the path and
 * the server's port, for a failure message; NULL if it cannot be read.
 * Caller frees with g_free(). */
char *test_log_tail(const char *path, int port);

/* Keep a server's log tail (taken, may be NULL) to print if the test run
 * fails; test_logs_finish(failures) prints them to stderr when failures is
 * not 0, drops them, and returns failures. */
void test_logs_keep(char *tail);
int test_logs_finish(int failures);

/* ---- worker processes ---- */

/* Remember the test program's own path (call first in main): under
 * valgrind /proc/self/exe is valgrind, not the test.  With
 * DLOCK_TEST_ONLY=GLOB in the environment, only the tests whose names
 * match GLOB run. */
void test_init(const char *argv0);

/*
 * Start argv[0] with argv (NULL-terminated) as a child process that gets
 * SIGKILL when the test process dies.  Its stdout is readable through
 * *ret_out_fd (NULL: inherited) and its stdin writable through *ret_in_fd
 * (NULL: /dev/null).  The child is exec'ed right after fork(), so forking
 * the multithreaded test process is safe.
 */
pid_t test_spawn(const char *const *argv, int *ret_in_fd, int *ret_out_fd);

/*
 * Start this test program again as a worker: PROGRAM --worker ARGS.
 * Its stdout is readable through *ret_out_fd.
 */
pid_t test_spawn_worker(const char *const *args, int *ret_out_fd);
/* The same, with its stdin writable through *ret_in_fd. */
pid_t test_spawn_worker_io(const char *const *args, int *ret_in_fd, int *ret_out_fd);

/* Read one line (without '\n') from fd into buf; false at EOF or after
 * timeout_ms. */
bool test_read_line(int fd, char *buf, size_t len, int64_t timeout_ms);
/* Read lines from fd until one begins with prefix (into buf); false at
 * EOF or when none came within timeout_ms. */
bool test_read_line_prefixed(int fd, const char *prefix, char *buf, size_t len, int64_t timeout_ms);
/* Write a whole string to fd; false on error. */
bool test_write_str(int fd, const char *text);
/* Run fn(arg) on n threads at once and wait for them all. */
void test_run_threads(int n, void *(*fn)(void *), void *arg);
/* Append a fencing token as one line to the file at path (created if
 * missing), in one write(2), so lines of concurrent writers never mix. */
bool test_append_token(const char *path, uint64_t token);
/* Wait for a child: its exit status, or -1 if it was killed by a signal
 * (*ret_signal, if not NULL, gets the signal or 0). */
int test_wait_child(pid_t pid, int *ret_signal);
int test_wait_worker(pid_t pid);

/* ---- fake network peers ---- */

/*
 * A loopback port on which nothing listens: a socket bound to it but not
 * listening (kept open so no one else takes the port), so a connect is
 * refused at once.  Close *ret_fd when done.
 */
int test_closed_port(int *ret_fd);

/*
 * A loopback port that accepts TCP connections (the kernel completes them
 * into the backlog) but never reads or answers.  Close *ret_fd when done.
 */
int test_silent_port(int *ret_fd);

/* The fault-injection proxy, test_proxy_*, has a header of its own. */
#include "test-proxy.h"

#endif
