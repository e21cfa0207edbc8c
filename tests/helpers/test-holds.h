/* SPDX-License-Identifier: MIT */
/*
 * Small pieces the library's suites share around one hold: a client and
 * a handle that fail the test if they cannot be made, a check of the
 * last error's wording, and a state callback that records what a hold
 * was told and when.
 */
#ifndef DLOCK_TEST_HOLDS_H
#define DLOCK_TEST_HOLDS_H

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>

#include "dlock.h"

/* A client on spec; the test fails, with the library's message, if it
 * cannot be made. */
dlock_client *test_client(const char *spec);
/* A handle on resource; the test fails if it cannot be made. */
dlock_lock *test_lock(dlock_client *client, const char *resource);
/* The test fails unless dlock_last_error_message() contains what. */
void test_assert_message_has(const char *what);

#define TEST_STATES_MAX 16

/* What a hold's state callback heard: the first TEST_STATES_MAX states in
 * order, its first LOST's and last RECONNECTED's times (test_now_ms(), 0
 * for none) and how many SUSPENDED and LOST.  Read under mu. */
typedef struct test_states {
	GMutex mu;
	int seen[TEST_STATES_MAX];
	int n;
	int64_t lost_at_ms;
	int64_t resumed_at_ms;
	int suspended;
	int lost;
} test_states;

void test_states_init(test_states *s);
void test_states_clear(test_states *s);
/* The callback: dlock_lock_set_state_callback(lock, test_states_record, &s). */
void test_states_record(dlock_lock *lock, dlock_state state, void *data);
int64_t test_states_lost_at(test_states *s);
int test_states_lost(test_states *s);
int test_states_suspended(test_states *s);
/* The i-th state heard (-1 if fewer), and how many were. */
int test_states_seen(test_states *s, int i);
int test_states_count(test_states *s);
/* Conditions for test_wait_until() (arg: the test_states *): LOST was
 * heard; RECONNECTED was. */
bool test_states_has_lost(void *s);
bool test_states_has_resumed(void *s);

#endif
