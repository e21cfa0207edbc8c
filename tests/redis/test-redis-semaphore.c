/* SPDX-License-Identifier: MIT */
/*
 * Semaphores on Redis (docs/redis.md, "Semaphores"): a permit is a READ
 * hold at the lock's key, a sorted set capped at N, with N kept at
 * "<prefix>{R}:permits" and the wait queue.  The shared checks
 * (test-permits.h) -- at most N at once and N reached across processes,
 * busy, a waiter granted by the release, agreement on N, re-entry, a lock
 * kept out, a killed holder's permit back after its lease -- and what is
 * Redis's own: the keys, a reader kept away from a semaphore's set, a
 * permit reported lost when its member is removed, nothing left behind.
 */
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <glib.h>
#include <hiredis/hiredis.h>

#include "dlock.h"
#include "test-events.h"
#include "test-permits.h"
#include "test-redis.h"
#include "test-util.h"

static test_redis *server;
static char *uri;

static void test_never_more_than_n_and_n_reached_across_processes(void **state)
{
	test_permits_run(uri, "sem/census", 3, 3, 2, 5);
}

static void test_permits_busy_grant_agreement_reentry_and_locks(void **state)
{
	test_permits_basics(uri, "sem/basics", 300, true);
}

/* A 1 s lease: the dead holder's member expires, and the waiter's next
 * try (its backoff is capped at 1 s) takes the permit. */
static void test_killed_holders_permit_returns_after_its_lease(void **state)
{
	char *short_uri = test_redis_uri(server, "?ttl=1s");

	test_permits_killed_holder(short_uri, "sem/killed", 1000 + 1000 + 1000);
	g_free(short_uri);
}

/* The permits key holds N and expires with the set; a reader is kept
 * away from a semaphore's set, and a permit from readers'. */
static void test_keys_and_readers_kept_apart(void **state)
{
	dlock_client *client;
	dlock_lock *sem, *reader;
	redisReply *r;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "sem/keys", &sem), DLOCK_OK);
	assert_int_equal(dlock_lock_set_owner(sem, DLOCK_OWNER_HANDLE), DLOCK_OK);
	assert_int_equal(dlock_lock_set_permits(sem, 5), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "sem/keys", &reader), DLOCK_OK);
	assert_int_equal(dlock_lock_set_owner(reader, DLOCK_OWNER_HANDLE), DLOCK_OK);
	assert_int_equal(dlock_lock_set_mode(reader, DLOCK_MODE_READ), DLOCK_OK);
	assert_int_equal(dlock_acquire(sem, 0), DLOCK_OK);
	r = test_redis_cmd(server, "GET dlock:{sem/keys}:permits");
	assert_string_equal(r->str, "5");
	freeReplyObject(r);
	assert_true(test_redis_int(server, "PTTL dlock:{sem/keys}:permits") > 0);
	assert_true(llabs(test_redis_int(server, "PTTL dlock:{sem/keys}:permits") -
	                  test_redis_int(server, "PTTL dlock:{sem/keys}")) < 50);
	assert_int_equal(test_redis_int(server, "ZCARD dlock:{sem/keys}"), 1);
	assert_int_equal(dlock_acquire(reader, 0), DLOCK_EBUSY);
	assert_int_equal(dlock_release(sem), DLOCK_OK);
	assert_int_equal(test_redis_int(server, "EXISTS dlock:{sem/keys} dlock:{sem/keys}:permits"), 0);
	assert_int_equal(dlock_acquire(reader, 0), DLOCK_OK);
	assert_int_equal(dlock_acquire(sem, 0), DLOCK_EBUSY);
	assert_int_equal(dlock_release(reader), DLOCK_OK);
	dlock_lock_free(reader);
	dlock_lock_free(sem);
	dlock_client_free(client);
}

static bool got_lost(void *arg)
{
	return test_events_index(arg, DLOCK_STATE_LOST) >= 0;
}

static bool permits_key_gone(void *key)
{
	return test_redis_int(server, "EXISTS %s", (const char *)key) == 0;
}

/* The watchdog's renewal finds the permit's member gone: LOST at once. */
static void test_permit_whose_member_is_removed_is_lost(void **state)
{
	char *short_uri = test_redis_uri(server, "?ttl=1500ms");
	dlock_client *client;
	dlock_lock *sem;
	test_events ev;

	test_events_init(&ev);
	assert_int_equal(dlock_client_new(short_uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "sem/lost", &sem), DLOCK_OK);
	assert_int_equal(dlock_lock_set_permits(sem, 2), DLOCK_OK);
	assert_int_equal(dlock_lock_set_state_callback(sem, test_events_record, &ev), DLOCK_OK);
	assert_int_equal(dlock_acquire(sem, 0), DLOCK_OK);
	assert_int_equal(test_redis_int(server, "DEL dlock:{sem/lost}"), 1);
	assert_true(test_wait_until(got_lost, &ev, 3000));
	assert_false(dlock_held(sem));
	assert_int_equal(dlock_release(sem), DLOCK_ELOST);
	/* N outlives its set by no more than the lease it was given. */
	assert_true(test_wait_until(permits_key_gone, "dlock:{sem/lost}:permits", 3000));
	dlock_lock_free(sem);
	dlock_client_free(client);
	test_events_clear(&ev);
	g_free(short_uri);
}

static void test_no_key_of_this_suite_remains(void **state)
{
	assert_int_equal(test_redis_leftover_keys(server, "dlock:{sem/"), 0);
}

static int setup(void **state)
{
	server = test_redis_start(NULL, NULL, false);
	uri = test_redis_uri(server, "");
	return 0;
}

static int teardown(void **state)
{
	g_free(uri);
	test_redis_stop(server);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_never_more_than_n_and_n_reached_across_processes),
		cmocka_unit_test(test_permits_busy_grant_agreement_reentry_and_locks),
		cmocka_unit_test(test_killed_holders_permit_returns_after_its_lease),
		cmocka_unit_test(test_keys_and_readers_kept_apart),
		cmocka_unit_test(test_permit_whose_member_is_removed_is_lost),
		cmocka_unit_test(test_no_key_of_this_suite_remains),
	};

	test_init(argv[0]);
	if (argc > 1 && strcmp(argv[1], "--worker") == 0)
		return test_permits_worker_main(argc, argv);
	return test_finish(cmocka_run_group_tests_name("redis-semaphore", tests, setup, teardown));
}
