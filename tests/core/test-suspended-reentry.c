/* SPDX-License-Identifier: MIT */
/*
 * A re-entrant acquire waiting out a suspended hold on a real Redis server
 * (frozen with SIGSTOP so a renewal goes unanswered) must be woken when the
 * hold ends by a release in another thread, not sleep to its deadline.
 */
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-redis.h"

static test_redis *server;

static void on_state(dlock_lock *lock, dlock_state state, void *user_data)
{
	int *suspended = user_data;

	(void)lock;
	if (state == DLOCK_STATE_SUSPENDED)
		__atomic_store_n(suspended, 1, __ATOMIC_SEQ_CST);
}

static bool flag_set(void *data)
{
	return __atomic_load_n((int *)data, __ATOMIC_SEQ_CST) != 0;
}

typedef struct reentry {
	dlock_lock *lock;
	int64_t wait_ms;
	int tid;
	int started;
	int done;
	int rc;
	int64_t returned_ms;
} reentry;

static void *reenter_thread(void *data)
{
	reentry *r = data;

	__atomic_store_n(&r->tid, (int)syscall(SYS_gettid), __ATOMIC_SEQ_CST);
	__atomic_store_n(&r->started, 1, __ATOMIC_SEQ_CST);
	r->rc = dlock_acquire(r->lock, r->wait_ms);
	r->returned_ms = test_now_ms();
	__atomic_store_n(&r->done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

/* Started, and asleep: nothing between the flag and dlock_acquire() sleeps. */
static bool sleeps_in_acquire(void *data)
{
	reentry *r = data;

	if (!__atomic_load_n(&r->started, __ATOMIC_SEQ_CST))
		return false;
	return test_thread_sleeps(__atomic_load_n(&r->tid, __ATOMIC_SEQ_CST));
}

static void test_reentry_waiting_on_suspended_hold_returns_when_another_thread_releases(void **state)
{
	char *uri = test_redis_uri(server, "?ttl=4s&command-timeout=200ms");
	dlock_client *client;
	dlock_lock *lock;
	int suspended = 0;
	reentry r = { 0 };
	pthread_t thread;
	int64_t released_ms;

	(void)state;
	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "suspended-reentry/handle", &lock), DLOCK_OK);
	assert_int_equal(dlock_lock_set_owner(lock, DLOCK_OWNER_HANDLE), DLOCK_OK);
	assert_int_equal(dlock_lock_set_state_callback(lock, on_state, &suspended), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, 2000), DLOCK_OK);

	/* A renewal (every ttl/3) goes unanswered: SUSPENDED, and the lease
	 * still has more than two seconds before it could be declared LOST. */
	test_redis_signal(server, SIGSTOP);
	assert_true(test_wait_until(flag_set, &suspended, 3000));

	r.lock = lock;
	r.wait_ms = 10000;
	assert_int_equal(pthread_create(&thread, NULL, reenter_thread, &r), 0);
	assert_true(test_wait_until(sleeps_in_acquire, &r, 1000));
	assert_false(flag_set(&r.done));

	/* The release clears the hold locally at once (the delete is left to
	 * the background while the server is silent). */
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	released_ms = test_now_ms();
	if (!test_wait_until(flag_set, &r.done, 2000)) {
		pthread_join(thread, NULL);
		test_redis_signal(server, SIGCONT);
		fail_msg("the re-entrant acquire was not woken by the release: it returned %s after "
		         "%" PRId64 " ms, at its deadline", dlock_strerror(r.rc), r.returned_ms - released_ms);
	}
	pthread_join(thread, NULL);
	print_message("re-entrant acquire returned %s %" PRId64 " ms after the release\n",
	              dlock_strerror(r.rc), r.returned_ms - released_ms);
	/* It went on as a fresh acquire of the released lock, which cannot
	 * reach the frozen server: a command timeout or two (the pooled
	 * connection, then one retry on a new one), not the deadline. */
	assert_int_equal(r.rc, DLOCK_EUNAVAILABLE);
	assert_true(r.returned_ms - released_ms < 200 + test_slack(800));
	assert_int_equal(dlock_held(lock), 0);

	test_redis_signal(server, SIGCONT);
	/* Once the server answers again the lock can be taken afresh. */
	assert_int_equal(dlock_acquire(lock, 10000), DLOCK_OK);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_free(uri);
}

/* A thread-owned hold taken through one handle, re-entered through another
 * while suspended. */
typedef struct owner_thread {
	dlock_lock *first;
	reentry again;
	int held;
	int go;
	int first_rc;
} owner_thread;

static void *owner_main(void *data)
{
	owner_thread *o = data;

	o->first_rc = dlock_acquire(o->first, 2000);
	__atomic_store_n(&o->held, 1, __ATOMIC_SEQ_CST);
	while (!__atomic_load_n(&o->go, __ATOMIC_SEQ_CST))
		g_usleep(1000);
	return reenter_thread(&o->again);
}

static void test_reentry_waiting_on_suspended_hold_returns_when_its_counts_handle_is_freed(void **state)
{
	char *uri = test_redis_uri(server, "?ttl=4s&command-timeout=200ms");
	dlock_client *client;
	dlock_lock *second;
	owner_thread o = { 0 };
	int suspended = 0;
	pthread_t thread;
	int64_t freed_ms;

	(void)state;
	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "suspended-reentry/thread", &o.first), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "suspended-reentry/thread", &second), DLOCK_OK);
	assert_int_equal(dlock_lock_set_state_callback(o.first, on_state, &suspended), DLOCK_OK);
	o.again.lock = second;
	o.again.wait_ms = 10000;
	assert_int_equal(pthread_create(&thread, NULL, owner_main, &o), 0);
	assert_true(test_wait_until(flag_set, &o.held, 3000));
	assert_int_equal(o.first_rc, DLOCK_OK);

	test_redis_signal(server, SIGSTOP);
	assert_true(test_wait_until(flag_set, &suspended, 3000));
	/* The owner re-enters through the second handle and waits. */
	__atomic_store_n(&o.go, 1, __ATOMIC_SEQ_CST);
	assert_true(test_wait_until(sleeps_in_acquire, &o.again, 1000));

	/* Freeing the handle the only count came through ends the hold. */
	dlock_lock_free(o.first);
	freed_ms = test_now_ms();
	if (!test_wait_until(flag_set, &o.again.done, 2000)) {
		pthread_join(thread, NULL);
		test_redis_signal(server, SIGCONT);
		fail_msg("the re-entrant acquire was not woken when the hold ended: it returned %s after "
		         "%" PRId64 " ms, at its deadline", dlock_strerror(o.again.rc),
		         o.again.returned_ms - freed_ms);
	}
	pthread_join(thread, NULL);
	print_message("re-entrant acquire returned %s %" PRId64 " ms after the free\n",
	              dlock_strerror(o.again.rc), o.again.returned_ms - freed_ms);
	assert_int_equal(o.again.rc, DLOCK_EUNAVAILABLE);
	assert_true(o.again.returned_ms - freed_ms < 200 + test_slack(800));

	test_redis_signal(server, SIGCONT);
	dlock_lock_free(second);
	dlock_client_free(client);
	g_free(uri);
}

static int setup(void **state)
{
	(void)state;
	server = test_redis_start(NULL, NULL, false);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	test_redis_stop(server);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reentry_waiting_on_suspended_hold_returns_when_another_thread_releases),
		cmocka_unit_test(test_reentry_waiting_on_suspended_hold_returns_when_its_counts_handle_is_freed),
	};

	(void)argc;
	test_init(argv[0]);
	return test_finish(cmocka_run_group_tests_name("suspended-reentry", tests, setup, teardown));
}
