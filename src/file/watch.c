/*
 * The watch thread ("dlock-file-watch"): one inotify descriptor per
 * backend.  A holder releases by closing its descriptor, and a dead
 * holder's descriptors are closed by the kernel; both raise IN_CLOSE_WRITE
 * on the lock file, which wakes the waiters of that file.  (Unlocking
 * raises no inotify event, which is why releasing means closing.)
 */
#include <errno.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "internal.h"
#include "thread.h"

#define WATCH_MASK (IN_CLOSE_WRITE | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF)

struct file_watch {
	GMutex mu;
	GHashTable *waiters; /* watch descriptor -> GPtrArray of dlock__waiter * */
	int inotify_fd;
	int stop_fd;
	GThread *thread;
};

static void wake_wd(file_watch *w, int wd)
{
	GPtrArray *list;

	g_mutex_lock(&w->mu);
	list = g_hash_table_lookup(w->waiters, GINT_TO_POINTER(wd));
	for (guint i = 0; list && i < list->len; i++)
		dlock__waiter_wake(list->pdata[i]);
	g_mutex_unlock(&w->mu);
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

			wake_wd(w, ev->wd);
			p += sizeof(*ev) + ev->len;
		}
	}
	return NULL;
}

static file_watch *watch_get(dlock__backend *b)
{
	file_watch *w;

	g_mutex_lock(&b->lazy_mu);
	if (!b->watch) {
		w = g_new0(file_watch, 1);
		g_mutex_init(&w->mu);
		w->waiters = g_hash_table_new_full(g_direct_hash, g_direct_equal, NULL,
		                                   (GDestroyNotify)g_ptr_array_unref);
		w->inotify_fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
		w->stop_fd = eventfd(0, EFD_CLOEXEC);
		if (w->inotify_fd < 0 || w->stop_fd < 0) {
			dlock__log(b->logger, DLOCK_LOG_WARNING, "file: inotify unavailable (%s); waiters poll",
			           g_strerror(errno));
		} else {
			w->thread = dlock__thread_new("dlock-file-watch", watch_main, w);
		}
		b->watch = w;
	}
	w = b->watch;
	g_mutex_unlock(&b->lazy_mu);
	return w;
}

int dlock__file_watch_add(dlock__backend *b, const char *path, dlock__waiter *waiter)
{
	file_watch *w = watch_get(b);
	GPtrArray *list;
	int wd;

	if (!w->thread)
		return -1;
	g_mutex_lock(&w->mu);
	wd = inotify_add_watch(w->inotify_fd, path, WATCH_MASK);
	if (wd >= 0) {
		list = g_hash_table_lookup(w->waiters, GINT_TO_POINTER(wd));
		if (!list) {
			list = g_ptr_array_new();
			g_hash_table_insert(w->waiters, GINT_TO_POINTER(wd), list);
		}
		g_ptr_array_add(list, waiter);
	}
	g_mutex_unlock(&w->mu);
	return wd;
}

void dlock__file_watch_remove(dlock__backend *b, int wd, dlock__waiter *waiter)
{
	file_watch *w = b->watch;
	GPtrArray *list;

	if (!w || wd < 0)
		return;
	g_mutex_lock(&w->mu);
	list = g_hash_table_lookup(w->waiters, GINT_TO_POINTER(wd));
	if (list) {
		g_ptr_array_remove_fast(list, waiter);
		if (list->len == 0) {
			g_hash_table_remove(w->waiters, GINT_TO_POINTER(wd));
			inotify_rm_watch(w->inotify_fd, wd);
		}
	}
	g_mutex_unlock(&w->mu);
}

void dlock__file_watch_stop(dlock__backend *b)
{
	file_watch *w = b->watch;
	uint64_t one = 1;

	if (!w)
		return;
	if (w->thread) {
		if (write(w->stop_fd, &one, sizeof(one)) < 0)
			dlock__log(b->logger, DLOCK_LOG_WARNING, "file: cannot stop the watch thread");
		g_thread_join(w->thread);
	}
	if (w->inotify_fd >= 0)
		close(w->inotify_fd);
	if (w->stop_fd >= 0)
		close(w->stop_fd);
	g_hash_table_unref(w->waiters);
	g_mutex_clear(&w->mu);
	g_free(w);
	b->watch = NULL;
}
