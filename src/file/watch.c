/* SPDX-License-Identifier: MIT */
/*
 * The watch thread ("dlock-filewatch"): two inotify descriptors per
 * backend, one for waiters and one for held files, so that neither's
 * events wake the thread for the other.
 *
 * Waiters without a futex (wake.c) watch the lock file for IN_MODIFY and
 * IN_CLOSE_WRITE: a release rewrites the record and, after its unlock,
 * the futex word (IN_MODIFY; it keeps its descriptor open, pool.c), and a
 * dead holder's descriptors are closed by the kernel (IN_CLOSE_WRITE).
 * Unlocking alone raises no inotify event.  Either wakes the waiters of
 * that file.
 *
 * Held files are watched too: dlock never unlinks a lock file, but a tmp
 * cleaner may, or may move it away.  Unlinking a file that is still open
 * raises IN_ATTRIB (its link count changed), a rename IN_MOVE_SELF; on
 * those events on a held file the thread checks that the path still names
 * the held descriptor's file, and reports the hold LOST if not: a new file
 * at that path is free for anyone to lock.  That watch is set when a lock
 * file is opened and kept while the descriptor is open, across holds
 * (pool.c), so a hold adds and removes no watch, and the holds' own
 * writes raise nothing it listens for: an uncontended acquire and release
 * never wake the thread.  The events it saw are counted per file, so a
 * hold granted after a check of its descriptor against the path learns
 * whether a removal came in between (dlock__file_watch_seen()).
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

#define WAIT_MASK (IN_MODIFY | IN_CLOSE_WRITE | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF)
#define HOLD_MASK (IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF)

/* A hold whose file is watched.  In a kept_file's list, path is
 * borrowed from the hold's descriptor (pool.c), which stays open while
 * the hold is listed; a copy (held_file_copy) owns its path. */
typedef struct held_file {
	dlock__hold *hold; /* a reference */
	int fd;
	char *path;
	bool own_path;
} held_file;

/* A file watched for removal, by the descriptors open on it. */
typedef struct kept_file {
	GPtrArray *holds;  /* held_file *, the holds on it */
	unsigned keeps;    /* descriptors open on it (pool.c) */
	unsigned events;   /* removal events seen */
} kept_file;

struct file_watch {
	GMutex mu;          /* guards waits, kept and their contents (rank FILE_WATCH) */
	/* waiters' watch descriptor -> the waiters of that file */
	dlock__waketable *waits;
	/* kept watch descriptor -> kept_file * */
	GHashTable *kept;
	int wait_fd;        /* inotify: waiters */
	int hold_fd;        /* inotify: kept files */
	int stop_fd;
};

static void held_file_free(gpointer data)
{
	held_file *h = data;

	dlock__hold_unref(h->hold);
	if (h->own_path)
		g_free(h->path);
	g_free(h);
}

static held_file *held_file_copy(const held_file *h)
{
	held_file *copy = g_new(held_file, 1);

	copy->hold = dlock__hold_ref(h->hold);
	copy->fd = h->fd;
	copy->path = g_strdup(h->path);
	copy->own_path = true;
	return copy;
}

static void kept_file_free(gpointer data)
{
	kept_file *k = data;

	g_ptr_array_unref(k->holds);
	g_free(k);
}

/* The descriptor still names the file at path. */
static bool still_linked(int fd, const char *path)
{
	struct stat a, b;

	return fstat(fd, &a) == 0 && a.st_nlink > 0 && lstat(path, &b) == 0 && a.st_dev == b.st_dev &&
	       a.st_ino == b.st_ino;
}

static void on_wait_event(file_watch *w, int wd)
{
	dlock__mutex_lock(&w->mu, DLOCK__RANK_FILE_WATCH);
	dlock__waketable_wake(w->waits, GINT_TO_POINTER(wd));
	dlock__mutex_unlock(&w->mu);
}

static void on_hold_event(file_watch *w, int wd, uint32_t mask)
{
	GPtrArray *check;
	kept_file *k;

	if (!(mask & HOLD_MASK))
		return; /* IN_IGNORED of a watch removed */
	check = g_ptr_array_new_with_free_func(held_file_free);
	dlock__mutex_lock(&w->mu, DLOCK__RANK_FILE_WATCH);
	k = g_hash_table_lookup(w->kept, GINT_TO_POINTER(wd));
	if (k) {
		k->events++;
		for (guint i = 0; i < k->holds->len; i++)
			g_ptr_array_add(check, held_file_copy(k->holds->pdata[i]));
	}
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

/* Read and handle what one inotify descriptor has. */
static void read_events(file_watch *w, int fd, bool holds)
{
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	ssize_t n = read(fd, buf, sizeof(buf));

	for (char *p = buf; n > 0 && p < buf + n;) {
		const struct inotify_event *ev = (const struct inotify_event *)p;

		if (holds)
			on_hold_event(w, ev->wd, ev->mask);
		else
			on_wait_event(w, ev->wd);
		p += sizeof(*ev) + ev->len;
	}
}

static gpointer watch_main(gpointer data)
{
	file_watch *w = data;

	for (;;) {
		struct pollfd fds[3] = { { .fd = w->wait_fd, .events = POLLIN },
		                         { .fd = w->hold_fd, .events = POLLIN },
		                         { .fd = w->stop_fd, .events = POLLIN } };

		if (poll(fds, 3, -1) < 0 && errno != EINTR)
			break;
		if (fds[2].revents & POLLIN)
			break;
		if (fds[0].revents & POLLIN)
			read_events(w, w->wait_fd, false);
		if (fds[1].revents & POLLIN)
			read_events(w, w->hold_fd, true);
	}
	return NULL;
}

/* The watch's state; without inotify, no thread is started on it. */
static gpointer watch_new(gpointer data, bool *ret_start)
{
	file_backend *b = data;
	file_watch *w = g_new0(file_watch, 1);

	g_mutex_init(&w->mu);
	w->waits = dlock__waketable_new(g_direct_hash, g_direct_equal, NULL, NULL, NULL);
	w->kept = g_hash_table_new_full(g_direct_hash, g_direct_equal, NULL, kept_file_free);
	w->wait_fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
	w->hold_fd = w->wait_fd < 0 ? -1 : inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
	w->stop_fd = w->hold_fd < 0 ? -1 : eventfd(0, EFD_CLOEXEC);
	if (w->wait_fd < 0 || w->hold_fd < 0 || w->stop_fd < 0) {
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
	wd = inotify_add_watch(w->wait_fd, path, WAIT_MASK);
	if (wd >= 0)
		dlock__waketable_add(w->waits, GINT_TO_POINTER(wd), waiter);
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
	if (dlock__waketable_remove(w->waits, GINT_TO_POINTER(wd), waiter))
		inotify_rm_watch(w->wait_fd, wd);
	dlock__mutex_unlock(&w->mu);
}

int dlock__file_watch_keep(file_backend *b, const char *path)
{
	file_watch *w = watch_get(b);
	kept_file *k;
	int wd;

	if (!dlock__lazy_thread_running(&b->watch))
		return -1;
	dlock__mutex_lock(&w->mu, DLOCK__RANK_FILE_WATCH);
	wd = inotify_add_watch(w->hold_fd, path, HOLD_MASK);
	if (wd >= 0) {
		k = g_hash_table_lookup(w->kept, GINT_TO_POINTER(wd));
		if (!k) {
			k = g_new0(kept_file, 1);
			k->holds = g_ptr_array_new_with_free_func(held_file_free);
			g_hash_table_insert(w->kept, GINT_TO_POINTER(wd), k);
		}
		k->keeps++;
	}
	dlock__mutex_unlock(&w->mu);
	if (wd < 0)
		dlock__log(b->logger, DLOCK_LOG_WARNING,
		           "file %s: cannot watch the lock file (%s); its removal while held would go "
		           "unnoticed", path, g_strerror(errno));
	return wd;
}

/* The kept file of watch wd, with the watch's mutex held (kept_unlock()
 * lets go), or NULL if there is none (no watch thread, no watch, or no
 * longer kept): the mutex is then not held. */
static kept_file *kept_lock(file_backend *b, int wd, file_watch **ret_w)
{
	file_watch *w = dlock__lazy_thread_peek(&b->watch);
	kept_file *k;

	if (!w || wd < 0)
		return NULL;
	dlock__mutex_lock(&w->mu, DLOCK__RANK_FILE_WATCH);
	k = g_hash_table_lookup(w->kept, GINT_TO_POINTER(wd));
	if (!k)
		dlock__mutex_unlock(&w->mu);
	*ret_w = w;
	return k;
}

/* Let go of kept_lock()'s mutex; the watch goes once no descriptor keeps
 * it and no hold is listed on it. */
static void kept_unlock(file_watch *w, int wd, kept_file *k)
{
	if (k->keeps == 0 && k->holds->len == 0) {
		g_hash_table_remove(w->kept, GINT_TO_POINTER(wd));
		inotify_rm_watch(w->hold_fd, wd);
	}
	dlock__mutex_unlock(&w->mu);
}

void dlock__file_watch_unkeep(file_backend *b, int wd)
{
	file_watch *w;
	kept_file *k = kept_lock(b, wd, &w);

	if (!k)
		return;
	k->keeps--;
	kept_unlock(w, wd, k);
}

unsigned dlock__file_watch_seen(file_backend *b, int wd)
{
	file_watch *w;
	kept_file *k = kept_lock(b, wd, &w);
	unsigned events;

	if (!k)
		return 0;
	events = k->events;
	dlock__mutex_unlock(&w->mu);
	return events;
}

void dlock__file_watch_hold(file_backend *b, int wd, const char *path, int fd, dlock__hold *hold,
                            const unsigned *seen)
{
	file_watch *w;
	kept_file *k = kept_lock(b, wd, &w);
	bool check = !seen;
	held_file *h;

	if (k) {
		h = g_new(held_file, 1);
		h->hold = dlock__hold_ref(hold);
		h->fd = fd;
		h->path = (char *)path;
		h->own_path = false;
		g_ptr_array_add(k->holds, h);
		if (seen && k->events != *seen)
			check = true;
		dlock__mutex_unlock(&w->mu);
	}
	/* An event the thread handled before the hold was listed here: the
	 * check it would have made. */
	if (check && !still_linked(fd, path))
		dlock__hold_report(hold, DLOCK_STATE_LOST);
}

void dlock__file_unwatch_hold(file_backend *b, int wd, dlock__hold *hold)
{
	file_watch *w;
	kept_file *k = kept_lock(b, wd, &w);

	if (!k)
		return;
	for (guint i = 0; i < k->holds->len; i++) {
		if (((held_file *)k->holds->pdata[i])->hold == hold) {
			g_ptr_array_remove_index_fast(k->holds, i);
			break;
		}
	}
	kept_unlock(w, wd, k);
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
	if (w->wait_fd >= 0)
		close(w->wait_fd);
	if (w->hold_fd >= 0)
		close(w->hold_fd);
	if (w->stop_fd >= 0)
		close(w->stop_fd);
	dlock__waketable_free(w->waits);
	g_hash_table_unref(w->kept);
	g_mutex_clear(&w->mu);
	g_free(w);
}
