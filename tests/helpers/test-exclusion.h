/* SPDX-License-Identifier: MIT */
/*
 * Mutual exclusion check shared by the backend suites: worker processes,
 * each with several threads, increment a number in a file by a slow
 * read-modify-write under the lock and append their fencing tokens to a
 * second file while they hold it.  Any overlap of two holders loses an
 * increment; the token file's order is the order of entry, so its tokens
 * must strictly increase.
 */
#ifndef DLOCK_TEST_EXCLUSION_H
#define DLOCK_TEST_EXCLUSION_H

/*
 * The worker, run in a process started with the arguments
 * "counter URI RESOURCE COUNTER-FILE TOKEN-FILE THREADS ROUNDS [elect]"
 * (argv points at URI): one client, THREADS threads with a handle each, ROUNDS
 * increments per thread.  Returns the worker's exit status: 0, 2 if the
 * client could not be built, 3 if any call failed.
 */
int test_exclusion_worker(char **argv);

/*
 * Start processes workers on resource, wait for them, and assert the
 * exact count (processes * threads * rounds) and strictly increasing
 * tokens.  Fails the test otherwise.
 */
void test_exclusion_run(const char *uri, const char *resource, int processes, int threads, int rounds);

/*
 * The same with leaders of the election called name: each thread is a
 * participant that campaigns, takes its turn while leading, and resigns,
 * rounds times (the worker's arguments end with "elect").  One leader at
 * a time, tokens increasing across leaders.
 */
void test_exclusion_run_elections(const char *uri, const char *name, int processes, int threads,
                                  int rounds);

#endif
