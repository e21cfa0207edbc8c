/* SPDX-License-Identifier: MIT */
/*
 * Read-write lock checks shared by the backend suites (docs/recipes.md,
 * "Read-write locks"), each on one resource of the backend at uri.
 * Separate clients in one process are separate owners, so one thread plays
 * several.  Each fails the test on a broken rule and leaves nothing held.
 */
#ifndef DLOCK_TEST_RW_H
#define DLOCK_TEST_RW_H

#include <stdbool.h>
#include <stdint.h>

#include "dlock.h"

/* A handle on resource in mode (a new client of its own: another owner). */
typedef struct test_rw_owner {
	dlock_client *client;
	dlock_lock *lock;
} test_rw_owner;

void test_rw_owner_open(test_rw_owner *o, const char *uri, const char *resource, dlock_mode mode);
void test_rw_owner_close(test_rw_owner *o);

/* An owner acquiring on a thread of its own (its handle the owner, so
 * this thread may look at and release the hold). */
typedef struct test_rw_waiter {
	test_rw_owner owner;
	int rc;
	int done; /* atomic: the acquire returned */
	void *thread;
} test_rw_waiter;

/* Open w's owner as test_rw_owner_open() does and start its acquire,
 * with wait_ms. */
void test_rw_waiter_start(test_rw_waiter *w, const char *uri, const char *resource, dlock_mode mode,
                          int64_t wait_ms);
/* Whether w's acquire returned (a condition for test_wait_until()). */
bool test_rw_waiter_done(void *w);
/* Join w's thread; its result is w->rc. */
void test_rw_waiter_join(test_rw_waiter *w);

/*
 * Readers share, a writer or mutex holder excludes readers and writers,
 * readers exclude writers and mutex holders; every grant's token is larger
 * than the one before, whatever the modes; the query lists every reader
 * (with this process's pid) and says shared, or exclusive with one holder.
 */
void test_rw_share_and_exclude(const char *uri, const char *resource);

/* An owner holding READ that asks for WRITE or EXCLUSIVE gets
 * DLOCK_EDEADLK at once, and its read hold stays. */
void test_rw_upgrade_refused(const char *uri, const char *resource);

/*
 * Downgrade: an owner holding WRITE takes READ at once, with a token no
 * smaller than the write's, while a writer of another owner waits;
 * releasing the write hold keeps the read hold, and the waiting writer
 * gets in only once every read hold is gone, with a larger token than the
 * read hold's.  A reader arriving meanwhile: on a backend that serves
 * arrival order (fair) it waits behind the queued writer, elsewhere (the
 * file backend's kernel order) it shares the read hold at once.
 */
void test_rw_downgrade(const char *uri, const char *resource, bool fair);

#endif
