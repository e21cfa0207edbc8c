/* SPDX-License-Identifier: MIT */
/*
 * Waiter processes for the wait-queue tests: each one waits for a lock in
 * a process of its own, says on its stdout when it got it (with its
 * fencing token), holds it for a while or until told to release on its
 * stdin, and says when it released.  While it holds the lock it owns a
 * marker file shared by every holder of the test (created with O_EXCL),
 * so two holders at once are seen by the second one.
 *
 * Plus a look at a Redis lock's wait queue: the sorted set "<lock key>:q"
 * whose members are "<lease end>|<ttl>|<id>|<owner token>", and the owner
 * token "dlock1:<32 hex>:<pid>:<tid>:<since>:<host>".
 *
 * Nothing here skips a test: a helper that cannot do its job fails the
 * calling test through cmocka.
 */
#ifndef DLOCK_TEST_WAITERS_H
#define DLOCK_TEST_WAITERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "dlock.h"
#include "test-redis.h"

/* Hold until told ("release" on stdin, or its end). */
#define TEST_WAITER_HOLD_UNTIL_TOLD (-1)

/*
 * The worker, run in a process started with the arguments
 * "waiter URI RESOURCE WAIT_MS HOLD_MS MARKER" (argv points at URI): one
 * dlock_acquire(WAIT_MS); then one line, "granted TOKEN", "overlap TOKEN"
 * (the marker existed: another holder had the lock), or "failed CODE"
 * (dlock_code_name) and exit.  Once granted it holds for HOLD_MS, or until
 * a line or the end of its stdin if HOLD_MS is TEST_WAITER_HOLD_UNTIL_TOLD,
 * removes the marker, releases, and says "released CODE".  MARKER "-": no
 * marker.  Returns the worker's exit status.
 */
int test_waiter_worker(char **argv);

/* Run the worker if this process was started as one ("PROGRAM --worker
 * waiter ..."): true, with its exit status in *ret_status. */
bool test_waiter_worker_main(int argc, char **argv, int *ret_status);

typedef struct test_waiter {
	pid_t pid;       /* 0 once it has ended */
	int in_fd;
	int out_fd;
	uint64_t token;  /* set by test_waiter_granted() */
	int64_t at_ms;   /* when its last line was read (test_now_ms) */
} test_waiter;

/* Start a waiter worker process (the test program must run
 * test_waiter_worker_main() first thing, or test_queue_main()). */
void test_waiter_start(test_waiter *w, const char *uri, const char *resource, int64_t wait_ms,
                       int64_t hold_ms, const char *marker);

/* Its next line into buf, or fail the test if none comes within
 * timeout_ms (scaled by the slack factor). */
void test_waiter_line(test_waiter *w, char *buf, size_t len, int64_t timeout_ms);

/* Its next line must say "granted TOKEN": returns the token (also kept in
 * w->token); fails the test otherwise. */
uint64_t test_waiter_granted(test_waiter *w, int64_t timeout_ms);

/* Whether it has a line to read right now (it said something). */
bool test_waiter_spoke(const test_waiter *w);

/* Tell a waiter holding until told to release, and wait for its
 * "released DLOCK_OK". */
void test_waiter_release(test_waiter *w);

/* Which of the n waiters says something first within timeout_ms (its line
 * in buf), or fail the test. */
int test_waiters_next(test_waiter *ws, int n, char *buf, size_t len, int64_t timeout_ms);

/* Wait for its exit with status 0 (its stdin is closed first). */
void test_waiter_finish(test_waiter *w);

/* SIGKILL it and reap it. */
void test_waiter_kill(test_waiter *w);

/* A fresh path for a marker file, in a new temporary directory (free with
 * test_marker_free(), which removes both). */
char *test_marker_new(void);
void test_marker_free(char *marker);

/* SIGKILL and reap every waiter started and not yet ended (those of a
 * test that failed). */
void test_waiters_kill_all(void);

struct CMUnitTest;

/*
 * The main of a wait-queue test program: test_init(); the worker if this
 * process was started as one; else start a server, set *ret_server, its
 * URI *ret_uri and a marker path *ret_marker for the tests, run them as
 * cmocka group name, stop the server, and return test_finish()'s result.
 * Give each test test_queue_reset as its setup.
 */
int test_queue_main(int argc, char **argv, const char *name, const struct CMUnitTest *tests,
                    size_t count, test_redis **ret_server, char **ret_uri, char **ret_marker);
/* Before each test: the waiters and the marker a failed test left go. */
int test_queue_reset(void **state);

/* ---- a waiter thread of this process ---- */

typedef struct test_acquire_thread test_acquire_thread;

/* dlock_acquire(lock, wait_ms) on a new thread.  Freed by
 * test_acquire_thread_join(); one a failed test leaves behind is never
 * freed, so the thread never writes into freed memory. */
test_acquire_thread *test_acquire_thread_start(dlock_lock *lock, int64_t wait_ms);
/* Whether it has returned from dlock_acquire. */
bool test_acquire_thread_done(test_acquire_thread *t);
/* Its result, once it returns within timeout_ms (else fail the test). */
int test_acquire_thread_join(test_acquire_thread *t, int64_t timeout_ms);

/* ---- this process as a holder ---- */

typedef struct test_holder {
	dlock_client *client;
	dlock_lock *lock; /* owned by the handle */
	const char *marker;
} test_holder;

/* A client for uri and a handle-owned lock on resource; the holder owns
 * marker (NULL: none) while it holds. */
void test_holder_open(test_holder *h, const char *uri, const char *resource, const char *marker);
/* Acquire without waiting and create the marker; fails the test if either
 * fails. */
void test_holder_take(test_holder *h);
/* Remove the marker, then release; fails the test unless the release
 * returns expect_rc. */
void test_holder_release(test_holder *h, int expect_rc);
void test_holder_close(test_holder *h);

/* ---- a Redis lock's wait queue ---- */

/* The number of entries in the queue of the lock at key (ZCARD key:q). */
long long test_queue_len(test_redis *r, const char *key);

/* Wait until the queue of the lock at key has n entries; fail the test,
 * saying how many it has, if it does not within timeout_ms. */
void test_queue_wait_len(test_redis *r, const char *key, long long n, int64_t timeout_ms);

/* The wait id (the 32 hex digits) of the entry whose owner token is of
 * process pid, or NULL if the queue has none (g_free). */
char *test_queue_entry_id(test_redis *r, const char *key, pid_t pid);

/* The process id in an owner token (a lock key's value), or -1. */
pid_t test_token_pid(const char *token);

/* The process whose owner token the lock at key holds, or -1 if free or
 * held by something else. */
pid_t test_lock_holder_pid(test_redis *r, const char *key);

/* Start a waiter that holds until told (see test_waiter_start) and wait
 * until the queue of the lock at key has n entries (it is the n-th). */
void test_queue_waiter_start(test_redis *r, test_waiter *w, const char *key, const char *uri,
                             const char *resource, int64_t wait_ms, long long n, const char *marker);

/* h releases the lock at key; w, the only waiter left in its queue, must
 * get it within bound_ms (the time is printed) and empty the queue; then
 * w releases and ends. */
void test_queue_release_to(test_redis *r, test_holder *h, test_waiter *w, const char *key,
                           int64_t bound_ms);

/* Nothing but the fencing counter is left of the lock at key: the key and
 * its queue are gone (polled for a while, as a last release may still be
 * on its way), the counter is there.  Fails the test otherwise. */
void test_queue_assert_only_fence(test_redis *r, const char *key);

#endif
