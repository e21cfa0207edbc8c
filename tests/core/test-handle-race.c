/* SPDX-License-Identifier: MIT */
/*
 * Handles torn down while calls on them are in flight, on a real backend
 * (argv[1]: "file" or "redis"): freeing a handle while another thread's
 * acquire on it is being granted, or while its owner downgrades its
 * write hold through another handle, must neither touch freed memory (the
 * ASan build shows that) nor leave the grant behind.
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

static const char *backend;
static test_redis *server;
static char *dir;
static char *uri;

typedef struct racer {
	dlock_lock *lock;
	int tid;
	int started;
	int rc;
} racer;

static void *acquire_racer(void *data)
{
	racer *r = data;

	__atomic_store_n(&r->tid, (int)syscall(SYS_gettid), __ATOMIC_SEQ_CST);
	__atomic_store_n(&r->started, 1, __ATOMIC_SEQ_CST);
	r->rc = dlock_acquire(r->lock, 5000);
	return NULL;
}

/* The racer thread has set its flag and is now asleep: nothing between
 * the flag and dlock_acquire() sleeps, so it sleeps inside the acquire. */
static bool racer_sleeps_in_acquire(void *data)
{
	racer *r = data;

	if (!__atomic_load_n(&r->started, __ATOMIC_SEQ_CST))
		return false;
	return test_thread_sleeps(__atomic_load_n(&r->tid, __ATOMIC_SEQ_CST));
}

static void test_freeing_a_handle_while_its_acquire_is_granted_leaves_nothing_held(void **state)
{
	const char *resource = "handle-race/free-during-grant";
	dlock_client *client, *checker;
	dlock_lock *holder, *probe;
	int64_t until = test_now_ms() + 3000;
	int rounds = 0, granted = 0, canceled = 0;

	(void)state;
	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_client_new(uri, &checker), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, resource, &holder), DLOCK_OK);
	assert_int_equal(dlock_lock_new(checker, resource, &probe), DLOCK_OK);

	while (test_now_ms() < until || rounds < 20) {
		racer r = { 0 };
		pthread_t thread;
		int rc;

		assert_int_equal(dlock_acquire(holder, 2000), DLOCK_OK);
		assert_int_equal(dlock_lock_new(client, resource, &r.lock), DLOCK_OK);
		assert_int_equal(pthread_create(&thread, NULL, acquire_racer, &r), 0);
		assert_true(test_wait_until(racer_sleeps_in_acquire, &r, 2000));

		/* The release hands the lock to the racer; the free races
		 * with that grant landing on the handle. */
		assert_int_equal(dlock_release(holder), DLOCK_OK);
		if (rounds % 2)
			usleep((useconds_t)(rounds % 7) * 50);
		dlock_lock_free(r.lock);
		pthread_join(thread, NULL);

		if (r.rc != DLOCK_OK && r.rc != DLOCK_ECANCELED)
			fail_msg("round %d: the racing acquire returned %s", rounds, dlock_strerror(r.rc));
		granted += r.rc == DLOCK_OK;
		canceled += r.rc == DLOCK_ECANCELED;
		/* Whatever the racer got went with its handle.  On Redis a
		 * try that the free interrupted in mid-command may have set
		 * the key: the library deletes it in the background, and that
		 * release message wakes the probe long before the lease (30 s)
		 * would run out. */
		rc = dlock_acquire(probe, strcmp(backend, "redis") == 0 ? 2000 : 0);
		if (rc != DLOCK_OK)
			fail_msg("round %d: after the handle was freed the lock is still held (%s: %s)",
			         rounds, dlock_strerror(rc), dlock_last_error_message());
		assert_int_equal(dlock_release(probe), DLOCK_OK);
		rounds++;
	}
	print_message("%d rounds: %d acquires granted before the free, %d canceled\n", rounds, granted,
	              canceled);

	dlock_lock_free(probe);
	dlock_lock_free(holder);
	dlock_client_free(checker);
	dlock_client_free(client);
}

/* Frees the write handles it is given, each after a short spin. */
static void *write_freer(void *data)
{
	GAsyncQueue *queue = data;
	dlock_lock *lock;
	unsigned spin = 0;

	while ((lock = g_async_queue_pop(queue)) != (dlock_lock *)queue) {
		for (volatile unsigned i = 0; i < spin % 3000; i++)
			;
		spin += 397;
		dlock_lock_free(lock);
	}
	return NULL;
}

/*
 * A thread holding a WRITE lock takes a READ hold on the same resource
 * (a downgrade) while another thread frees the write hold's handle,
 * which releases it.  Either way the read acquire is granted -- as a
 * downgrade, or as any reader once the write hold has gone -- with a
 * later token, and it never reads the write hold's state after that
 * release freed it (the ASan build shows that).
 */
static void test_freeing_the_write_handle_during_its_downgrade_grants_the_read_hold(void **state)
{
	const char *resource = "handle-race/downgrade";
	GAsyncQueue *queue = g_async_queue_new();
	int64_t until = test_now_ms() + 3000;
	int rounds = 0, failed = 0, first_rc = DLOCK_OK;
	dlock_client *client;
	pthread_t freer;

	(void)state;
	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(pthread_create(&freer, NULL, write_freer, queue), 0);
	while (test_now_ms() < until || rounds < 200) {
		dlock_lock *w, *r;
		uint64_t write_token;
		int rc;

		assert_int_equal(dlock_lock_new(client, resource, &w), DLOCK_OK);
		assert_int_equal(dlock_lock_new(client, resource, &r), DLOCK_OK);
		assert_int_equal(dlock_lock_set_mode(w, DLOCK_MODE_WRITE), DLOCK_OK);
		assert_int_equal(dlock_lock_set_mode(r, DLOCK_MODE_READ), DLOCK_OK);
		assert_int_equal(dlock_acquire(w, 5000), DLOCK_OK);
		write_token = dlock_fencing_token(w);
		g_async_queue_push(queue, w);
		rc = dlock_acquire(r, 5000);
		if (rc != DLOCK_OK && failed++ == 0) {
			first_rc = rc;
			print_message("round %d: the read acquire returned %s: %s\n", rounds,
			              dlock_code_name(rc), dlock_last_error_message());
		}
		if (rc == DLOCK_OK) {
			assert_int_equal(dlock_held(r), 1);
			assert_true(dlock_fencing_token(r) > write_token);
			assert_int_equal(dlock_release(r), DLOCK_OK);
		}
		dlock_lock_free(r);
		rounds++;
	}
	g_async_queue_push(queue, queue);
	pthread_join(freer, NULL);
	print_message("%d rounds, %d read acquires not granted\n", rounds, failed);
	assert_int_equal(failed, 0);
	assert_int_equal(first_rc, DLOCK_OK);
	g_async_queue_unref(queue);
	dlock_client_free(client);
}

static void count_lost(dlock_lock *lock, dlock_state state, void *user_data)
{
	(void)lock;
	if (state == DLOCK_STATE_LOST)
		__atomic_add_fetch((int *)user_data, 1, __ATOMIC_SEQ_CST);
}

/*
 * Two threads acquire READ through one handle-owned handle while a writer
 * of another client holds the lock; its release grants both at once, as
 * readers share.  The handle is one owner: the second grant is a second
 * count of its hold, not a replacement of a hold that was never lost --
 * no LOST event, both releases DLOCK_OK, and nothing left held.
 */
static void test_two_grants_at_once_through_one_handle_are_one_hold_counted_twice(void **state)
{
	const char *resource = "handle-race/two-readers-one-handle";
	dlock_client *client, *other;
	dlock_lock *shared, *writer;
	racer r[2] = { { 0 } };
	pthread_t threads[2];
	int lost = 0;

	(void)state;
	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_client_new(uri, &other), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, resource, &shared), DLOCK_OK);
	assert_int_equal(dlock_lock_set_owner(shared, DLOCK_OWNER_HANDLE), DLOCK_OK);
	assert_int_equal(dlock_lock_set_mode(shared, DLOCK_MODE_READ), DLOCK_OK);
	assert_int_equal(dlock_lock_set_state_callback(shared, count_lost, &lost), DLOCK_OK);
	assert_int_equal(dlock_lock_new(other, resource, &writer), DLOCK_OK);
	assert_int_equal(dlock_lock_set_mode(writer, DLOCK_MODE_WRITE), DLOCK_OK);

	assert_int_equal(dlock_acquire(writer, 0), DLOCK_OK);
	for (int i = 0; i < 2; i++) {
		r[i].lock = shared;
		assert_int_equal(pthread_create(&threads[i], NULL, acquire_racer, &r[i]), 0);
	}
	for (int i = 0; i < 2; i++)
		assert_true(test_wait_until(racer_sleeps_in_acquire, &r[i], 5000));
	g_usleep(200 * 1000); /* both past their first try, waiting */
	assert_int_equal(dlock_release(writer), DLOCK_OK);
	for (int i = 0; i < 2; i++) {
		pthread_join(threads[i], NULL);
		assert_int_equal(r[i].rc, DLOCK_OK);
	}

	/* A writer stays out while the handle holds. */
	assert_int_equal(dlock_acquire(writer, 0), DLOCK_EBUSY);
	assert_int_equal(dlock_release(shared), DLOCK_OK);
	assert_int_equal(dlock_acquire(writer, 0), DLOCK_EBUSY);
	assert_int_equal(dlock_release(shared), DLOCK_OK);
	assert_int_equal(dlock_release(shared), DLOCK_ENOTHELD);
	assert_int_equal(__atomic_load_n(&lost, __ATOMIC_SEQ_CST), 0);
	/* Both grants are gone from the server. */
	assert_int_equal(dlock_acquire(writer, strcmp(backend, "redis") == 0 ? 2000 : 0), DLOCK_OK);
	assert_int_equal(dlock_release(writer), DLOCK_OK);

	dlock_lock_free(writer);
	dlock_lock_free(shared);
	dlock_client_free(other);
	dlock_client_free(client);
}

static int setup(void **state)
{
	(void)state;
	if (strcmp(backend, "redis") == 0) {
		server = test_redis_start(NULL, NULL, false);
		uri = test_redis_uri(server, NULL);
	} else {
		dir = g_dir_make_tmp("dlock-handle-race-XXXXXX", NULL);
		assert_non_null(dir);
		uri = g_strdup_printf("file://%s", dir);
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (server)
		test_redis_stop(server);
	if (dir)
		test_remove_tree(dir);
	g_free(dir);
	g_free(uri);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_freeing_a_handle_while_its_acquire_is_granted_leaves_nothing_held),
		cmocka_unit_test(test_freeing_the_write_handle_during_its_downgrade_grants_the_read_hold),
		cmocka_unit_test(test_two_grants_at_once_through_one_handle_are_one_hold_counted_twice),
	};

	test_init(argv[0]);
	if (argc < 2 || (strcmp(argv[1], "file") != 0 && strcmp(argv[1], "redis") != 0)) {
		fprintf(stderr, "usage: %s file|redis\n", argv[0]);
		return 2;
	}
	backend = argv[1];
	return test_finish(cmocka_run_group_tests_name(backend, tests, setup, teardown));
}
