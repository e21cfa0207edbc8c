/* SPDX-License-Identifier: MIT */
/*
 * Clock, failure messages, pipes with timeouts, and worker processes.
 *
 * A worker is this program re-executed (/proc/self/exe) in a hidden mode.
 * It gets exactly two descriptors besides 0-2: BENCH_FD_OUT to write to
 * the parent and BENCH_FD_IN to read from it.  Everything else is closed
 * before exec — the ZooKeeper C client opens its sockets and pipes without
 * close-on-exec, and a worker must not keep the parent's session alive.
 * Between fork() and exec() the child makes only async-signal-safe calls:
 * the parent has threads (dlock's, ZooKeeper's) that may hold locks.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

int64_t bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void bench_sleep_ns(int64_t ns)
{
	struct timespec ts = { .tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000 };

	if (ns <= 0)
		return;
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

void bench_fail(const char *fmt, ...)
{
	va_list ap;

	fputs("dlock-bench: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

void bench_fail_dlock(const char *what, int rc)
{
	const char *detail = dlock_last_error_message();

	bench_fail("%s: %s (%s)%s%s", what, dlock_strerror(rc), dlock_code_name(rc), *detail ? ": " : "",
	           detail);
}

/* Wait until fd is ready for events; false on timeout or error. */
static bool wait_fd(int fd, short events, int64_t until_ns)
{
	for (;;) {
		struct pollfd p = { .fd = fd, .events = events };
		int64_t left_ms = (until_ns - bench_now_ns()) / 1000000;
		int n;

		if (left_ms <= 0)
			return false;
		n = poll(&p, 1, left_ms > INT_MAX ? INT_MAX : (int)left_ms);
		if (n > 0)
			return true;
		if (n < 0 && errno != EINTR)
			return false;
	}
}

int bench_read_full(int fd, void *buf, size_t len, int timeout_ms)
{
	int64_t until = bench_now_ns() + (int64_t)timeout_ms * 1000000;
	size_t got = 0;

	while (got < len) {
		ssize_t n;

		if (!wait_fd(fd, POLLIN, until))
			return -1;
		n = read(fd, (char *)buf + got, len - got);
		if (n > 0)
			got += (size_t)n;
		else if (n == 0 || errno != EINTR)
			return -1;
	}
	return 0;
}

int bench_write_full(int fd, const void *buf, size_t len)
{
	size_t put = 0;

	while (put < len) {
		ssize_t n = write(fd, (const char *)buf + put, len - put);

		if (n > 0)
			put += (size_t)n;
		else if (n < 0 && errno != EINTR)
			return -1;
	}
	return 0;
}

void bench_worker_start(char *const argv[], bench_worker *ret)
{
	int to_parent[2], to_worker[2];
	char *full[32] = { "dlock-bench" };
	pid_t pid;

	/* argv[0] of the new program is its name; the hidden mode follows. */
	for (int i = 0; argv[i]; i++) {
		if (i + 2 >= (int)(sizeof(full) / sizeof(full[0])))
			bench_fail("too many worker arguments");
		full[i + 1] = argv[i];
	}
	if (pipe2(to_parent, O_CLOEXEC) != 0 || pipe2(to_worker, O_CLOEXEC) != 0)
		bench_fail("pipe: %s", strerror(errno));
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		bench_fail("fork: %s", strerror(errno));
	if (pid == 0) {
		/* Move the worker's ends to 3 and 4 without clobbering one with
		 * the other (either may already sit on 3 or 4). */
		int out = fcntl(to_parent[1], F_DUPFD_CLOEXEC, 10);
		int in = fcntl(to_worker[0], F_DUPFD_CLOEXEC, 10);

		if (out < 0 || in < 0 || dup2(out, BENCH_FD_OUT) < 0 || dup2(in, BENCH_FD_IN) < 0)
			_exit(126);
		if (close_range(BENCH_FD_IN + 1, ~0U, 0) != 0)
			for (int fd = BENCH_FD_IN + 1; fd < 65536; fd++)
				close(fd);
		execv("/proc/self/exe", full);
		_exit(127);
	}
	close(to_parent[1]);
	close(to_worker[0]);
	ret->pid = pid;
	ret->out_fd = to_parent[0];
	ret->in_fd = to_worker[1];
}

int bench_worker_finish(bench_worker *w, int timeout_ms)
{
	int64_t until = bench_now_ns() + (int64_t)timeout_ms * 1000000;
	int status;

	if (w->in_fd >= 0)
		close(w->in_fd);
	if (w->out_fd >= 0)
		close(w->out_fd);
	w->in_fd = w->out_fd = -1;
	if (w->pid <= 0)
		return -1;
	for (;;) {
		pid_t r = waitpid(w->pid, &status, WNOHANG);

		if (r == w->pid)
			break;
		if (r < 0 && errno != EINTR)
			return -1;
		if (bench_now_ns() > until) {
			fprintf(stderr, "dlock-bench: worker %d did not exit in time; killing it\n", (int)w->pid);
			kill(w->pid, SIGKILL);
			waitpid(w->pid, &status, 0);
			w->pid = 0;
			return -1;
		}
		bench_sleep_ns(5000000);
	}
	w->pid = 0;
	return status;
}

void bench_resource(char *buf, size_t len, const char *what, pid_t pid)
{
	snprintf(buf, len, "bench/%s/%d", what, (int)pid);
}

void bench_lock_open(const char *uri, const char *resource, bool connect, dlock_client **client,
                     dlock_lock **lock)
{
	dlock_info *info;
	int rc;

	if ((rc = dlock_client_new(uri, client)) != DLOCK_OK)
		bench_fail_dlock("client", rc);
	if ((rc = dlock_lock_new(*client, resource, lock)) != DLOCK_OK)
		bench_fail_dlock("lock", rc);
	if (connect) {
		if ((rc = dlock_lock_query(*lock, &info)) != DLOCK_OK)
			bench_fail_dlock("query", rc);
		dlock_info_free(info);
	}
}
