/* SPDX-License-Identifier: MIT */
/*
 * The watch thread ("dlock-filewatch"): one inotify descriptor per
 * backend.  A holder releases by closing its descriptor, and a dead
 * holder's descriptors are closed by the kernel; both raise IN_CLOSE_WRITE
 * on the lock file, which wakes the waiters of that file.  (Unlocking
 * raises no inotify event, which is why releasing means closing.)
 *
 * Holds are watched too: dlock never unlinks a lock file, but a tmp
 * cleaner may, or may move it away.  Unlinking a file that is still open
 * raises IN_ATTRIB (its link count changed), a rename IN_MOVE_SELF; on
 * those events on a held file the thread checks that the path still names
 * the held descriptor's file, and reports the hold LOST if not: a new file
 * at that path is free for anyone to lock.  A close wakes waiters only:
 * checking every hold of the file on every close would make each of R
 * readers' releases cost R checks.
 */
#include <errno.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "mutex.h"
#include "thread.h"
#include "waketable.h"

#define WATCH_MASK (IN_CLOSE_WRITE | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF)

/* A hold whose file is watched. */
typedef struct held_file {
	dlock__hold *hold; /* a reference */
	int fd;
	char *path;
} held_file;

struct file_watch {
	GMutex mu;          /* guards entries and their held files (rank FILE_WATCH) */
	/* watch descriptor -> the waiters of that file, and as data the
	 * GPtrArray of held_file * of its holds (NULL when none) */
	dlock__waketable *entries;
	int inotify_fd;
	int stop_fd;
};

static void held_file_free(gpointer data)
{
	held_file *h = data;

	dlock__hold_unref(h->hold);
	g_free(h->path);
	g_free(h);
}

static held_file *held_file_copy(const held_file *h)
{
	held_file *copy = g_new(held_file, 1);

	copy->hold = dlock__hold_ref(h->hold);
	copy->fd = h->fd;
	copy->path = g_strdup(h->path);
	return copy;
}

/* The descriptor still names the file at path. */
static bool still_linked(int fd, const char *path)
{
	struct stat a, b;

	return fstat(fd, &a) == 0 && a.st_nlink > 0 && lstat(path, &b) == 0 && a.st_dev == b.st_dev &&
	       a.st_ino == b.st_ino;
}

static void on_event(file_watch *w, int wd, uint32_t mask)
{
	GPtrArray *check = g_ptr_array_new_with_free_func(held_file_free);
	GPtrArray *holds;

	dlock__mutex_lock(&w->mu, DLOCK__RANK_FILE_WATCH);
	holds = dlock__waketable_wake(w->entries, GINT_TO_POINTER(wd));
	if (!(mask & (IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF)))
		holds = NULL;
	for (guint i = 0; holds && i < holds->len; i++)
		g_ptr_array_add(check, held_file_copy(holds->pdata[i]));
	dlock__mutex_unlock(&w->mu);
	/* The checks are I/O: outside the mutex.  A hold released meanwhile
	 * ignores the report. */
	for (guint i = 0; i < check->len; i++) {
		held_file *h = check->pdata[i];

		if (!still_linked(h->fd, h->path))
			dlock__hold_report(h->hold, DLOCK_STATE_LOST);
	}
	g_ptr_array_unref(check);
}

static gpointer watch_main(gpointer data)
{
	file_watch *w = data;
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));

	for (;;) {
		struct pollfd fds[2] = { { .fd = w->inotify_fd, .events = POLLIN },
		                         { .fd = w->stop_fd, .events = POLLIN } };
		ssize_t n;

		if (poll(fds, 2, -1) < 0 && errno != EINTR)
			break;
		if (fds[1].revents & POLLIN)
			break;
		if (!(fds[0].revents & POLLIN))
			continue;
		n = read(w->inotify_fd, buf, sizeof(buf));
		for (char *p = buf; n > 0 && p < buf + n;) {
			const struct inotify_event *ev = (const struct inotify_event *)p;

			on_event(w, ev->wd, ev->mask);
			p += sizeof(*ev) + ev->len;
		}
	}
	return NULL;
}

/* The watch's state; without inotify, no thread is started on it. */
static gpointer watch_new(gpointer data, bool *ret_start)
{
	file_backend *b = data;
	file_watch *w = g_new0(file_watch, 1);

	g_mutex_init(&w->mu);
	w->entries = dlock__waketable_new(g_direct_hash, g_direct_equal, NULL, NULL,
	                                  (GDestroyNotify)g_ptr_array_unref);
	w->inotify_fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
	w->stop_fd = eventfd(0, EFD_CLOEXEC);
	if (w->inotify_fd < 0 || w->stop_fd < 0) {
		dlock__log(b->logger, DLOCK_LOG_WARNING, "file: inotify unavailable (%s); waiters poll",
		           g_strerror(errno));
		*ret_start = false;
	}
	return w;
}

static file_watch *watch_get(file_backend *b)
{
	return dlock__lazy_thread_get(&b->watch, &b->lazy_mu, DLOCK__RANK_THREAD_START, "dlock-filewatch", watch_new, watch_main, b);
}

int dlock__file_watch_add(file_backend *b, const char *path, dlock__waiter *waiter)
{
	file_watch *w = watch_get(b);
	int wd;

	if (!dlock__lazy_thread_running(&b->watch))
		return -1;
	dlock__mutex_lock(&w->mu, DLOCK__RANK_FILE_WATCH);
	wd = inotify_add_watch(w->inotify_fd, path, WATCH_MASK);
	if (wd >= 0)
		dlock__waketable_add(w->entries, GINT_TO_POINTER(wd), waiter);
	dlock__mutex_unlock(&w->mu);
	return wd;
}

void dlock__file_watch_remove(file_backend *b, int wd, dlock__waiter *waiter)
{
	file_watch *w = dlock__lazy_thread_peek(&b->watch);

	if (!w || wd < 0)
		return;
	dlock__mutex_lock(&w->mu, DLOCK__RANK_FILE_WATCH);
	/* The watch goes once nobody needs it: its key has left the table. */
	if (dlock__waketable_remove(w->entries, GINT_TO_POINTER(wd), waiter))
		inotify_rm_watch(w->inotify_fd, wd);
	dlock__mutex_unlock(&w->mu);
}

int dlock__file_watch_hold(file_backend *b, const char *path, int fd, dlock__hold *hold)
{
	file_watch *w = watch_get(b);
	GPtrArray *holds;
	held_file *h;
	int wd;

	if (!dlock__lazy_thread_running(&b->watch))
		return -1;
	dlock__mutex_lock(&w->mu, DLOCK__RANK_FILE_WATCH);
	wd = inotify_add_watch(w->inotify_fd, path, WATCH_MASK);
	if (wd >= 0) {
		h = g_new(held_file, 1);
		h->hold = dlock__hold_ref(hold);
		h->fd = fd;
		h->path = g_strdup(path);
		holds = dlock__waketable_data(w->entries, GINT_TO_POINTER(wd));
		if (!holds) {
			holds = g_ptr_array_new_with_free_func(held_file_free);
			dlock__waketable_set_data(w->entries, GINT_TO_POINTER(wd), holds);
		}
		g_ptr_array_add(holds, h);
	}
	dlock__mutex_unlock(&w->mu);
	if (wd < 0)
		dlock__log(b->logger, DLOCK_LOG_WARNING,
		           "file %s: cannot watch the held file (%s); its removal would go unnoticed", path,
		           g_strerror(errno));
	/* The watch follows the path: if the file was replaced before it was
	 * set, it watches the new file, and this check is the only notice. */
	if (!still_linked(fd, path))
		dlock__hold_report(hold, DLOCK_STATE_LOST);
	return wd;
}

void dlock__file_unwatch_hold(file_backend *b, int wd, dlock__hold *hold)
{
	file_watch *w = dlock__lazy_thread_peek(&b->watch);
	GPtrArray *holds;

	if (!w || wd < 0)
		return;
	dlock__mutex_lock(&w->mu, DLOCK__RANK_FILE_WATCH);
	holds = dlock__waketable_data(w->entries, GINT_TO_POINTER(wd));
	for (guint i = 0; holds && i < holds->len; i++) {
		if (((held_file *)holds->pdata[i])->hold == hold) {
			g_ptr_array_remove_index_fast(holds, i);
			break;
		}
	}
	if (holds && holds->len == 0) {
		g_ptr_array_unref(holds);
		if (dlock__waketable_set_data(w->entries, GINT_TO_POINTER(wd), NULL))
			inotify_rm_watch(w->inotify_fd, wd);
	}
	dlock__mutex_unlock(&w->mu);
}

void dlock__file_watch_stop(file_backend *b)
{
	file_watch *w = dlock__lazy_thread_peek(&b->watch);
	uint64_t one = 1;

	if (!w)
		return;
	if (dlock__lazy_thread_running(&b->watch) && write(w->stop_fd, &one, sizeof(one)) < 0)
		dlock__log(b->logger, DLOCK_LOG_WARNING, "file: cannot stop the watch thread");
	dlock__lazy_thread_stop(&b->watch, &b->lazy_mu, DLOCK__RANK_THREAD_START, NULL);
	if (w->inotify_fd >= 0)
		close(w->inotify_fd);
	if (w->stop_fd >= 0)
		close(w->stop_fd);
	dlock__waketable_free(w->entries);
	g_mutex_clear(&w->mu);
	g_free(w);
}
