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
	/* path -> the newest idle descriptor of path, keyed by its own path;
	 * the others follow it through path_link, older and older */
	GHashTable *idle;
	GQueue lru;         /* every idle descriptor, through its lru link, newest first */
};

dlock__file_pool *dlock__file_pool_new(void)
{
	dlock__file_pool *p = g_new0(dlock__file_pool, 1);

	g_mutex_init(&p->mu);
	p->idle = g_hash_table_new(g_str_hash, g_str_equal);
	g_queue_init(&p->lru);
	return p;
}

/* Open and watch a new descriptor on path.  Reads through it leave the
 * file's access time alone (O_NOATIME; a file of another user refuses
 * that): each would otherwise dirty the inode, the file being written
 * between reads. */
static int fd_open(file_backend *b, const char *path, dlock__file_fd **ret)
{
	int fd = dlock__file_open_guarded(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NOATIME, 0600);
	dlock__file_fd *lf;
	struct stat st;

	if (fd < 0 && errno == EPERM)
		fd = dlock__file_open_guarded(path, O_RDWR | O_CREAT | O_NOFOLLOW, 0600);
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

/* Take lf out of the pool (p->mu held). */
static void unpool_locked(dlock__file_pool *p, dlock__file_fd *lf)
{
	GList *next = lf->path_link.next;

	if (lf->path_link.prev) {
		lf->path_link.prev->next = next;
	} else {
		/* The newest of its path: the next one, if any, becomes the
		 * entry, under its own copy of the path. */
		g_hash_table_remove(p->idle, lf->path);
		if (next)
			g_hash_table_insert(p->idle, ((dlock__file_fd *)next->data)->path, next);
	}
	if (next)
		next->prev = lf->path_link.prev;
	lf->path_link.prev = lf->path_link.next = NULL;
	g_queue_unlink(&p->lru, &lf->lru_link);
}

int dlock__file_fd_get(file_backend *b, const char *path, dlock__file_fd **ret)
{
	dlock__file_pool *p = b->pool;
	dlock__file_fd *lf = NULL;
	GList *newest;

	dlock__mutex_lock(&p->mu, DLOCK__RANK_FILE_POOL);
	newest = g_hash_table_lookup(p->idle, path);
	if (newest) {
		lf = newest->data;
		unpool_locked(p, lf);
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

void dlock__file_fd_put(file_backend *b, dlock__file_fd *lf)
{
	dlock__file_pool *p = b->pool;
	dlock__file_fd *evict = NULL;
	GList *newest;
	guint of_path = 0;

	dlock__mutex_lock(&p->mu, DLOCK__RANK_FILE_POOL);
	newest = g_hash_table_lookup(p->idle, lf->path);
	for (GList *l = newest; l; l = l->next) {
		if (++of_path >= PER_PATH_MAX) {
			evict = l->data; /* the oldest of path */
			break;
		}
	}
	if (!evict && p->lru.length >= TOTAL_MAX)
		evict = g_queue_peek_tail(&p->lru);
	if (evict)
		unpool_locked(p, evict);
	newest = g_hash_table_lookup(p->idle, lf->path);
	lf->path_link.prev = NULL;
	lf->path_link.next = newest;
	if (newest) {
		newest->prev = &lf->path_link;
		g_hash_table_remove(p->idle, lf->path);
	}
	g_hash_table_insert(p->idle, lf->path, &lf->path_link);
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
