/* SPDX-License-Identifier: MIT */
/*
 * Semaphore check shared by the backend suites: worker processes, each
 * with several threads and a handle per thread set to N permits, count
 * how many of them hold at once in a shared file (updated under flock,
 * so the count itself is exact) and record every fencing token.  The
 * run asserts that never more than N held at once, that N was reached,
 * and that no two holds got the same token.
 */
#ifndef DLOCK_TEST_PERMITS_H
#define DLOCK_TEST_PERMITS_H

#include <stdbool.h>
#include <stdint.h>

/*
 * The worker, run in a process started with the arguments
 * "permits URI RESOURCE PERMITS COUNT-FILE TOKEN-FILE THREADS ROUNDS"
 * (argv points at URI).  In its first round each holder stays until N
 * holders are in at once (or 10 s pass), so a semaphore that admits
 * fewer than N is seen; later rounds hold for a few milliseconds.
 * Returns the worker's exit status: 0, 2 if the client could not be
 * built, 3 if any call failed.
 */
int test_permits_worker(char **argv);

/*
 * Start processes workers on resource with permits N, wait for them, and
 * assert: at most N holders at any time, exactly N at some time, and
 * processes * threads * rounds distinct tokens.  Fails the test otherwise.
 */
void test_permits_run(const char *uri, const char *resource, uint32_t permits, int processes,
                      int threads, int rounds);

/*
 * A worker that holds one permit: "permit-hold URI RESOURCE PERMITS"
 * (argv points at URI).  Prints "held TOKEN" once it holds, then holds
 * until its stdin ends or it is killed.  Exit 2 if the client cannot be
 * built, 3 if the acquire fails.
 */
int test_permit_hold_worker(char **argv);

/* The worker side of a semaphore suite's main: "PROGRAM --worker KIND
 * ARGS..." with KIND permits or permit-hold; 64 for anything else. */
int test_permits_worker_main(int argc, char **argv);

/*
 * The checks of a semaphore of 3 on resource, each participant with a
 * client of its own: 3 hold at once and a 4th try is DLOCK_EBUSY; the
 * query shows 3 of 3 taken with every holder; tokens increase in the
 * order of the grants; a waiter is given a released permit within
 * wake_bound_ms; another N is refused while the semaphore is in use,
 * naming both numbers, and accepted once nobody holds; one owner's second
 * acquire through another handle is a re-entry, not a second permit; with
 * locks_excluded, a lock on the resource is kept out while permits are
 * taken and keeps the permits out while held (Redis and the file backend
 * keep both in one place; on ZooKeeper, as in Curator, they live apart).
 */
void test_permits_basics(const char *uri, const char *resource, int64_t wake_bound_ms,
                         bool locks_excluded);

/*
 * A permit holder in another process is killed with SIGKILL while every
 * permit (2) is taken and a waiter waits here: the waiter gets the permit
 * within bound_ms of the kill (the lease, the session, the kernel).
 * Returns the time it took, ms.
 */
int64_t test_permits_killed_holder(const char *uri, const char *resource, int64_t bound_ms);

#endif
