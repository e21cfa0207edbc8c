/* SPDX-License-Identifier: MIT */
/*
 * Invariant stress: several threads, each an owner with a client of its
 * own, hammer one resource of one recipe on a healthy backend with every
 * kind of wait -- 0, a few ms, 100 ms and forever -- and random cancels
 * from another thread, while every result and every hold is checked as it
 * happens:
 *  - the result is one the wait allows: wait 0 -> DLOCK_OK or DLOCK_EBUSY;
 *    a deadline -> DLOCK_OK or DLOCK_ETIMEDOUT, returned within the
 *    deadline plus STRESS_SLACK_MS; forever -> DLOCK_OK; a cancel ->
 *    DLOCK_ECANCELED (or the result it raced with) within STRESS_SLACK_MS
 *    of the cancel; never DLOCK_EUNAVAILABLE or anything else on a
 *    healthy server; a release DLOCK_OK;
 *  - the recipe's invariants (stress-check.c): a mutex, a write hold and a
 *    leadership exclusive, readers beside readers only, at most N permits,
 *    tokens increasing; a semaphore's try refused only when N permits
 *    might have been taken (an acquire that gave up may leave its permit
 *    to a background cleanup: it counts for STRESS_GHOST_MS after); an
 *    election's callbacks in step with its campaigns and resigns, its
 *    last resign's RESIGNED delivered although the election is freed
 *    right after.
 * What must be left afterwards -- nothing on the server, no library
 * thread -- is the calling test's to check once stress_run() returns
 * (every client is freed by then).
 */
#ifndef DLOCK_STRESS_H
#define DLOCK_STRESS_H

#include <stdbool.h>
#include <stdint.h>

/* The slack allowed past a deadline or a cancel, before test_slack(). */
#define STRESS_SLACK_MS 500

/* How long a permit may outlive an acquire that gave up (the library's
 * background cleanup), before test_slack(). */
#define STRESS_GHOST_MS 1000

#define STRESS_MAX_THREADS 16

typedef enum stress_recipe {
	STRESS_MUTEX,
	STRESS_RW,        /* READ and WRITE, some WRITE downgraded to READ */
	STRESS_SEMAPHORE, /* permits of a semaphore of permits */
	STRESS_ELECTION
} stress_recipe;

typedef struct stress_config {
	const char *uri;
	const char *resource;
	stress_recipe recipe;
	uint32_t permits;   /* STRESS_SEMAPHORE */
	int threads;
	int64_t duration_ms;
	uint32_t seed;
	/* Waits of 0 and forever only, and no cancels: no acquire ever gives
	 * up, so nothing is left for the library to clean up in the
	 * background, and a refused try can only be the semaphore's doing. */
	bool never_give_up;
} stress_config;

typedef struct stress_report {
	int64_t acquires, granted, busy, timed_out, canceled, cancels_sent, downgrades;
	int64_t violations; /* every broken rule, each printed when found */
} stress_report;

/* Run the stress on cfg; fills *report; prints every violation and a
 * summary line.  Every client it made is freed when it returns. */
void stress_run(const stress_config *cfg, stress_report *report);

/* "mutex", "read-write", "semaphore", "election". */
const char *stress_recipe_name(stress_recipe recipe);

#endif
