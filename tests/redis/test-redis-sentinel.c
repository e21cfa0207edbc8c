/* SPDX-License-Identifier: MIT */
/*
 * redis+sentinel:// against a real Sentinel setup (a master, a replica,
 * three sentinels): the master found and followed across a failover and a
 * switchover, holds and waits across them, tokens that keep increasing,
 * replica acknowledgement through Sentinel, and what failures say.
 */
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
#include "test-holds.h"
#include "test-sentinel.h"

#define SERVICE "mymaster"

static test_sentinel *ts;

static dlock_client *client_with(const char *suffix)
{
	char *uri = test_sentinel_uri(ts, suffix);
	dlock_client *client = test_client(uri);

	g_free(uri);
	return client;
}

static char *address_of(const test_redis *r)
{
	return g_strdup_printf("127.0.0.1:%d", r->port);
}

/* Every sentinel, and every data server, up and agreed again. */
static void heal(void)
{
	for (int i = 0; i < TEST_SENTINEL_COUNT; i++)
		if (ts->frozen[i])
			test_sentinel_thaw(ts, i);
	for (int i = 0; i < ts->n_servers; i++)
		if (ts->servers[i]->pid == 0)
			test_sentinel_restart_as_replica(ts, ts->servers[i]);
	assert_true(test_sentinel_wait_ready(ts, 30000));
}

/* Held and released through the sentinels; status names the master. */
static void test_a_lock_through_sentinel_and_the_master_it_names(void **state)
{
	dlock_client *client = client_with(NULL);
	dlock_lock *lock = test_lock(client, "sentinel/basic");
	char *master = address_of(test_sentinel_master(ts));
	dlock_info *info;

	assert_int_equal(dlock_acquire(lock, 5000), DLOCK_OK);
	assert_true(dlock_fencing_token(lock) > 0);
	assert_int_equal(test_redis_int(test_sentinel_master(ts), "EXISTS dlock:{sentinel/basic}"), 1);
	assert_int_equal(dlock_lock_query(lock, &info), DLOCK_OK);
	assert_true(dlock_info_locked(info));
	assert_string_equal(dlock_info_service(info), SERVICE);
	assert_string_equal(dlock_info_master(info), master);
	dlock_info_free(info);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_free(master);
}

typedef struct waiter {
	dlock_lock *lock;
	int64_t wait_ms;
	int rc;
	int64_t done_at_ms;
	uint64_t token;
	bool done;
	GMutex mu;
} waiter;

static gpointer wait_for_it(gpointer data)
{
	waiter *w = data;
	int rc = dlock_acquire(w->lock, w->wait_ms);

	g_mutex_lock(&w->mu);
	w->rc = rc;
	w->token = dlock_fencing_token(w->lock);
	w->done_at_ms = test_now_ms();
	w->done = true;
	g_mutex_unlock(&w->mu);
	return NULL;
}

static bool waiter_done(void *data)
{
	waiter *w = data;
	bool done;

	g_mutex_lock(&w->mu);
	done = w->done;
	g_mutex_unlock(&w->mu);
	return done;
}

static bool queued(void *resource)
{
	return test_redis_int(test_sentinel_master(ts), "ZCARD dlock:{%s}:q", (const char *)resource) > 0;
}

/*
 * kill -9 of the master while a lock is held (and replicated) and a
 * waiter waits, with a lease shorter than the failover: the holder is told
 * LOST by its lease's end, the waiter holds on the promoted master within
 * seconds of it, never before the holder's LOST, with a larger token.
 */
static void test_a_waiter_holds_on_the_promoted_master_after_a_kill(void **state)
{
	const char *resource = "sentinel/kill";
	dlock_client *a = client_with("?ttl=1500ms"), *b = client_with("?ttl=1500ms");
	dlock_lock *held = test_lock(a, resource);
	waiter w = { .lock = test_lock(b, resource), .wait_ms = 30000, .rc = 99 };
	test_states s;
	int64_t killed_ms;
	uint64_t token;
	int old_port;
	GThread *t;

	test_states_init(&s);
	g_mutex_init(&w.mu);
	assert_int_equal(dlock_lock_set_state_callback(held, test_states_record, &s), DLOCK_OK);
	assert_int_equal(dlock_lock_set_owner(w.lock, DLOCK_OWNER_HANDLE), DLOCK_OK);
	assert_int_equal(dlock_acquire(held, 5000), DLOCK_OK);
	token = dlock_fencing_token(held);
	t = g_thread_new("waiter", wait_for_it, &w);
	assert_true(test_wait_until(queued, (void *)resource, 10000));
	/* The key and the queue are on the replica too. */
	assert_int_equal(test_redis_int(test_sentinel_master(ts), "WAIT 1 2000"), 1);

	killed_ms = test_now_ms();
	old_port = test_sentinel_kill_master(ts);
	assert_true(test_sentinel_wait_promoted(ts, old_port, 20000));
	assert_true(test_wait_until(waiter_done, &w, 20000));
	g_thread_join(t);
	print_message("killed at 0; holder LOST at %" PRId64 " ms; waiter returned %d at %" PRId64
	              " ms with token %" PRIu64 " (holder's %" PRIu64 ")\n",
	              test_states_lost_at(&s) - killed_ms, w.rc, w.done_at_ms - killed_ms, w.token, token);
	assert_int_equal(w.rc, DLOCK_OK);
	assert_true(test_states_lost_at(&s) > 0);
	assert_true(test_states_lost_at(&s) - killed_ms <= 1500 + test_slack(300));
	assert_true(w.done_at_ms >= test_states_lost_at(&s));
	assert_true(w.token > token);
	assert_int_equal(dlock_release(held), DLOCK_ELOST);
	assert_int_equal(dlock_release(w.lock), DLOCK_OK);

	dlock_lock_free(w.lock);
	dlock_lock_free(held);
	dlock_client_free(b);
	dlock_client_free(a);
	test_states_clear(&s);
	g_mutex_clear(&w.mu);
	heal();
}

/*
 * A switchover with a lease shorter than the switch takes: the renewals
 * the old master takes meanwhile never reach the new one.  With
 * min-replicas=1 they are not counted (the old master has no replica
 * left to acknowledge them), so the holder is LOST before its key expires
 * on the new master, and the waiter never holds beside it.
 */
static void test_with_min_replicas_a_switchover_makes_no_second_holder(void **state)
{
	const char *resource = "sentinel/switch-acked";
	const char *suffix = "?ttl=1500ms&min-replicas=1&replica-timeout=100ms";
	dlock_client *a = client_with(suffix), *b = client_with(suffix);
	dlock_lock *held = test_lock(a, resource);
	waiter w = { .lock = test_lock(b, resource), .wait_ms = 30000, .rc = 99 };
	test_states s;
	uint64_t token;
	GThread *t;

	test_states_init(&s);
	g_mutex_init(&w.mu);
	assert_int_equal(dlock_lock_set_state_callback(held, test_states_record, &s), DLOCK_OK);
	assert_int_equal(dlock_lock_set_owner(w.lock, DLOCK_OWNER_HANDLE), DLOCK_OK);
	assert_int_equal(dlock_acquire(held, 5000), DLOCK_OK);
	token = dlock_fencing_token(held);
	t = g_thread_new("waiter", wait_for_it, &w);
	assert_true(test_wait_until(queued, (void *)resource, 10000));

	test_sentinel_failover(ts);
	/* Either the hold lives on, renewed on the new master, or it is
	 * LOST; the waiter holds only after that.  (Until the old master
	 * becomes its replica, about 10 s on, the new master has no replica
	 * to acknowledge the waiter's grant either.) */
	if (test_wait_until(waiter_done, &w, 25000)) {
		print_message("the holder was LOST at %" PRId64 ", the waiter returned %d at %" PRId64 "\n",
		              test_states_lost_at(&s), w.rc, w.done_at_ms);
		assert_int_equal(w.rc, DLOCK_OK);
		assert_true(test_states_lost_at(&s) > 0);
		assert_true(w.done_at_ms >= test_states_lost_at(&s));
		assert_true(w.token > token);
		assert_int_equal(dlock_release(held), DLOCK_ELOST);
	} else {
		assert_true(dlock_held(held));
		assert_int_equal(dlock_release(held), DLOCK_OK);
		assert_true(test_wait_until(waiter_done, &w, 5000));
		assert_int_equal(w.rc, DLOCK_OK);
	}
	g_thread_join(t);
	assert_int_equal(dlock_release(w.lock), DLOCK_OK);

	dlock_lock_free(w.lock);
	dlock_lock_free(held);
	dlock_client_free(b);
	dlock_client_free(a);
	test_states_clear(&s);
	g_mutex_clear(&w.mu);
}

/*
 * The lost grant of a failover: the replica frozen and dropped, a lock
 * taken on the master that it never sees, the master killed, the replica
 * promoted.  The lock is granted again at once on the promoted master (a
 * replica that never had it: what min-replicas closes), with a token
 * larger than the lost one.
 */
static void test_a_token_after_a_failover_that_lost_the_grant_is_larger(void **state)
{
	const char *resource = "sentinel/lostgrant";
	dlock_client *a = client_with(NULL), *c;
	dlock_lock *held = test_lock(a, resource), *again;
	test_redis *master = test_sentinel_master(ts), *replica = test_sentinel_replica(ts, 0);
	uint64_t token;
	int old_port;

	test_redis_signal(replica, SIGSTOP);
	assert_true(test_redis_int(master, "CLIENT KILL TYPE replica") >= 1);
	assert_int_equal(dlock_acquire(held, 5000), DLOCK_OK);
	token = dlock_fencing_token(held);
	old_port = test_sentinel_kill_master(ts);
	test_redis_signal(replica, SIGCONT);
	assert_true(test_sentinel_wait_promoted(ts, old_port, 30000));
	assert_int_equal(test_redis_int(test_sentinel_master(ts), "EXISTS dlock:{%s}", resource), 0);

	c = client_with(NULL);
	again = test_lock(c, resource);
	assert_int_equal(dlock_acquire(again, 10000), DLOCK_OK);
	print_message("lost grant's token %" PRIu64 ", first on the promoted master %" PRIu64 "\n", token,
	              dlock_fencing_token(again));
	assert_true(dlock_fencing_token(again) > token);
	assert_int_equal(dlock_release(again), DLOCK_OK);
	dlock_lock_free(again);
	dlock_client_free(c);
	dlock_lock_free(held);
	dlock_client_free(a);
	heal();
}

static bool key_gone(void *resource)
{
	return test_redis_int(test_sentinel_master(ts), "EXISTS dlock:{%s}", (const char *)resource) == 0;
}

/* min-replicas through Sentinel: with the replica frozen, no grant. */
static void test_min_replicas_through_sentinel_refuses_an_unreplicated_grant(void **state)
{
	const char *resource = "sentinel/acked";
	dlock_client *client = client_with("?min-replicas=1&replica-timeout=200ms");
	dlock_lock *lock = test_lock(client, resource);
	test_redis *replica = test_sentinel_replica(ts, 0);

	assert_int_equal(dlock_acquire(lock, 5000), DLOCK_OK);
	assert_int_equal(test_redis_int(replica, "EXISTS dlock:{%s}", resource), 1);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	test_redis_signal(replica, SIGSTOP);
	assert_int_equal(dlock_acquire(lock, 1000), DLOCK_EUNAVAILABLE);
	test_assert_message_has("0 of the 1 replicas");
	/* Given back at once, or, when the last try's WAIT was still
	 * unanswered at the deadline, by the cleanup once it is answered. */
	assert_true(test_wait_until(key_gone, (void *)resource, 3000));
	test_redis_signal(replica, SIGCONT);
	dlock_lock_free(lock);
	dlock_client_free(client);
	heal();
}

/* A silent first sentinel leaves time for the others. */
static void test_a_frozen_sentinel_is_passed_over_within_the_wait(void **state)
{
	dlock_client *client = client_with(NULL);
	dlock_lock *lock = test_lock(client, "sentinel/frozen");
	int64_t t0, took;

	test_sentinel_freeze(ts, 0);
	t0 = test_now_ms();
	assert_int_equal(dlock_acquire(lock, 10000), DLOCK_OK);
	took = test_now_ms() - t0;
	print_message("acquire with the first sentinel frozen took %" PRId64 " ms\n", took);
	assert_true(took < 3000 + test_slack(1000));
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	/* Freeing the client does not wait on a silent sentinel either. */
	test_sentinel_freeze(ts, 1);
	test_sentinel_freeze(ts, 2);
	t0 = test_now_ms();
	dlock_lock_free(lock);
	dlock_client_free(client);
	took = test_now_ms() - t0;
	print_message("dlock_client_free with every sentinel frozen took %" PRId64 " ms\n", took);
	assert_true(took < 1000 + test_slack(500));
	heal();
}

/* What failing to find the master says: each sentinel tried, by address,
 * and why; the creation of the client does no I/O. */
static void test_failures_name_the_sentinels_and_what_they_said(void **state)
{
	dlock_client *client;
	dlock_lock *lock;
	char *uri, *master;
	int64_t t0;

	t0 = test_now_ms();
	assert_int_equal(dlock_client_new("redis+sentinel://127.0.0.1:1,127.0.0.1:2/" SERVICE, &client),
	                 DLOCK_OK);
	lock = test_lock(client, "sentinel/none");
	assert_true(test_now_ms() - t0 < 100);
	assert_int_equal(dlock_acquire(lock, 2000), DLOCK_EUNAVAILABLE);
	test_assert_message_has("127.0.0.1:1");
	test_assert_message_has("127.0.0.1:2");
	dlock_lock_free(lock);
	dlock_client_free(client);

	uri = g_strdup_printf("redis+sentinel://127.0.0.1:%d,127.0.0.1:%d/nosuch", test_sentinel_port(ts, 0),
	                      test_sentinel_port(ts, 1));
	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	lock = test_lock(client, "sentinel/none");
	assert_int_equal(dlock_acquire(lock, 2000), DLOCK_EUNAVAILABLE);
	test_assert_message_has("do not know");
	test_assert_message_has("'nosuch'");
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_free(uri);

	/* A master that refuses the credentials: a refusal (as from one
	 * server), the master named, the password not. */
	uri = test_sentinel_uri_userinfo(ts, ":s3cr3t-pw", NULL);
	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	lock = test_lock(client, "sentinel/none");
	assert_int_equal(dlock_acquire(lock, 2000), DLOCK_EACCES);
	master = address_of(test_sentinel_master(ts));
	test_assert_message_has(master);
	test_assert_message_has("password");
	assert_null(strstr(dlock_last_error_message(), "s3cr3t-pw"));
	g_free(master);
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_free(uri);

	/* Every sentinel refuses the sentinel credentials: a refusal too,
	 * naming the option and each sentinel, never the password. */
	uri = test_sentinel_uri_userinfo(ts, NULL, "?sentinel-password=s3nt-pw");
	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	lock = test_lock(client, "sentinel/none");
	assert_int_equal(dlock_acquire(lock, 2000), DLOCK_EACCES);
	test_assert_message_has("sentinel-password");
	for (int i = 0; i < TEST_SENTINEL_COUNT; i++) {
		char *sentinel = g_strdup_printf("127.0.0.1:%d", test_sentinel_port(ts, i));

		test_assert_message_has(sentinel);
		g_free(sentinel);
	}
	assert_null(strstr(dlock_last_error_message(), "s3nt-pw"));
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_free(uri);
}

/* The URI's forms: a service is required; a database after it. */
static void test_the_uri_is_checked(void **state)
{
	dlock_client *client = NULL;

	assert_int_equal(dlock_client_new("redis+sentinel://127.0.0.1:1", &client), DLOCK_ECONFIG);
	test_assert_message_has("no service name");
	assert_int_equal(dlock_client_new("redis+sentinel://127.0.0.1:1/svc/x", &client), DLOCK_ECONFIG);
	test_assert_message_has("database");
	assert_int_equal(dlock_client_new("redis+sentinel:///svc", &client), DLOCK_ECONFIG);
	assert_int_equal(dlock_client_new("redis+sentinel://h/svc?sentinel-user=u", &client), DLOCK_ECONFIG);
	test_assert_message_has("sentinel-password");
	assert_int_equal(dlock_client_new("redis+sentinel://h:1/svc/3?sentinel-password=x", &client), DLOCK_OK);
	dlock_client_free(client);
}

/* Runs last: a group teardown's failure would not fail the program. */
static void test_no_lock_key_of_this_suite_remains(void **state)
{
	assert_int_equal(test_redis_leftover_keys(test_sentinel_master(ts), "dlock:{sentinel/"), 0);
}

static int setup(void **state)
{
	ts = test_sentinel_start(SERVICE, 1, NULL, NULL);
	return 0;
}

static int teardown(void **state)
{
	test_sentinel_stop(ts);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_a_lock_through_sentinel_and_the_master_it_names),
		cmocka_unit_test(test_failures_name_the_sentinels_and_what_they_said),
		cmocka_unit_test(test_the_uri_is_checked),
		cmocka_unit_test(test_a_frozen_sentinel_is_passed_over_within_the_wait),
		cmocka_unit_test(test_min_replicas_through_sentinel_refuses_an_unreplicated_grant),
		cmocka_unit_test(test_a_token_after_a_failover_that_lost_the_grant_is_larger),
		cmocka_unit_test(test_a_waiter_holds_on_the_promoted_master_after_a_kill),
		cmocka_unit_test(test_with_min_replicas_a_switchover_makes_no_second_holder),
		cmocka_unit_test(test_no_lock_key_of_this_suite_remains),
	};

	test_init(argv[0]);
	return test_finish(cmocka_run_group_tests_name("redis-sentinel", tests, setup, teardown));
}
