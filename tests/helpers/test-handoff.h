/* SPDX-License-Identifier: MIT */
/*
 * Handoff measurement shared by the backend suites: how long after a
 * holder's release a waiter in another process gets the lock.
 */
#ifndef DLOCK_TEST_HANDOFF_H
#define DLOCK_TEST_HANDOFF_H

#include <stdint.h>

/*
 * The waiter, run in a worker process started with the arguments
 * "handoff URI RESOURCE COUNT": acquire COUNT times, printing the monotonic
 * time in µs of each grant, releasing and pausing 30 ms after each so the
 * parent takes the lock back.  Returns the worker's exit status.
 */
int test_handoff_worker(const char *uri, const char *resource, int count);

/*
 * The holder: take the lock, start the waiter, then COUNT times pause
 * pause_us (the waiter is asleep in acquire by then), release, read the
 * waiter's grant time, and take the lock back.  Returns the median
 * handoff in µs; *ret_max_us gets the largest.  Fails the test on error.
 */
int64_t test_handoff_median_us(const char *uri, const char *resource, int count, int64_t pause_us,
                               int64_t *ret_max_us);

#endif
