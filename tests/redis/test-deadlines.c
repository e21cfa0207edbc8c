/*
 * The caller's deadline on Redis: a wait that is too short for the server
 * to answer is a timeout, not an unreachable server.
 */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-redis.h"
#include "test-waiters.h"

/* A command timeout far longer than the waits. */
#define SLOW_COMMAND_TIMEOUT "3s"

static test_redis *server;
static char *uri;
static char *marker;

/* ---- short waits --------------------------------------------------------- */

/* A waiter kind and the hold that keeps it out. */
typedef struct contention {
	const char *resource;
	dlock_mode holder_mode;
	dlock_mode waiter_mode;
	uint32_t permits;   /* > 1: a semaphore, taken by that many holders */
} contention;

static const contention contentions[] = {
	{ "deadline/short-mutex", DLOCK_MODE_EXCLUSIVE, DLOCK_MODE_EXCLUSIVE, 1 },
	{ "deadline/short-read", DLOCK_MODE_WRITE, DLOCK_MODE_READ, 1 },
	{ "deadline/short-write", DLOCK_MODE_READ, DLOCK_MODE_WRITE, 1 },
	{ "deadline/short-permits", DLOCK_MODE_EXCLUSIVE, DLOCK_MODE_EXCLUSIVE, 2 },
};

static dlock_lock *lock_for(dlock_client *client, const contention *c, dlock_mode mode)
{
	dlock_lock *lock;

	assert_int_equal(dlock_lock_new(client, c->resource, &lock), DLOCK_OK);
	assert_int_equal(dlock_lock_set_owner(lock, DLOCK_OWNER_HANDLE), DLOCK_OK);
	if (c->permits > 1)
		assert_int_equal(dlock_lock_set_permits(lock, c->permits), DLOCK_OK);
	else
		assert_int_equal(dlock_lock_set_mode(lock, mode), DLOCK_OK);
	return lock;
}

/* Each hold of the contention (one, or every permit), on client. */
static void hold(dlock_client *client, const contention *c, dlock_lock **held)
{
	for (uint32_t i = 0; i < MAX(c->permits, 1); i++) {
		held[i] = lock_for(client, c, c->holder_mode);
		if (dlock_acquire(held[i], 5000) != DLOCK_OK)
			fail_msg("%s: holder %u: %s", c->resource, i, dlock_last_error_message());
	}
}

static void unhold(const contention *c, dlock_lock **held)
{
	for (uint32_t i = 0; i < MAX(c->permits, 1); i++) {
		assert_int_equal(dlock_release(held[i]), DLOCK_OK);
		dlock_lock_free(held[i]);
	}
}

/* Until the paused server answers again. */
static bool server_answers(void *arg)
{
	redisReply *reply = test_redis_cmd(server, "PING");
	bool ok = reply && reply->type == REDIS_REPLY_STATUS;

	if (reply)
		freeReplyObject(reply);
	return ok;
}

/*
 * Waits of 1 to 20 ms on a lock another client holds, for a mutex, READ,
 * WRITE and a permit, each on a fresh client (the connect is part of the
 * wait) and on a warm one; with pause_ms, the server is paused (CLIENT
 * PAUSE) that long before each, so no answer can come within the wait.
 * Every one must be DLOCK_ETIMEDOUT.  Returns how many were not.
 */
static int short_waits(const int64_t *waits, size_t n_waits, int64_t pause_ms)
{
	char *fast_uri = test_redis_uri(server, "?command-timeout=" SLOW_COMMAND_TIMEOUT);
	dlock_client *holders, *warm;
	int wrong = 0, total = 0;

	assert_int_equal(dlock_client_new(fast_uri, &holders), DLOCK_OK);
	assert_int_equal(dlock_client_new(fast_uri, &warm), DLOCK_OK);
	for (size_t c = 0; c < G_N_ELEMENTS(contentions); c++) {
		const contention *k = &contentions[c];
		dlock_lock *held[2];
		dlock_lock *warm_lock = lock_for(warm, k, k->waiter_mode);
		dlock_info *info;

		hold(holders, k, held);
		/* Warm: its pool has a connection, its subscriber is up. */
		assert_int_equal(dlock_lock_query(warm_lock, &info), DLOCK_OK);
		dlock_info_free(info);
		assert_int_equal(dlock_acquire(warm_lock, 200), DLOCK_ETIMEDOUT);
		for (size_t i = 0; i < n_waits; i++) {
			for (int fresh = 0; fresh < 2; fresh++) {
				dlock_client *client = warm;
				dlock_lock *lock = warm_lock;
				int rc;

				if (fresh) {
					assert_int_equal(dlock_client_new(fast_uri, &client), DLOCK_OK);
					lock = lock_for(client, k, k->waiter_mode);
				}
				if (pause_ms > 0)
					freeReplyObject(test_redis_cmd(server, "CLIENT PAUSE %" PRId64 " ALL", pause_ms));
				rc = dlock_acquire(lock, waits[i]);
				total++;
				if (rc != DLOCK_ETIMEDOUT) {
					wrong++;
					print_message("%s, %s client, wait %" PRId64 " ms: %s: %s\n", k->resource,
					              fresh ? "fresh" : "warm", waits[i], dlock_code_name(rc),
					              dlock_last_error_message());
				}
				if (rc == DLOCK_OK)
					assert_int_equal(dlock_release(lock), DLOCK_OK);
				if (fresh) {
					dlock_lock_free(lock);
					dlock_client_free(client);
				}
				if (pause_ms > 0)
					assert_true(test_wait_until(server_answers, NULL, 5000));
			}
		}
		unhold(k, held);
		dlock_lock_free(warm_lock);
	}
	dlock_client_free(warm);
	dlock_client_free(holders);
	print_message("%d of %d short waits were not DLOCK_ETIMEDOUT\n", wrong, total);
	g_free(fast_uri);
	return wrong;
}

static void test_short_waits_on_a_busy_healthy_server_time_out_never_unavailable(void **state)
{
	static const int64_t waits[] = { 1, 2, 3, 5, 8, 13, 20 };

	assert_int_equal(short_waits(waits, G_N_ELEMENTS(waits), 0), 0);
	for (size_t c = 0; c < G_N_ELEMENTS(contentions); c++) {
		char *key = g_strdup_printf("dlock:{%s}", contentions[c].resource);

		test_queue_assert_only_fence(server, key);
		g_free(key);
	}
}

/* The server answers, only later than the wait: a timeout too. */
static void test_short_waits_on_a_paused_server_time_out_never_unavailable(void **state)
{
	static const int64_t waits[] = { 1, 5, 20 };

	assert_int_equal(short_waits(waits, G_N_ELEMENTS(waits), 60), 0);
	for (size_t c = 0; c < G_N_ELEMENTS(contentions); c++) {
		char *key = g_strdup_printf("dlock:{%s}", contentions[c].resource);

		test_queue_assert_only_fence(server, key);
		g_free(key);
	}
}

/* Nothing listens on the port: that is known at once, whatever the wait. */
static void test_short_waits_on_a_closed_port_are_unavailable(void **state)
{
	static const int64_t waits[] = { 1, 2, 3, 5, 8, 13, 20 };
	int fd;
	int port = test_closed_port(&fd);
	char *closed = g_strdup_printf("redis://127.0.0.1:%d", port);

	for (size_t i = 0; i < G_N_ELEMENTS(waits); i++) {
		dlock_client *client;
		dlock_lock *lock;
		int rc;

		assert_int_equal(dlock_client_new(closed, &client), DLOCK_OK);
		assert_int_equal(dlock_lock_new(client, "deadline/closed", &lock), DLOCK_OK);
		rc = dlock_acquire(lock, waits[i]);
		if (rc != DLOCK_EUNAVAILABLE)
			fail_msg("wait %" PRId64 " ms on a closed port: %s: %s", waits[i], dlock_code_name(rc),
			         dlock_last_error_message());
		dlock_lock_free(lock);
		dlock_client_free(client);
	}
	close(fd);
	g_free(closed);
}

static void test_no_lock_key_of_this_suite_remains(void **state)
{
	assert_int_equal(test_redis_leftover_keys(server, "dlock:{deadline/"), 0);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_short_waits_on_a_busy_healthy_server_time_out_never_unavailable,
		                       test_queue_reset),
		cmocka_unit_test_setup(test_short_waits_on_a_paused_server_time_out_never_unavailable,
		                       test_queue_reset),
		cmocka_unit_test_setup(test_short_waits_on_a_closed_port_are_unavailable, test_queue_reset),
		cmocka_unit_test(test_no_lock_key_of_this_suite_remains),
	};

	return test_queue_main(argc, argv, "redis-deadlines", tests, G_N_ELEMENTS(tests), &server, &uri,
	                       &marker);
}
