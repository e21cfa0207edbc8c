/* SPDX-License-Identifier: MIT */
/*
 * Lock file descriptors kept open between holds: a later hold of the
 * resource takes the released one instead of opening the file, a file
 * replaced between two holds is locked anew (and watched anew), nothing is
 * left open after the client is freed, a forked child keeps none, and a
 * waiter without a futex is still woken by a release that closes nothing.
 */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-util.h"

static char *dir;
static char *uri;

/* How many descriptors this process has open. */
static int open_descriptors(void)
{
	return test_count_entries("/proc/self/fd");
}

/* The descriptors of this process open on the file at path, ascending,
 * as a string ("3 7"), for comparison. */
static char *descriptors_on(const char *path)
{
	GString *found = g_string_new(NULL);
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	GArray *fds = g_array_new(FALSE, FALSE, sizeof(int));

	assert_non_null(d);
	while ((e = readdir(d))) {
		char link[300], target[PATH_MAX];
		ssize_t n;

		if (e->d_name[0] == '.')
			continue;
		snprintf(link, sizeof(link), "/proc/self/fd/%s", e->d_name);
		n = readlink(link, target, sizeof(target) - 1);
		if (n < 0)
			continue;
		target[n] = '\0';
		if (strcmp(target, path) == 0) {
			int fd = atoi(e->d_name);

			g_array_append_val(fds, fd);
		}
	}
	closedir(d);
	for (guint i = 0; i < fds->len; i++) {
		for (guint j = i + 1; j < fds->len; j++) {
			if (g_array_index(fds, int, j) < g_array_index(fds, int, i)) {
				int t = g_array_index(fds, int, i);

				g_array_index(fds, int, i) = g_array_index(fds, int, j);
				g_array_index(fds, int, j) = t;
			}
		}
		g_string_append_printf(found, "%s%d", i ? " " : "", g_array_index(fds, int, i));
	}
	g_array_unref(fds);
	return g_string_free(found, FALSE);
}

static char *lock_path(const char *name)
{
	return g_strdup_printf("%s/r-%s", dir, name);
}

static void test_later_holds_take_the_released_descriptor(void **state)
{
	char *path = lock_path("pooled");
	dlock_client *client;
	dlock_lock *lock;
	char *after_first, *after_all;
	int before;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "pooled", &lock), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_OK);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	before = open_descriptors();
	after_first = descriptors_on(path);
	/* Released, the descriptor stays open for the next hold. */
	assert_string_not_equal(after_first, "");
	for (int i = 0; i < 1000; i++) {
		assert_int_equal(dlock_acquire(lock, 0), DLOCK_OK);
		assert_int_equal(dlock_release(lock), DLOCK_OK);
	}
	after_all = descriptors_on(path);
	print_message("descriptors on the lock file: after one pair [%s], after 1001 [%s]; open %d -> %d\n",
	              after_first, after_all, before, open_descriptors());
	assert_string_equal(after_first, after_all);
	assert_int_equal(open_descriptors(), before);
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_free(after_first);
	g_free(after_all);
	g_free(path);
}

static void record_state(dlock_lock *lock, dlock_state state, void *user_data)
{
	g_atomic_int_set((gint *)user_data, (gint)state);
}

static bool state_is_lost(void *arg)
{
	return g_atomic_int_get((gint *)arg) == DLOCK_STATE_LOST;
}

/* The fence recorded in the file at path. */
static uint64_t recorded_fence(const char *path)
{
	char *text = NULL, *at;
	uint64_t fence = 0;

	assert_true(g_file_get_contents(path, &text, NULL, NULL));
	at = strstr(text, "\nfence ");
	if (at)
		fence = g_ascii_strtoull(at + 7, NULL, 10);
	g_free(text);
	return fence;
}

/*
 * A file replaced between two holds (renamed over by another one) while
 * the first hold's descriptor waits in the pool: the next hold must lock
 * the new file, take its token from it, and watch it, so that the new
 * file's removal is reported.
 */
static void test_file_replaced_between_holds_is_locked_and_watched_anew(void **state)
{
	char *path = lock_path("replaced");
	char *other = g_strdup_printf("%s/replacement", dir);
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
	dlock_client *client;
	dlock_lock *lock;
	uint64_t old_token;
	char *pooled;
	gint seen = 0;
	int fd;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "replaced", &lock), DLOCK_OK);
	assert_int_equal(dlock_lock_set_state_callback(lock, record_state, &seen), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_OK);
	old_token = dlock_fencing_token(lock);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	pooled = descriptors_on(path);
	assert_string_not_equal(pooled, "");
	g_free(pooled);
	/* A new, empty file takes the path. */
	fd = open(other, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(rename(other, path), 0);

	assert_int_equal(dlock_acquire(lock, 0), DLOCK_OK);
	/* The new file is the one locked, and the token is its own. */
	assert_int_equal(fcntl(fd, F_OFD_GETLK, &fl), 0);
	assert_int_not_equal(fl.l_type, F_UNLCK);
	assert_int_equal(dlock_fencing_token(lock), recorded_fence(path));
	assert_true(dlock_fencing_token(lock) > old_token);
	/* Its removal during the hold is noticed. */
	assert_int_equal(unlink(path), 0);
	assert_true(test_wait_until(state_is_lost, &seen, 2000));
	assert_int_equal(dlock_release(lock), DLOCK_ELOST);
	close(fd);
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_free(other);
	g_free(path);
}

static void test_freed_client_leaves_no_descriptor_open(void **state)
{
	int before = open_descriptors();
	dlock_client *client;
	dlock_lock *locks[40];

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	/* More resources than the pool keeps, and two holds of one. */
	for (int i = 0; i < 40; i++) {
		char *name = g_strdup_printf("freed/%d", i % 39);

		assert_int_equal(dlock_lock_new(client, name, &locks[i]), DLOCK_OK);
		assert_int_equal(dlock_lock_set_owner(locks[i], DLOCK_OWNER_HANDLE), DLOCK_OK);
		assert_int_equal(dlock_acquire(locks[i], 0), i == 39 ? DLOCK_EBUSY : DLOCK_OK);
		g_free(name);
	}
	for (int i = 0; i < 39; i++)
		assert_int_equal(dlock_release(locks[i]), DLOCK_OK);
	for (int i = 0; i < 40; i++)
		dlock_lock_free(locks[i]);
	assert_true(open_descriptors() > before);
	dlock_client_free(client);
	assert_int_equal(open_descriptors(), before);
}

static void test_forked_child_keeps_no_pooled_descriptor(void **state)
{
	char *path = lock_path("forked");
	dlock_client *client;
	dlock_lock *lock;
	char *in_parent, *in_parent_after;
	int answer[2];
	char said = 0;
	pid_t pid;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "forked", &lock), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_OK);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	in_parent = descriptors_on(path);
	assert_string_not_equal(in_parent, "");
	assert_int_equal(pipe(answer), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* The answer goes through the pipe: under valgrind the exit
		 * status is the tool's, which counts what the parent's threads
		 * owned as the child's leaks. */
		if (write(answer[1], strcmp(descriptors_on(path), "") == 0 ? "y" : "n", 1) != 1)
			_exit(4);
		_exit(0);
	}
	close(answer[1]);
	assert_int_equal(read(answer[0], &said, 1), 1);
	assert_int_equal(said, 'y');
	close(answer[0]);
	test_wait_worker(pid);
	/* The parent's stays, and serves the next hold. */
	in_parent_after = descriptors_on(path);
	assert_string_equal(in_parent_after, in_parent);
	g_free(in_parent_after);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_OK);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_free(in_parent);
	g_free(path);
}

static gint64 done_at_us;

static void on_done(dlock_lock *lock, int rc, uint64_t token, void *user_data)
{
	g_atomic_int_set((gint *)user_data, rc == DLOCK_OK ? 1 : -1);
	done_at_us = g_get_monotonic_time();
}

static bool done_set(void *arg)
{
	return g_atomic_int_get((gint *)arg) != 0;
}

/*
 * An asynchronous acquire waits without the futex (its thread is not its
 * own to sleep), by the watch thread's inotify: the release, which now
 * keeps its descriptor open, must still wake it, long before the waiter's
 * backoff (capped at 200 ms) would.
 */
static void test_waiter_without_futex_is_woken_by_a_release(void **state)
{
	dlock_client *client;
	dlock_lock *holder, *waiter;
	int64_t worst_ms = 0;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "nofutex", &holder), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "nofutex", &waiter), DLOCK_OK);
	assert_int_equal(dlock_lock_set_owner(holder, DLOCK_OWNER_HANDLE), DLOCK_OK);
	assert_int_equal(dlock_lock_set_owner(waiter, DLOCK_OWNER_HANDLE), DLOCK_OK);
	for (int round = 0; round < 7; round++) {
		gint done = 0;
		gint64 released_us;

		assert_int_equal(dlock_acquire(holder, 0), DLOCK_OK);
		assert_int_equal(dlock_acquire_async(waiter, 10000, on_done, &done), DLOCK_OK);
		/* Long enough for the backoff to reach its cap. */
		g_usleep(400 * 1000);
		assert_int_equal(g_atomic_int_get(&done), 0);
		released_us = g_get_monotonic_time();
		assert_int_equal(dlock_release(holder), DLOCK_OK);
		assert_true(test_wait_until(done_set, &done, 5000));
		assert_int_equal(g_atomic_int_get(&done), 1);
		worst_ms = MAX(worst_ms, (done_at_us - released_us) / 1000);
		assert_int_equal(dlock_release(waiter), DLOCK_OK);
	}
	print_message("slowest wake-up after a release: %" PRId64 " ms\n", worst_ms);
	assert_true(worst_ms < test_slack(60));
	dlock_lock_free(holder);
	dlock_lock_free(waiter);
	dlock_client_free(client);
}

static int setup(void **state)
{
	test_file_dir_make("dlock-file-pool", &dir, &uri);
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
		cmocka_unit_test(test_later_holds_take_the_released_descriptor),
		cmocka_unit_test(test_file_replaced_between_holds_is_locked_and_watched_anew),
		cmocka_unit_test(test_freed_client_leaves_no_descriptor_open),
		cmocka_unit_test(test_forked_child_keeps_no_pooled_descriptor),
		cmocka_unit_test(test_waiter_without_futex_is_woken_by_a_release),
	};

	test_init(argv[0]);
	return cmocka_run_group_tests_name("file-pool", tests, setup, teardown);
}
