/*
 * Handles torn down while calls on them are in flight, on a real backend
 * (argv[1]: "file" or "redis"): freeing a handle while another thread's
 * acquire on it is being granted must neither touch freed memory (the
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
	};

	test_init(argv[0]);
	if (argc < 2 || (strcmp(argv[1], "file") != 0 && strcmp(argv[1], "redis") != 0)) {
		fprintf(stderr, "usage: %s file|redis\n", argv[0]);
		return 2;
	}
	backend = argv[1];
	return test_finish(cmocka_run_group_tests_name(backend, tests, setup, teardown));
}
