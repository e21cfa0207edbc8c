/* SPDX-License-Identifier: MIT */
/*
 * The stress run's referee (stress-check.c): what every owner holds and
 * is trying, kept under one mutex, each rule checked the moment an
 * acquire returns.  A hold is registered once its acquire has returned
 * and unregistered before its release is called, so on a healthy server
 * two registered holds that exclude each other are a broken rule, never
 * a matter of timing.
 */
#ifndef DLOCK_STRESS_CHECK_H
#define DLOCK_STRESS_CHECK_H

#include <stdarg.h>

#include <glib.h>

#include "stress.h"

/* What a hold is. */
typedef enum stress_mode {
	MODE_EXCLUSIVE, /* a mutex's */
	MODE_WRITE,
	MODE_READ,
	MODE_PERMIT,
	MODE_LEADER
} stress_mode;

/* "exclusive", "write", "read", "permit", "leader". */
const char *stress_mode_name(stress_mode mode);

typedef struct stress_referee stress_referee;

/* A try under way: what the referee needs at its end. */
typedef struct stress_try {
	int owner;
	stress_mode mode;
	int64_t wait_ms;
	uint64_t floor;    /* the largest token of a hold returned before it began */
	uint64_t own_write; /* a downgrade: the token of its owner's write hold */
	int others_max;    /* the most other owners that might have held a
	                    * permit while it ran */
	bool listed;
} stress_try;

stress_referee *stress_referee_new(const stress_config *cfg, stress_report *report);
void stress_referee_free(stress_referee *ref);

/* Count and print one broken rule (a line naming the recipe). */
G_GNUC_PRINTF(2, 3) void stress_violation(stress_referee *ref, const char *fmt, ...);

/* An acquire begins / has returned rc with token (when rc is DLOCK_OK:
 * the hold is checked against every registered one, and registered). */
void stress_try_begin(stress_referee *ref, stress_try *t, int owner, stress_mode mode, int64_t wait_ms);
void stress_try_end(stress_referee *ref, stress_try *t, int rc, uint64_t token);

/* A release is about to be called (the hold is no longer believed) / has
 * returned (the server may have let it go). */
void stress_release_begin(stress_referee *ref, int owner, stress_mode mode);
void stress_release_end(stress_referee *ref, int owner, stress_mode mode);

#endif
