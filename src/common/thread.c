#include <fcntl.h>
#include <pthread.h>

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

void dlock__set_cloexec(int fd)
{
	int flags;

	if (fd < 0)
		return;
	flags = fcntl(fd, F_GETFD);
	if (flags >= 0 && !(flags & FD_CLOEXEC))
		fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
}
