/* SPDX-License-Identifier: MIT */
/*
 * Lock file descriptors kept open between holds.
 *
 * Opening a lock file, watching it for removal and closing it again cost
 * several times what the lock itself costs, and a program usually locks
 * the same few resources again and again.  So a released hold's
 * descriptor -- unlocked, its records cleared -- comes here, and the next
 * acquire of that resource takes it instead of opening the file.  Each
 * descriptor is its own open file description and serves one hold at a
 * time, so two holds of one resource in one process still exclude each
 * other.
 *
 * A descriptor remembers the device and inode it was opened on, and keeps
 * the watch thread's removal watch on that inode (watch.c) for as long as
 * it is open: the check after locking (lockfile.c) is then one lstat() of
 * the path, and a hold needs no watch of its own.  A pooled descriptor
 * whose file was removed or replaced meanwhile is found by that check and
 * closed, never pooled again.
 *
 * At most PER_PATH_MAX idle descriptors per path and TOTAL_MAX in all are
 * kept; beyond, the least recently used one is closed.  Every descriptor
 * is opened through forkguard.c, so a child made by fork() closes its
 * copies of pooled descriptors as of held ones, and the backend's close
 * closes the rest.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

#include "error.h"
#include "internal.h"
#include "mutex.h"

#define PER_PATH_MAX 4
#define TOTAL_MAX 32

struct dlock__file_pool {
	GMutex mu;          /* guards everything below (rank FILE_POOL) */
	GHashTable *idle;   /* path -> GQueue of its idle dlock__file_fd, newest first */
	GQueue lru;         /* every idle descriptor, through its lru link, newest first */
};

dlock__file_pool *dlock__file_pool_new(void)
{
	dlock__file_pool *p = g_new0(dlock__file_pool, 1);

	g_mutex_init(&p->mu);
	p->idle = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
	g_queue_init(&p->lru);
	return p;
}

/* Open and watch a new descriptor on path. */
static int fd_open(file_backend *b, const char *path, dlock__file_fd **ret)
{
	int fd = dlock__file_open_guarded(path, O_RDWR | O_CREAT | O_NOFOLLOW, 0600);
	dlock__file_fd *lf;
	struct stat st;

	if (fd < 0)
		return dlock__error(DLOCK_EUNAVAILABLE, "file %s: cannot open: %s", path, g_strerror(errno));
	if (fstat(fd, &st) != 0) {
		int err = errno;

		dlock__file_close_guarded(fd);
		return dlock__error(DLOCK_EUNAVAILABLE, "file %s: cannot stat: %s", path, g_strerror(err));
	}
	lf = g_new0(dlock__file_fd, 1);
	lf->fd = fd;
	lf->dev = st.st_dev;
	lf->ino = st.st_ino;
	lf->path = g_strdup(path);
	lf->path_link.data = lf;
	lf->lru_link.data = lf;
	/* Before any check of the path: a removal after the check raises an
	 * event on this watch (watch.c). */
	lf->wd = dlock__file_watch_keep(b, path);
	*ret = lf;
	return DLOCK_OK;
}

int dlock__file_fd_get(file_backend *b, const char *path, dlock__file_fd **ret)
{
	dlock__file_pool *p = b->pool;
	dlock__file_fd *lf = NULL;
	GQueue *q;

	dlock__mutex_lock(&p->mu, DLOCK__RANK_FILE_POOL);
	q = g_hash_table_lookup(p->idle, path);
	if (q) {
		GList *link = g_queue_pop_head_link(q);

		lf = link->data;
		g_queue_unlink(&p->lru, &lf->lru_link);
		if (g_queue_is_empty(q)) {
			g_hash_table_remove(p->idle, path);
			g_queue_free(q);
		}
	}
	dlock__mutex_unlock(&p->mu);
	if (lf) {
		*ret = lf;
		return DLOCK_OK;
	}
	return fd_open(b, path, ret);
}

void dlock__file_fd_close(file_backend *b, dlock__file_fd *lf)
{
	if (!lf)
		return;
	dlock__file_close_guarded(lf->fd);
	dlock__file_watch_unkeep(b, lf->wd);
	g_free(lf->path);
	g_free(lf);
}

/* Take lf out of the pool (p->mu held). */
static void unpool_locked(dlock__file_pool *p, dlock__file_fd *lf)
{
	GQueue *q = g_hash_table_lookup(p->idle, lf->path);

	g_queue_unlink(q, &lf->path_link);
	g_queue_unlink(&p->lru, &lf->lru_link);
	if (g_queue_is_empty(q)) {
		g_hash_table_remove(p->idle, lf->path);
		g_queue_free(q);
	}
}

void dlock__file_fd_put(file_backend *b, dlock__file_fd *lf)
{
	dlock__file_pool *p = b->pool;
	dlock__file_fd *evict = NULL;
	GQueue *q;

	dlock__mutex_lock(&p->mu, DLOCK__RANK_FILE_POOL);
	q = g_hash_table_lookup(p->idle, lf->path);
	if (q && q->length >= PER_PATH_MAX) {
		evict = g_queue_peek_tail(q);
		unpool_locked(p, evict);
	} else if (p->lru.length >= TOTAL_MAX) {
		evict = g_queue_peek_tail(&p->lru);
		unpool_locked(p, evict);
	}
	q = g_hash_table_lookup(p->idle, lf->path);
	if (!q) {
		q = g_queue_new();
		g_hash_table_insert(p->idle, g_strdup(lf->path), q);
	}
	g_queue_push_head_link(q, &lf->path_link);
	g_queue_push_head_link(&p->lru, &lf->lru_link);
	dlock__mutex_unlock(&p->mu);
	/* Closed outside the mutex: that takes the watch's, ranked lower. */
	dlock__file_fd_close(b, evict);
}

void dlock__file_pool_free(file_backend *b)
{
	dlock__file_pool *p = b->pool;
	GList *link;

	while ((link = g_queue_peek_head_link(&p->lru))) {
		dlock__file_fd *lf = link->data;

		unpool_locked(p, lf);
		dlock__file_fd_close(b, lf);
	}
	g_hash_table_unref(p->idle);
	g_mutex_clear(&p->mu);
	g_free(p);
}
