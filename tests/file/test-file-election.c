/* SPDX-License-Identifier: MIT */
/*
 * Leader election on the file backend: the shared checks
 * (test-election.h) -- hand-over by resignation seen by an observer, a
 * killed leader replaced at once (the kernel drops its lock) -- and what
 * the lock file records of a leader.
 */
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-election.h"
#include "test-exclusion.h"
#include "test-util.h"

static char *dir;
static char *uri;

/* Participants in 3 processes, 2 each, lead one at a time, 4 turns each. */
static void test_one_leader_at_a_time_across_processes(void **state)
{
	test_exclusion_run_elections(uri, "elect/census", 3, 2, 4);
}

static void test_resignation_hands_over_and_the_observer_sees_each_leader(void **state)
{
	test_election_handover(uri, "elect/handover", 1000);
}

static void test_killed_leader_is_replaced_at_once(void **state)
{
	test_election_failover(uri, "elect/failover", 2000);
}

/* dlock status shows the leader: the holder record carries its id, and
 * a plain lock holder is no leader. */
static void test_query_names_the_leader_and_a_lock_is_none(void **state)
{
	dlock_client *client;
	dlock_election *e;
	dlock_lock *lock;
	dlock_info *info;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_election_new(client, "elect/query", "node 7 (east)", &e), DLOCK_OK);
	assert_string_equal(dlock_election_id(e), "node 7 (east)");
	assert_string_equal(dlock_election_name(e), "elect/query");
	assert_int_equal(dlock_election_campaign(e, 0), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "elect/query", &lock), DLOCK_OK);
	assert_int_equal(dlock_lock_query(lock, &info), DLOCK_OK);
	assert_string_equal(dlock_info_leader(info), "node 7 (east)");
	assert_non_null(strstr(dlock_info_holder(info), " id=node 7 (east)"));
	dlock_info_free(info);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_EBUSY);
	dlock_election_free(e); /* resigns */
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_OK);
	assert_int_equal(dlock_lock_query(lock, &info), DLOCK_OK);
	assert_null(dlock_info_leader(info));
	dlock_info_free(info);
	dlock_lock_free(lock);
	dlock_client_free(client);
}

static void test_bad_participant_ids_are_refused(void **state)
{
	dlock_client *client;
	dlock_election *e = NULL;
	char *long_id = g_strnfill(256, 'x');

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_election_new(client, "elect/bad", "", &e), DLOCK_EINVAL);
	assert_int_equal(dlock_election_new(client, "elect/bad", "a\nb", &e), DLOCK_EINVAL);
	assert_non_null(strstr(dlock_last_error_message(), "control character"));
	assert_int_equal(dlock_election_new(client, "elect/bad", "\xff", &e), DLOCK_EINVAL);
	assert_int_equal(dlock_election_new(client, "elect/bad", long_id, &e), DLOCK_EINVAL);
	assert_int_equal(dlock_election_new(client, "bad/../name", "x", &e), DLOCK_EINVAL);
	assert_null(e);
	long_id[255] = '\0';
	assert_int_equal(dlock_election_new(client, "elect/bad", long_id, &e), DLOCK_OK);
	dlock_election_free(e);
	/* The default id is <host>-<pid>. */
	assert_int_equal(dlock_election_new(client, "elect/bad", NULL, &e), DLOCK_OK);
	g_free(long_id);
	long_id = g_strdup_printf("-%d", (int)getpid());
	assert_true(g_str_has_suffix(dlock_election_id(e), long_id));
	dlock_election_free(e);
	g_free(long_id);
	dlock_client_free(client);
}

/* Freeing the client stops the observer and resigns; the election is
 * freed afterwards, as a lock handle may be. */
static void test_client_freed_before_an_observing_leader(void **state)
{
	dlock_client *client, *other;
	dlock_election *e;
	dlock_lock *lock;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_client_new(uri, &other), DLOCK_OK);
	assert_int_equal(dlock_election_new(client, "elect/teardown", "a", &e), DLOCK_OK);
	assert_int_equal(dlock_election_observe(e, 1), DLOCK_OK);
	assert_int_equal(dlock_election_campaign(e, 0), DLOCK_OK);
	dlock_client_free(client);
	assert_int_equal(dlock_lock_new(other, "elect/teardown", &lock), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_OK);
	assert_false(dlock_election_is_leader(e));
	assert_int_equal(dlock_election_campaign(e, 0), DLOCK_ECANCELED);
	dlock_election_free(e);
	dlock_lock_free(lock);
	dlock_client_free(other);
}

typedef struct self_free {
	GAsyncQueue *done;
} self_free;

static void free_on_resign(dlock_election *e, dlock_election_event event, const char *id, void *data)
{
	self_free *f = data;

	if (event != DLOCK_ELECTION_RESIGNED)
		return;
	dlock_election_free(e);
	g_async_queue_push(f->done, GINT_TO_POINTER(1));
}

/* An election may be freed from its own callback, observer and all. */
static void test_election_freed_from_its_callback(void **state)
{
	self_free f = { g_async_queue_new() };
	dlock_client *client;
	dlock_election *e;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_election_new(client, "elect/self", "a", &e), DLOCK_OK);
	assert_int_equal(dlock_election_set_callback(e, free_on_resign, &f), DLOCK_OK);
	assert_int_equal(dlock_election_observe(e, 1), DLOCK_OK);
	assert_int_equal(dlock_election_campaign(e, 0), DLOCK_OK);
	assert_int_equal(dlock_election_resign(e), DLOCK_OK);
	assert_non_null(g_async_queue_timeout_pop(f.done, 10 * G_USEC_PER_SEC));
	dlock_client_free(client);
	g_async_queue_unref(f.done);
}

typedef struct waiting_campaign {
	dlock_election *e;
	int rc;
} waiting_campaign;

static void *campaign_main(void *data)
{
	waiting_campaign *w = data;

	w->rc = dlock_election_campaign(w->e, 30000);
	return NULL;
}

/* One campaign at a time per participant; cancel ends the one waiting. */
static void test_second_campaign_is_refused_and_cancel_ends_the_first(void **state)
{
	dlock_client *client, *other;
	dlock_election *leader, *e;
	waiting_campaign w = { NULL, 1 };
	pthread_t t;
	int64_t t0;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_client_new(uri, &other), DLOCK_OK);
	assert_int_equal(dlock_election_new(other, "elect/twice", "leader", &leader), DLOCK_OK);
	assert_int_equal(dlock_election_campaign(leader, 0), DLOCK_OK);
	assert_int_equal(dlock_election_new(client, "elect/twice", "waiter", &e), DLOCK_OK);
	w.e = e;
	pthread_create(&t, NULL, campaign_main, &w);
	g_usleep(200 * 1000);
	assert_int_equal(dlock_election_campaign(e, 0), DLOCK_EINVAL);
	assert_non_null(strstr(dlock_last_error_message(), "already under way"));
	t0 = test_now_ms();
	assert_int_equal(dlock_election_cancel(e), DLOCK_OK);
	pthread_join(t, NULL);
	assert_int_equal(w.rc, DLOCK_ECANCELED);
	assert_true(test_now_ms() - t0 < 1000 * test_slack_factor());
	assert_false(dlock_election_is_leader(e));
	/* The refused campaign left the next one free to run. */
	assert_int_equal(dlock_election_campaign(e, 0), DLOCK_EBUSY);
	assert_non_null(strstr(dlock_last_error_message(), "another participant leads"));
	dlock_election_free(e);
	dlock_election_free(leader);
	dlock_client_free(client);
	dlock_client_free(other);
}

/* A resignation from another thread as the campaign finishes. */
static void test_resignation_racing_a_campaign_comes_after_elected(void **state)
{
	test_election_resign_racing_campaign(uri, "elect/race", 1000, NULL, NULL);
}

static void test_free_right_after_resign_delivers_resigned(void **state)
{
	test_election_resign_then_free_delivers_resigned(uri, "elect/resign-free", 20);
}

static int setup(void **state)
{
	test_file_dir_make("dlock-file-elect", &dir, &uri);
	return 0;
}

static int teardown(void **state)
{
	test_file_dir_remove(dir);
	g_free(dir);
	g_free(uri);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_one_leader_at_a_time_across_processes),
		cmocka_unit_test(test_resignation_hands_over_and_the_observer_sees_each_leader),
		cmocka_unit_test(test_killed_leader_is_replaced_at_once),
		cmocka_unit_test(test_query_names_the_leader_and_a_lock_is_none),
		cmocka_unit_test(test_bad_participant_ids_are_refused),
		cmocka_unit_test(test_client_freed_before_an_observing_leader),
		cmocka_unit_test(test_election_freed_from_its_callback),
		cmocka_unit_test(test_second_campaign_is_refused_and_cancel_ends_the_first),
		cmocka_unit_test(test_resignation_racing_a_campaign_comes_after_elected),
		cmocka_unit_test(test_free_right_after_resign_delivers_resigned),
	};

	test_init(argv[0]);
	if (argc > 1 && strcmp(argv[1], "--worker") == 0)
		return test_election_worker_main(argc, argv);
	return cmocka_run_group_tests_name("file-election", tests, setup, teardown);
}
