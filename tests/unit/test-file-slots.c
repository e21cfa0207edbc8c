/* SPDX-License-Identifier: MIT */
/*
 * The readers' slots of a lock file (src/file/readers.c), on a real file
 * with real open-file-description locks: a slot is a live reader's while
 * a lock of the slot's own shape is held on it, by a reader (or a
 * permit's holder, or a downgrade's read hold) -- never because a
 * writer's whole-file lock covers it.  A reader killed leaves its record
 * behind with no lock, and `dlock status` must not list it, also when it
 * looks while a writer holds the file (the file was shared when it
 * looked at the main range, and a writer got in before the scan).
 */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "file/internal.h"

static char *dir;
static char *path;

static int open_file(void)
{
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);

	assert_true(fd >= 0);
	return fd;
}

/* The readers a status query of the file finds, joined by spaces. */
static char *readers_seen(void)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	GPtrArray *readers;
	GString *text = g_string_new(NULL);

	assert_true(fd >= 0);
	readers = dlock__file_readers(fd);
	for (guint i = 0; i < readers->len; i++)
		g_string_append_printf(text, "%s%s", i ? " " : "", (const char *)readers->pdata[i]);
	g_ptr_array_unref(readers);
	close(fd);
	return g_string_free(text, FALSE);
}

static void assert_readers(const char *expected)
{
	char *seen = readers_seen();

	if (strcmp(seen, expected) != 0)
		fail_msg("readers listed: '%s', expected '%s'", seen, expected);
	g_free(seen);
}

/* A reader's hold as acquire makes it: the main range shared and a slot. */
static int reader(const char *token, int64_t first)
{
	int fd = open_file();

	assert_int_equal(dlock__file_lock_range(fd, F_RDLCK, F_OFD_SETLK, 0, DLOCK__FILE_READ_RANGE), 0);
	assert_true(dlock__file_slot_claim(fd, token, first) >= 0);
	return fd;
}

static void test_a_held_slot_is_listed_and_a_dead_readers_record_is_not(void **state)
{
	int dead, live;

	(void)state;
	dead = reader("dead", 3);
	live = reader("live", 5);
	assert_readers("dead live");
	/* Killed: the kernel drops its locks, its record stays. */
	close(dead);
	assert_readers("live");
	close(live);
	assert_readers("");
}

static void test_a_writers_lock_makes_no_record_live(void **state)
{
	int fd, writer;

	(void)state;
	fd = reader("dead", 7);
	close(fd); /* its record is left behind */
	writer = open_file();
	assert_int_equal(dlock__file_lock_range(writer, F_WRLCK, F_OFD_SETLK, 0, 0), 0);
	assert_readers("");
	close(writer);
}

static void test_a_downgrades_slot_zero_is_listed(void **state)
{
	int writer, other;

	(void)state;
	other = reader("dead", 9);
	close(other);
	writer = open_file();
	assert_int_equal(dlock__file_lock_range(writer, F_WRLCK, F_OFD_SETLK, 0, 0), 0);
	assert_int_equal(dlock__file_slot_write(writer, 0, "downgraded"), 0);
	assert_readers("");
	assert_int_equal(dlock__file_downgrade_locks(writer), 0);
	assert_readers("downgraded");
	/* Another reader shares it, in a slot of its own. */
	other = reader("joined", 11);
	assert_readers("downgraded joined");
	close(other);
	close(writer);
	assert_readers("");
}

static int setup(void **state)
{
	(void)state;
	dir = g_dir_make_tmp("dlock-file-slots-XXXXXX", NULL);
	path = dir ? g_build_filename(dir, "r-slots", NULL) : NULL;
	return dir ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	unlink(path);
	rmdir(dir);
	g_free(path);
	g_free(dir);
	return 0;
}

/* Each test on a fresh file. */
static int fresh_file(void **state)
{
	(void)state;
	unlink(path);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_a_held_slot_is_listed_and_a_dead_readers_record_is_not, fresh_file),
		cmocka_unit_test_setup(test_a_writers_lock_makes_no_record_live, fresh_file),
		cmocka_unit_test_setup(test_a_downgrades_slot_zero_is_listed, fresh_file),
	};

	return cmocka_run_group_tests_name("file-slots", tests, setup, teardown);
}
