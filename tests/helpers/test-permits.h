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

#endif
