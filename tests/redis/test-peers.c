/*
 * dlock among others on one server: redis-py's Lock in key-format=plain
 * (both exclude each other), password and ACL authentication, unix
 * sockets, database numbers, and the key layout peers and operators see.
 */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-redis.h"

static test_redis *server;    /* no password */
static test_redis *protected; /* requirepass, an ACL user, a unix socket */
static const char *script;

/* Run the redis-py helper and return its first line of output (g_free). */
static char *redispy(const char *name, const char *action, const char *arg, pid_t *ret_pid, int *ret_fd)
{
	char port[16];
	const char *argv[] = { "/usr/bin/python3", script, port, name, action, arg, NULL };
	GError *error = NULL;
	GPid pid;
	int out;
	char line[64];

	g_snprintf(port, sizeof(port), "%d", server->port);
	if (!g_spawn_async_with_pipes(NULL, (char **)argv, NULL, G_SPAWN_DO_NOT_REAP_CHILD, NULL, NULL, &pid, NULL,
	                              &out, NULL, &error))
		fail_msg("cannot run /usr/bin/python3: %s", error->message);
	assert_true(test_read_line(out, line, sizeof(line), 20000));
	if (ret_pid) {
		*ret_pid = pid;
		*ret_fd = out;
	} else {
		test_wait_worker(pid);
		close(out);
	}
	return g_strdup(line);
}

static void test_plain_keys_exclude_redis_py_in_both_directions(void **state)
{
	char *uri = test_redis_uri(server, "?key-format=plain");
	dlock_client *client;
	dlock_lock *lock;
	dlock_info *info;
	char *line;
	pid_t pid;
	int fd;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "peers/report", &lock), DLOCK_OK);

	/* redis-py holds: dlock is refused and sees a foreign holder. */
	line = redispy("peers/report", "hold", "3", &pid, &fd);
	assert_string_equal(line, "held");
	g_free(line);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_EBUSY);
	assert_int_equal(dlock_lock_query(lock, &info), DLOCK_OK);
	assert_true(dlock_info_locked(info));
	assert_int_equal(dlock_info_holder_pid(info), 0);
	assert_true(strlen(dlock_info_holder(info)) > 0);
	dlock_info_free(info);
	/* ... and gets it once redis-py releases, woken or by its backoff. */
	assert_int_equal(dlock_acquire(lock, 10000), DLOCK_OK);
	test_wait_worker(pid);
	close(fd);

	/* dlock holds, under the very key redis-py uses: redis-py is refused. */
	assert_int_equal(test_redis_int(server, "EXISTS %s", "peers/report"), 1);
	line = redispy("peers/report", "try", NULL, NULL, NULL);
	assert_string_equal(line, "busy");
	g_free(line);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	line = redispy("peers/report", "try", NULL, NULL, NULL);
	assert_string_equal(line, "acquired");
	g_free(line);
	assert_int_equal(test_redis_int(server, "EXISTS %s", "peers/report"), 0);

	/* Names that would collide with dlock's own keys are refused. */
	{
		dlock_lock *bad = NULL;

		assert_int_equal(dlock_lock_new(client, "peers/x:fence", &bad), DLOCK_EINVAL);
		assert_int_equal(dlock_lock_new(client, "peers/x:released", &bad), DLOCK_EINVAL);
		assert_null(bad);
	}
	dlock_lock_free(lock);
	dlock_client_free(client);
	test_redis_int(server, "DEL %s", "peers/report:fence");
	g_free(uri);
}

static int try_uri(const char *uri, const char *resource)
{
	dlock_client *client;
	dlock_lock *lock;
	int rc;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, resource, &lock), DLOCK_OK);
	rc = dlock_acquire(lock, 0);
	if (rc == DLOCK_OK)
		assert_int_equal(dlock_release(lock), DLOCK_OK);
	dlock_lock_free(lock);
	dlock_client_free(client);
	return rc;
}

static bool message_mentions(const char *word)
{
	char *lower = g_ascii_strdown(dlock_last_error_message(), -1);
	bool found = strstr(lower, word) != NULL;

	g_free(lower);
	return found;
}

static void test_password_and_acl_user_authenticate_and_failures_are_clear(void **state)
{
	char *good = g_strdup_printf("redis://:s3cret@127.0.0.1:%d", protected->port);
	char *none = g_strdup_printf("redis://127.0.0.1:%d", protected->port);
	char *wrong = g_strdup_printf("redis://:nope@127.0.0.1:%d", protected->port);
	char *alice = g_strdup_printf("redis://alice:alicepw@127.0.0.1:%d", protected->port);
	char *alice_bad = g_strdup_printf("redis://alice:bad@127.0.0.1:%d", protected->port);

	assert_int_equal(try_uri(good, "auth/a"), DLOCK_OK);
	assert_int_equal(try_uri(alice, "auth/a"), DLOCK_OK);
	assert_int_equal(try_uri(none, "auth/a"), DLOCK_EBACKEND);
	assert_true(message_mentions("auth"));
	assert_int_equal(try_uri(wrong, "auth/a"), DLOCK_EBACKEND);
	assert_true(message_mentions("auth") || message_mentions("wrongpass"));
	assert_int_equal(try_uri(alice_bad, "auth/a"), DLOCK_EBACKEND);
	assert_true(message_mentions("auth") || message_mentions("wrongpass"));
	g_free(good);
	g_free(none);
	g_free(wrong);
	g_free(alice);
	g_free(alice_bad);
}

static void test_unix_socket_and_database_number_are_honoured(void **state)
{
	char *unix_uri = g_strdup_printf("redis+unix://:s3cret@%s", protected->unix_path);
	char *db_uri = g_strdup_printf("redis://:s3cret@127.0.0.1:%d/3", protected->port);
	dlock_client *client;
	dlock_lock *lock;

	assert_int_equal(try_uri(unix_uri, "auth/unix"), DLOCK_OK);
	assert_int_equal(dlock_client_new(db_uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "auth/db", &lock), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_OK);
	assert_int_equal(test_redis_int(protected, "EXISTS %s", "dlock:{auth/db}"), 0);
	freeReplyObject(test_redis_cmd(protected, "SELECT 3"));
	assert_int_equal(test_redis_int(protected, "EXISTS %s", "dlock:{auth/db}"), 1);
	freeReplyObject(test_redis_cmd(protected, "SELECT 0"));
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_free(unix_uri);
	g_free(db_uri);
}

static void test_key_layout_and_token_format_are_as_documented(void **state)
{
	char *uri = test_redis_uri(server, "?prefix=app:");
	dlock_client *client;
	dlock_lock *lock;
	dlock_info *info;
	char *value, *fence, *pid_part;
	GRegex *re = g_regex_new("^dlock1:[0-9a-f]{32}:([0-9]+):[0-9]+:[0-9]+:.+$", 0, 0, NULL);
	GMatchInfo *m;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "keys/a", &lock), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_OK);
	value = test_redis_str(server, "GET %s", "app:{keys/a}");
	assert_non_null(value);
	assert_true(g_regex_match(re, value, 0, &m));
	pid_part = g_match_info_fetch(m, 1);
	assert_int_equal(atol(pid_part), getpid());
	fence = test_redis_str(server, "GET %s", "app:{keys/a}:fence");
	assert_int_equal(g_ascii_strtoull(fence, NULL, 10), dlock_fencing_token(lock));
	assert_int_equal(dlock_lock_query(lock, &info), DLOCK_OK);
	assert_true(dlock_info_locked(info));
	assert_int_equal(dlock_info_holder_pid(info), getpid());
	assert_true(dlock_info_expires_in_ms(info) > 0 && dlock_info_expires_in_ms(info) <= 30000);
	assert_int_equal(dlock_info_fencing_token(info), dlock_fencing_token(lock));
	assert_non_null(strstr(dlock_info_holder(info), "pid="));
	dlock_info_free(info);
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	assert_int_equal(test_redis_int(server, "EXISTS %s", "app:{keys/a}"), 0);
	assert_int_equal(test_redis_int(server, "EXISTS %s", "app:{keys/a}:fence"), 1);
	test_redis_int(server, "DEL %s", "app:{keys/a}:fence");
	g_match_info_free(m);
	g_regex_unref(re);
	g_free(pid_part);
	g_free(value);
	g_free(fence);
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_free(uri);
}

static void test_bad_input_is_refused_before_any_connection(void **state)
{
	const char *bad_uris[] = {
		"redis://127.0.0.1:%d?ttl=50ms", "redis://127.0.0.1:%d?bogus=1", "redis://127.0.0.1:%d?ttl=1s&ttl=2s",
		"redis://127.0.0.1:%d?ttl=abc", "redis://127.0.0.1:%d?root=/x", "redis://127.0.0.1:%d/notanumber",
		"nosuch://127.0.0.1:%d", "redis://127.0.0.1:%d?key-format=plain&prefix=x:",
	};
	const char *bad_names[] = { "", "a//b", "a/../b", "x{y}", "\x01", "\xed\xa0\x80", "/a", "a/" };
	char *stats = test_redis_str(server, "INFO stats");
	char *conns = strstr(stats, "total_connections_received:");
	long long conns_before = g_ascii_strtoll(conns + strlen("total_connections_received:"), NULL, 10);
	char *uri = test_redis_uri(server, NULL);
	dlock_client *client = NULL;
	char name[300];

	for (size_t i = 0; i < G_N_ELEMENTS(bad_uris); i++) {
		char *spec = g_strdup_printf(bad_uris[i], server->port);

		assert_int_equal(dlock_client_new(spec, &client), DLOCK_ECONFIG);
		assert_true(strlen(dlock_last_error_message()) > 0);
		assert_null(client);
		g_free(spec);
	}
	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	for (size_t i = 0; i < G_N_ELEMENTS(bad_names); i++) {
		dlock_lock *lock = NULL;

		assert_int_equal(dlock_lock_new(client, bad_names[i], &lock), DLOCK_EINVAL);
		assert_true(strlen(dlock_last_error_message()) > 0);
		assert_null(lock);
	}
	memset(name, 'n', 256);
	name[256] = '\0';
	{
		dlock_lock *lock = NULL;

		assert_int_equal(dlock_lock_new(client, name, &lock), DLOCK_EINVAL);
		name[255] = '\0';
		assert_int_equal(dlock_lock_new(client, name, &lock), DLOCK_OK);
		assert_int_equal(dlock_lock_set_ttl(lock, 99), DLOCK_EINVAL);
		dlock_lock_free(lock);
	}
	dlock_client_free(client);
	g_free(stats);
	stats = test_redis_str(server, "INFO stats");
	conns = strstr(stats, "total_connections_received:");
	assert_int_equal(g_ascii_strtoll(conns + strlen("total_connections_received:"), NULL, 10), conns_before);
	g_free(stats);
	g_free(uri);
}

static int setup(void **state)
{
	const char *acl[] = { "--user", "alice", "on", ">alicepw", "~*", "&*", "+@all", NULL };

	script = getenv("DLOCK_TEST_REDISPY_SCRIPT");
	server = test_redis_start(NULL, NULL, false);
	protected = test_redis_start(acl, "s3cret", true);
	return script ? 0 : -1;
}

static int teardown(void **state)
{
	assert_int_equal(test_redis_count_keys(server, "*"), 0);
	assert_int_equal(test_redis_count_keys(protected, "dlock:{auth/*}"), 0);
	test_redis_stop(server);
	test_redis_stop(protected);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_plain_keys_exclude_redis_py_in_both_directions),
		cmocka_unit_test(test_password_and_acl_user_authenticate_and_failures_are_clear),
		cmocka_unit_test(test_unix_socket_and_database_number_are_honoured),
		cmocka_unit_test(test_key_layout_and_token_format_are_as_documented),
		cmocka_unit_test(test_bad_input_is_refused_before_any_connection),
	};

	test_init(argv[0]);
	return cmocka_run_group_tests_name("redis-peers", tests, setup, teardown);
}
