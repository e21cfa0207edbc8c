/* SPDX-License-Identifier: MIT */
/* Small pieces around one hold (test-holds.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "test-holds.h"
#include "test-util.h"

dlock_client *test_client(const char *spec)
{
	dlock_client *client = NULL;

	if (dlock_client_new(spec, &client) != DLOCK_OK)
		fail_msg("%s: %s", spec, dlock_last_error_message());
	return client;
}

dlock_lock *test_lock(dlock_client *client, const char *resource)
{
	dlock_lock *lock = NULL;

	if (dlock_lock_new(client, resource, &lock) != DLOCK_OK)
		fail_msg("'%s': %s", resource, dlock_last_error_message());
	return lock;
}

void test_assert_message_has(const char *what)
{
	const char *m = dlock_last_error_message();

	if (!strstr(m, what))
		fail_msg("message '%s' lacks '%s'", m, what);
}

void test_states_init(test_states *s)
{
	memset(s, 0, sizeof(*s));
	g_mutex_init(&s->mu);
}

void test_states_clear(test_states *s)
{
	g_mutex_clear(&s->mu);
}

void test_states_record(dlock_lock *lock, dlock_state state, void *data)
{
	test_states *s = data;

	(void)lock;
	g_mutex_lock(&s->mu);
	if (s->n < TEST_STATES_MAX)
		s->seen[s->n++] = state;
	if (state == DLOCK_STATE_RECONNECTED)
		s->resumed_at_ms = test_now_ms();
	if (state == DLOCK_STATE_LOST) {
		if (!s->lost_at_ms)
			s->lost_at_ms = test_now_ms();
		s->lost++;
	}
	if (state == DLOCK_STATE_SUSPENDED)
		s->suspended++;
	g_mutex_unlock(&s->mu);
}

int64_t test_states_lost_at(test_states *s)
{
	int64_t at;

	g_mutex_lock(&s->mu);
	at = s->lost_at_ms;
	g_mutex_unlock(&s->mu);
	return at;
}

int test_states_lost(test_states *s)
{
	int n;

	g_mutex_lock(&s->mu);
	n = s->lost;
	g_mutex_unlock(&s->mu);
	return n;
}

int test_states_suspended(test_states *s)
{
	int n;

	g_mutex_lock(&s->mu);
	n = s->suspended;
	g_mutex_unlock(&s->mu);
	return n;
}

int test_states_seen(test_states *s, int i)
{
	int state;

	g_mutex_lock(&s->mu);
	state = i >= 0 && i < s->n ? s->seen[i] : -1;
	g_mutex_unlock(&s->mu);
	return state;
}

int test_states_count(test_states *s)
{
	int n;

	g_mutex_lock(&s->mu);
	n = s->n;
	g_mutex_unlock(&s->mu);
	return n;
}

bool test_states_has_lost(void *s)
{
	return test_states_lost(s) > 0;
}

bool test_states_has_resumed(void *data)
{
	test_states *s = data;
	bool resumed;

	g_mutex_lock(&s->mu);
	resumed = s->resumed_at_ms != 0;
	g_mutex_unlock(&s->mu);
	return resumed;
}
