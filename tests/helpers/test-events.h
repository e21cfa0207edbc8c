/* SPDX-License-Identifier: MIT */
/*
 * A recorder for lock state callbacks: each state reported, with the
 * monotonic time (test_now_ms) it arrived at, for tests that assert when a
 * hold became SUSPENDED, RECONNECTED or LOST.
 */
#ifndef DLOCK_TEST_EVENTS_H
#define DLOCK_TEST_EVENTS_H

#include <stdint.h>

#include <glib.h>

#include "dlock.h"

#define TEST_EVENTS_MAX 32

typedef struct test_events {
	GMutex mu;
	int n;
	dlock_state states[TEST_EVENTS_MAX];
	int64_t at_ms[TEST_EVENTS_MAX];
} test_events;

void test_events_init(test_events *ev);
void test_events_clear(test_events *ev);
/* The state callback: dlock_lock_set_state_callback(lock, test_events_record, ev).
 * Events past TEST_EVENTS_MAX are dropped. */
void test_events_record(dlock_lock *lock, dlock_state state, void *user_data);
/* The position of state's first report among the events, or -1. */
int test_events_index(test_events *ev, dlock_state state);
/* When state was first reported (test_now_ms), or -1. */
int64_t test_events_first_at(test_events *ev, dlock_state state);
/* How many events were recorded. */
int test_events_count(test_events *ev);

#endif
