/*
 * The watchdog under faults that touch several leases at once: a script
 * cache flushed while renewals go out pipelined.  Each lease must get its
 * own outcome.
 */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-redis.h"

static test_redis *server;

/* What one lock's state callback saw, with the monotonic time of each. */
typedef struct events {
	GMutex mu;
	int states[16];
	int64_t at_ms[16];
	int n;
} events;

static void record(dlock_lock *lock, dlock_state state, void *user_data)
{
	events *ev = user_data;

	g_mutex_lock(&ev->mu);
	if (ev->n < 16) {
		ev->states[ev->n] = state;
		ev->at_ms[ev->n] = test_now_ms();
		ev->n++;
	}
	g_mutex_unlock(&ev->mu);
}

/* Monotonic time of the first event of this state, or -1. */
static int64_t state_at(events *ev, int state)
{
	int64_t at = -1;

	g_mutex_lock(&ev->mu);
	for (int i = 0; i < ev->n && at < 0; i++)
		if (ev->states[i] == state)
			at = ev->at_ms[i];
	g_mutex_unlock(&ev->mu);
	return at;
}

static bool got_lost(void *arg)
{
	return state_at(arg, DLOCK_STATE_LOST) >= 0;
}

static dlock_lock *new_lock(dlock_client *client, const char *resource, int64_t ttl_ms,
                            int watchdog, events *ev)
{
	dlock_lock *lock;

	memset(ev, 0, sizeof(*ev));
	g_mutex_init(&ev->mu);
	assert_int_equal(dlock_lock_new(client, resource, &lock), DLOCK_OK);
	assert_int_equal(dlock_lock_set_ttl(lock, ttl_ms), DLOCK_OK);
	assert_int_equal(dlock_lock_set_watchdog(lock, watchdog), DLOCK_OK);
	assert_int_equal(dlock_lock_set_state_callback(lock, record, ev), DLOCK_OK);
	return lock;
}

#define FLUSH_LOCKS 4
#define FLUSH_VICTIM 2

/*
 * Renewals of leases due together go out pipelined.  After SCRIPT FLUSH
 * each of them answers NOSCRIPT; the one whose key a peer overwrote must be
 * reported LOST, and the others renewed, never LOST.
 */
static void test_script_flush_gives_each_pipelined_renewal_its_own_result(void **state)
{
	char *uri = test_redis_uri(server, "?command-timeout=3s");
	dlock_client *client;
	dlock_lock *locks[FLUSH_LOCKS];
	events ev[FLUSH_LOCKS];
	char *keys[FLUSH_LOCKS];
	char *value;
	redisReply *reply;
	int64_t t0, until;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	for (int i = 0; i < FLUSH_LOCKS; i++) {
		char *resource = g_strdup_printf("wd/flush/%d", i);

		keys[i] = g_strdup_printf("dlock:{%s}", resource);
		locks[i] = new_lock(client, resource, 1500, 1, &ev[i]);
		g_free(resource);
	}
	for (int i = 0; i < FLUSH_LOCKS; i++)
		assert_int_equal(dlock_acquire(locks[i], 5000), DLOCK_OK);
	t0 = test_now_ms();

	/* Hold the first renewal (due 500 ms after its acquire) at the server
	 * until the others are due too: from then on they share one send time
	 * and go out in one pipelined batch. */
	g_usleep(300 * 1000);
	reply = test_redis_cmd(server, "CLIENT PAUSE 500 ALL");
	assert_non_null(reply);
	assert_int_equal(reply->type, REDIS_REPLY_STATUS);
	freeReplyObject(reply);
	g_usleep(600 * 1000);

	/* A peer takes the victim's key; keep the script cache empty for
	 * several renewal periods so every batch meets NOSCRIPT. */
	freeReplyObject(test_redis_cmd(server, "SET %s %s PX 10000", keys[FLUSH_VICTIM], "peer-value"));
	until = test_now_ms() + 2500;
	while (test_now_ms() < until) {
		freeReplyObject(test_redis_cmd(server, "SCRIPT FLUSH"));
		g_usleep(20 * 1000);
	}
	print_message("flushing ended %" PRId64 " ms after the acquires\n", test_now_ms() - t0);

	assert_true(test_wait_until(got_lost, &ev[FLUSH_VICTIM], 2000));
	assert_false(dlock_held(locks[FLUSH_VICTIM]));
	value = test_redis_str(server, "GET %s", keys[FLUSH_VICTIM]);
	assert_non_null(value);
	assert_string_equal(value, "peer-value");
	g_free(value);
	for (int i = 0; i < FLUSH_LOCKS; i++) {
		long long pttl;

		if (i == FLUSH_VICTIM)
			continue;
		pttl = test_redis_int(server, "PTTL %s", keys[i]);
		print_message("lock %d: PTTL %lld, lost at %" PRId64 "\n", i, pttl,
		              state_at(&ev[i], DLOCK_STATE_LOST));
		assert_int_equal(state_at(&ev[i], DLOCK_STATE_LOST), -1);
		assert_true(dlock_held(locks[i]));
		/* Renewed every 500 ms, so never much below TTL - 500 ms; without
		 * renewals since the flush began it would be gone. */
		assert_true(pttl > 700 && pttl <= 1500);
	}

	for (int i = 0; i < FLUSH_LOCKS; i++) {
		assert_int_equal(dlock_release(locks[i]), i == FLUSH_VICTIM ? DLOCK_ELOST : DLOCK_OK);
		dlock_lock_free(locks[i]);
		g_mutex_clear(&ev[i].mu);
	}
	dlock_client_free(client);
	/* The peer's value is left alone. */
	value = test_redis_str(server, "GET %s", keys[FLUSH_VICTIM]);
	assert_non_null(value);
	assert_string_equal(value, "peer-value");
	g_free(value);
	test_redis_int(server, "DEL %s", keys[FLUSH_VICTIM]);
	for (int i = 0; i < FLUSH_LOCKS; i++)
		g_free(keys[i]);
	g_free(uri);
}

/* Runs last: a group teardown's failure would not fail the program. */
static void test_no_lock_key_of_this_suite_remains(void **state)
{
	assert_int_equal(test_redis_leftover_keys(server, "dlock:{wd/"), 0);
}

static int setup(void **state)
{
	server = test_redis_start(NULL, NULL, false);
	return 0;
}

static int teardown(void **state)
{
	test_redis_stop(server);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_script_flush_gives_each_pipelined_renewal_its_own_result),
		cmocka_unit_test(test_no_lock_key_of_this_suite_remains),
	};

	test_init(argv[0]);
	return test_finish(cmocka_run_group_tests_name("redis-watchdog", tests, setup, teardown));
}
