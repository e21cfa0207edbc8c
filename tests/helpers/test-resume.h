/* SPDX-License-Identifier: MIT */
/*
 * A holder paused (SIGSTOP) past the end of its hold while a peer takes
 * the lock, then resumed, shared by the backend suites: what the holder's
 * first look at its lock after the pause says.
 */
#ifndef DLOCK_TEST_RESUME_H
#define DLOCK_TEST_RESUME_H

#include <stdint.h>

/*
 * The holder, run in a worker process started with the arguments
 * "resume URI RESOURCE TTL_MS ROUNDS" (TTL_MS 0: the backend's default
 * TTL): ROUNDS times, acquire and print "held TOKEN", then check
 * dlock_held() every millisecond until a jump of the monotonic clock of
 * over 500 ms across one check shows the process was paused; release at
 * once; after waiting (up to 10 s) for LOST, and 1 s more for a duplicate,
 * print "resumed held=H release=RC lost=N" (H: that first check, N: how
 * many LOST callbacks came).  "dropped" if the hold ended before any
 * pause.  Returns the worker's exit status.
 */
int test_resume_worker(const char *uri, const char *resource, int64_t ttl_ms, int rounds);

/*
 * The other side: start that worker, and each round, once it holds the
 * lock, pause it (SIGSTOP), acquire the lock from this process (the
 * worker's hold must have ended on the server for that), resume it
 * (SIGCONT) and check its line: held=0, release DLOCK_ELOST, one LOST.
 * Fails the test otherwise.
 */
void test_resume_rounds(const char *uri, const char *resource, int64_t ttl_ms, int rounds);

#endif
