/*
 * redis-server instances for the integration tests.  See test-redis.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
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
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "test-redis.h"

int64_t test_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t test_now_ms(void)
{
	return test_now_us() / 1000;
}

bool test_wait_until(bool (*cond)(void *), void *arg, int64_t timeout_ms)
{
	int64_t until = test_now_ms() + timeout_ms;

	for (;;) {
		if (cond(arg))
			return true;
		if (test_now_ms() > until)
			return false;
		g_usleep(5000);
	}
}

static int free_port(void)
{
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(addr);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int port;

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&addr, &len), 0);
	port = ntohs(addr.sin_port);
	close(fd);
	return port;
}

static const char *server_binary(void)
{
	const char *env = getenv("DLOCK_TEST_REDIS_SERVER");

	if (env && *env)
		return env;
	return "redis-server";
}

static void print_log_tail(const test_redis *r)
{
	char *path = g_build_filename(r->dir, "redis.log", NULL);
	char *text = NULL;

	if (g_file_get_contents(path, &text, NULL, NULL)) {
		size_t len = strlen(text);

		fprintf(stderr, "---- %s (tail) ----\n%s\n", path, len > 2000 ? text + len - 2000 : text);
	}
	g_free(text);
	g_free(path);
}

static pid_t launch(test_redis *r)
{
	GPtrArray *argv = g_ptr_array_new_with_free_func(g_free);
	char *log = g_build_filename(r->dir, "redis.log", NULL);
	pid_t pid;

	g_ptr_array_add(argv, g_strdup(server_binary()));
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

	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execvp((char *)argv->pdata[0], (char **)argv->pdata);
		fprintf(stderr, "cannot run %s: %s\n", (char *)argv->pdata[0], strerror(errno));
		_exit(127);
	}
	g_ptr_array_unref(argv);
	g_free(log);
	return pid;
}

static bool answers(test_redis *r)
{
	redisContext *c = redisConnect("127.0.0.1", r->port);
	redisReply *reply;
	bool ok = false;

	if (c && !c->err) {
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

static bool start_once(test_redis *r)
{
	int64_t until = test_now_ms() + 10000;
	int status;

	r->pid = launch(r);
	while (test_now_ms() < until) {
		if (waitpid(r->pid, &status, WNOHANG) == r->pid) {
			r->pid = 0;
			return false; /* exited: port taken, or no binary */
		}
		if (answers(r))
			return true;
		g_usleep(20000);
	}
	kill(r->pid, SIGKILL);
	waitpid(r->pid, &status, 0);
	r->pid = 0;
	return false;
}

test_redis *test_redis_start(const char *const *extra, const char *password, bool unix_socket)
{
	test_redis *r = g_new0(test_redis, 1);
	int count = 0;

	r->dir = g_dir_make_tmp("dlock-test-redis-XXXXXX", NULL);
	assert_non_null(r->dir);
	r->password = g_strdup(password);
	if (unix_socket)
		r->unix_path = g_build_filename(r->dir, "redis.sock", NULL);
	while (extra && extra[count])
		count++;
	r->extra = g_new0(char *, count + 1);
	for (int i = 0; i < count; i++)
		r->extra[i] = g_strdup(extra[i]);

	for (int attempt = 0; attempt < 5; attempt++) {
		r->port = free_port();
		if (start_once(r))
			return r;
	}
	print_log_tail(r);
	fail_msg("redis-server (%s) did not start; install redis-server or set DLOCK_TEST_REDIS_SERVER",
	         server_binary());
	return NULL;
}

static void kill_server(test_redis *r, int sig)
{
	int status;

	if (r->pid <= 0)
		return;
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

void test_redis_stop(test_redis *r)
{
	if (!r)
		return;
	if (r->ctx)
		redisFree(r->ctx);
	kill_server(r, SIGTERM);
	if (r->dir) {
		char *cmd = g_strdup_printf("rm -rf '%s'", r->dir);

		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", r->dir);
		g_free(cmd);
	}
	g_strfreev(r->extra);
	g_free(r->dir);
	g_free(r->unix_path);
	g_free(r->password);
	g_free(r);
}

void test_redis_restart(test_redis *r)
{
	if (r->ctx) {
		redisFree(r->ctx);
		r->ctx = NULL;
	}
	kill_server(r, SIGKILL);
	for (int attempt = 0; attempt < 50; attempt++) {
		if (start_once(r))
			return;
		g_usleep(100000);
	}
	print_log_tail(r);
	fail_msg("redis-server did not restart on port %d", r->port);
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

static redisReply *vcmd(test_redis *r, const char *fmt, va_list ap)
{
	redisContext *c = inspection(r);

	if (!c || c->err)
		return NULL;
	return redisvCommand(c, fmt, ap);
}

redisReply *test_redis_cmd(test_redis *r, const char *fmt, ...)
{
	redisReply *reply;
	va_list ap;

	va_start(ap, fmt);
	reply = vcmd(r, fmt, ap);
	va_end(ap);
	return reply;
}

long long test_redis_int(test_redis *r, const char *fmt, ...)
{
	redisReply *reply;
	long long value = -999;
	va_list ap;

	va_start(ap, fmt);
	reply = vcmd(r, fmt, ap);
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
	reply = vcmd(r, fmt, ap);
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

static char self_path[4096];

void test_init(const char *argv0)
{
	if (!realpath(argv0, self_path))
		g_strlcpy(self_path, "/proc/self/exe", sizeof(self_path));
}

pid_t test_spawn_worker(const char *const *args, int *ret_out_fd)
{
	GPtrArray *argv = g_ptr_array_new();
	int fds[2];
	pid_t pid;

	assert_int_equal(pipe2(fds, O_CLOEXEC), 0);
	if (!self_path[0])
		g_strlcpy(self_path, "/proc/self/exe", sizeof(self_path));
	g_ptr_array_add(argv, self_path);
	g_ptr_array_add(argv, (char *)"--worker");
	for (int i = 0; args[i]; i++)
		g_ptr_array_add(argv, (char *)args[i]);
	g_ptr_array_add(argv, NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(fds[1], 1);
		execv(self_path, (char **)argv->pdata);
		_exit(127);
	}
	close(fds[1]);
	g_ptr_array_unref(argv);
	*ret_out_fd = fds[0];
	return pid;
}

bool test_read_line(int fd, char *buf, size_t len, int64_t timeout_ms)
{
	int64_t until = test_now_ms() + timeout_ms;
	size_t n = 0;

	while (n + 1 < len) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int64_t left = until - test_now_ms();
		char c;

		if (left <= 0 || poll(&p, 1, (int)left) <= 0)
			return false;
		if (read(fd, &c, 1) != 1)
			return false;
		if (c == '\n')
			break;
		buf[n++] = c;
	}
	buf[n] = '\0';
	return true;
}

int test_wait_worker(pid_t pid)
{
	int status;

	if (waitpid(pid, &status, 0) != pid)
		return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
