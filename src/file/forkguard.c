/*
 * Lock file descriptors and fork().
 *
 * An OFD lock belongs to the open file description, and fork() gives the
 * child a descriptor on that same description.  The kernel drops the lock
 * only when the last descriptor on the description is closed, so a child
 * that merely exists (no exec, which close-on-exec covers) would keep the
 * lock after its parent died.  Every lock file descriptor the backend
 * opens is therefore listed here, and a pthread_atfork() child handler
 * closes the child's copies before fork() returns in the child.  Closing a
 * copy does not unlock the shared description: the parent keeps its lock.
 *
 * This is the one piece of process-wide state of the backend: fork() is a
 * process-wide event, and atfork handlers cannot be unregistered, so the
 * list cannot belong to a client.
 *
 * A fork() between open() and the listing would leave the child an
 * unlisted copy of a description we are about to lock; the prepare handler
 * counts forks, and an open that sees the count move reopens.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include "internal.h"

static GMutex registry_mu; /* zero-initialised statically, as GLib allows */
static GArray *registry;   /* int: every listed descriptor */
static uint64_t forks;     /* bumped by every fork() of the process */
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void before_fork(void)
{
	g_mutex_lock(&registry_mu);
	forks++;
}

static void after_fork_parent(void)
{
	g_mutex_unlock(&registry_mu);
}

/* In the child: only the forking thread exists, and it holds registry_mu. */
static void after_fork_child(void)
{
	for (guint i = 0; i < registry->len; i++)
		close(g_array_index(registry, int, i));
	g_array_set_size(registry, 0);
	g_mutex_unlock(&registry_mu);
}

static void install(void)
{
	registry = g_array_new(FALSE, FALSE, sizeof(int));
	pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

int dlock__file_open_guarded(const char *path, int flags, mode_t mode)
{
	pthread_once(&once, install);
	for (;;) {
		uint64_t seen;
		int fd;

		g_mutex_lock(&registry_mu);
		seen = forks;
		g_mutex_unlock(&registry_mu);
		do
			fd = open(path, flags | O_CLOEXEC, mode);
		while (fd < 0 && errno == EINTR);
		if (fd < 0)
			return -1;
		g_mutex_lock(&registry_mu);
		if (forks == seen) {
			g_array_append_val(registry, fd);
			g_mutex_unlock(&registry_mu);
			return fd;
		}
		g_mutex_unlock(&registry_mu);
		close(fd); /* a child may have an unlisted copy: use a new description */
	}
}

void dlock__file_close_guarded(int fd)
{
	if (fd < 0)
		return;
	g_mutex_lock(&registry_mu);
	for (guint i = 0; registry && i < registry->len; i++) {
		if (g_array_index(registry, int, i) == fd) {
			g_array_remove_index_fast(registry, i);
			break;
		}
	}
	g_mutex_unlock(&registry_mu);
	close(fd);
}
