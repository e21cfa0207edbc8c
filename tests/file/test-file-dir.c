/* SPDX-License-Identifier: MIT */
/*
 * The file backend's lock directory: the same rule however it is named
 * (file:///path, the dir option in a URI or a configuration file, a
 * configuration file's url, $DLOCK_DIR, the default) -- a directory, not
 * a symbolic link, owned by the user, writable by nobody else -- and a
 * configuration error naming the directory and what is wrong with it.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdbool.h>
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
#include "test-util.h"

static char *parent; /* a private directory holding each test's directories */

/* The ways a program or a user names the lock directory. */
typedef enum naming {
	BY_URI_PATH,       /* file:///dir */
	BY_URI_OPTION,     /* file://?dir=/dir */
	BY_CONFIG_URL,     /* [backend b] url = file:///dir */
	BY_CONFIG_OPTION,  /* [backend b] url = file://, dir = /dir */
	BY_ENVIRONMENT,    /* $DLOCK_DIR=/dir, file:// */
	NAMINGS
} naming;

static const char *naming_name(naming how)
{
	static const char *names[] = { "file:///dir", "file://?dir=", "config url", "config dir key",
		                       "$DLOCK_DIR" };

	return names[how];
}

/* dlock_client_new() on dir named as how says; the client is freed. */
static int open_dir(const char *dir, naming how)
{
	char *conf = g_build_filename(parent, "dlock.conf", NULL);
	char *text = NULL, *spec = NULL;
	dlock_client *client = NULL;
	int rc;

	switch (how) {
	case BY_URI_PATH:
		spec = g_strconcat("file://", dir, NULL);
		break;
	case BY_URI_OPTION:
		spec = g_strconcat("file://?dir=", dir, NULL);
		break;
	case BY_CONFIG_URL:
		text = g_strdup_printf("[defaults]\nbackend = b\n\n[backend b]\nurl = file://%s\n", dir);
		break;
	case BY_CONFIG_OPTION:
		text = g_strdup_printf("[defaults]\nbackend = b\n\n[backend b]\nurl = file://\ndir = %s\n", dir);
		break;
	case BY_ENVIRONMENT:
		g_setenv("DLOCK_DIR", dir, TRUE);
		spec = g_strdup("file://");
		break;
	default:
		g_assert_not_reached();
	}
	if (text) {
		assert_true(g_file_set_contents(conf, text, -1, NULL));
		spec = g_strdup(conf);
	}
	rc = dlock_client_new(spec, &client);
	g_unsetenv("DLOCK_DIR");
	if (rc == DLOCK_OK)
		dlock_client_free(client);
	else
		assert_null(client);
	g_free(spec);
	g_free(text);
	g_free(conf);
	return rc;
}

/* Every naming of dir is refused with DLOCK_ECONFIG, the message naming
 * the directory (as shown) and saying why. */
static void assert_refused_as(const char *dir, const char *shown, const char *why)
{
	int wrong = 0;

	for (naming how = 0; how < NAMINGS; how++) {
		int rc = open_dir(dir, how);
		const char *msg = rc == DLOCK_OK ? "" : dlock_last_error_message();
		bool right = rc == DLOCK_ECONFIG && strstr(msg, shown) && strstr(msg, why);

		print_message("%s %s: %s %s\n", right ? "refused" : "WRONG", naming_name(how),
		              dlock_code_name(rc), msg);
		wrong += !right;
	}
	assert_int_equal(wrong, 0);
}

static void assert_refused_everywhere(const char *dir, const char *why)
{
	assert_refused_as(dir, dir, why);
}

static void assert_accepted_everywhere(const char *dir)
{
	for (naming how = 0; how < NAMINGS; how++) {
		int rc = open_dir(dir, how);

		if (rc != DLOCK_OK)
			print_message("%s: %s\n", naming_name(how), dlock_last_error_message());
		assert_int_equal(rc, DLOCK_OK);
	}
}

/* A new directory under parent with exactly mode (the umask aside). */
static char *make_dir(const char *name, mode_t mode)
{
	char *path = g_build_filename(parent, name, NULL);

	assert_int_equal(mkdir(path, 0700), 0);
	assert_int_equal(chmod(path, mode), 0);
	return path;
}

static void test_world_writable_directory_is_refused_however_named(void **state)
{
	char *dir = make_dir("world", 0777);
	char *sticky = make_dir("sticky", 01777);

	(void)state;
	assert_refused_everywhere(dir, "writable by group or others");
	/* /tmp's mode: others cannot remove our files, but may squat names */
	assert_refused_everywhere(sticky, "writable by group or others");
	g_free(dir);
	g_free(sticky);
}

static void test_group_writable_directory_is_refused_however_named(void **state)
{
	char *dir = make_dir("group", 0770);

	(void)state;
	assert_refused_everywhere(dir, "writable by group or others");
	g_free(dir);
}

static void test_symbolic_link_to_a_private_directory_is_refused(void **state)
{
	char *target = make_dir("target", 0700);
	char *link = g_build_filename(parent, "link", NULL);
	char *slashed = g_strconcat(link, "/", NULL);

	(void)state;
	assert_int_equal(symlink(target, link), 0);
	assert_refused_everywhere(link, "symbolic link");
	/* A trailing slash makes stat() follow the link: still refused. */
	assert_refused_as(slashed, link, "symbolic link");
	g_free(target);
	g_free(link);
	g_free(slashed);
}

static void test_directory_of_another_user_is_refused(void **state)
{
	char *dir = make_dir("theirs", 0755);

	(void)state;
	if (geteuid() != 0) {
		g_free(dir);
		skip(); /* only root can give a directory away */
	}
	assert_int_equal(chown(dir, 65534, 65534), 0);
	assert_refused_everywhere(dir, "owned by uid 65534");
	g_free(dir);
}

static void test_not_a_directory_and_missing_directory_are_refused(void **state)
{
	char *plain = g_build_filename(parent, "plain-file", NULL);
	char *missing = g_build_filename(parent, "missing", NULL);

	(void)state;
	assert_true(g_file_set_contents(plain, "x", 1, NULL));
	assert_refused_everywhere(plain, "not a directory");
	for (naming how = 0; how < NAMINGS; how++) {
		/* Named explicitly, it must exist; $DLOCK_DIR is created. */
		if (how == BY_ENVIRONMENT)
			continue;
		assert_int_equal(open_dir(missing, how), DLOCK_ECONFIG);
		assert_non_null(strstr(dlock_last_error_message(), missing));
	}
	g_free(plain);
	g_free(missing);
}

static void test_private_directories_are_accepted_however_named(void **state)
{
	char *private = make_dir("private", 0700);
	char *readable = make_dir("readable", 0755);
	char *slashed = g_strconcat(private, "/", NULL);

	(void)state;
	assert_accepted_everywhere(private);
	assert_accepted_everywhere(readable);
	assert_accepted_everywhere(slashed);
	g_free(private);
	g_free(readable);
	g_free(slashed);
}

static int setup(void **state)
{
	(void)state;
	parent = g_dir_make_tmp("dlock-file-dir-XXXXXX", NULL);
	return parent ? 0 : -1;
}

static int teardown(void **state)
{
	char *cmd = g_strdup_printf("rm -rf '%s'", parent);
	int rc = system(cmd);

	(void)state;
	g_free(cmd);
	g_free(parent);
	return rc == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_world_writable_directory_is_refused_however_named, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_group_writable_directory_is_refused_however_named, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_symbolic_link_to_a_private_directory_is_refused, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_directory_of_another_user_is_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_not_a_directory_and_missing_directory_are_refused, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_private_directories_are_accepted_however_named, setup,
		                                teardown),
	};

	(void)argc;
	test_init(argv[0]);
	return cmocka_run_group_tests_name("file-dir", tests, NULL, NULL);
}
