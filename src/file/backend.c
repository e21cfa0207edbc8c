/* SPDX-License-Identifier: MIT */
/*
 * The file backend: locks between processes of one host, with no server.
 * The embedded default, so the dlock command works on a bare machine.
 *
 * Directory: the URI's path (file:///path, which must exist), or the
 * option dir (which must exist), or else $DLOCK_DIR, or else
 * /tmp/dlock-<uid> — the same for a cron job and a login shell; the last
 * two are created mode 0700.  Whichever it is, it is refused if it is a
 * symbolic link, not a directory, not owned by the user, or group or world
 * writable (check_dir()): another user could otherwise replace lock files.
 *
 * Lock file names: names.c.
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"
#include "file.h"
#include "internal.h"

/* The options, as the row below parses them. */
typedef struct file_options {
	char *dir; /* NULL: the URI's path, $DLOCK_DIR or the default */
} file_options;

static const dlock__option options[] = {
	{ .name = "dir", .kind = DLOCK__OPTION_PATH, .offset = offsetof(file_options, dir) },
	{ .name = NULL },
};

/*
 * The lock directory, however it was named (source says how): it must be
 * a directory itself, not a symbolic link to one, owned by this user and
 * writable by nobody else, or another user could replace or squat its
 * lock files -- also with the sticky bit of /tmp, which only keeps others
 * from removing our files.  Only the directory itself is checked, not the
 * path to it.  A default directory ($DLOCK_DIR, /tmp/dlock-<uid>) is
 * created 0700 if missing (create); a named one must exist.  dir has no
 * trailing slash, so that lstat() sees a link rather than its target.
 */
static int check_dir(const char *dir, const char *source, bool create)
{
	struct stat st;

	if (dir[0] != '/')
		return dlock__error(DLOCK_ECONFIG, "lock directory %s (%s): not an absolute path", dir, source);
	if (create && mkdir(dir, 0700) != 0 && errno != EEXIST)
		return dlock__error(DLOCK_ECONFIG, "lock directory %s (%s): cannot create: %s", dir, source,
		                    g_strerror(errno));
	if (lstat(dir, &st) != 0)
		return dlock__error(DLOCK_ECONFIG, "lock directory %s (%s): %s", dir, source, g_strerror(errno));
	if (S_ISLNK(st.st_mode))
		return dlock__error(DLOCK_ECONFIG, "lock directory %s (%s): a symbolic link; name the "
		                    "directory itself", dir, source);
	if (!S_ISDIR(st.st_mode))
		return dlock__error(DLOCK_ECONFIG, "lock directory %s (%s): not a directory", dir, source);
	if (st.st_uid != geteuid())
		return dlock__error(DLOCK_ECONFIG, "lock directory %s (%s): owned by uid %u, not by this user (%u)",
		                    dir, source, (unsigned)st.st_uid, (unsigned)geteuid());
	if (st.st_mode & (S_IWGRP | S_IWOTH))
		return dlock__error(DLOCK_ECONFIG,
		                    "lock directory %s (%s): writable by group or others (mode %03o); "
		                    "another user could replace its lock files", dir, source,
		                    (unsigned)(st.st_mode & 07777));
	return DLOCK_OK;
}

/* path without its trailing slashes ("/" stays "/"); g_free. */
static char *without_trailing_slash(const char *path)
{
	size_t len = strlen(path);

	while (len > 1 && path[len - 1] == '/')
		len--;
	return g_strndup(path, len);
}

static int open_backend(const dlock__backend_env *env, const dlock__uri *uri,
                        const dlock__options *opts, dlock__backend **ret)
{
	const char *given = uri->path && strcmp(uri->path, "/") != 0 ? uri->path : NULL;
	const file_options *o = opts->values;
	const char *env_dir = g_getenv("DLOCK_DIR");
	file_backend *b;
	char *dir;
	int rc;

	if (uri->hosts->len > 0)
		return dlock__error(DLOCK_ECONFIG, "URI %s: file takes a local directory (file:///path/to/dir)",
		                    uri->redacted);
	if (uri->user || uri->password)
		return dlock__error(DLOCK_ECONFIG, "URI %s: file takes no user or password", uri->redacted);
	if (given && o->dir)
		return dlock__error(DLOCK_ECONFIG, "URI %s: the directory is given twice (path and option dir)",
		                    uri->redacted);
	if (given) {
		dir = without_trailing_slash(given);
		rc = check_dir(dir, "the URI's path", false);
	} else if (o->dir) {
		dir = without_trailing_slash(o->dir);
		rc = check_dir(dir, "option dir", false);
	} else if (env_dir && *env_dir) {
		dir = without_trailing_slash(env_dir);
		rc = check_dir(dir, "$DLOCK_DIR", true);
	} else {
		dir = g_strdup_printf("/tmp/dlock-%u", (unsigned)geteuid());
		rc = check_dir(dir, "the default", true);
	}
	if (rc != DLOCK_OK) {
		g_free(dir);
		return rc;
	}
	b = g_new0(file_backend, 1);
	b->logger = env->logger;
	b->dir = dir;
	g_mutex_init(&b->lazy_mu);
	g_mutex_init(&b->rw_mu);
	b->wakes = dlock__file_wakes_new();
	b->pool = dlock__file_pool_new();
	*ret = (dlock__backend *)(void *)b;
	return DLOCK_OK;
}

static void close_backend(dlock__backend *backend)
{
	file_backend *b = file_of(backend);

	dlock__file_pool_free(b);
	dlock__file_watch_stop(b);
	dlock__file_wakes_free(b->wakes);
	g_mutex_clear(&b->lazy_mu);
	g_mutex_clear(&b->rw_mu);
	g_free(b->dir);
	g_free(b);
}

static char *describe(const dlock__backend *backend)
{
	const file_backend *b = file_of_const(backend);

	return g_strconcat("file://", b->dir, NULL);
}

const dlock__backend_ops dlock__file_ops = {
	.type = "file",
	/* No lease: the kernel ends a hold when its holder dies. */
	.caps = DLOCK__CAP_SHARED | DLOCK__CAP_PERMITS,
	.options = options,
	.options_size = sizeof(file_options),
	.open = open_backend,
	.close = close_backend,
	.acquire_begin = dlock__file_acquire_begin,
	.acquire_step = dlock__file_acquire_step,
	.acquire_end = dlock__file_acquire_end,
	.release = dlock__file_release,
	.query = dlock__file_query,
	.describe = describe,
	.watch = dlock__file_watch,
	.unwatch = dlock__file_unwatch,
	.announce = dlock__file_announce,
};
