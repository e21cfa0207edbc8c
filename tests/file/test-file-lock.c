/* SPDX-License-Identifier: MIT */
/*
 * The file backend: exclusion across processes and threads, release by
 * the kernel when a holder dies, waiting woken by the release, deadlines, name
 * mapping that never leaves the directory, and the default directory's
 * checks.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-exclusion.h"
#include "test-handoff.h"
#include "test-redis.h"

#define PROCESSES 3
#define THREADS 4
#define ROUNDS 25

static char *dir;
static char *uri;

/* ---- workers ---------------------------------------------------------- */

static int64_t cpu_us(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (int64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000 + ru.ru_utime.tv_usec +
	       ru.ru_stime.tv_usec;
}

static void log_to_stdout(dlock_log_level level, const char *message, void *user_data)
{
	printf("log %s\n", message);
	fflush(stdout);
}

/* The descriptor limit before leave_one_descriptor() lowered it. */
static struct rlimit saved_nofile;

/*
 * Leave this process exactly one free descriptor: the lock file takes it,
 * so inotify_init1() fails with EMFILE, as it does for a program that has
 * used up its descriptors.  Only the soft limit is lowered, so
 * restore_descriptors() can give them back (LeakSanitizer needs
 * descriptors of its own when the process exits).
 */
static bool leave_one_descriptor(void)
{
	struct rlimit rl;
	int fd, last = -1;
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int max = 2;

	if (!d)
		return false;
	while ((e = readdir(d)))
		if (atoi(e->d_name) > max)
			max = atoi(e->d_name);
	closedir(d);
	if (getrlimit(RLIMIT_NOFILE, &saved_nofile) != 0)
		return false;
	rl = saved_nofile;
	rl.rlim_cur = (rlim_t)max + 2;
	if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
		return false;
	while ((fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
		last = fd;
	if (last < 0)
		return false;
	close(last);
	return true;
}

/*
 * Without inotify: a 500 ms wait on a held lock, then (after "held" is
 * reported) a wait that the test ends by releasing.  Prints "rc CODE
 * ELAPSED_MS CPU_MS" for each.
 */
static int noinotify_worker(const char *spec, const char *resource)
{
	dlock_client *client;
	dlock_lock *lock;
	int64_t t0, c0;
	int rc;

	if (dlock_client_new(spec, &client) != DLOCK_OK || dlock_lock_new(client, resource, &lock) != DLOCK_OK)
		return 2;
	dlock_client_set_log_callback(client, DLOCK_LOG_WARNING, log_to_stdout, NULL);
	if (!leave_one_descriptor())
		return 3;
	t0 = test_now_ms();
	c0 = cpu_us();
	rc = dlock_acquire(lock, 500);
	printf("rc %d %" PRId64 " %" PRId64 "\n", rc, test_now_ms() - t0, (cpu_us() - c0) / 1000);
	fflush(stdout);
	t0 = test_now_ms();
	c0 = cpu_us();
	rc = dlock_acquire(lock, 10000);
	printf("rc %d %" PRId64 " %" PRId64 "\n", rc, test_now_ms() - t0, (cpu_us() - c0) / 1000);
	fflush(stdout);
	setrlimit(RLIMIT_NOFILE, &saved_nofile);
	dlock_lock_free(lock);
	dlock_client_free(client);
	return rc == DLOCK_OK ? 0 : 1;
}

static int worker_main(int argc, char **argv)
{
	dlock_client *client;
	dlock_lock *lock;

	if (argc >= 6 && strcmp(argv[2], "handoff") == 0)
		return test_handoff_worker(argv[3], argv[4], atoi(argv[5]));
	if (argc >= 9 && strcmp(argv[2], "counter") == 0)
		return test_exclusion_worker(argv + 3);
	if (argc >= 5 && strcmp(argv[2], "noinotify") == 0)
		return noinotify_worker(argv[3], argv[4]);
	if (argc < 4 || dlock_client_new(argv[3], &client) != DLOCK_OK)
		return 2;
	if (strcmp(argv[2], "try") == 0 && argc >= 5) {
		int rc;

		if (dlock_lock_new(client, argv[4], &lock) != DLOCK_OK)
			return 2;
		rc = dlock_acquire(lock, 0);
		/* Flushed, and the client's threads joined, before exit: the
		 * leak check at exit of the sanitized build must not meet a
		 * thread still starting, and must not lose the line when it
		 * aborts. */
		printf("rc %d\n", rc);
		fflush(stdout);
		dlock_lock_free(lock);
		dlock_client_free(client);
		return 0;
	}
	if (strcmp(argv[2], "forkhold") == 0 && argc >= 5) {
		pid_t child;

		if (dlock_lock_new(client, argv[4], &lock) != DLOCK_OK || dlock_acquire(lock, 5000) != DLOCK_OK)
			return 2;
		child = fork();
		if (child == 0) {
			alarm(30); /* outlives this worker, not the test */
			for (;;)
				pause();
		}
		printf("held %" PRIu64 " %ld\n", dlock_fencing_token(lock), (long)child);
		fflush(stdout);
		for (;;)
			pause();
	}
	if (strcmp(argv[2], "hold") == 0 && argc >= 5) {
		if (dlock_lock_new(client, argv[4], &lock) != DLOCK_OK || dlock_acquire(lock, 5000) != DLOCK_OK)
			return 2;
		printf("held %" PRIu64 "\n", dlock_fencing_token(lock));
		fflush(stdout);
		for (;;)
			pause();
	}
	return 64;
}

/* ---- tests ------------------------------------------------------------ */

static void test_processes_and_threads_never_overlap_and_tokens_increase(void **state)
{
	test_exclusion_run(uri, "file/counter", PROCESSES, THREADS, ROUNDS);
}

static void test_killed_holder_releases_at_once_with_larger_token_next(void **state)
{
	const char *args[] = { "hold", uri, "file/crash", NULL };
	dlock_client *client;
	dlock_lock *lock;
	char line[64];
	uint64_t dead;
	int64_t t0;
	int fd;
	pid_t pid = test_spawn_worker(args, &fd);

	assert_true(test_read_line(fd, line, sizeof(line), 10000));
	dead = g_ascii_strtoull(line + 5, NULL, 10);
	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "file/crash", &lock), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_EBUSY);
	kill(pid, SIGKILL);
	t0 = test_now_ms();
	assert_int_equal(dlock_acquire(lock, 5000), DLOCK_OK);
	assert_true(test_now_ms() - t0 < 500);
	assert_true(dlock_fencing_token(lock) > dead);
	test_wait_worker(pid);
	close(fd);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	dlock_lock_free(lock);
	dlock_client_free(client);
}

static void test_waiter_in_another_process_is_woken_by_the_release(void **state)
{
	/* 600 ms lets the waiter's backoff reach its 200 ms cap: only the
	 * release's wake-up (the futex, or inotify's close event without
	 * one) can wake it within a few ms. */
	int64_t median_us = test_handoff_median_us(uri, "file/handoff", 10, 600000, NULL);

	print_message("file handoff median %" PRId64 " us\n", median_us);
	assert_true(median_us < 50000);
}

/* Read "rc CODE ELAPSED CPU" from a worker, skipping its log lines. */
static void read_result(int fd, int64_t timeout_ms, int *rc, int64_t *elapsed_ms, int64_t *cpu_ms)
{
	char line[512];

	for (;;) {
		assert_true(test_read_line(fd, line, sizeof(line), timeout_ms));
		print_message("worker: %s\n", line);
		if (strncmp(line, "rc ", 3) == 0)
			break;
	}
	assert_int_equal(sscanf(line, "rc %d %" SCNd64 " %" SCNd64, rc, elapsed_ms, cpu_ms), 3);
}

static void test_waiter_without_inotify_backs_off_and_honours_its_deadline(void **state)
{
	const char *args[] = { "noinotify", uri, "file/noinotify", NULL };
	dlock_client *client;
	dlock_lock *lock;
	int64_t elapsed, cpu;
	int fd, rc;
	pid_t pid;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "file/noinotify", &lock), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_OK);
	pid = test_spawn_worker(args, &fd);
	/* Old code spun here forever, past the deadline. */
	read_result(fd, 500 + test_slack(2500), &rc, &elapsed, &cpu);
	assert_int_equal(rc, DLOCK_ETIMEDOUT);
	assert_true(elapsed >= 500 && elapsed < 500 + test_slack(300));
	assert_true(cpu * 100 < elapsed * 30);
	/* The second wait polls by backoff: it sees the release. */
	g_usleep(300 * 1000);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	read_result(fd, test_slack(3000), &rc, &elapsed, &cpu);
	assert_int_equal(rc, DLOCK_OK);
	assert_true(cpu * 100 < elapsed * 30);
	assert_int_equal(test_wait_worker(pid), 0);
	close(fd);
	dlock_lock_free(lock);
	dlock_client_free(client);
}

/* Another process tries the lock once: its dlock_acquire() result. */
static int try_in_other_process(const char *resource)
{
	const char *args[] = { "try", uri, resource, NULL };
	char line[64];
	int fd, rc = 1;
	pid_t pid = test_spawn_worker(args, &fd);

	assert_true(test_read_line(fd, line, sizeof(line), test_slack(5000)));
	assert_int_equal(sscanf(line, "rc %d", &rc), 1);
	assert_int_equal(test_wait_worker(pid), 0);
	close(fd);
	return rc;
}

static void kill_and_reap(pid_t pid)
{
	kill(pid, SIGKILL);
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
}

/* A child that only sleeps: made by fork(), or by a bare clone system call
 * that runs no pthread_atfork() handler (as a program may do). */
static pid_t sleeping_child(bool bare)
{
	pid_t pid = bare ? (pid_t)syscall(SYS_clone, SIGCHLD, NULL, NULL, NULL, NULL) : fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		alarm(30); /* gone even if the test fails before killing it */
		for (;;)
			pause();
	}
	return pid;
}

static void release_with_a_forked_child_alive(const char *resource, bool bare)
{
	dlock_client *client;
	dlock_lock *lock;
	pid_t child;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, resource, &lock), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_OK);
	child = sleeping_child(bare);
	assert_int_equal(try_in_other_process(resource), DLOCK_EBUSY);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	/* The child is still there, with its copy of the descriptor table. */
	assert_int_equal(kill(child, 0), 0);
	assert_int_equal(try_in_other_process(resource), DLOCK_OK);
	kill_and_reap(child);
	dlock_lock_free(lock);
	dlock_client_free(client);
}

static void test_release_frees_the_lock_while_a_forked_child_lives(void **state)
{
	release_with_a_forked_child_alive("file/fork-release", false);
}

static void test_release_frees_the_lock_while_a_bare_clone_child_lives(void **state)
{
	release_with_a_forked_child_alive("file/clone-release", true);
}

static void test_holder_killed_while_its_forked_child_lives_frees_the_lock(void **state)
{
	const char *args[] = { "forkhold", uri, "file/fork-crash", NULL };
	dlock_client *client;
	dlock_lock *lock;
	char line[64];
	uint64_t dead;
	long child;
	int64_t t0;
	int fd;
	pid_t pid = test_spawn_worker(args, &fd);

	assert_true(test_read_line(fd, line, sizeof(line), test_slack(10000)));
	assert_int_equal(sscanf(line, "held %" SCNu64 " %ld", &dead, &child), 2);
	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "file/fork-crash", &lock), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_EBUSY);
	kill(pid, SIGKILL);
	test_wait_worker(pid);
	t0 = test_now_ms();
	assert_int_equal(dlock_acquire(lock, 2000), DLOCK_OK);
	assert_true(test_now_ms() - t0 < test_slack(500));
	assert_true(dlock_fencing_token(lock) > dead);
	/* The holder's child outlived it and did not keep the lock. */
	assert_int_equal(kill((pid_t)child, 0), 0);
	kill((pid_t)child, SIGKILL);
	close(fd);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	dlock_lock_free(lock);
	dlock_client_free(client);
}

static void record_state(dlock_lock *lock, dlock_state state, void *user_data)
{
	g_atomic_int_set((gint *)user_data, (gint)state);
}

static bool state_is_lost(void *arg)
{
	return g_atomic_int_get((gint *)arg) == DLOCK_STATE_LOST;
}

/*
 * A tmp cleaner (systemd-tmpfiles, tmpreaper) may unlink a held lock file.
 * The holder must learn that its hold no longer excludes anyone (LOST),
 * and the fencing token of whoever locks the new file must still be larger
 * than the old holder's.
 */
static void test_unlinked_lock_file_is_reported_lost_and_tokens_keep_increasing(void **state)
{
	char *path = g_build_filename(dir, "r-file%2Funlinked", NULL);
	const char *args[] = { "hold", uri, "file/unlinked", NULL };
	dlock_client *client;
	dlock_lock *old, *next;
	uint64_t old_token, waiter_token;
	char line[64];
	gint seen = 0;
	pid_t pid;
	int fd;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "file/unlinked", &old), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "file/unlinked", &next), DLOCK_OK);
	assert_int_equal(dlock_lock_set_owner(next, DLOCK_OWNER_HANDLE), DLOCK_OK);
	assert_int_equal(dlock_lock_set_state_callback(old, record_state, &seen), DLOCK_OK);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(dlock_acquire(old, 0), DLOCK_OK);
		assert_int_equal(dlock_release(old), DLOCK_OK);
	}
	assert_int_equal(dlock_acquire(old, 0), DLOCK_OK);
	old_token = dlock_fencing_token(old);
	/* A waiter in another process, its descriptor on the file to be removed. */
	pid = test_spawn_worker(args, &fd);
	g_usleep(300 * 1000);
	assert_int_equal(unlink(path), 0);
	assert_true(test_wait_until(state_is_lost, &seen, 2000));
	assert_int_equal(dlock_held(old), 0);
	/* Anyone may lock the new file now, the waiter first; its token is
	 * still larger. */
	assert_true(test_read_line(fd, line, sizeof(line), test_slack(2000)));
	waiter_token = g_ascii_strtoull(line + 5, NULL, 10);
	print_message("token before the unlink %" PRIu64 ", after %" PRIu64 "\n", old_token, waiter_token);
	assert_true(waiter_token > old_token);
	kill(pid, SIGKILL);
	test_wait_worker(pid);
	close(fd);
	assert_int_equal(dlock_acquire(next, 1000), DLOCK_OK);
	assert_true(dlock_fencing_token(next) > waiter_token);
	assert_int_equal(dlock_release(old), DLOCK_ELOST);
	assert_int_equal(dlock_release(next), DLOCK_OK);
	dlock_lock_free(old);
	dlock_lock_free(next);
	dlock_client_free(client);
	g_free(path);
}

static void test_try_and_deadline_and_two_clients_in_one_process(void **state)
{
	dlock_client *a, *b;
	dlock_lock *la, *lb;
	int64_t t0, elapsed;

	assert_int_equal(dlock_client_new(uri, &a), DLOCK_OK);
	assert_int_equal(dlock_client_new(uri, &b), DLOCK_OK);
	assert_int_equal(dlock_lock_new(a, "file/try", &la), DLOCK_OK);
	assert_int_equal(dlock_lock_new(b, "file/try", &lb), DLOCK_OK);
	assert_int_equal(dlock_acquire(la, 0), DLOCK_OK);
	assert_int_equal(dlock_acquire(la, 0), DLOCK_OK); /* re-entry */
	assert_int_equal(dlock_acquire(lb, 0), DLOCK_EBUSY);
	t0 = test_now_ms();
	assert_int_equal(dlock_acquire(lb, 300), DLOCK_ETIMEDOUT);
	elapsed = test_now_ms() - t0;
	assert_true(elapsed >= 300 && elapsed < 600);
	assert_int_equal(dlock_release(la), DLOCK_OK);
	assert_int_equal(dlock_acquire(lb, 0), DLOCK_EBUSY); /* still one count */
	assert_int_equal(dlock_release(la), DLOCK_OK);
	assert_int_equal(dlock_acquire(lb, 0), DLOCK_OK);
	assert_int_equal(dlock_release(lb), DLOCK_OK);
	dlock_lock_free(la);
	dlock_lock_free(lb);
	dlock_client_free(a);
	dlock_client_free(b);
}

static void test_names_map_to_distinct_files_inside_the_directory(void **state)
{
	dlock_client *client;
	dlock_lock *a, *ab, *longname, *bad = NULL;
	GString *name = g_string_new(NULL);
	int before = test_count_entries(dir);

	/* 85 three-byte characters: 255 bytes, 765 once escaped: hashed. */
	for (int i = 0; i < 85; i++)
		g_string_append(name, "\xe2\x82\xac");
	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "names/a", &a), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "names/a/b", &ab), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, name->str, &longname), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "../escape", &bad), DLOCK_EINVAL);
	assert_null(bad);
	assert_int_equal(dlock_acquire(a, 0), DLOCK_OK);
	assert_int_equal(dlock_acquire(ab, 0), DLOCK_OK);
	assert_int_equal(dlock_acquire(longname, 0), DLOCK_OK);
	assert_int_equal(test_count_entries(dir), before + 3);
	dlock_release(a);
	dlock_release(ab);
	dlock_release(longname);
	dlock_lock_free(a);
	dlock_lock_free(ab);
	dlock_lock_free(longname);
	dlock_client_free(client);
	g_string_free(name, TRUE);
}

static void test_query_shows_holder_and_fence(void **state)
{
	dlock_client *client;
	dlock_lock *lock;
	dlock_info *info;
	uint64_t token;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "file/query", &lock), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_OK);
	token = dlock_fencing_token(lock);
	assert_int_equal(dlock_lock_query(lock, &info), DLOCK_OK);
	assert_true(dlock_info_locked(info));
	assert_int_equal(dlock_info_holder_pid(info), getpid());
	assert_int_equal(dlock_info_fencing_token(info), token);
	assert_int_equal(dlock_info_hold(info), DLOCK_HOLD_HELD);
	dlock_info_free(info);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	assert_int_equal(dlock_lock_query(lock, &info), DLOCK_OK);
	assert_false(dlock_info_locked(info));
	assert_string_equal(dlock_info_holder(info), "");
	assert_int_equal(dlock_info_fencing_token(info), token);
	dlock_info_free(info);
	dlock_lock_free(lock);
	dlock_client_free(client);
}

static void test_unsafe_default_directories_are_refused(void **state)
{
	char *shared = g_build_filename(dir, "..", "shared-dir", NULL);
	char *plain = g_build_filename(dir, "..", "plain-file", NULL);
	dlock_client *client = NULL;

	mkdir(shared, 0700);
	chmod(shared, 0770);
	g_setenv("DLOCK_DIR", shared, TRUE);
	assert_int_equal(dlock_client_new("file://", &client), DLOCK_ECONFIG);
	assert_non_null(strstr(dlock_last_error_message(), "writable by group or others"));
	assert_non_null(strstr(dlock_last_error_message(), "shared-dir"));
	assert_true(g_file_set_contents(plain, "x", 1, NULL));
	g_setenv("DLOCK_DIR", plain, TRUE);
	assert_int_equal(dlock_client_new("file://", &client), DLOCK_ECONFIG);
	assert_non_null(strstr(dlock_last_error_message(), "not a directory"));
	g_setenv("DLOCK_DIR", "relative/dir", TRUE);
	assert_int_equal(dlock_client_new(NULL, &client), DLOCK_ECONFIG);
	g_unsetenv("DLOCK_DIR");
	assert_null(client);
	rmdir(shared);
	unlink(plain);
	g_free(shared);
	g_free(plain);
}

static void test_default_directory_is_created_private(void **state)
{
	char *fresh = g_build_filename(dir, "..", "fresh-default", NULL);
	dlock_client *client;
	dlock_lock *lock;
	struct stat st;

	rmdir(fresh);
	g_setenv("DLOCK_DIR", fresh, TRUE);
	assert_int_equal(dlock_client_new(NULL, &client), DLOCK_OK);
	g_unsetenv("DLOCK_DIR");
	assert_int_equal(stat(fresh, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);
	assert_int_equal(dlock_lock_new(client, "x", &lock), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_OK);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	dlock_lock_free(lock);
	dlock_client_free(client);
	{
		char *cmd = g_strdup_printf("rm -rf '%s'", fresh);

		assert_int_equal(system(cmd), 0);
		g_free(cmd);
	}
	g_free(fresh);
}

static int setup(void **state)
{
	test_file_dir_make("dlock-file-test", &dir, &uri);
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
		cmocka_unit_test(test_processes_and_threads_never_overlap_and_tokens_increase),
		cmocka_unit_test(test_killed_holder_releases_at_once_with_larger_token_next),
		cmocka_unit_test(test_waiter_in_another_process_is_woken_by_the_release),
		cmocka_unit_test(test_waiter_without_inotify_backs_off_and_honours_its_deadline),
		cmocka_unit_test(test_release_frees_the_lock_while_a_forked_child_lives),
		cmocka_unit_test(test_release_frees_the_lock_while_a_bare_clone_child_lives),
		cmocka_unit_test(test_holder_killed_while_its_forked_child_lives_frees_the_lock),
		cmocka_unit_test(test_unlinked_lock_file_is_reported_lost_and_tokens_keep_increasing),
		cmocka_unit_test(test_try_and_deadline_and_two_clients_in_one_process),
		cmocka_unit_test(test_names_map_to_distinct_files_inside_the_directory),
		cmocka_unit_test(test_query_shows_holder_and_fence),
		cmocka_unit_test(test_unsafe_default_directories_are_refused),
		cmocka_unit_test(test_default_directory_is_created_private),
	};

	test_init(argv[0]);
	if (argc > 1 && strcmp(argv[1], "--worker") == 0)
		return worker_main(argc, argv);
	return cmocka_run_group_tests_name("file-lock", tests, setup, teardown);
}
