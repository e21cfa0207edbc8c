/* SPDX-License-Identifier: MIT */
/*
 * Owners on a real server: reentrancy without round trips, thread and
 * handle owners, waiting with deadlines and cancel, teardown of handles,
 * threads and clients, and a forked child that must not touch its
 * parent's locks.
 */
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-redis.h"

static test_redis *server;

typedef struct pair {
	dlock_client *client;
	dlock_lock *lock;
} pair;

static void open_pair(pair *p, const char *resource)
{
	char *uri = test_redis_uri(server, NULL);

	assert_int_equal(dlock_client_new(uri, &p->client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(p->client, resource, &p->lock), DLOCK_OK);
	g_free(uri);
}

static void close_pair(pair *p)
{
	dlock_lock_free(p->lock);
	dlock_client_free(p->client);
}

static long long exists(const char *resource)
{
	return test_redis_int(server, "EXISTS dlock:{%s}", resource);
}

static long long script_calls(void)
{
	return test_redis_calls(server, "evalsha") + test_redis_calls(server, "eval");
}

/* Every command by which the library could reach the server to acquire
 * (commands run inside scripts count too). */
static long long acquire_like_calls(void)
{
	return script_calls() + test_redis_calls(server, "set") + test_redis_calls(server, "get") +
	       test_redis_calls(server, "pexpire") + test_redis_calls(server, "incr");
}

typedef struct call {
	dlock_lock *lock;
	int64_t wait_ms;
	int rc;
	int done;
} call;

static void *acquire_call(void *data)
{
	call *c = data;

	c->rc = dlock_acquire(c->lock, c->wait_ms);
	__atomic_store_n(&c->done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

static void *release_call(void *data)
{
	call *c = data;

	c->rc = dlock_release(c->lock);
	return NULL;
}

static void *acquire_then_exit(void *data)
{
	call *c = data;

	c->rc = dlock_acquire(c->lock, 5000);
	return NULL;
}

static bool call_done(void *arg)
{
	return __atomic_load_n(&((call *)arg)->done, __ATOMIC_SEQ_CST) != 0;
}

static bool subscribed(void *arg)
{
	redisReply *r = test_redis_cmd(server, "PUBSUB NUMSUB %s", (const char *)arg);
	bool yes = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->integer > 0;

	if (r)
		freeReplyObject(r);
	return yes;
}

static bool unsubscribed(void *arg)
{
	return !subscribed(arg);
}

static bool key_gone(void *arg)
{
	return exists(arg) == 0;
}

static void test_reentry_makes_no_round_trip_and_counts(void **state)
{
	pair a, b;
	long long before;
	uint64_t token;

	open_pair(&a, "own/reenter");
	open_pair(&b, "own/reenter");
	assert_int_equal(dlock_acquire(a.lock, 0), DLOCK_OK);
	token = dlock_fencing_token(a.lock);
	before = acquire_like_calls();
	for (int i = 0; i < 100; i++)
		assert_int_equal(dlock_acquire(a.lock, 0), DLOCK_OK);
	assert_int_equal(acquire_like_calls(), before);
	before = script_calls();
	assert_int_equal(dlock_fencing_token(a.lock), token);
	for (int i = 0; i < 100; i++) {
		assert_int_equal(dlock_release(a.lock), DLOCK_OK);
		assert_int_equal(dlock_acquire(b.lock, 0), DLOCK_EBUSY);
	}
	assert_int_equal(script_calls(), before + 100); /* only b's tries */
	assert_int_equal(dlock_release(a.lock), DLOCK_OK);
	assert_int_equal(exists("own/reenter"), 0);
	assert_int_equal(dlock_acquire(b.lock, 0), DLOCK_OK);
	assert_int_equal(dlock_release(b.lock), DLOCK_OK);
	close_pair(&a);
	close_pair(&b);
}

static void test_same_thread_other_handle_is_same_owner_other_thread_waits(void **state)
{
	pair a;
	dlock_lock *second;
	call c = { NULL, 300, 99, 0 }, r = { NULL, 0, 99, 0 };
	pthread_t t;
	char *value;

	open_pair(&a, "own/handles");
	assert_int_equal(dlock_lock_new(a.client, "own/handles", &second), DLOCK_OK);
	assert_int_equal(dlock_acquire(a.lock, 0), DLOCK_OK);
	assert_int_equal(dlock_acquire(second, 0), DLOCK_OK);
	assert_int_equal(dlock_fencing_token(second), dlock_fencing_token(a.lock));
	value = test_redis_str(server, "GET dlock:{own/handles}");

	/* Another thread of the same client is another owner: it waits, and
	 * cannot release the hold. */
	c.lock = second;
	pthread_create(&t, NULL, acquire_call, &c);
	pthread_join(t, NULL);
	assert_int_equal(c.rc, DLOCK_ETIMEDOUT);
	r.lock = a.lock;
	pthread_create(&t, NULL, release_call, &r);
	pthread_join(t, NULL);
	assert_int_equal(r.rc, DLOCK_ENOTHELD);
	{
		char *after = test_redis_str(server, "GET dlock:{own/handles}");

		assert_string_equal(after, value);
		g_free(after);
	}
	g_free(value);
	assert_true(dlock_held(a.lock));
	assert_int_equal(dlock_release(second), DLOCK_OK);
	assert_int_equal(dlock_release(a.lock), DLOCK_OK);
	assert_int_equal(exists("own/handles"), 0);
	dlock_lock_free(second);
	close_pair(&a);
}

static void test_try_is_busy_and_timed_wait_leaves_nothing_behind(void **state)
{
	pair a, b;
	char *holder;
	int64_t t0, elapsed;

	open_pair(&a, "own/timeout");
	open_pair(&b, "own/timeout");
	assert_int_equal(dlock_acquire(a.lock, 0), DLOCK_OK);
	holder = test_redis_str(server, "GET dlock:{own/timeout}");
	assert_int_equal(dlock_acquire(b.lock, 0), DLOCK_EBUSY);
	assert_non_null(strstr(dlock_last_error_message(), "own/timeout"));
	t0 = test_now_ms();
	assert_int_equal(dlock_acquire(b.lock, 500), DLOCK_ETIMEDOUT);
	elapsed = test_now_ms() - t0;
	assert_true(elapsed >= 500);
	assert_true(elapsed < 500 + test_slack(300));
	/* No subscription and no key of the waiter remain. */
	assert_true(test_wait_until(unsubscribed, "dlock:{own/timeout}:released", 2000));
	{
		char *now = test_redis_str(server, "GET dlock:{own/timeout}");

		assert_string_equal(now, holder);
		g_free(now);
	}
	g_free(holder);
	assert_int_equal(dlock_release(a.lock), DLOCK_OK);
	assert_int_equal(exists("own/timeout"), 0);
	close_pair(&a);
	close_pair(&b);
}

static void test_cancel_wakes_a_waiter_with_ecanceled(void **state)
{
	pair a, b;
	call c = { NULL, -1, 99, 0 };
	pthread_t t;
	int64_t t0;

	open_pair(&a, "own/cancel");
	open_pair(&b, "own/cancel");
	assert_int_equal(dlock_acquire(a.lock, 0), DLOCK_OK);
	c.lock = b.lock;
	pthread_create(&t, NULL, acquire_call, &c);
	assert_true(test_wait_until(subscribed, "dlock:{own/cancel}:released", 5000));
	t0 = test_now_ms();
	assert_int_equal(dlock_lock_cancel(b.lock), DLOCK_OK);
	assert_true(test_wait_until(call_done, &c, 2000));
	assert_true(test_now_ms() - t0 < 200);
	pthread_join(t, NULL);
	assert_int_equal(c.rc, DLOCK_ECANCELED);
	/* A later acquire waits normally again. */
	assert_int_equal(dlock_acquire(b.lock, 0), DLOCK_EBUSY);
	assert_int_equal(dlock_release(a.lock), DLOCK_OK);
	close_pair(&a);
	close_pair(&b);
}

static void test_client_free_cancels_waiter_and_deletes_holders_key(void **state)
{
	pair p;
	dlock_lock *waiter_lock;
	call c = { NULL, -1, 99, 0 };
	pthread_t t;

	open_pair(&p, "own/teardown");
	assert_int_equal(dlock_lock_new(p.client, "own/teardown", &waiter_lock), DLOCK_OK);
	assert_int_equal(dlock_acquire(p.lock, 0), DLOCK_OK);
	c.lock = waiter_lock;
	pthread_create(&t, NULL, acquire_call, &c);
	assert_true(test_wait_until(subscribed, "dlock:{own/teardown}:released", 5000));
	dlock_client_free(p.client);
	pthread_join(t, NULL);
	assert_int_equal(c.rc, DLOCK_ECANCELED);
	assert_int_equal(exists("own/teardown"), 0);
	dlock_lock_free(waiter_lock);
	dlock_lock_free(p.lock);
}

static void test_thread_exiting_while_holding_has_its_lock_released(void **state)
{
	pair p;
	call c = { NULL, 0, 99, 0 };
	pthread_t t;

	open_pair(&p, "own/exit");
	c.lock = p.lock;
	pthread_create(&t, NULL, acquire_then_exit, &c);
	pthread_join(t, NULL);
	assert_int_equal(c.rc, DLOCK_OK);
	assert_true(test_wait_until(key_gone, "own/exit", 2000));
	assert_int_equal(dlock_acquire(p.lock, 0), DLOCK_OK);
	assert_int_equal(dlock_release(p.lock), DLOCK_OK);
	close_pair(&p);
}

static void test_handle_owner_releases_from_another_thread(void **state)
{
	pair p, q;
	call r = { NULL, 0, 99, 0 };
	pthread_t t;

	open_pair(&p, "own/handle");
	assert_int_equal(dlock_lock_set_owner(p.lock, DLOCK_OWNER_HANDLE), DLOCK_OK);
	assert_int_equal(dlock_acquire(p.lock, 0), DLOCK_OK);
	r.lock = p.lock;
	pthread_create(&t, NULL, release_call, &r);
	pthread_join(t, NULL);
	assert_int_equal(r.rc, DLOCK_OK);
	assert_int_equal(exists("own/handle"), 0);

	/* The same in thread-owner mode is refused. */
	open_pair(&q, "own/handle");
	assert_int_equal(dlock_acquire(q.lock, 0), DLOCK_OK);
	r.lock = q.lock;
	pthread_create(&t, NULL, release_call, &r);
	pthread_join(t, NULL);
	assert_int_equal(r.rc, DLOCK_ENOTHELD);
	assert_int_equal(exists("own/handle"), 1);
	assert_int_equal(dlock_release(q.lock), DLOCK_OK);
	close_pair(&p);
	close_pair(&q);
}

static void test_freeing_a_handle_deletes_its_key(void **state)
{
	pair p;
	dlock_lock *lock;

	open_pair(&p, "own/free");
	assert_int_equal(dlock_lock_new(p.client, "own/free2", &lock), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_OK);
	assert_int_equal(exists("own/free2"), 1);
	dlock_lock_free(lock);
	assert_int_equal(exists("own/free2"), 0);
	close_pair(&p);
}

static void test_forked_child_gets_ecanceled_and_parent_keeps_lock(void **state)
{
	pair p;
	char *before, *after;
	char verdict[16] = "";
	int fds[2];
	pid_t pid;

	open_pair(&p, "own/fork");
	assert_int_equal(dlock_acquire(p.lock, 0), DLOCK_OK);
	before = test_redis_str(server, "GET dlock:{own/fork}");
	/* The child reports through a pipe: its exit status is not reliable
	 * under valgrind, which counts the parent's threads' memory as lost
	 * in a child where those threads do not exist. */
	assert_int_equal(pipe(fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dlock_lock *other;
		int bad = 0;

		bad |= dlock_acquire(p.lock, 0) != DLOCK_ECANCELED;
		bad |= dlock_release(p.lock) != DLOCK_ECANCELED;
		bad |= dlock_lock_new(p.client, "own/fork-child", &other) != DLOCK_ECANCELED;
		bad |= dlock_lock_cancel(p.lock) != DLOCK_ECANCELED;
		bad |= dlock_held(p.lock) != 0;
		dlock_lock_free(p.lock);
		dlock_client_free(p.client);
		if (write(fds[1], bad ? "bad\n" : "ok\n", bad ? 4 : 3) < 0)
			_exit(2);
		_exit(0);
	}
	close(fds[1]);
	assert_true(test_read_line(fds[0], verdict, sizeof(verdict), 10000));
	close(fds[0]);
	waitpid(pid, NULL, 0);
	assert_string_equal(verdict, "ok");
	after = test_redis_str(server, "GET dlock:{own/fork}");
	assert_string_equal(after, before);
	assert_true(dlock_held(p.lock));
	assert_int_equal(dlock_release(p.lock), DLOCK_OK);
	assert_int_equal(exists("own/fork"), 0);
	g_free(before);
	g_free(after);
	close_pair(&p);
}

/* Runs last: a group teardown's failure would not fail the program. */
static void test_no_lock_key_of_this_suite_remains(void **state)
{
	assert_int_equal(test_redis_leftover_keys(server, "dlock:{own/"), 0);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reentry_makes_no_round_trip_and_counts),
		cmocka_unit_test(test_same_thread_other_handle_is_same_owner_other_thread_waits),
		cmocka_unit_test(test_try_is_busy_and_timed_wait_leaves_nothing_behind),
		cmocka_unit_test(test_cancel_wakes_a_waiter_with_ecanceled),
		cmocka_unit_test(test_client_free_cancels_waiter_and_deletes_holders_key),
		cmocka_unit_test(test_thread_exiting_while_holding_has_its_lock_released),
		cmocka_unit_test(test_handle_owner_releases_from_another_thread),
		cmocka_unit_test(test_freeing_a_handle_deletes_its_key),
		cmocka_unit_test(test_forked_child_gets_ecanceled_and_parent_keeps_lock),
		cmocka_unit_test(test_no_lock_key_of_this_suite_remains),
	};

	return test_finish(cmocka_run_group_tests_name("redis-ownership", tests, setup, teardown));
}
