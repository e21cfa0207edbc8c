/* SPDX-License-Identifier: MIT */
#include "test-events.h"

#include "test-util.h"

void test_events_init(test_events *ev)
{
	g_mutex_init(&ev->mu);
	ev->n = 0;
}

void test_events_clear(test_events *ev)
{
	g_mutex_clear(&ev->mu);
}

void test_events_record(dlock_lock *lock, dlock_state state, void *user_data)
{
	test_events *ev = user_data;

	(void)lock;
	g_mutex_lock(&ev->mu);
	if (ev->n < TEST_EVENTS_MAX) {
		ev->states[ev->n] = state;
		ev->at_ms[ev->n] = test_now_ms();
		ev->n++;
	}
	g_mutex_unlock(&ev->mu);
}

int test_events_index(test_events *ev, dlock_state state)
{
	int found = -1;

	g_mutex_lock(&ev->mu);
	for (int i = 0; i < ev->n && found < 0; i++)
		if (ev->states[i] == state)
			found = i;
	g_mutex_unlock(&ev->mu);
	return found;
}

int64_t test_events_first_at(test_events *ev, dlock_state state)
{
	int i = test_events_index(ev, state);
	int64_t at;

	if (i < 0)
		return -1;
	g_mutex_lock(&ev->mu);
	at = ev->at_ms[i];
	g_mutex_unlock(&ev->mu);
	return at;
}

int test_events_count(test_events *ev)
{
	int n;

	g_mutex_lock(&ev->mu);
	n = ev->n;
	g_mutex_unlock(&ev->mu);
	return n;
}
