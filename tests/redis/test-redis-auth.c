/* SPDX-License-Identifier: MIT */
/*
 * Connecting the way the URI says: a password, an ACL user, a unix
 * socket, a database number; and failing clearly when the credentials
 * are missing or wrong.
 */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>
#include <glib/gstdio.h>

#include "dlock.h"
#include "test-redis.h"

#define PASSWORD "s3cret-pw"

/* requirepass, plus ACL users alice (everything), bob (no channels) and
 * carol (no scripts); a unix socket. */
static test_redis *secured;
/* No password; a unix socket. */
static test_redis *open_server;

static char *secured_uri(const char *userinfo, const char *suffix)
{
	return g_strdup_printf("redis://%s@127.0.0.1:%d%s", userinfo, secured->port, suffix ? suffix : "");
}

/* Acquire and release through uri, checking the key on inspect meanwhile
 * (in database db). */
static void lock_round_trip(test_redis *inspect, const char *uri, const char *resource, int db)
{
	dlock_client *client;
	dlock_lock *lock;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, resource, &lock), DLOCK_OK);
	if (dlock_acquire(lock, 2000) != DLOCK_OK)
		fail_msg("%s: acquire failed: %s", uri, dlock_last_error_message());
	freeReplyObject(test_redis_cmd(inspect, "SELECT %d", db));
	assert_int_equal(test_redis_int(inspect, "EXISTS dlock:{%s}", resource), 1);
	assert_int_equal(test_redis_int(inspect, "EXISTS dlock:{%s}:fence", resource), 1);
	freeReplyObject(test_redis_cmd(inspect, "SELECT 0"));
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	freeReplyObject(test_redis_cmd(inspect, "SELECT %d", db));
	assert_int_equal(test_redis_int(inspect, "EXISTS dlock:{%s}", resource), 0);
	freeReplyObject(test_redis_cmd(inspect, "SELECT 0"));
	dlock_lock_free(lock);
	dlock_client_free(client);
}

/*
 * An acquire that the server must refuse with code, the message
 * containing each of the words (NULL-terminated), never the password.
 */
static void assert_refused(const char *uri, const char *resource, int code, ...)
{
	dlock_client *client;
	dlock_lock *lock;
	const char *word;
	char *lower;
	va_list ap;
	int rc;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, resource, &lock), DLOCK_OK);
	rc = dlock_acquire(lock, 1000);
	print_message("%s: %s: %s\n", uri, dlock_code_name(rc), dlock_last_error_message());
	if (rc != code)
		fail_msg("%s instead of %s", dlock_code_name(rc), dlock_code_name(code));
	lower = g_ascii_strdown(dlock_last_error_message(), -1);
	va_start(ap, code);
	while ((word = va_arg(ap, const char *)))
		if (!strstr(lower, word))
			fail_msg("message does not say '%s': %s", word, dlock_last_error_message());
	va_end(ap);
	/* The password never shows in a message. */
	assert_null(strstr(dlock_last_error_message(), PASSWORD));
	assert_null(strstr(dlock_last_error_message(), "wrong-pw"));
	g_free(lower);
	assert_false(dlock_held(lock));
	assert_int_equal(test_redis_int(secured, "EXISTS dlock:{%s}", resource), 0);
	dlock_lock_free(lock);
	dlock_client_free(client);
}

static void test_password_in_uri_authenticates(void **state)
{
	char *uri = secured_uri(":" PASSWORD, NULL);

	lock_round_trip(secured, uri, "auth/password", 0);
	g_free(uri);
}

/* ---- passwords from files ------------------------------------------------ */

/* A file in a fresh directory holding text; its path (g_free). */
static char *password_file(const char *text)
{
	char *dir = g_dir_make_tmp("dlock-pwfile-XXXXXX", NULL);
	char *path = g_build_filename(dir, "pw", NULL);

	assert_non_null(dir);
	assert_true(g_file_set_contents(path, text, -1, NULL));
	g_free(dir);
	return path;
}

static void password_file_remove(char *path)
{
	char *dir = g_path_get_dirname(path);

	g_unlink(path);
	g_rmdir(dir);
	g_free(dir);
	g_free(path);
}

/* dlock_client_new refuses uri with DLOCK_ECONFIG, the message saying
 * each of the words and nothing of what the file held. */
static void assert_config_refused(const char *uri, const char *held, const char *word1, const char *word2)
{
	dlock_client *client = NULL;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_ECONFIG);
	assert_null(client);
	print_message("%s\n", dlock_last_error_message());
	assert_non_null(strstr(dlock_last_error_message(), word1));
	if (word2)
		assert_non_null(strstr(dlock_last_error_message(), word2));
	if (held)
		assert_null(strstr(dlock_last_error_message(), held));
}

/* password-file: the password is read from the file (its line end
 * dropped), and then the round trip is as with a password in the URI;
 * ACL user and password file together too. */
static void test_password_file_authenticates(void **state)
{
	char *path = password_file(PASSWORD "\n");
	char *crlf = password_file("alice-pw\r\n");
	char *uri = g_strdup_printf("redis://127.0.0.1:%d?password-file=%s", secured->port, path);
	char *acl = g_strdup_printf("redis://alice@127.0.0.1:%d?password-file=%s", secured->port, crlf);

	lock_round_trip(secured, uri, "auth/password-file", 0);
	lock_round_trip(secured, acl, "auth/password-file-acl", 0);
	g_free(uri);
	g_free(acl);
	password_file_remove(path);
	password_file_remove(crlf);
}

/* A wrong password in the file is the server's refusal, as in the URI;
 * the messages never show it. */
static void test_wrong_password_in_file_is_eacces(void **state)
{
	char *path = password_file("wrong-pw\n");
	char *uri = g_strdup_printf("redis://127.0.0.1:%d?password-file=%s", secured->port, path);

	assert_refused(uri, "auth/wrong-file", DLOCK_EACCES, "password", NULL);
	g_free(uri);
	password_file_remove(path);
}

/* What is wrong with the file, or with giving it, is DLOCK_ECONFIG at
 * once, naming the file, never its content. */
static void test_bad_password_file_is_econfig_naming_it(void **state)
{
	char *empty = password_file("");
	char *lines = password_file(PASSWORD "\nsecond-line\n");
	char *good = password_file(PASSWORD);
	char *long_text = g_strnfill(5000, 'x');
	char *big = password_file(long_text);
	char *fifo = g_strconcat(good, ".fifo", NULL);
	char *uri;

	/* A FIFO with no writer: an open that blocked would hang the client. */
	assert_int_equal(mkfifo(fifo, 0600), 0);
	uri = g_strdup_printf("redis://127.0.0.1:%d?password-file=%s", secured->port, empty);
	assert_config_refused(uri, NULL, empty, "is empty");
	g_free(uri);
	uri = g_strdup_printf("redis://127.0.0.1:%d?password-file=%s", secured->port, lines);
	assert_config_refused(uri, PASSWORD, lines, "more than one line");
	g_free(uri);
	uri = g_strdup_printf("redis://127.0.0.1:%d?password-file=/nonexistent/dlock-pw", secured->port);
	assert_config_refused(uri, NULL, "/nonexistent/dlock-pw", "cannot open");
	g_free(uri);
	uri = g_strdup_printf("redis://127.0.0.1:%d?password-file=pw", secured->port);
	assert_config_refused(uri, NULL, "'pw'", "not an absolute path");
	g_free(uri);
	uri = g_strdup_printf("redis://127.0.0.1:%d?password-file=/dev/zero", secured->port);
	assert_config_refused(uri, NULL, "/dev/zero", "not a regular file");
	g_free(uri);
	uri = g_strdup_printf("redis://127.0.0.1:%d?password-file=%s", secured->port, fifo);
	assert_config_refused(uri, NULL, fifo, "not a regular file");
	g_free(uri);
	uri = g_strdup_printf("redis://127.0.0.1:%d?password-file=%s", secured->port, big);
	assert_config_refused(uri, "xxxx", big, "larger than 4096 bytes");
	g_free(uri);
	uri = g_strdup_printf("redis://:other-pw@127.0.0.1:%d?password-file=%s", secured->port, good);
	assert_config_refused(uri, PASSWORD, "password-file", "one password is enough");
	assert_null(strstr(dlock_last_error_message(), "other-pw"));
	g_free(uri);
	uri = g_strdup_printf("file:///tmp?password-file=%s", good);
	assert_config_refused(uri, PASSWORD, "no user or password", NULL);
	g_free(uri);
	g_unlink(fifo);
	g_free(fifo);
	g_free(long_text);
	password_file_remove(big);
	password_file_remove(empty);
	password_file_remove(lines);
	password_file_remove(good);
}

/* In a configuration file the group's password-file key does the same. */
static void test_password_file_in_a_configuration_group(void **state)
{
	char *path = password_file(PASSWORD "\n");
	char *dir = g_path_get_dirname(path);
	char *conf = g_build_filename(dir, "dlock.conf", NULL);
	char *text = g_strdup_printf("[backend main]\nurl = redis://127.0.0.1:%d\npassword-file = %s\n",
	                             secured->port, path);

	assert_true(g_file_set_contents(conf, text, -1, NULL));
	lock_round_trip(secured, conf, "auth/password-file-conf", 0);
	g_unlink(conf);
	g_free(conf);
	g_free(text);
	g_free(dir);
	password_file_remove(path);
}

static void test_acl_user_in_uri_authenticates(void **state)
{
	char *uri = secured_uri("alice:alice-pw", NULL);

	lock_round_trip(secured, uri, "auth/alice", 0);
	g_free(uri);
}

static void test_acl_user_without_channel_rights_still_releases(void **state)
{
	char *uri = secured_uri("bob:bob-pw", NULL);

	/* Release publishes through pcall: bob's missing channel rights do
	 * not keep the key from being deleted. */
	lock_round_trip(secured, uri, "auth/bob", 0);
	g_free(uri);
}

/*
 * A server that needs a password, given none: the first command is
 * refused (NOAUTH, or for a script of many arguments "Protocol error:
 * unauthenticated multibulk length"); either way the caller is told a
 * password is needed, with a permission error (exit 77), not "the
 * backend returned an error".
 */
static void test_missing_password_is_eacces_saying_a_password_is_needed(void **state)
{
	char *uri = g_strdup_printf("redis://127.0.0.1:%d", secured->port);
	dlock_client *client;
	dlock_lock *lock;
	dlock_info *info = NULL;

	assert_refused(uri, "auth/none", DLOCK_EACCES, "password", "requires", NULL);
	/* A query (a GET, not a script) says the same. */
	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "auth/none", &lock), DLOCK_OK);
	assert_int_equal(dlock_lock_query(lock, &info), DLOCK_EACCES);
	assert_null(info);
	assert_non_null(strstr(dlock_last_error_message(), "password"));
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_free(uri);
}

static void test_wrong_password_is_eacces(void **state)
{
	char *uri = secured_uri(":wrong-pw", NULL);

	assert_refused(uri, "auth/wrong", DLOCK_EACCES, "password", NULL);
	g_free(uri);
}

static void test_wrong_acl_password_is_eacces_naming_the_user(void **state)
{
	char *uri = secured_uri("alice:" PASSWORD, NULL);

	assert_refused(uri, "auth/wrong-user", DLOCK_EACCES, "alice", "password", NULL);
	g_free(uri);
}

/* An ACL user that may not run scripts: refused, naming the user and
 * what it may not do. */
static void test_acl_refusal_is_eacces_naming_the_user_and_the_command(void **state)
{
	char *uri = secured_uri("carol:carol-pw", NULL);

	assert_refused(uri, "auth/carol", DLOCK_EACCES, "carol", "evalsha", NULL);
	g_free(uri);
}

/* A password for a server that has none is refused by the server: said
 * so, as a refused credential. */
static void test_password_for_a_server_without_one_is_eacces(void **state)
{
	char *uri = g_strdup_printf("redis://:wrong-pw@127.0.0.1:%d", open_server->port);
	dlock_client *client;
	dlock_lock *lock;
	int rc;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "auth/extra-password", &lock), DLOCK_OK);
	rc = dlock_acquire(lock, 1000);
	print_message("%s: %s\n", dlock_code_name(rc), dlock_last_error_message());
	assert_int_equal(rc, DLOCK_EACCES);
	assert_non_null(strstr(dlock_last_error_message(), "no password"));
	assert_null(strstr(dlock_last_error_message(), "wrong-pw"));
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_free(uri);
}

/* A database the server does not have is a configuration error naming
 * the number, on every path that connects (acquire and query). */
static void test_database_out_of_range_is_econfig_naming_it(void **state)
{
	char *uri = test_redis_uri(open_server, "/99");
	dlock_client *client;
	dlock_lock *lock;
	dlock_info *info = NULL;
	int rc;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "auth/db99", &lock), DLOCK_OK);
	rc = dlock_acquire(lock, 1000);
	print_message("%s: %s\n", dlock_code_name(rc), dlock_last_error_message());
	assert_int_equal(rc, DLOCK_ECONFIG);
	assert_non_null(strstr(dlock_last_error_message(), "99"));
	assert_int_equal(dlock_lock_query(lock, &info), DLOCK_ECONFIG);
	assert_null(info);
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_free(uri);
}

static void test_unix_socket_with_password_authenticates(void **state)
{
	char *uri = g_strdup_printf("redis+unix://:" PASSWORD "@%s", secured->unix_path);

	lock_round_trip(secured, uri, "auth/unix-password", 0);
	g_free(uri);
}

static void test_backend_uri_shown_to_users_has_no_password(void **state)
{
	char *uri = secured_uri("alice:alice-pw", NULL);
	dlock_client *client;
	dlock_lock *lock;
	dlock_info *info;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "auth/shown", &lock), DLOCK_OK);
	assert_non_null(dlock_lock_backend_uri(lock));
	assert_null(strstr(dlock_lock_backend_uri(lock), "alice-pw"));
	assert_int_equal(dlock_lock_query(lock, &info), DLOCK_OK);
	assert_null(strstr(dlock_info_backend(info), "alice-pw"));
	dlock_info_free(info);
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_free(uri);
}

static void test_unix_socket_uri_connects(void **state)
{
	char *uri = test_redis_unix_uri(open_server, NULL);
	long long before = test_redis_info_int(open_server, "total_connections_received");

	lock_round_trip(open_server, uri, "auth/unix", 0);
	/* The connections came in through the socket: CLIENT LIST shows no
	 * TCP peer other than the inspection connection. */
	{
		char *list = test_redis_str(open_server, "CLIENT LIST");
		gchar **lines = g_strsplit(list ? list : "", "\n", -1);
		int tcp = 0;

		for (int i = 0; lines[i]; i++)
			if (strstr(lines[i], "addr=127.0.0.1:"))
				tcp++;
		assert_int_equal(tcp, 1);
		g_strfreev(lines);
		g_free(list);
	}
	assert_true(test_redis_info_int(open_server, "total_connections_received") > before);
	g_free(uri);
}

static void test_database_number_in_uri_is_honoured(void **state)
{
	char *uri = test_redis_uri(open_server, "/3");
	dlock_client *client;
	dlock_lock *lock;

	lock_round_trip(open_server, uri, "auth/db3", 3);
	/* Nothing went to database 0. */
	assert_int_equal(test_redis_int(open_server, "EXISTS dlock:{auth/db3}:fence"), 0);

	/* A hold made through database 3 has its lease there (the renewals
	 * and the release go to the same database). */
	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "auth/db3", &lock), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_OK);
	freeReplyObject(test_redis_cmd(open_server, "SELECT 3"));
	assert_true(test_redis_int(open_server, "PTTL dlock:{auth/db3}") > 0);
	freeReplyObject(test_redis_cmd(open_server, "SELECT 0"));
	assert_int_equal(test_redis_int(open_server, "EXISTS dlock:{auth/db3}"), 0);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_free(uri);
}

/* Runs last: a group teardown's failure would not fail the program. */
static void test_no_lock_key_of_this_suite_remains(void **state)
{
	assert_int_equal(test_redis_leftover_keys(secured, "dlock:{auth/"), 0);
	assert_int_equal(test_redis_leftover_keys(open_server, "dlock:{auth/"), 0);
}

static int setup(void **state)
{
	redisReply *reply;

	secured = test_redis_start(NULL, PASSWORD, true);
	reply = test_redis_cmd(secured, "ACL SETUSER alice on >alice-pw ~* &* +@all");
	assert_non_null(reply);
	assert_int_equal(reply->type, REDIS_REPLY_STATUS);
	freeReplyObject(reply);
	reply = test_redis_cmd(secured, "ACL SETUSER bob on >bob-pw ~* resetchannels +@all");
	assert_non_null(reply);
	assert_int_equal(reply->type, REDIS_REPLY_STATUS);
	freeReplyObject(reply);
	reply = test_redis_cmd(secured, "ACL SETUSER carol on >carol-pw ~* &* +@all -eval -evalsha");
	assert_non_null(reply);
	assert_int_equal(reply->type, REDIS_REPLY_STATUS);
	freeReplyObject(reply);
	open_server = test_redis_start(NULL, NULL, true);
	return 0;
}

static int teardown(void **state)
{
	test_redis_stop(secured);
	test_redis_stop(open_server);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_password_in_uri_authenticates),
		cmocka_unit_test(test_password_file_authenticates),
		cmocka_unit_test(test_wrong_password_in_file_is_eacces),
		cmocka_unit_test(test_bad_password_file_is_econfig_naming_it),
		cmocka_unit_test(test_password_file_in_a_configuration_group),
		cmocka_unit_test(test_acl_user_in_uri_authenticates),
		cmocka_unit_test(test_acl_user_without_channel_rights_still_releases),
		cmocka_unit_test(test_missing_password_is_eacces_saying_a_password_is_needed),
		cmocka_unit_test(test_wrong_password_is_eacces),
		cmocka_unit_test(test_wrong_acl_password_is_eacces_naming_the_user),
		cmocka_unit_test(test_acl_refusal_is_eacces_naming_the_user_and_the_command),
		cmocka_unit_test(test_password_for_a_server_without_one_is_eacces),
		cmocka_unit_test(test_database_out_of_range_is_econfig_naming_it),
		cmocka_unit_test(test_unix_socket_with_password_authenticates),
		cmocka_unit_test(test_backend_uri_shown_to_users_has_no_password),
		cmocka_unit_test(test_unix_socket_uri_connects),
		cmocka_unit_test(test_database_number_in_uri_is_honoured),
		cmocka_unit_test(test_no_lock_key_of_this_suite_remains),
	};

	test_init(argv[0]);
	return test_finish(cmocka_run_group_tests_name("redis-auth", tests, setup, teardown));
}
