/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <unistd.h>

#include "thread.h"

GThread *dlock__thread_start(const char *name, GThreadFunc fn, gpointer data)
{
	sigset_t all, saved;
	GThread *thread;

	/* A new thread inherits the creating thread's mask. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &saved);
	thread = g_thread_new(name, fn, data);
	pthread_sigmask(SIG_SETMASK, &saved, NULL);
	return thread;
}

gpointer dlock__lazy_thread_start(dlock__lazy_thread *lazy, GMutex *mu, dlock__rank rank,
                                  const char *name, dlock__lazy_make_fn make, GThreadFunc fn,
                                  gpointer arg)
{
	gpointer data;

	if (mu)
		dlock__mutex_lock(mu, rank);
	if (!lazy->data && !lazy->stopped) {
		bool start = true;

		data = make ? make(arg, &start) : arg;
		if (start)
			lazy->thread = dlock__thread_start(name, fn, data);
		/* Published last: peek() reads it without the mutex. */
		g_atomic_pointer_set(&lazy->data, data);
	}
	data = lazy->data;
	if (mu)
		dlock__mutex_unlock(mu);
	return data;
}

gpointer dlock__lazy_thread_peek(dlock__lazy_thread *lazy)
{
	return g_atomic_pointer_get(&lazy->data);
}

bool dlock__lazy_thread_running(dlock__lazy_thread *lazy)
{
	return dlock__lazy_thread_peek(lazy) && lazy->thread;
}

gpointer dlock__lazy_thread_stop(dlock__lazy_thread *lazy, GMutex *mu, dlock__rank rank,
                                 void (*tell)(gpointer data))
{
	gpointer data;
	GThread *thread;

	dlock__mutex_lock(mu, rank);
	lazy->stopped = true;
	data = lazy->data;
	thread = lazy->thread;
	g_atomic_pointer_set(&lazy->data, NULL);
	lazy->thread = NULL;
	dlock__mutex_unlock(mu);
	if (thread) {
		if (tell)
			tell(data);
		g_thread_join(thread);
	}
	return data;
}

void dlock__set_cloexec(int fd)
{
	int flags;

	if (fd < 0)
		return;
	flags = fcntl(fd, F_GETFD);
	if (flags >= 0 && !(flags & FD_CLOEXEC))
		fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
}

void dlock__wake_fd_drain(int fd)
{
	uint64_t count;

	while (read(fd, &count, sizeof(count)) < 0 && errno == EINTR)
		;
}

void dlock__wake_fd_pause(int fd, int64_t us, bool (*stopping)(void *arg), void *arg)
{
	int64_t until_us = g_get_monotonic_time() + us;

	for (;;) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		int64_t left_us = until_us - g_get_monotonic_time();

		if (stopping(arg) || left_us <= 0)
			return;
		if (poll(&pfd, 1, (int)((left_us + 999) / 1000)) > 0)
			dlock__wake_fd_drain(fd);
	}
}
