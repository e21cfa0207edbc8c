/* SPDX-License-Identifier: MIT */
/*
 * Read-write locks on the file backend: the shared checks (test-rw.h), and
 * what only processes show -- readers in several processes share, a
 * killed reader's hold and record go with it, a writer in another process
 * is kept out by readers and gets in once they are gone.
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
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-rw.h"
#include "test-util.h"

static char *dir;
static char *uri;

/* "hold URI RESOURCE MODE [fork]": hold the lock in MODE (read, write)
 * until killed -- with fork, after forking a child that outlives this
 * worker -- and print "held TOKEN CHILD-PID" once it holds. */
static int worker_main(int argc, char **argv)
{
	test_rw_owner o;
	pid_t child = 0;

	if (argc < 6 || strcmp(argv[2], "hold") != 0)
		return 64;
	test_rw_owner_open(&o, argv[3], argv[4], strcmp(argv[5], "read") == 0 ? DLOCK_MODE_READ
	                                                                      : DLOCK_MODE_WRITE);
	if (dlock_acquire(o.lock, 10000) != DLOCK_OK)
		return 3;
	if (argc > 6 && strcmp(argv[6], "fork") == 0 && (child = fork()) == 0) {
		alarm(30); /* outlives this worker, not the test */
		for (;;)
			pause();
	}
	printf("held %" PRIu64 " %ld\n", dlock_fencing_token(o.lock), (long)child);
	fflush(stdout);
	for (;;)
		pause();
}

static pid_t spawn_holder(const char *resource, const char *mode, int *ret_fd, uint64_t *ret_token)
{
	const char *args[] = { "hold", uri, resource, mode, NULL };
	char line[64];
	pid_t pid = test_spawn_worker(args, ret_fd);

	assert_true(test_read_line(*ret_fd, line, sizeof(line), 10000));
	assert_true(g_str_has_prefix(line, "held "));
	*ret_token = g_ascii_strtoull(line + 5, NULL, 10);
	return pid;
}

/* A reader killed while a child it forked lives: the child never keeps
 * its parent's read lock, so a writer gets in at once. */
static void test_killed_reader_with_a_live_child_frees_the_lock(void **state)
{
	const char *args[] = { "hold", uri, "rw/fork", "read", "fork", NULL };
	test_rw_owner writer;
	char line[96];
	long child = 0;
	int fd;
	pid_t pid = test_spawn_worker(args, &fd);

	assert_true(test_read_line(fd, line, sizeof(line), 10000));
	assert_int_equal(sscanf(line, "held %*u %ld", &child), 1);
	assert_true(child > 0);
	test_rw_owner_open(&writer, uri, "rw/fork", DLOCK_MODE_WRITE);
	assert_int_equal(dlock_acquire(writer.lock, 0), DLOCK_EBUSY);
	kill(pid, SIGKILL);
	test_wait_worker(pid);
	close(fd);
	assert_int_equal(dlock_acquire(writer.lock, 5000), DLOCK_OK);
	assert_int_equal(dlock_release(writer.lock), DLOCK_OK);
	kill((pid_t)child, SIGKILL);
	test_rw_owner_close(&writer);
}

/* Freeing a client that holds a write hold and the read hold it was
 * downgraded to releases both, in whichever order teardown takes them. */
static void test_client_free_releases_a_downgrade_pair(void **state)
{
	test_rw_owner owner, other;
	dlock_lock *read;

	for (int order = 0; order < 2; order++) {
		test_rw_owner_open(&owner, uri, "rw/teardown", DLOCK_MODE_WRITE);
		assert_int_equal(dlock_lock_new(owner.client, "rw/teardown", &read), DLOCK_OK);
		assert_int_equal(dlock_lock_set_mode(read, DLOCK_MODE_READ), DLOCK_OK);
		assert_int_equal(dlock_acquire(owner.lock, 0), DLOCK_OK);
		assert_int_equal(dlock_acquire(read, 0), DLOCK_OK);
		/* Either handle first: its free releases its hold. */
		if (order == 0) {
			dlock_lock_free(read);
			test_rw_owner_close(&owner);
		} else {
			dlock_lock_free(owner.lock);
			/* The client's free releases the read hold left. */
			dlock_client_free(owner.client);
			dlock_lock_free(read);
		}
		test_rw_owner_open(&other, uri, "rw/teardown", DLOCK_MODE_EXCLUSIVE);
		assert_int_equal(dlock_acquire(other.lock, 0), DLOCK_OK);
		assert_int_equal(dlock_release(other.lock), DLOCK_OK);
		test_rw_owner_close(&other);
	}
}

static void test_readers_share_writers_exclude_tokens_increase(void **state)
{
	test_rw_share_and_exclude(uri, "rw/share");
}

static void test_upgrade_is_refused_at_once(void **state)
{
	test_rw_upgrade_refused(uri, "rw/upgrade");
}

static void test_downgrade_keeps_the_read_hold_and_lets_no_writer_in(void **state)
{
	test_rw_downgrade(uri, "rw/downgrade", false);
}

/* Readers in two other processes hold at once; this process reads too,
 * and its writer waits until both are gone -- one killed, whose record
 * then no longer shows. */
static void test_readers_in_processes_share_and_a_killed_one_frees_its_part(void **state)
{
	test_rw_owner reader, writer;
	uint64_t t1, t2;
	int fd1, fd2;
	pid_t p1 = spawn_holder("rw/procs", "read", &fd1, &t1);
	pid_t p2 = spawn_holder("rw/procs", "read", &fd2, &t2);
	dlock_info *info;

	assert_true(t2 > t1);
	test_rw_owner_open(&reader, uri, "rw/procs", DLOCK_MODE_READ);
	test_rw_owner_open(&writer, uri, "rw/procs", DLOCK_MODE_WRITE);
	assert_int_equal(dlock_acquire(reader.lock, 0), DLOCK_OK);
	assert_int_equal(dlock_acquire(writer.lock, 0), DLOCK_EBUSY);
	assert_int_equal(dlock_lock_query(writer.lock, &info), DLOCK_OK);
	assert_int_equal(dlock_info_mode(info), DLOCK_HELD_SHARED);
	assert_int_equal(dlock_info_holders(info), 3);
	dlock_info_free(info);
	assert_int_equal(dlock_release(reader.lock), DLOCK_OK);

	kill(p1, SIGKILL);
	test_wait_worker(p1);
	close(fd1);
	assert_int_equal(dlock_lock_query(writer.lock, &info), DLOCK_OK);
	assert_int_equal(dlock_info_holders(info), 1);
	assert_int_equal(dlock_info_holder_pid_at(info, 0), p2);
	dlock_info_free(info);
	assert_int_equal(dlock_acquire(writer.lock, 0), DLOCK_EBUSY);

	kill(p2, SIGKILL);
	test_wait_worker(p2);
	close(fd2);
	assert_int_equal(dlock_acquire(writer.lock, 5000), DLOCK_OK);
	assert_true(dlock_fencing_token(writer.lock) > t2);
	assert_int_equal(dlock_release(writer.lock), DLOCK_OK);
	test_rw_owner_close(&reader);
	test_rw_owner_close(&writer);
}

static bool all_done(void *arg)
{
	test_rw_waiter *w = arg;

	for (int i = 0; i < 3; i++)
		if (!test_rw_waiter_done(&w[i]))
			return false;
	return true;
}

/* Readers waiting for a writer in another process all get in once it is
 * gone, and hold at once. */
static void test_waiting_readers_all_get_in_when_the_writer_goes(void **state)
{
	test_rw_waiter readers[3];
	uint64_t token;
	int fd;
	pid_t pid = spawn_holder("rw/wake", "write", &fd, &token);

	for (int i = 0; i < 3; i++)
		test_rw_waiter_start(&readers[i], uri, "rw/wake", DLOCK_MODE_READ, 20000);
	assert_false(test_poll_window(all_done, readers, 300));
	kill(pid, SIGKILL);
	test_wait_worker(pid);
	close(fd);
	assert_true(test_wait_until(all_done, readers, 5000));
	for (int i = 0; i < 3; i++) {
		test_rw_waiter_join(&readers[i]);
		assert_int_equal(readers[i].rc, DLOCK_OK);
		assert_true(dlock_held(readers[i].owner.lock));
		assert_true(dlock_fencing_token(readers[i].owner.lock) > token);
	}
	for (int i = 0; i < 3; i++) {
		assert_int_equal(dlock_release(readers[i].owner.lock), DLOCK_OK);
		test_rw_owner_close(&readers[i].owner);
	}
}

/* One handle-owned handle of a fresh client on resource, in mode or as a
 * permit of a semaphore of permits (> 1). */
static dlock_lock *short_wait_handle(dlock_client **ret_client, const char *resource, dlock_mode mode,
                                     uint32_t permits)
{
	dlock_lock *lock;

	assert_int_equal(dlock_client_new(uri, ret_client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(*ret_client, resource, &lock), DLOCK_OK);
	assert_int_equal(dlock_lock_set_owner(lock, DLOCK_OWNER_HANDLE), DLOCK_OK);
	if (permits > 1)
		assert_int_equal(dlock_lock_set_permits(lock, permits), DLOCK_OK);
	else
		assert_int_equal(dlock_lock_set_mode(lock, mode), DLOCK_OK);
	return lock;
}

/*
 * Waits of 1 to 20 ms while another owner holds, in every mode, each on a
 * fresh client: always a timeout, however little of the wait the opening
 * of the lock file leaves, never "unavailable".
 */
static void test_short_waits_time_out_in_every_mode(void **state)
{
	static const struct {
		dlock_mode holder, waiter;
		uint32_t permits;
	} cases[] = {
		{ DLOCK_MODE_EXCLUSIVE, DLOCK_MODE_EXCLUSIVE, 1 },
		{ DLOCK_MODE_WRITE, DLOCK_MODE_READ, 1 },
		{ DLOCK_MODE_READ, DLOCK_MODE_WRITE, 1 },
		{ DLOCK_MODE_EXCLUSIVE, DLOCK_MODE_EXCLUSIVE, 2 },
	};
	static const int64_t waits[] = { 1, 2, 3, 5, 8, 13, 20 };

	for (size_t c = 0; c < G_N_ELEMENTS(cases); c++) {
		char *resource = g_strdup_printf("rw/short-%zu", c);
		dlock_client *holder_clients[2];
		dlock_lock *holders[2];
		uint32_t n = cases[c].permits;

		for (uint32_t i = 0; i < n; i++) {
			holders[i] = short_wait_handle(&holder_clients[i], resource, cases[c].holder, n);
			assert_int_equal(dlock_acquire(holders[i], 1000), DLOCK_OK);
		}
		for (size_t w = 0; w < G_N_ELEMENTS(waits); w++) {
			dlock_client *client;
			dlock_lock *lock = short_wait_handle(&client, resource, cases[c].waiter, n);
			int rc = dlock_acquire(lock, waits[w]);

			if (rc != DLOCK_ETIMEDOUT)
				fail_msg("case %zu, wait %" PRId64 " ms: %s: %s", c, waits[w], dlock_code_name(rc),
				         dlock_last_error_message());
			dlock_lock_free(lock);
			dlock_client_free(client);
		}
		for (uint32_t i = 0; i < n; i++) {
			assert_int_equal(dlock_release(holders[i]), DLOCK_OK);
			dlock_lock_free(holders[i]);
			dlock_client_free(holder_clients[i]);
		}
		g_free(resource);
	}
}

/* ---- token order across a downgrade's handover ------------------------ */

#define HANDOVER_READERS 3

typedef struct handover {
	int stop;          /* atomic */
	uint64_t max_read; /* atomic: the largest token a reader was granted */
	int reads;         /* atomic */
} handover;

/* A reader trying without pause: it gets in the moment the write lock
 * becomes a downgrade's read lock, and records its token before it
 * releases. */
static void *handover_reader(void *data)
{
	handover *h = data;
	test_rw_owner o;

	test_rw_owner_open(&o, uri, "rw/handover", DLOCK_MODE_READ);
	while (!__atomic_load_n(&h->stop, __ATOMIC_SEQ_CST)) {
		uint64_t token, seen;

		if (dlock_acquire(o.lock, 0) != DLOCK_OK)
			continue;
		token = dlock_fencing_token(o.lock);
		seen = __atomic_load_n(&h->max_read, __ATOMIC_SEQ_CST);
		while (seen < token &&
		       !__atomic_compare_exchange_n(&h->max_read, &seen, token, false, __ATOMIC_SEQ_CST,
		                                    __ATOMIC_SEQ_CST))
			;
		__atomic_add_fetch(&h->reads, 1, __ATOMIC_SEQ_CST);
		dlock_release(o.lock);
	}
	test_rw_owner_close(&o);
	return NULL;
}

/*
 * A write hold released after its owner downgraded hands its lock to the
 * owner's read hold, and readers may join at once: a writer that comes
 * after them must still get a larger token than any of theirs.  The
 * handover once rewrote the lock file's counter after the readers could
 * draw from it, so a later writer could get a reader's token again.
 */
static void test_a_writer_after_a_downgrades_readers_gets_a_larger_token(void **state)
{
	handover h = { 0 };
	pthread_t readers[HANDOVER_READERS];
	test_rw_owner writer, reader;
	int rounds = 0, repeated = 0;
	int64_t until = test_now_ms() + 4000;
	/* Readers that retry at once can keep the writer out for long:
	 * under valgrind, which runs one thread at a time, it may get in
	 * only a few times in 4 s, so it goes on there until the rounds are
	 * enough. */
	int64_t until_slow = test_now_ms() + test_slack(4000);

	(void)state;
	test_rw_owner_open(&writer, uri, "rw/handover", DLOCK_MODE_WRITE);
	assert_int_equal(dlock_lock_new(writer.client, "rw/handover", &reader.lock), DLOCK_OK);
	assert_int_equal(dlock_lock_set_mode(reader.lock, DLOCK_MODE_READ), DLOCK_OK);
	for (int i = 0; i < HANDOVER_READERS; i++)
		assert_int_equal(pthread_create(&readers[i], NULL, handover_reader, &h), 0);
	while (test_now_ms() < until || (rounds <= 10 && test_now_ms() < until_slow)) {
		uint64_t token, before;

		assert_int_equal(dlock_acquire(writer.lock, -1), DLOCK_OK);
		token = dlock_fencing_token(writer.lock);
		before = __atomic_load_n(&h.max_read, __ATOMIC_SEQ_CST);
		if (token <= before && repeated++ == 0)
			print_message("round %d: write token %" PRIu64 ", a reader before it had %" PRIu64 "\n",
			              rounds, token, before);
		assert_int_equal(dlock_acquire(reader.lock, 0), DLOCK_OK);
		assert_int_equal(dlock_release(writer.lock), DLOCK_OK);
		assert_int_equal(dlock_release(reader.lock), DLOCK_OK);
		rounds++;
	}
	__atomic_store_n(&h.stop, 1, __ATOMIC_SEQ_CST);
	for (int i = 0; i < HANDOVER_READERS; i++)
		pthread_join(readers[i], NULL);
	print_message("%d rounds, %d reads: %d write tokens not larger than an earlier reader's\n", rounds,
	              __atomic_load_n(&h.reads, __ATOMIC_SEQ_CST), repeated);
	dlock_lock_free(reader.lock);
	test_rw_owner_close(&writer);
	assert_true(rounds > 10);
	assert_int_equal(repeated, 0);
}

static void record_state(dlock_lock *lock, dlock_state state, void *user_data)
{
	(void)lock;
	g_atomic_int_set((gint *)user_data, (gint)state);
}

static bool state_is_lost(void *arg)
{
	return g_atomic_int_get((gint *)arg) == DLOCK_STATE_LOST;
}

/*
 * A tmp cleaner unlinks the lock file while its owner holds WRITE and the
 * READ it downgraded to, before the write hold is released: both holds
 * are lost at once -- the read hold shares the write hold's lock, which
 * no longer keeps anyone out -- and a writer that locks the new file
 * never holds beside a reader that still reports held.
 */
static void test_unlinked_file_loses_a_downgrades_read_hold_with_its_write_hold(void **state)
{
	char *path = g_build_filename(dir, "r-rw%2Funlinked", NULL);
	test_rw_owner owner, other;
	dlock_lock *read;
	gint write_state = 0, read_state = 0;
	bool read_lost;

	(void)state;
	test_rw_owner_open(&owner, uri, "rw/unlinked", DLOCK_MODE_WRITE);
	assert_int_equal(dlock_lock_new(owner.client, "rw/unlinked", &read), DLOCK_OK);
	assert_int_equal(dlock_lock_set_mode(read, DLOCK_MODE_READ), DLOCK_OK);
	assert_int_equal(dlock_lock_set_state_callback(owner.lock, record_state, &write_state), DLOCK_OK);
	assert_int_equal(dlock_lock_set_state_callback(read, record_state, &read_state), DLOCK_OK);
	assert_int_equal(dlock_acquire(owner.lock, 0), DLOCK_OK);
	assert_int_equal(dlock_acquire(read, 0), DLOCK_OK);
	assert_int_equal(unlink(path), 0);
	assert_true(test_wait_until(state_is_lost, &write_state, 5000));
	/* Another owner writes on the new file at the same path. */
	test_rw_owner_open(&other, uri, "rw/unlinked", DLOCK_MODE_WRITE);
	assert_int_equal(dlock_acquire(other.lock, 1000), DLOCK_OK);
	read_lost = test_wait_until(state_is_lost, &read_state, 2000);
	print_message("a writer holds the new file; the downgrade's read hold %s\n",
	              read_lost ? "was lost" : "still reports held");
	assert_true(read_lost);
	assert_int_equal(dlock_held(read), 0);
	assert_int_equal(dlock_release(owner.lock), DLOCK_ELOST);
	assert_int_equal(dlock_release(read), DLOCK_ELOST);
	assert_int_equal(dlock_release(other.lock), DLOCK_OK);
	dlock_lock_free(read);
	test_rw_owner_close(&owner);
	test_rw_owner_close(&other);
	g_free(path);
}

static int setup(void **state)
{
	test_file_dir_make("dlock-file-rw", &dir, &uri);
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
		cmocka_unit_test(test_readers_share_writers_exclude_tokens_increase),
		cmocka_unit_test(test_a_writer_after_a_downgrades_readers_gets_a_larger_token),
		cmocka_unit_test(test_upgrade_is_refused_at_once),
		cmocka_unit_test(test_downgrade_keeps_the_read_hold_and_lets_no_writer_in),
		cmocka_unit_test(test_readers_in_processes_share_and_a_killed_one_frees_its_part),
		cmocka_unit_test(test_waiting_readers_all_get_in_when_the_writer_goes),
		cmocka_unit_test(test_killed_reader_with_a_live_child_frees_the_lock),
		cmocka_unit_test(test_client_free_releases_a_downgrade_pair),
		cmocka_unit_test(test_short_waits_time_out_in_every_mode),
		cmocka_unit_test(test_unlinked_file_loses_a_downgrades_read_hold_with_its_write_hold),
	};

	test_init(argv[0]);
	if (argc > 1 && strcmp(argv[1], "--worker") == 0)
		return worker_main(argc, argv);
	return cmocka_run_group_tests_name("file-rw", tests, setup, teardown);
}
