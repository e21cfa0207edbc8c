/* SPDX-License-Identifier: MIT */
/*
 * What leader elections need of the file backend (docs/file.md,
 * "Elections"): observers watch the lock file with the backend's inotify
 * watch for waiters, which wakes on every write to the file -- a leader's
 * record, its release -- and on every close of a descriptor opened for
 * writing -- a leader's death.  A new leader also announces itself by
 * such a close, as older dlocks' observers listen for closes only.
 *
 * A query that runs between a new holder's lock and its record sees the
 * previous holder's record: one whose process is gone is not reported
 * (dlock__file_record_stale), so an observer never names a dead leader.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <limits.h>
#include <string.h>

#include "error.h"
#include "internal.h"

typedef struct file_watch_handle {
	dlock__waiter *waiter;
	int wd;
} file_watch_handle;

/* A close of a write descriptor on resource's lock file (created if
 * missing): the event every watch of the file wakes on. */
static int touch(file_backend *b, const char *resource)
{
	char *path = dlock__file_path(b, resource);
	int fd = dlock__file_open_guarded(path, O_WRONLY | O_CREAT | O_NOFOLLOW, 0600);
	int rc = DLOCK_OK;

	if (fd < 0)
		rc = dlock__error(DLOCK_EUNAVAILABLE, "file %s: cannot open: %s", path, g_strerror(errno));
	else
		dlock__file_close_guarded(fd);
	g_free(path);
	return rc;
}

int dlock__file_watch(dlock__backend *backend, const char *resource, dlock__waiter *waiter,
                      void **watch)
{
	file_backend *b = file_of(backend);
	file_watch_handle *h;
	char *path;
	int wd, rc;

	if (*watch)
		return DLOCK_OK; /* an inotify watch lasts */
	/* inotify watches a file that exists: a name nobody used yet gets
	 * its lock file now, as its first acquire would make it. */
	if ((rc = touch(b, resource)) != DLOCK_OK)
		return rc;
	path = dlock__file_path(b, resource);
	wd = dlock__file_watch_add(b, path, waiter);
	g_free(path);
	if (wd < 0)
		return dlock__error(DLOCK_EUNAVAILABLE, "file backend: cannot watch the lock file of '%s'",
		                    resource);
	h = g_new(file_watch_handle, 1);
	h->waiter = dlock__waiter_ref(waiter);
	h->wd = wd;
	*watch = h;
	return DLOCK_OK;
}

void dlock__file_unwatch(dlock__backend *backend, void *watch)
{
	file_backend *b = file_of(backend);
	file_watch_handle *h = watch;

	dlock__file_watch_remove(b, h->wd, h->waiter);
	dlock__waiter_free(h->waiter);
	g_free(h);
}

void dlock__file_announce(dlock__backend *backend, const char *resource, const char *id,
                          uint64_t token, int64_t ttl_ms)
{
	file_backend *b = file_of(backend);

	/* A resignation rewrote the leader's record: watchers woke. */
	if (id && touch(b, resource) != DLOCK_OK)
		dlock__log(b->logger, DLOCK_LOG_WARNING, "file backend: leader '%s' of '%s' (token %" G_GUINT64_FORMAT
		           ") not announced: %s", id, resource, token, dlock_last_error_message());
}

bool dlock__file_record_stale(const char *record)
{
	dlock__holder h;
	bool stale;

	if (!record || !dlock__token_parse(record, &h))
		return false;
	stale = strcmp(h.host, g_get_host_name()) == 0 && h.pid > 0 && h.pid <= INT_MAX &&
	        kill((pid_t)h.pid, 0) != 0 && errno == ESRCH;
	dlock__holder_clear(&h);
	return stale;
}
