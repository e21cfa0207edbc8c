/* SPDX-License-Identifier: MIT */
/*
 * Semaphores on the file backend (docs/file.md, "Semaphores"): N permits
 * as N bytes of the lock file's main range.  The shared checks
 * (test-permits.h) -- at most N at once and N reached across processes,
 * busy, waking, agreement on N, re-entry, a lock kept out, a killed
 * holder's permit back at once -- and what is the file's own: the bound
 * on N.
 */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-permits.h"
#include "test-util.h"

static char *dir;
static char *uri;

static void test_never_more_than_n_and_n_reached_across_processes(void **state)
{
	test_permits_run(uri, "sem/census", 3, 3, 3, 5);
}

static void test_permits_busy_wake_agreement_reentry_and_locks(void **state)
{
	test_permits_basics(uri, "sem/basics", 300, true);
}

/* The kernel drops a dead holder's lock: its permit is free at once (a
 * waiter's nap finds it, the futex is not told). */
static void test_killed_holders_permit_returns_at_once(void **state)
{
	test_permits_killed_holder(uri, "sem/killed", 1000);
}

static void test_more_permits_than_the_file_keeps_are_refused(void **state)
{
	dlock_client *client;
	dlock_lock *lock;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "sem/many", &lock), DLOCK_OK);
	assert_int_equal(dlock_lock_set_permits(lock, 4001), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_EINVAL);
	assert_non_null(strstr(dlock_last_error_message(), "at most 4000"));
	dlock_lock_free(lock);
	assert_int_equal(dlock_lock_new(client, "sem/many", &lock), DLOCK_OK);
	assert_int_equal(dlock_lock_set_permits(lock, 4000), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_OK);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	dlock_lock_free(lock);
	dlock_client_free(client);
}

/* The core's checks of permits, before any I/O or at the first acquire. */
static void test_permits_setter_and_owner_checks(void **state)
{
	dlock_client *client;
	dlock_lock *sem, *two, *plain, *reader;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "sem/checks", &sem), DLOCK_OK);
	assert_int_equal(dlock_lock_set_permits(sem, 0), DLOCK_EINVAL);
	assert_int_equal(dlock_lock_set_permits(sem, DLOCK_PERMITS_MAX + 1), DLOCK_EINVAL);
	assert_non_null(strstr(dlock_last_error_message(), "65536"));
	assert_int_equal(dlock_lock_set_permits(NULL, 3), DLOCK_EINVAL);
	assert_int_equal(dlock_lock_set_permits(sem, 3), DLOCK_OK);
	assert_int_equal(dlock_acquire(sem, 0), DLOCK_OK);
	assert_int_equal(dlock_lock_set_permits(sem, 4), DLOCK_EINVAL); /* too late */
	/* The caller holds R with 3 permits: another number is refused. */
	assert_int_equal(dlock_lock_new(client, "sem/checks", &two), DLOCK_OK);
	assert_int_equal(dlock_lock_set_permits(two, 2), DLOCK_OK);
	assert_int_equal(dlock_acquire(two, 0), DLOCK_EINVAL);
	assert_non_null(strstr(dlock_last_error_message(), "holds it with 3 permits"));
	assert_non_null(strstr(dlock_last_error_message(), "asks for 2"));
	assert_int_equal(dlock_lock_new(client, "sem/checks", &plain), DLOCK_OK);
	assert_int_equal(dlock_acquire(plain, 0), DLOCK_EINVAL);
	assert_int_equal(dlock_lock_new(client, "sem/checks", &reader), DLOCK_OK);
	assert_int_equal(dlock_lock_set_mode(reader, DLOCK_MODE_READ), DLOCK_OK);
	assert_int_equal(dlock_acquire(reader, 0), DLOCK_EINVAL);
	assert_int_equal(dlock_release(sem), DLOCK_OK);
	dlock_lock_free(reader);
	/* A semaphore's holds have no mode. */
	assert_int_equal(dlock_lock_new(client, "sem/checks", &reader), DLOCK_OK);
	assert_int_equal(dlock_lock_set_mode(reader, DLOCK_MODE_READ), DLOCK_OK);
	assert_int_equal(dlock_lock_set_permits(reader, 3), DLOCK_OK);
	assert_int_equal(dlock_acquire(reader, 0), DLOCK_EINVAL);
	assert_non_null(strstr(dlock_last_error_message(), "no mode"));
	dlock_lock_free(reader);
	dlock_lock_free(plain);
	dlock_lock_free(two);
	dlock_lock_free(sem);
	dlock_client_free(client);
}

/*
 * A handle refused because its permits differ from the hold the caller
 * has is not the owner of that hold: its release, its state and its token
 * leave the hold alone -- the caller's critical section under the first
 * handle stays protected.
 */
static void test_a_handle_of_other_permits_neither_sees_nor_releases_the_hold(void **state)
{
	dlock_client *client, *other;
	dlock_lock *plain, *sem, *probe;

	(void)state;
	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_client_new(uri, &other), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "sem/other-permits", &plain), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "sem/other-permits", &sem), DLOCK_OK);
	assert_int_equal(dlock_lock_set_permits(sem, 3), DLOCK_OK);
	assert_int_equal(dlock_lock_new(other, "sem/other-permits", &probe), DLOCK_OK);

	assert_int_equal(dlock_acquire(plain, 0), DLOCK_OK);
	assert_int_equal(dlock_acquire(sem, 0), DLOCK_EINVAL);
	assert_int_equal(dlock_held(sem), 0);
	assert_int_equal(dlock_fencing_token(sem), 0);
	assert_int_equal(dlock_release(sem), DLOCK_ENOTHELD);
	assert_int_equal(dlock_held(plain), 1);
	assert_int_equal(dlock_acquire(probe, 0), DLOCK_EBUSY);
	assert_int_equal(dlock_release(plain), DLOCK_OK);
	assert_int_equal(dlock_acquire(probe, 0), DLOCK_OK);
	assert_int_equal(dlock_release(probe), DLOCK_OK);

	dlock_lock_free(probe);
	dlock_lock_free(sem);
	dlock_lock_free(plain);
	dlock_client_free(other);
	dlock_client_free(client);
}

static int setup(void **state)
{
	test_file_dir_make("dlock-file-sem", &dir, &uri);
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
		cmocka_unit_test(test_never_more_than_n_and_n_reached_across_processes),
		cmocka_unit_test(test_permits_busy_wake_agreement_reentry_and_locks),
		cmocka_unit_test(test_killed_holders_permit_returns_at_once),
		cmocka_unit_test(test_more_permits_than_the_file_keeps_are_refused),
		cmocka_unit_test(test_permits_setter_and_owner_checks),
		cmocka_unit_test(test_a_handle_of_other_permits_neither_sees_nor_releases_the_hold),
	};

	test_init(argv[0]);
	if (argc > 1 && strcmp(argv[1], "--worker") == 0)
		return test_permits_worker_main(argc, argv);
	return cmocka_run_group_tests_name("file-semaphore", tests, setup, teardown);
}
