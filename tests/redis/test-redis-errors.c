/* SPDX-License-Identifier: MIT */
/*
 * Failures the caller must be told about clearly and quickly: servers
 * that cannot be reached or never answer, invalid names and
 * specifications (refused before any I/O, with a message naming the
 * problem), bad arguments, and connections that die under the library
 * without SIGPIPE killing the host program.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>
#include <glib/gstdio.h>

#include "dlock.h"
#include "test-redis.h"

static test_redis *server;

/* Connections the server has accepted so far, the inspection
 * connection's included (it is opened once and kept). */
static long long connections(void)
{
	return test_redis_info_int(server, "total_connections_received");
}

static void assert_message_names(const char *keyword)
{
	const char *msg = dlock_last_error_message();
	char *lower_msg = g_ascii_strdown(msg, -1);
	char *lower_kw = g_ascii_strdown(keyword, -1);

	if (!strstr(lower_msg, lower_kw))
		fail_msg("message '%s' does not mention '%s'", msg, keyword);
	g_free(lower_msg);
	g_free(lower_kw);
}

/* ---- unreachable and silent servers ----------------------------------- */

static void test_closed_port_is_unavailable_within_connect_timeout(void **state)
{
	int fd;
	int port = test_closed_port(&fd);
	char *uri = g_strdup_printf("redis://127.0.0.1:%d?connect-timeout=500ms", port);
	int64_t waits[] = { 0, 3000, -1 };
	dlock_client *client;
	dlock_lock *lock;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "err/closed", &lock), DLOCK_OK);
	/* A refused connection is an answer: whatever the wait, the caller
	 * learns at once (at the latest after the connect timeout) that the
	 * server is not there, rather than blocking on a dead backend. */
	for (size_t i = 0; i < G_N_ELEMENTS(waits); i++) {
		int64_t t0 = test_now_ms();

		assert_int_equal(dlock_acquire(lock, waits[i]), DLOCK_EUNAVAILABLE);
		assert_true(test_now_ms() - t0 <= 500 + test_slack(300));
		assert_true(dlock_last_error_message()[0] != '\0');
		assert_false(dlock_held(lock));
	}
	assert_int_equal(dlock_release(lock), DLOCK_ENOTHELD);
	dlock_lock_free(lock);
	dlock_client_free(client);
	close(fd);
	g_free(uri);
}

static void test_silent_server_is_unavailable_within_connect_and_command_timeouts(void **state)
{
	int fd;
	int port = test_silent_port(&fd);
	char *uri = g_strdup_printf("redis://127.0.0.1:%d?connect-timeout=500ms&command-timeout=500ms", port);
	dlock_client *client;
	dlock_lock *lock;
	int64_t t0, elapsed;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "err/silent", &lock), DLOCK_OK);
	t0 = test_now_ms();
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_EUNAVAILABLE);
	elapsed = test_now_ms() - t0;
	print_message("silent server: EUNAVAILABLE after %" PRId64 " ms: %s\n", elapsed,
	              dlock_last_error_message());
	/* Said as what happened, not as errno's "Resource temporarily
	 * unavailable". */
	assert_message_names("no answer within 500 ms");
	/* The TCP connect succeeds (the kernel accepts into the backlog), so
	 * the command timeout is what ends the wait. */
	assert_true(elapsed >= 450);
	assert_true(elapsed <= 500 + 500 + test_slack(300));

	/* A timed wait is bounded by its own deadline as well. */
	t0 = test_now_ms();
	{
		int rc = dlock_acquire(lock, 300);

		elapsed = test_now_ms() - t0;
		assert_true(rc == DLOCK_EUNAVAILABLE || rc == DLOCK_ETIMEDOUT);
		assert_true(elapsed <= 300 + test_slack(300));
	}
	dlock_lock_free(lock);
	dlock_client_free(client);
	close(fd);
	g_free(uri);
}

/* ---- refused before any I/O ------------------------------------------- */

static void test_invalid_resource_names_are_einval_without_io(void **state)
{
	static const char *const bad[] = {
		"",                 /* empty */
		"a{b", "a}b",       /* would break the hash tag */
		"a//b", "/a", "a/", /* empty segments */
		".", "..", "a/./b", "a/../b",
		"a\x01" "b", "a\x7f", /* control characters */
		"\xc2\x85",         /* U+0085, a C1 control */
		"\xff\xfe",         /* not UTF-8 */
		"\xc0\xaf",         /* overlong encoding of '/' */
		"\xed\xa0\x80",     /* U+D800, a surrogate */
		"\xee\x80\x80",     /* U+E000, refused by ZooKeeper */
		"\xef\xbf\xb0",     /* U+FFF0 */
		"\xf0\x9f\x98\x80", /* U+1F600, above U+FFFF */
	};
	static const char *const good[] = { "a", "a/b/c", "a.b", "..a/b..", "x:fence", "\xc3\xbc/\xe4\xb8\xad" };
	char *uri = test_redis_uri(server, NULL);
	char long_name[257];
	long long before;
	dlock_client *client;
	dlock_lock *lock;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	before = connections();
	for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
		lock = NULL;
		if (dlock_lock_new(client, bad[i], &lock) != DLOCK_EINVAL)
			fail_msg("resource name #%zu was not refused", i);
		assert_null(lock);
		assert_true(dlock_last_error_message()[0] != '\0');
	}
	assert_int_equal(dlock_lock_new(client, NULL, &lock), DLOCK_EINVAL);
	assert_int_equal(dlock_lock_new(NULL, "a", &lock), DLOCK_EINVAL);
	assert_int_equal(dlock_lock_new(client, "a", NULL), DLOCK_EINVAL);

	/* 255 bytes is the longest name, 256 one too many. */
	memset(long_name, 'n', sizeof(long_name));
	long_name[256] = '\0';
	assert_int_equal(dlock_lock_new(client, long_name, &lock), DLOCK_EINVAL);
	assert_message_names("255");
	long_name[255] = '\0';
	assert_int_equal(dlock_lock_new(client, long_name, &lock), DLOCK_OK);
	dlock_lock_free(lock);
	for (size_t i = 0; i < G_N_ELEMENTS(good); i++) {
		assert_int_equal(dlock_lock_new(client, good[i], &lock), DLOCK_OK);
		assert_string_equal(dlock_lock_resource(lock), good[i]);
		dlock_lock_free(lock);
	}
	assert_int_equal(connections(), before);
	dlock_client_free(client);
	g_free(uri);
}

static void test_plain_key_format_refuses_names_that_collide_with_its_keys(void **state)
{
	char *uri = test_redis_uri(server, "?key-format=plain");
	long long before = connections();
	dlock_client *client;
	dlock_lock *lock;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "err/x:fence", &lock), DLOCK_EINVAL);
	assert_message_names(":fence");
	assert_int_equal(dlock_lock_new(client, "err/x:q", &lock), DLOCK_EINVAL);
	assert_message_names(":q");
	assert_int_equal(dlock_lock_new(client, "err/x:released", &lock), DLOCK_EINVAL);
	assert_message_names(":released");
	assert_int_equal(dlock_lock_new(client, "err/x:permits", &lock), DLOCK_EINVAL);
	assert_message_names(":permits");
	assert_int_equal(connections(), before);
	dlock_client_free(client);
	g_free(uri);
}

/* A Redlock's masters share the key format: the same names are refused,
 * before any connection (the masters here do not exist). */
static void test_plain_key_format_refuses_colliding_names_on_a_redlock_too(void **state)
{
	dlock_client *client;
	dlock_lock *lock;

	assert_int_equal(dlock_client_new("redis://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"
	                                  "?key-format=plain", &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "err/x:fence", &lock), DLOCK_EINVAL);
	assert_message_names(":fence");
	assert_int_equal(dlock_lock_new(client, "err/x:permits", &lock), DLOCK_EINVAL);
	assert_message_names(":permits");
	assert_int_equal(dlock_lock_new(client, "err/x", &lock), DLOCK_OK);
	dlock_lock_free(lock);
	dlock_client_free(client);
}

static void test_invalid_specifications_are_econfig_naming_the_problem_without_io(void **state)
{
	/* Each spec with a word its message must contain. */
	static const struct {
		const char *suffix; /* after redis://127.0.0.1:PORT, or a whole spec */
		const char *keyword;
	} bad[] = {
		{ "?bogus=1", "bogus" },
		{ "?root=/x", "root" }, /* a ZooKeeper option */
		{ "?ttl=abc", "ttl" },
		{ "?ttl=10x", "ttl" },
		{ "?ttl=", "ttl" },
		{ "?ttl=99ms", "ttl" },
		{ "?ttl=1s&ttl=2s", "ttl" },
		{ "?connect-timeout=-1s", "connect-timeout" },
		{ "?command-timeout=soon", "command-timeout" },
		{ "?watchdog=maybe", "watchdog" },
		{ "?key-format=weird", "key-format" },
		{ "?key-format=plain&prefix=app:", "prefix" },
		{ "?prefix=a{b", "prefix" },
		{ "/notadb", "notadb" },
		{ "nope://127.0.0.1:1", "nope" },
		{ "redis://127.0.0.1:notaport", "notaport" },
		{ "redis://127.0.0.1:99999", "99999" },
		{ "/nonexistent/dlock-test.conf", "dlock-test.conf" },
	};
	long long before = connections();

	for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
		const char *s = bad[i].suffix;
		char *spec = (s[0] == '?' || s[0] == '/') && !g_str_has_prefix(s, "/nonexistent")
		                     ? test_redis_uri(server, s)
		                     : g_strdup(s);
		dlock_client *client = NULL;
		int rc = dlock_client_new(spec, &client);

		if (rc != DLOCK_ECONFIG)
			fail_msg("%s: %s instead of DLOCK_ECONFIG", spec, dlock_code_name(rc));
		assert_null(client);
		assert_message_names(bad[i].keyword);
		g_free(spec);
	}
	assert_int_equal(connections(), before);
}

/*
 * A URI that names no host -- "redis://${REDIS_HOST}" with the variable
 * unset -- or an empty host, port or socket path, in any scheme and also
 * as a configuration file's url: a configuration error naming what is
 * missing, never a crash, and never the password in the message.
 */
static void test_specifications_without_a_host_are_econfig_not_a_crash(void **state)
{
	static const struct {
		const char *spec;
		const char *keyword;
	} bad[] = {
		{ "redis://", "host" },
		{ "redis:///3", "host" },
		{ "redis://?ttl=5s", "host" },
		{ "redis://:pw-not-shown@", "host" },
		{ "redis://user:pw-not-shown@/0?ttl=5s", "host" },
		{ "redis://:6379", "host" },
		{ "redis://a,", "empty host" },
		{ "redis://,a", "empty host" },
		{ "redis://a,,b", "empty host" },
		{ "redis://127.0.0.1:0", "port 0" },
		{ "redis://127.0.0.1:70000", "70000" },
		{ "redis://127.0.0.1:", "port" },
		{ "redis://[]:6379", "host" },
		{ "redis+unix://", "socket path" },
		{ "redis+unix:///", "socket path" },
		{ "redis+unix://?ttl=5s", "socket path" },
		{ "redis+unix://host/tmp/s.sock", "socket path" },
		{ "zk://", "host" },
		{ "zk:///chroot", "host" },
		{ "zk://?session-timeout=5s", "host" },
		{ "zk://:pw-not-shown@", "host" },
		{ "zk://a,", "empty host" },
		{ "zk://127.0.0.1:0", "port 0" },
	};
	static const char *const urls[] = { "redis://", "redis:///3", "redis://:pw-not-shown@", "zk://" };
	char *dir = g_dir_make_tmp("dlock-test-XXXXXX", NULL);
	char *path = g_build_filename(dir, "nohost.conf", NULL);
	long long before = connections();

	for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
		dlock_client *client = NULL;
		int rc = dlock_client_new(bad[i].spec, &client);

		if (rc != DLOCK_ECONFIG)
			fail_msg("%s: %s instead of DLOCK_ECONFIG", bad[i].spec, dlock_code_name(rc));
		assert_null(client);
		assert_message_names(bad[i].keyword);
		assert_null(strstr(dlock_last_error_message(), "pw-not-shown"));
	}
	for (size_t i = 0; i < G_N_ELEMENTS(urls); i++) {
		char *text = g_strdup_printf("[backend main]\nurl = %s\n", urls[i]);
		dlock_client *client = NULL;
		int rc;

		assert_true(g_file_set_contents(path, text, -1, NULL));
		rc = dlock_client_new(path, &client);
		if (rc != DLOCK_ECONFIG)
			fail_msg("url = %s: %s instead of DLOCK_ECONFIG", urls[i], dlock_code_name(rc));
		assert_null(client);
		assert_message_names("host");
		assert_message_names("nohost.conf");
		assert_null(strstr(dlock_last_error_message(), "pw-not-shown"));
		g_free(text);
	}
	assert_int_equal(connections(), before);
	g_unlink(path);
	g_rmdir(dir);
	g_free(path);
	g_free(dir);
}

static void test_ttl_below_minimum_and_late_options_are_einval(void **state)
{
	char *uri = test_redis_uri(server, NULL);
	dlock_client *client;
	dlock_lock *lock;

	assert_int_equal(dlock_client_new(uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "err/options", &lock), DLOCK_OK);
	assert_int_equal(dlock_lock_set_ttl(lock, 99), DLOCK_EINVAL);
	assert_true(dlock_last_error_message()[0] != '\0');
	assert_int_equal(dlock_lock_set_ttl(lock, -1), DLOCK_EINVAL);
	assert_int_equal(dlock_lock_set_ttl(lock, 100), DLOCK_OK);
	assert_int_equal(dlock_lock_set_owner(lock, (dlock_owner)7), DLOCK_EINVAL);
	assert_int_equal(dlock_lock_set_ttl(lock, 5000), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_OK);
	/* Too late once acquired: nothing changes. */
	assert_int_equal(dlock_lock_set_ttl(lock, 20000), DLOCK_EINVAL);
	assert_int_equal(dlock_lock_set_watchdog(lock, 0), DLOCK_EINVAL);
	assert_int_equal(dlock_lock_set_owner(lock, DLOCK_OWNER_HANDLE), DLOCK_EINVAL);
	{
		long long pttl = test_redis_int(server, "PTTL dlock:{err/options}");

		assert_true(pttl > 0 && pttl <= 5000);
	}
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_free(uri);
}

static void test_null_arguments_are_refused_without_crashing(void **state)
{
	dlock_info *info = NULL;

	assert_int_equal(dlock_client_new("redis://127.0.0.1:1", NULL), DLOCK_EINVAL);
	assert_int_equal(dlock_acquire(NULL, 0), DLOCK_EINVAL);
	assert_int_equal(dlock_release(NULL), DLOCK_EINVAL);
	assert_int_equal(dlock_lock_cancel(NULL), DLOCK_EINVAL);
	assert_int_equal(dlock_lock_set_ttl(NULL, 1000), DLOCK_EINVAL);
	assert_int_equal(dlock_lock_set_state_callback(NULL, NULL, NULL), DLOCK_EINVAL);
	assert_int_equal(dlock_lock_query(NULL, &info), DLOCK_EINVAL);
	assert_null(info);
	assert_int_equal(dlock_held(NULL), 0);
	assert_int_equal(dlock_fencing_token(NULL), 0);
	assert_null(dlock_lock_resource(NULL));
	dlock_lock_free(NULL);
	dlock_client_free(NULL);
	dlock_info_free(NULL);
}

/* ---- SIGPIPE ------------------------------------------------------------ */

typedef struct busy_job {
	dlock_client *client;
	int index;
	int failures;
} busy_job;

/* Several threads at once, so the pool holds idle connections. */
static void *busy_thread(void *data)
{
	busy_job *job = data;
	char name[64];
	dlock_lock *lock;

	g_snprintf(name, sizeof(name), "err/pipe-pool-%d", job->index);
	if (dlock_lock_new(job->client, name, &lock) != DLOCK_OK)
		return NULL;
	for (int i = 0; i < 20; i++) {
		if (dlock_acquire(lock, 2000) != DLOCK_OK || dlock_release(lock) != DLOCK_OK)
			job->failures++;
	}
	dlock_lock_free(lock);
	return NULL;
}

/*
 * Runs with SIGPIPE at its default disposition and unblocked.  Holds a
 * lock through a proxy and leaves idle connections in the pool, then has
 * the proxy end every connection as a server that shut down and vanished
 * would (FIN, then reset), and keeps calling from this thread, whose
 * first command goes to a dead pooled connection.  Prints the codes;
 * SIGPIPE would kill it before it could.
 */
static int worker_sigpipe(char **argv)
{
	int port = atoi(argv[0]);
	test_proxy *proxy = test_proxy_start(port);
	char *uri = g_strdup_printf("redis://127.0.0.1:%d?connect-timeout=300ms&command-timeout=300ms",
	                            test_proxy_port(proxy));
	dlock_client *client;
	dlock_lock *held, *other, *spare;
	dlock_info *info = NULL;
	busy_job jobs[4];
	pthread_t threads[4];
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
		                    .sin_port = htons((uint16_t)test_proxy_port(proxy)) };
	int control, accepted;
	int control_epipe = 0, control_sigpipe = 0;
	int rc_acquire, rc_query, rc_release, rc_spare, rc_later;
	sigset_t pipe_only, pending;

	if (dlock_client_new(uri, &client) != DLOCK_OK)
		return 2;
	if (dlock_lock_new(client, "err/pipe-held", &held) != DLOCK_OK ||
	    dlock_lock_new(client, "err/pipe-other", &other) != DLOCK_OK ||
	    dlock_lock_new(client, "err/pipe-spare", &spare) != DLOCK_OK)
		return 2;
	dlock_lock_set_ttl(held, 600);
	if (dlock_acquire(held, 2000) != DLOCK_OK)
		return 3;
	for (int i = 0; i < 4; i++) {
		jobs[i] = (busy_job){ client, i, 0 };
		pthread_create(&threads[i], NULL, busy_thread, &jobs[i]);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(threads[i], NULL);

	/* The control: a connection of our own through the proxy, written
	 * to once the proxy has ended it, shows that the scenario raises
	 * SIGPIPE on the very first write (blocked here, so we survive). */
	accepted = test_proxy_accepted(proxy);
	control = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (connect(control, (struct sockaddr *)&addr, sizeof(addr)) != 0)
		return 4;
	for (int i = 0; i < 200 && test_proxy_accepted(proxy) == accepted; i++)
		g_usleep(5000);

	test_proxy_reset(proxy);

	sigemptyset(&pipe_only);
	sigaddset(&pipe_only, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe_only, NULL);
	if (write(control, "PING\r\n", 6) < 0 && errno == EPIPE)
		control_epipe = 1;
	sigpending(&pending);
	if (sigismember(&pending, SIGPIPE)) {
		struct timespec zero = { 0, 0 };

		control_sigpipe = 1;
		sigtimedwait(&pipe_only, NULL, &zero);
	}
	pthread_sigmask(SIG_UNBLOCK, &pipe_only, NULL);
	close(control);

	/* Each call meets a dead pooled connection first, as long as there
	 * are any; the watchdog's renewal of "held" (every 200 ms) meets its
	 * own. */
	rc_acquire = dlock_acquire(other, 0);
	rc_query = dlock_lock_query(spare, &info);
	dlock_info_free(info);
	rc_spare = dlock_acquire(spare, 0);
	g_usleep(400000);
	rc_release = dlock_release(held);
	rc_later = DLOCK_OK;
	for (int i = 0; i < 5 && rc_later == DLOCK_OK; i++) {
		rc_later = dlock_acquire(spare, 0);
		if (rc_later == DLOCK_OK)
			dlock_release(spare);
	}

	printf("control %d %d codes %d %d %d %d %d pool-failures %d\n", control_epipe, control_sigpipe,
	       rc_acquire, rc_query, rc_spare, rc_release, rc_later,
	       jobs[0].failures + jobs[1].failures + jobs[2].failures + jobs[3].failures);
	fflush(stdout);
	dlock_lock_free(held);
	dlock_lock_free(other);
	dlock_lock_free(spare);
	dlock_client_free(client);
	test_proxy_stop(proxy);
	g_free(uri);
	return 0;
}

static void test_dead_connections_never_kill_the_process_with_sigpipe(void **state)
{
	char port[16];
	const char *args[] = { "sigpipe", port, NULL };
	char line[256] = "";
	int fd, sig, status;
	int epipe, sigpipe, rc_acquire, rc_query, rc_spare, rc_release, rc_later, pool_failures;
	pid_t pid;

	g_snprintf(port, sizeof(port), "%d", server->port);
	pid = test_spawn_worker(args, &fd);
	/* The line is checked after the exit status, which says more. */
	test_read_line(fd, line, sizeof(line), 30000);
	status = test_wait_child(pid, &sig);
	close(fd);
	print_message("worker: '%s', exit %d, signal %d\n", line, status, sig);
	if (sig == SIGPIPE)
		fail_msg("the worker was killed by SIGPIPE");
	assert_int_equal(sig, 0);
	assert_int_equal(status, 0);
	assert_int_equal(sscanf(line, "control %d %d codes %d %d %d %d %d pool-failures %d", &epipe, &sigpipe,
	                        &rc_acquire, &rc_query, &rc_spare, &rc_release, &rc_later, &pool_failures),
	                 8);
	/* The scenario did put a SIGPIPE in the library's way. */
	assert_int_equal(epipe, 1);
	assert_int_equal(sigpipe, 1);
	assert_int_equal(pool_failures, 0);
	/* The server is unreachable through the proxy now: negative codes. */
	assert_int_equal(rc_acquire, DLOCK_EUNAVAILABLE);
	assert_int_equal(rc_query, DLOCK_EUNAVAILABLE);
	assert_int_equal(rc_spare, DLOCK_EUNAVAILABLE);
	assert_int_equal(rc_later, DLOCK_EUNAVAILABLE);
	/* A release while the server is unreachable clears the hold and
	 * succeeds, or reports the hold lost if the watchdog noticed first. */
	assert_true(rc_release == DLOCK_OK || rc_release == DLOCK_ELOST);
}

static int worker_main(int argc, char **argv)
{
	if (argc >= 4 && strcmp(argv[2], "sigpipe") == 0)
		return worker_sigpipe(argv + 3);
	return 64;
}

/* Runs last: a group teardown's failure would not fail the program. */
static void test_no_lock_key_of_this_suite_remains(void **state)
{
	/* The held lock behind the dead proxy expires with its lease. */
	g_usleep(700000);
	assert_int_equal(test_redis_leftover_keys(server, "dlock:{err/"), 0);
}

static int setup(void **state)
{
	server = test_redis_start(NULL, NULL, false);
	return 0;
}

static int teardown(void **state)
{
	test_redis_stop(server);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_closed_port_is_unavailable_within_connect_timeout),
		cmocka_unit_test(test_silent_server_is_unavailable_within_connect_and_command_timeouts),
		cmocka_unit_test(test_invalid_resource_names_are_einval_without_io),
		cmocka_unit_test(test_plain_key_format_refuses_names_that_collide_with_its_keys),
		cmocka_unit_test(test_plain_key_format_refuses_colliding_names_on_a_redlock_too),
		cmocka_unit_test(test_invalid_specifications_are_econfig_naming_the_problem_without_io),
		cmocka_unit_test(test_specifications_without_a_host_are_econfig_not_a_crash),
		cmocka_unit_test(test_ttl_below_minimum_and_late_options_are_einval),
		cmocka_unit_test(test_null_arguments_are_refused_without_crashing),
		cmocka_unit_test(test_dead_connections_never_kill_the_process_with_sigpipe),
		cmocka_unit_test(test_no_lock_key_of_this_suite_remains),
	};

	test_init(argv[0]);
	if (argc > 1 && strcmp(argv[1], "--worker") == 0)
		return worker_main(argc, argv);
	return test_finish(cmocka_run_group_tests_name("redis-errors", tests, setup, teardown));
}
