/* SPDX-License-Identifier: MIT */
/*
 * Generic test utilities.  See test-util.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>
#include <glib/gstdio.h>

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif

#include "test-util.h"

/* ---- time ------------------------------------------------------------- */

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

int64_t test_wall_ms(void)
{
	return g_get_real_time() / 1000;
}

int test_slack_factor(void)
{
	const char *env = getenv("DLOCK_TEST_SLACK_FACTOR");
	int factor = env ? atoi(env) : 0;

	if (factor > 0)
		return factor;
#ifdef RUNNING_ON_VALGRIND
	/* Everything in the test process and the library runs 10-50 times
	 * slower under valgrind; the servers do not. */
	if (RUNNING_ON_VALGRIND)
		return 8;
#endif
	return 1;
}

bool test_under_valgrind(void)
{
#ifdef RUNNING_ON_VALGRIND
	return RUNNING_ON_VALGRIND;
#else
	return false;
#endif
}

int64_t test_slack(int64_t margin_ms)
{
	return margin_ms * test_slack_factor();
}

bool test_poll_window(bool (*cond)(void *), void *arg, int64_t window_ms)
{
	int64_t until = test_now_ms() + window_ms;

	for (;;) {
		if (cond(arg))
			return true;
		if (test_now_ms() > until)
			return false;
		g_usleep(5000);
	}
}

bool test_thread_sleeps(int tid)
{
	char path[64], buf[256];
	const char *state;
	bool sleeping = false;
	FILE *f;

	g_snprintf(path, sizeof(path), "/proc/self/task/%d/stat", tid);
	f = fopen(path, "r");
	if (!f)
		return false;
	if (fgets(buf, sizeof(buf), f) && (state = strrchr(buf, ')')))
		sleeping = state[1] == ' ' && state[2] == 'S';
	fclose(f);
	return sleeping;
}

bool test_wait_until(bool (*cond)(void *), void *arg, int64_t timeout_ms)
{
	return test_poll_window(cond, arg, timeout_ms * test_slack_factor());
}

void test_thread_freeze(pid_t tid)
{
	int status;

	assert_int_equal(ptrace(PTRACE_SEIZE, tid, NULL, NULL), 0);
	assert_int_equal(ptrace(PTRACE_INTERRUPT, tid, NULL, NULL), 0);
	assert_int_equal(waitpid(tid, &status, __WALL), tid);
	assert_true(WIFSTOPPED(status));
}

void test_thread_thaw(pid_t tid)
{
	assert_int_equal(ptrace(PTRACE_DETACH, tid, NULL, 0), 0);
}

/* ---- worker processes ------------------------------------------------- */

static char self_path[4096];

void test_init(const char *argv0)
{
	const char *only = getenv("DLOCK_TEST_ONLY");

	if (!realpath(argv0, self_path))
		g_strlcpy(self_path, "/proc/self/exe", sizeof(self_path));
	/* Run only the tests whose names match this glob (for a rerun of one). */
	if (only && *only)
		cmocka_set_test_filter(only);
}

pid_t test_spawn(const char *const *argv, int *ret_in_fd, int *ret_out_fd)
{
	int in[2] = { -1, -1 }, out[2] = { -1, -1 };
	int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	pid_t parent = getpid();
	pid_t pid;

	assert_true(devnull >= 0);
	if (ret_in_fd)
		assert_int_equal(pipe2(in, O_CLOEXEC), 0);
	if (ret_out_fd)
		assert_int_equal(pipe2(out, O_CLOEXEC), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* Only async-signal-safe calls between fork() and exec(): the
		 * parent has other threads, whose locks may be held. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		/* The parent may have died before prctl() took effect. */
		if (getppid() != parent)
			_exit(126);
		dup2(ret_in_fd ? in[0] : devnull, 0);
		if (ret_out_fd)
			dup2(out[1], 1);
		/* exec keeps the signal mask and ignored signals: start the
		 * child as a fresh program would, with SIGPIPE at its default. */
		sigset_t none;

		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		signal(SIGPIPE, SIG_DFL);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(devnull);
	if (ret_in_fd) {
		close(in[0]);
		*ret_in_fd = in[1];
	}
	if (ret_out_fd) {
		close(out[1]);
		*ret_out_fd = out[0];
	}
	return pid;
}

pid_t test_spawn_worker(const char *const *args, int *ret_out_fd)
{
	return test_spawn_worker_io(args, NULL, ret_out_fd);
}

pid_t test_spawn_worker_io(const char *const *args, int *ret_in_fd, int *ret_out_fd)
{
	GPtrArray *argv = g_ptr_array_new();
	pid_t pid;

	if (!self_path[0])
		g_strlcpy(self_path, "/proc/self/exe", sizeof(self_path));
	g_ptr_array_add(argv, self_path);
	g_ptr_array_add(argv, (char *)"--worker");
	for (int i = 0; args[i]; i++)
		g_ptr_array_add(argv, (char *)args[i]);
	g_ptr_array_add(argv, NULL);
	pid = test_spawn((const char *const *)argv->pdata, ret_in_fd, ret_out_fd);
	g_ptr_array_unref(argv);
	return pid;
}

bool test_read_line(int fd, char *buf, size_t len, int64_t timeout_ms)
{
	int64_t until = test_now_ms() + timeout_ms * test_slack_factor();
	size_t n = 0;

	while (n + 1 < len) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int64_t left = until - test_now_ms();
		ssize_t got;
		int ready;
		char c;

		if (left <= 0)
			return false;
		/* A signal (a server or worker of the test exiting) is no
		 * reason to stop waiting for the line. */
		ready = poll(&p, 1, (int)left);
		if (ready < 0 && errno == EINTR)
			continue;
		if (ready <= 0)
			return false;
		do
			got = read(fd, &c, 1);
		while (got < 0 && errno == EINTR);
		if (got != 1)
			return false;
		if (c == '\n')
			break;
		buf[n++] = c;
	}
	buf[n] = '\0';
	return true;
}

bool test_read_line_prefixed(int fd, const char *prefix, char *buf, size_t len, int64_t timeout_ms)
{
	int64_t until = test_now_ms() + timeout_ms;

	do {
		int64_t left = until - test_now_ms();

		if (left <= 0 || !test_read_line(fd, buf, len, left))
			return false;
	} while (!g_str_has_prefix(buf, prefix));
	return true;
}

void test_run_threads(int n, void *(*fn)(void *), void *arg)
{
	pthread_t *tids = g_new(pthread_t, n);

	for (int i = 0; i < n; i++)
		assert_int_equal(pthread_create(&tids[i], NULL, fn, arg), 0);
	for (int i = 0; i < n; i++)
		pthread_join(tids[i], NULL);
	g_free(tids);
}

bool test_append_token(const char *path, uint64_t token)
{
	char line[32];
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	bool ok;

	if (fd < 0)
		return false;
	snprintf(line, sizeof(line), "%" PRIu64 "\n", token);
	ok = write(fd, line, strlen(line)) == (ssize_t)strlen(line);
	close(fd);
	return ok;
}

bool test_write_str(int fd, const char *text)
{
	size_t len = strlen(text), off = 0;
	sigset_t pipe_only, old;
	bool ok = true;

	/* A child that died must give EPIPE here, not kill the test: block
	 * SIGPIPE around the write and consume one it raised, rather than
	 * change the test process's disposition for the library's sake. */
	sigemptyset(&pipe_only);
	sigaddset(&pipe_only, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe_only, &old);
	while (off < len) {
		ssize_t n = write(fd, text + off, len - off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			struct timespec zero = { 0, 0 };

			if (errno == EPIPE && !sigismember(&old, SIGPIPE))
				sigtimedwait(&pipe_only, NULL, &zero);
			ok = false;
			break;
		}
		off += (size_t)n;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return ok;
}

int test_wait_child(pid_t pid, int *ret_signal)
{
	int status;

	if (ret_signal)
		*ret_signal = 0;
	while (waitpid(pid, &status, 0) != pid)
		if (errno != EINTR)
			return -1;
	if (WIFSIGNALED(status) && ret_signal)
		*ret_signal = WTERMSIG(status);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int test_wait_worker(pid_t pid)
{
	return test_wait_child(pid, NULL);
}

/* ---- fake network peers ----------------------------------------------- */

static int bound_socket(int *ret_port)
{
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(addr);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&addr, &len), 0);
	*ret_port = ntohs(addr.sin_port);
	return fd;
}

int test_closed_port(int *ret_fd)
{
	int port;

	*ret_fd = bound_socket(&port);
	return port;
}

int test_silent_port(int *ret_fd)
{
	int port;

	*ret_fd = bound_socket(&port);
	assert_int_equal(listen(*ret_fd, 64), 0);
	return port;
}

char *test_log_tail(const char *path, int port)
{
	char *text = NULL, *tail = NULL;

	if (g_file_get_contents(path, &text, NULL, NULL)) {
		size_t len = strlen(text);

		tail = g_strdup_printf("---- %s, port %d (tail) ----\n%s", path, port,
		                       len > 3000 ? text + len - 3000 : text);
	}
	g_free(text);
	return tail;
}

static GPtrArray *kept_logs;

void test_logs_keep(char *tail)
{
	if (!tail)
		return;
	if (!kept_logs)
		kept_logs = g_ptr_array_new_with_free_func(g_free);
	g_ptr_array_add(kept_logs, tail);
}

int test_logs_finish(int failures)
{
	if (failures && kept_logs) {
		for (guint i = 0; i < kept_logs->len; i++)
			fprintf(stderr, "%s\n", (char *)kept_logs->pdata[i]);
	}
	if (kept_logs)
		g_ptr_array_unref(kept_logs);
	kept_logs = NULL;
	return failures;
}

void test_remove_tree(const char *dir)
{
	GDir *d = g_dir_open(dir, 0, NULL);
	const char *name;

	if (d) {
		while ((name = g_dir_read_name(d))) {
			char *path = g_build_filename(dir, name, NULL);

			if (g_file_test(path, G_FILE_TEST_IS_DIR) && !g_file_test(path, G_FILE_TEST_IS_SYMLINK))
				test_remove_tree(path);
			else
				g_unlink(path);
			g_free(path);
		}
		g_dir_close(d);
	}
	g_rmdir(dir);
}

void test_file_dir_make(const char *prefix, char **ret_dir, char **ret_uri)
{
	char *template = g_strconcat(prefix, "-XXXXXX", NULL);
	char *parent = g_dir_make_tmp(template, NULL);

	assert_non_null(parent);
	*ret_dir = g_build_filename(parent, "locks", NULL);
	assert_int_equal(g_mkdir(*ret_dir, 0700), 0);
	*ret_uri = g_strconcat("file://", *ret_dir, NULL);
	g_free(parent);
	g_free(template);
}

void test_file_dir_remove(const char *dir)
{
	char *parent = g_path_get_dirname(dir);

	test_remove_tree(parent);
	g_free(parent);
}

int test_count_entries(const char *dir)
{
	GDir *d = g_dir_open(dir, 0, NULL);
	int n = 0;

	assert_non_null(d);
	while (g_dir_read_name(d))
		n++;
	g_dir_close(d);
	return n;
}
