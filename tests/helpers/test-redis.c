/* SPDX-License-Identifier: MIT */
/*
 * redis-server instances for the integration tests.  See test-redis.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>
#include <glib/gstdio.h>

#include "test-redis.h"

/* Log tails of stopped servers, printed by test_finish() on failure: the
 * directories are gone by then. */

static int free_port(void)
{
	int fd;
	int port = test_closed_port(&fd);

	close(fd);
	return port;
}

/* The server binary, or NULL (with *ret_why) if there is none. */
static char *server_binary(const char **ret_why)
{
	const char *env = getenv("DLOCK_TEST_REDIS_SERVER");
	char *found;

	if (env && *env) {
		if (g_file_test(env, G_FILE_TEST_IS_EXECUTABLE))
			return g_strdup(env);
		*ret_why = "DLOCK_TEST_REDIS_SERVER does not name an executable";
		return NULL;
	}
	found = g_find_program_in_path("redis-server");
	if (found)
		return found;
	if (g_file_test("/usr/bin/redis-server", G_FILE_TEST_IS_EXECUTABLE))
		return g_strdup("/usr/bin/redis-server");
	*ret_why = "redis-server is neither in PATH nor /usr/bin (install redis-server or set "
	           "DLOCK_TEST_REDIS_SERVER)";
	return NULL;
}

static char *log_path(const test_redis *r)
{
	return g_build_filename(r->dir, "redis.log", NULL);
}

/* The last lines of the server's log, or NULL. */
static char *log_tail(const test_redis *r)
{
	char *path = log_path(r);
	char *tail = test_log_tail(path, r->port);

	g_free(path);
	return tail;
}

static pid_t launch(test_redis *r, const char *binary)
{
	GPtrArray *argv = g_ptr_array_new_with_free_func(g_free);
	char *log = log_path(r);
	pid_t parent = getpid();
	int fd;
	pid_t pid;

	g_ptr_array_add(argv, g_strdup(binary));
	if (r->conf) {
		/* Fresh each start: the last run may have rewritten it. */
		char *path = g_build_filename(r->dir, "redis.conf", NULL);

		assert_true(g_file_set_contents(path, r->conf, -1, NULL));
		g_ptr_array_add(argv, path);
	}
	g_ptr_array_add(argv, g_strdup("--port"));
	g_ptr_array_add(argv, g_strdup_printf("%d", r->port));
	g_ptr_array_add(argv, g_strdup("--bind"));
	g_ptr_array_add(argv, g_strdup("127.0.0.1"));
	g_ptr_array_add(argv, g_strdup("--save"));
	g_ptr_array_add(argv, g_strdup(""));
	g_ptr_array_add(argv, g_strdup("--appendonly"));
	g_ptr_array_add(argv, g_strdup("no"));
	g_ptr_array_add(argv, g_strdup("--dir"));
	g_ptr_array_add(argv, g_strdup(r->dir));
	if (r->cluster_port) {
		g_ptr_array_add(argv, g_strdup("--cluster-port"));
		g_ptr_array_add(argv, g_strdup_printf("%d", r->cluster_port));
	}
	if (r->password) {
		g_ptr_array_add(argv, g_strdup("--requirepass"));
		g_ptr_array_add(argv, g_strdup(r->password));
	}
	if (r->unix_path) {
		g_ptr_array_add(argv, g_strdup("--unixsocket"));
		g_ptr_array_add(argv, g_strdup(r->unix_path));
		g_ptr_array_add(argv, g_strdup("--unixsocketperm"));
		g_ptr_array_add(argv, g_strdup("700"));
	}
	for (int i = 0; r->extra && r->extra[i]; i++)
		g_ptr_array_add(argv, g_strdup(r->extra[i]));
	g_ptr_array_add(argv, NULL);

	/* Opened before fork(): the child of a multithreaded process may
	 * only make async-signal-safe calls before exec. */
	fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		sigset_t none;

		/* The server dies with the test, whatever kills the test. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(126);
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		dup2(fd, 1);
		dup2(fd, 2);
		execv((char *)argv->pdata[0], (char **)argv->pdata);
		_exit(127);
	}
	close(fd);
	g_ptr_array_unref(argv);
	g_free(log);
	return pid;
}

static bool answers(test_redis *r)
{
	struct timeval tv = { 1, 0 };
	redisContext *c = redisConnectWithTimeout("127.0.0.1", r->port, tv);
	redisReply *reply;
	bool ok = false;

	if (c && !c->err) {
		redisSetTimeout(c, tv);
		reply = redisCommand(c, "PING");
		/* NOAUTH is an answer too: the server is up. */
		ok = reply != NULL;
		if (reply)
			freeReplyObject(reply);
	}
	if (c)
		redisFree(c);
	return ok;
}

/* Launch on r->port and wait until it answers; false if it exited (port
 * taken) or stayed silent for 10 s. */
static bool start_once(test_redis *r, const char *binary)
{
	int64_t until = test_now_ms() + 10000;
	int status;

	r->pid = launch(r, binary);
	while (test_now_ms() < until) {
		if (waitpid(r->pid, &status, WNOHANG) == r->pid) {
			r->pid = 0;
			return false;
		}
		if (answers(r))
			return true;
		g_usleep(10000);
	}
	kill(r->pid, SIGKILL);
	waitpid(r->pid, &status, 0);
	r->pid = 0;
	return false;
}

static void fail_start(test_redis *r, const char *what)
{
	char *tail = log_tail(r);

	if (tail)
		fprintf(stderr, "%s\n", tail);
	g_free(tail);
	fail_msg("%s", what);
}

static test_redis *start(const char *conf, const char *const *extra, const char *password, bool unix_socket,
                         bool cluster)
{
	test_redis *r = g_new0(test_redis, 1);
	const char *why = NULL;
	char *binary = server_binary(&why);
	int count = 0;

	if (!binary)
		fail_msg("cannot start redis-server: %s", why);
	r->dir = g_dir_make_tmp("dlock-test-redis-XXXXXX", NULL);
	assert_non_null(r->dir);
	r->password = g_strdup(password);
	r->conf = g_strdup(conf);
	if (unix_socket)
		r->unix_path = g_build_filename(r->dir, "redis.sock", NULL);
	while (extra && extra[count])
		count++;
	r->extra = g_new0(char *, count + 1);
	for (int i = 0; i < count; i++)
		r->extra[i] = g_strdup(extra[i]);

	/* The port was free a moment ago; another process may take it
	 * before the server binds it, so try a few. */
	for (int attempt = 0; attempt < 5; attempt++) {
		r->port = free_port();
		/* Both were free, but the first was released before the
		 * second was asked for. */
		while (cluster && (r->cluster_port = free_port()) == r->port)
			;
		if (start_once(r, binary)) {
			g_free(binary);
			return r;
		}
	}
	g_free(binary);
	fail_start(r, "redis-server did not start (log above)");
	return NULL;
}

test_redis *test_redis_start(const char *const *extra, const char *password, bool unix_socket)
{
	return start(NULL, extra, password, unix_socket, false);
}

test_redis *test_redis_start_cluster_node(const char *const *extra, const char *password)
{
	return start(NULL, extra, password, false, true);
}

test_redis *test_redis_start_conf(const char *conf, const char *const *extra, const char *password)
{
	assert_non_null(conf);
	return start(conf, extra, password, false, false);
}

static void kill_server(test_redis *r, int sig)
{
	int status;

	if (r->pid <= 0)
		return;
	/* A stopped server would never act on SIGTERM. */
	kill(r->pid, SIGCONT);
	kill(r->pid, sig);
	for (int i = 0; i < 500; i++) {
		if (waitpid(r->pid, &status, WNOHANG) == r->pid) {
			r->pid = 0;
			return;
		}
		g_usleep(10000);
	}
	kill(r->pid, SIGKILL);
	waitpid(r->pid, &status, 0);
	r->pid = 0;
}

void test_redis_halt(test_redis *r)
{
	if (r->ctx) {
		redisFree(r->ctx);
		r->ctx = NULL;
	}
	kill_server(r, SIGTERM);
}

void test_redis_resume(test_redis *r)
{
	const char *why = NULL;
	char *binary = server_binary(&why);

	assert_non_null(binary);
	/* The old process is gone, but give the port a moment if something
	 * else grabbed it meanwhile. */
	for (int attempt = 0; attempt < 50; attempt++) {
		if (start_once(r, binary)) {
			g_free(binary);
			return;
		}
		g_usleep(100000);
	}
	g_free(binary);
	fail_start(r, "redis-server did not start again on its port (log above)");
}

void test_redis_restart(test_redis *r)
{
	test_redis_halt(r);
	test_redis_resume(r);
}

void test_redis_stop(test_redis *r)
{
	if (!r)
		return;
	test_redis_halt(r);
	test_logs_keep(log_tail(r));
	test_remove_tree(r->dir);
	g_strfreev(r->extra);
	g_free(r->dir);
	g_free(r->unix_path);
	g_free(r->password);
	g_free(r->conf);
	g_free(r);
}

int test_finish(int failures)
{
	return test_logs_finish(failures);
}

void test_redis_signal(test_redis *r, int sig)
{
	assert_true(r->pid > 0);
	assert_int_equal(kill(r->pid, sig), 0);
}

char *test_redis_uri(const test_redis *r, const char *suffix)
{
	return g_strdup_printf("redis://127.0.0.1:%d%s", r->port, suffix ? suffix : "");
}

char *test_redis_unix_uri(const test_redis *r, const char *suffix)
{
	assert_non_null(r->unix_path);
	return g_strdup_printf("redis+unix://%s%s", r->unix_path, suffix ? suffix : "");
}

static redisContext *inspection(test_redis *r)
{
	if (r->ctx && r->ctx->err) {
		redisFree(r->ctx);
		r->ctx = NULL;
	}
	if (!r->ctx) {
		struct timeval tv = { 5, 0 };

		r->ctx = redisConnectWithTimeout("127.0.0.1", r->port, tv);
		if (!r->ctx || r->ctx->err)
			return r->ctx;
		redisSetTimeout(r->ctx, tv);
		if (r->password) {
			redisReply *reply = redisCommand(r->ctx, "AUTH %s", r->password);

			if (reply)
				freeReplyObject(reply);
		}
	}
	return r->ctx;
}

redisReply *test_redis_vcmd(test_redis *r, const char *fmt, va_list ap)
{
	bool reused = r->ctx && !r->ctx->err;
	redisContext *c = inspection(r);
	redisReply *reply;
	va_list again;

	if (!c || c->err)
		return NULL;
	va_copy(again, ap);
	reply = redisvCommand(c, fmt, ap);
	/* The server closed the idle connection before it read the command
	 * (CLIENT KILL TYPE normal, which Sentinel sends with every change
	 * of a server's role): send it once more on a new connection. */
	if (!reply && reused && c->err == REDIS_ERR_EOF) {
		c = inspection(r);
		if (c && !c->err)
			reply = redisvCommand(c, fmt, again);
	}
	va_end(again);
	return reply;
}

redisReply *test_redis_cmd_argv(test_redis *r, int argc, const char *const *argv)
{
	bool reused = r->ctx && !r->ctx->err;
	redisContext *c = inspection(r);
	redisReply *reply;

	if (!c || c->err)
		return NULL;
	reply = redisCommandArgv(c, argc, (const char **)argv, NULL);
	/* As test_redis_vcmd(): once more if the idle connection was killed. */
	if (!reply && reused && c->err == REDIS_ERR_EOF) {
		c = inspection(r);
		if (c && !c->err)
			reply = redisCommandArgv(c, argc, (const char **)argv, NULL);
	}
	return reply;
}

redisReply *test_redis_cmd(test_redis *r, const char *fmt, ...)
{
	redisReply *reply;
	va_list ap;

	va_start(ap, fmt);
	reply = test_redis_vcmd(r, fmt, ap);
	va_end(ap);
	return reply;
}

long long test_redis_int(test_redis *r, const char *fmt, ...)
{
	redisReply *reply;
	long long value = -999;
	va_list ap;

	va_start(ap, fmt);
	reply = test_redis_vcmd(r, fmt, ap);
	va_end(ap);
	if (reply && reply->type == REDIS_REPLY_INTEGER)
		value = reply->integer;
	if (reply)
		freeReplyObject(reply);
	return value;
}

char *test_redis_str(test_redis *r, const char *fmt, ...)
{
	redisReply *reply;
	char *value = NULL;
	va_list ap;

	va_start(ap, fmt);
	reply = test_redis_vcmd(r, fmt, ap);
	va_end(ap);
	if (reply && (reply->type == REDIS_REPLY_STRING || reply->type == REDIS_REPLY_STATUS))
		value = g_strndup(reply->str, reply->len);
	if (reply)
		freeReplyObject(reply);
	return value;
}

long long test_redis_calls(test_redis *r, const char *command)
{
	char *info = test_redis_str(r, "INFO commandstats");
	char *needle = g_strdup_printf("cmdstat_%s:calls=", command);
	char *at = info ? strstr(info, needle) : NULL;
	long long calls = at ? strtoll(at + strlen(needle), NULL, 10) : 0;

	g_free(needle);
	g_free(info);
	return calls;
}

long long test_redis_info_int(test_redis *r, const char *field)
{
	char *info = test_redis_str(r, "INFO all");
	char *needle = g_strdup_printf("\n%s:", field);
	char *at = info ? strstr(info, needle) : NULL;
	long long value = at ? strtoll(at + strlen(needle), NULL, 10) : -1;

	g_free(needle);
	g_free(info);
	return value;
}

long long test_redis_numsub(test_redis *r, const char *channel)
{
	redisReply *reply = test_redis_cmd(r, "PUBSUB NUMSUB %s", channel);
	long long n = -1;

	if (reply && reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
	    reply->element[1]->type == REDIS_REPLY_INTEGER)
		n = reply->element[1]->integer;
	if (reply)
		freeReplyObject(reply);
	return n;
}

long long test_redis_count_keys(test_redis *r, const char *pattern)
{
	redisReply *reply = test_redis_cmd(r, "KEYS %s", pattern);
	long long n = -1;

	if (reply && reply->type == REDIS_REPLY_ARRAY)
		n = (long long)reply->elements;
	if (reply)
		freeReplyObject(reply);
	return n;
}

static long long leftovers(test_redis *r, const char *prefix, bool report)
{
	long long found = 0;

	for (int db = 0; db < 16; db++) {
		char cursor[32] = "0";
		redisReply *sel = test_redis_cmd(r, "SELECT %d", db);
		bool one_db;

		if (!sel)
			return -1;
		/* A cluster node has only database 0 and refuses SELECT. */
		one_db = sel->type == REDIS_REPLY_ERROR;
		freeReplyObject(sel);
		if (one_db && db > 0)
			break;
		do {
			redisReply *reply = test_redis_cmd(r, "SCAN %s COUNT 1000", cursor);

			if (!reply || reply->type != REDIS_REPLY_ARRAY || reply->elements != 2) {
				if (reply)
					freeReplyObject(reply);
				found = -1;
				break;
			}
			g_strlcpy(cursor, reply->element[0]->str, sizeof(cursor));
			for (size_t i = 0; i < reply->element[1]->elements; i++) {
				const char *key = reply->element[1]->element[i]->str;

				redisReply *pttl;

				if (!g_str_has_prefix(key, prefix) || g_str_has_suffix(key, ":fence"))
					continue;
				found++;
				if (!report)
					continue;
				/* The time left says whether it would have gone by
				 * itself, and when. */
				pttl = test_redis_cmd(r, "PTTL %s", key);
				fprintf(stderr, "left over in db %d: %s (PTTL %lld ms)\n", db, key,
				        pttl && pttl->type == REDIS_REPLY_INTEGER ? pttl->integer : -3);
				if (pttl)
					freeReplyObject(pttl);
			}
			freeReplyObject(reply);
		} while (strcmp(cursor, "0") != 0);
	}
	freeReplyObject(test_redis_cmd(r, "SELECT 0"));
	return found;
}

long long test_redis_leftover_keys(test_redis *r, const char *prefix)
{
	return leftovers(r, prefix, true);
}

long long test_redis_leftover_count(test_redis *r, const char *prefix)
{
	return leftovers(r, prefix, false);
}
