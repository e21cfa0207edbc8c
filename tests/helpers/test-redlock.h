/* SPDX-License-Identifier: MIT */
/*
 * Test helper for Redlock: N independent throwaway redis-server masters
 * (test-redis.h) and the multi-host URI that locks them by quorum, plus
 * looks at what each master holds.
 */
#ifndef DLOCK_TEST_REDLOCK_H
#define DLOCK_TEST_REDLOCK_H

#include <stdbool.h>

#include "dlock.h"
#include "test-redis.h"

#define TEST_REDLOCK_MAX 7

typedef struct test_redlock {
	int n;
	test_redis *masters[TEST_REDLOCK_MAX];
	bool stopped[TEST_REDLOCK_MAX]; /* SIGSTOPped: not to be inspected */
} test_redlock;

/* Start n masters (n <= TEST_REDLOCK_MAX) from the test's main thread. */
test_redlock *test_redlock_start(int n);
/* Continue any master left SIGSTOPped, stop them all, free. */
void test_redlock_stop(test_redlock *rl);

/*
 * The masters a test program's tests share: test_redlock_suite_setup(),
 * a cmocka group setup, starts TEST_REDLOCK_SUITE_MASTERS of them from
 * the main thread; test_redlock_suite_teardown() stops them.
 */
#define TEST_REDLOCK_SUITE_MASTERS 5
extern test_redlock *test_redlock_suite;
int test_redlock_suite_setup(void **state);
int test_redlock_suite_teardown(void **state);

/* "redis://127.0.0.1:P1,127.0.0.1:P2,...": the first n masters of rl
 * (n <= rl->n), plus suffix (e.g. "?ttl=2s"); g_free. */
char *test_redlock_uri(const test_redlock *rl, int n, const char *suffix);

/* SIGSTOP / SIGCONT master i, remembering it so it is not inspected. */
void test_redlock_freeze(test_redlock *rl, int i);
void test_redlock_thaw(test_redlock *rl, int i);

/*
 * How many running masters hold key (a string value); fails the test if
 * two of them hold different values (one owner token on every master).
 * *ret_value (may be NULL) gets the value (g_free), NULL if none.
 */
int test_redlock_count_key(test_redlock *rl, const char *key, char **ret_value);

/* A client on the first `masters` masters (URI suffix as above) and a
 * handle on resource; fails the test if either cannot be made. */
typedef struct test_redlock_handle {
	dlock_client *client;
	dlock_lock *lock;
} test_redlock_handle;

void test_redlock_open(const test_redlock *rl, test_redlock_handle *h, int masters, const char *suffix,
                       const char *resource);
void test_redlock_close(test_redlock_handle *h);

/*
 * A loopback port whose host silently drops connection attempts, as a
 * host behind a firewall that drops packets does: a listener with a full
 * backlog (listen(0) and one connection that is never accepted), so the
 * kernel ignores every further SYN and a connect neither succeeds nor
 * fails until it gives up.  Pass the result to test_dropping_port_close().
 */
typedef struct test_dropping_port {
	int port;
	int listener;
	int filler;
} test_dropping_port;

test_dropping_port test_dropping_port_open(void);
void test_dropping_port_close(test_dropping_port *d);

/* Leftover keys starting with prefix on every running master, restarting
 * halted ones first (test_redis_leftover_keys). */
long long test_redlock_leftover_keys(test_redlock *rl, const char *prefix);

/*
 * A test's teardown: continue the masters it froze, give background
 * releases 3 s to finish (gone(arg) says when no key is left), then count
 * the keys starting with prefix left behind, naming their number.  0 if
 * none, -1 if some.
 */
int test_redlock_revive(test_redlock *rl, bool (*gone)(void *), void *arg, const char *prefix);

#endif
