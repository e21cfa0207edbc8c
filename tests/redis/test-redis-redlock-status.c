/* SPDX-License-Identifier: MIT */
/*
 * dlock_lock_query on a Redlock (three redis-servers): the quorum's
 * verdict in the common accessors, and each master's own answer --
 * holder, TTL, counter, or that it did not answer.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-redlock.h"

#define MASTERS 3

static test_redlock *rl;
static test_redis **masters;

static void open_lock(const char *resource, dlock_client **ret_client, dlock_lock **ret_lock)
{
	test_redlock_handle h;

	test_redlock_open(rl, &h, MASTERS, "?master-timeout=300ms", resource);
	*ret_client = h.client;
	*ret_lock = h.lock;
}

static void test_query_gives_the_quorums_verdict_and_every_masters_view(void **state)
{
	dlock_client *client;
	dlock_lock *lock;
	dlock_info *info;

	open_lock("rls/held", &client, &lock);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_OK);
	assert_int_equal(dlock_lock_query(lock, &info), DLOCK_OK);
	assert_true(dlock_info_locked(info));
	assert_int_equal(dlock_info_hold(info), DLOCK_HOLD_HELD);
	assert_int_equal(dlock_info_fencing_token(info), dlock_fencing_token(lock));
	assert_int_equal(dlock_info_masters(info), MASTERS);
	for (size_t i = 0; i < MASTERS; i++) {
		char *address = g_strdup_printf("127.0.0.1:%d", masters[i]->port);

		assert_string_equal(dlock_info_master_at(info, i), address);
		assert_true(dlock_info_master_reachable_at(info, i));
		assert_string_equal(dlock_info_master_holder_at(info, i), dlock_info_holder(info));
		assert_true(dlock_info_master_expires_in_ms_at(info, i) > 0);
		assert_int_equal(dlock_info_master_fencing_token_at(info, i), dlock_fencing_token(lock));
		g_free(address);
	}
	/* Out of range: as an unreachable master. */
	assert_false(dlock_info_master_reachable_at(info, MASTERS));
	assert_string_equal(dlock_info_master_holder_at(info, MASTERS), "");
	dlock_info_free(info);
	assert_int_equal(dlock_release(lock), DLOCK_OK);

	assert_int_equal(dlock_lock_query(lock, &info), DLOCK_OK);
	assert_false(dlock_info_locked(info));
	for (size_t i = 0; i < MASTERS; i++)
		assert_string_equal(dlock_info_master_holder_at(info, i), "");
	dlock_info_free(info);
	dlock_lock_free(lock);
	dlock_client_free(client);
}

/* A value on one master alone is not a holder; on a quorum it is. */
static void test_a_holder_needs_a_quorum_of_masters(void **state)
{
	dlock_client *client;
	dlock_lock *lock;
	dlock_info *info;

	open_lock("rls/foreign", &client, &lock);
	test_redis_int(masters[0], "SET dlock:{rls/foreign} peer-value PX 20000");
	assert_int_equal(dlock_lock_query(lock, &info), DLOCK_OK);
	assert_false(dlock_info_locked(info));
	assert_string_equal(dlock_info_master_holder_at(info, 0), "peer-value");
	assert_string_equal(dlock_info_master_holder_at(info, 1), "");
	dlock_info_free(info);

	test_redis_int(masters[2], "SET dlock:{rls/foreign} peer-value PX 20000");
	assert_int_equal(dlock_lock_query(lock, &info), DLOCK_OK);
	assert_true(dlock_info_locked(info));
	assert_string_equal(dlock_info_holder(info), "peer-value");
	assert_true(dlock_info_expires_in_ms(info) > 0);
	dlock_info_free(info);
	/* And an acquire finds it busy. */
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_EBUSY);
	test_redis_int(masters[0], "DEL dlock:{rls/foreign}");
	test_redis_int(masters[2], "DEL dlock:{rls/foreign}");
	dlock_lock_free(lock);
	dlock_client_free(client);
}

static void test_an_unreachable_master_is_shown_and_a_lost_quorum_is_an_error(void **state)
{
	dlock_client *client;
	dlock_lock *lock;
	dlock_info *info;

	open_lock("rls/down", &client, &lock);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_OK);
	test_redis_halt(masters[1]);
	assert_int_equal(dlock_lock_query(lock, &info), DLOCK_OK);
	assert_true(dlock_info_locked(info));
	assert_true(dlock_info_master_reachable_at(info, 0));
	assert_false(dlock_info_master_reachable_at(info, 1));
	assert_string_equal(dlock_info_master_holder_at(info, 1), "");
	assert_int_equal(dlock_info_master_expires_in_ms_at(info, 1), -1);
	dlock_info_free(info);

	test_redis_halt(masters[2]);
	assert_int_equal(dlock_lock_query(lock, &info), DLOCK_EUNAVAILABLE);
	assert_non_null(strstr(dlock_last_error_message(), "1 of 3 masters answered"));
	/* Back, empty (no persistence): two masters show the key gone, so
	 * the hold had ended when it is released. */
	test_redis_resume(masters[1]);
	test_redis_resume(masters[2]);
	assert_int_equal(dlock_release(lock), DLOCK_ELOST);
	dlock_lock_free(lock);
	dlock_client_free(client);
}

/* Every other backend has no masters to show. */
static void test_a_single_server_has_no_masters(void **state)
{
	char *uri = test_redis_uri(masters[0], NULL);
	dlock_client *client;
	dlock_lock *lock;
	dlock_info *info;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "rls/single", &lock), DLOCK_OK);
	assert_int_equal(dlock_lock_query(lock, &info), DLOCK_OK);
	assert_int_equal(dlock_info_masters(info), 0);
	assert_string_equal(dlock_info_master_at(info, 0), "");
	dlock_info_free(info);
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_free(uri);
}

static void test_no_lock_key_of_this_suite_remains(void **state)
{
	assert_int_equal(test_redlock_leftover_keys(rl, "dlock:{rls/"), 0);
}

static int setup(void **state)
{
	rl = test_redlock_start(MASTERS);
	masters = rl->masters;
	return 0;
}

static int teardown(void **state)
{
	test_redlock_stop(rl);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_query_gives_the_quorums_verdict_and_every_masters_view),
		cmocka_unit_test(test_a_holder_needs_a_quorum_of_masters),
		cmocka_unit_test(test_an_unreachable_master_is_shown_and_a_lost_quorum_is_an_error),
		cmocka_unit_test(test_a_single_server_has_no_masters),
		cmocka_unit_test(test_no_lock_key_of_this_suite_remains),
	};

	test_init(argv[0]);
	return test_finish(cmocka_run_group_tests_name("redis-redlock-status", tests, setup, teardown));
}
