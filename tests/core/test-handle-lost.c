/* SPDX-License-Identifier: MIT */
/*
 * A handle-owned hold that is lost while another thread's fresh acquire
 * through the same handle is waiting: that acquire's grant replaces the
 * lost hold, and the loss must still be reported by the first release
 * afterwards (DLOCK_ELOST), on a real Redis server.
 */
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
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

#define RESOURCE "handle-lost/replaced"

static test_redis *server;

typedef struct acquirer {
	dlock_lock *lock;
	int tid;
	int rc;
	int *done;
} acquirer;

static void *acquire_thread(void *data)
{
	acquirer *a = data;

	__atomic_store_n(&a->tid, (int)syscall(SYS_gettid), __ATOMIC_SEQ_CST);
	a->rc = dlock_acquire(a->lock, 15000);
	__atomic_add_fetch(a->done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

typedef struct count_at_least {
	int *value;
	int min;
} count_at_least;

static bool reached(void *data)
{
	count_at_least *c = data;

	return __atomic_load_n(c->value, __ATOMIC_SEQ_CST) >= c->min;
}

/* The thread has started and is asleep, which before its grant it only is
 * inside dlock_acquire(), waiting for the other client's release. */
static bool sleeping(void *data)
{
	acquirer *a = data;

	if (!__atomic_load_n(&a->tid, __ATOMIC_SEQ_CST))
		return false;
	return test_thread_sleeps(__atomic_load_n(&a->tid, __ATOMIC_SEQ_CST));
}

static bool channel_has_subscriber(void *data)
{
	(void)data;
	return test_redis_numsub(server, "dlock:{" RESOURCE "}:released") >= 1;
}

static void test_first_release_after_a_lost_hold_was_replaced_returns_elost(void **state)
{
	char *uri = test_redis_uri(server, "?ttl=1s");
	dlock_client *client, *other;
	dlock_lock *lock, *blocker;
	acquirer a[2] = { { 0 } };
	pthread_t threads[2];
	int done = 0;
	count_at_least one = { &done, 1 }, two = { &done, 2 };

	(void)state;
	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_client_new(uri, &other), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, RESOURCE, &lock), DLOCK_OK);
	assert_int_equal(dlock_lock_set_owner(lock, DLOCK_OWNER_HANDLE), DLOCK_OK);
	assert_int_equal(dlock_lock_new(other, RESOURCE, &blocker), DLOCK_OK);

	/* Both threads start a fresh acquire through the handle while another
	 * client holds the lock: neither finds a hold to re-enter. */
	assert_int_equal(dlock_acquire(blocker, 0), DLOCK_OK);
	for (int i = 0; i < 2; i++) {
		a[i].lock = lock;
		a[i].done = &done;
		assert_int_equal(pthread_create(&threads[i], NULL, acquire_thread, &a[i]), 0);
	}
	assert_true(test_wait_until(channel_has_subscriber, NULL, 5000));
	assert_true(test_wait_until(sleeping, &a[0], 5000));
	assert_true(test_wait_until(sleeping, &a[1], 5000));
	g_usleep(200 * 1000); /* both threads past their first try */
	assert_int_equal(dlock_release(blocker), DLOCK_OK);

	/* One wins; the other keeps waiting, for the same resource. */
	assert_true(test_wait_until(reached, &one, 5000));
	g_usleep(100 * 1000);
	assert_int_equal(__atomic_load_n(&done, __ATOMIC_SEQ_CST), 1);
	assert_int_equal(dlock_held(lock), 1);

	/* The hold is lost on the server (its key removed); the waiting
	 * thread then gets a fresh grant, which replaces the lost hold. */
	assert_int_equal(test_redis_int(server, "DEL dlock:{%s}", RESOURCE), 1);
	assert_true(test_wait_until(reached, &two, 10000));
	for (int i = 0; i < 2; i++) {
		pthread_join(threads[i], NULL);
		assert_int_equal(a[i].rc, DLOCK_OK);
	}

	/* The hold acquired first was lost: the first release says so. */
	assert_int_equal(dlock_release(lock), DLOCK_ELOST);
	/* The fresh grant is still held, and its release is an ordinary one. */
	assert_int_equal(dlock_held(lock), 1);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	assert_int_equal(dlock_release(lock), DLOCK_ENOTHELD);
	assert_int_equal(test_redis_int(server, "EXISTS dlock:{%s}", RESOURCE), 0);

	dlock_lock_free(blocker);
	dlock_lock_free(lock);
	dlock_client_free(other);
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
		cmocka_unit_test(test_first_release_after_a_lost_hold_was_replaced_returns_elost),
	};

	(void)argc;
	test_init(argv[0]);
	return test_finish(cmocka_run_group_tests_name("handle-lost", tests, setup, teardown));
}
