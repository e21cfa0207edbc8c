/* SPDX-License-Identifier: MIT */
/*
 * The file backend's internals:
 *   backend.c   the directory, open/close, the ops table
 *   names.c     the lock file name of a resource
 *   lockfile.c  acquire, release, query on one lock file
 *   readers.c   READ holds: the byte ranges, the readers' slots and records
 *   permits.c   semaphores: N permits as N bytes of the main range
 *   elect.c     leader elections: observers' watches, announcements
 *   wake.c      the futex in the lock file: a release wakes one waiter
 *   watch.c     the inotify thread: held files, and waiters without futex
 *   forkguard.c lock descriptors closed in a child after fork()
 *   pool.c      lock file descriptors kept open between holds
 */
#ifndef DLOCK_FILE_INTERNAL_H
#define DLOCK_FILE_INTERNAL_H

#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <glib.h>

#include "backend.h"
#include "thread.h"

typedef struct file_backend file_backend;
typedef struct file_watch file_watch;
typedef struct dlock__file_wakes dlock__file_wakes;
typedef struct dlock__file_pool dlock__file_pool;

/* The seam's handle of a file backend is its file_backend: the ops
 * receive it as a dlock__backend, and see it again as what it is. */
static inline file_backend *file_of(dlock__backend *backend)
{
	return (file_backend *)(void *)backend;
}

static inline const file_backend *file_of_const(const dlock__backend *backend)
{
	return (const file_backend *)(const void *)backend;
}

struct file_backend {
	const dlock__logger *logger;
	char *dir;
	GMutex lazy_mu;     /* guards starting the watch thread (rank THREAD_START) */
	dlock__lazy_thread watch; /* file_watch * */
	dlock__file_wakes *wakes; /* mapped futex words (wake.c) */
	dlock__file_pool *pool;   /* idle lock file descriptors (pool.c) */
	GMutex rw_mu;       /* guards the link between a write hold and the read
	                     * hold its owner made by a downgrade (lockfile.c;
	                     * rank FILE_RW) */
};

/* The lock file's byte ranges (readers.c explains them). */
#define DLOCK__FILE_READ_RANGE 4000
#define DLOCK__FILE_COUNTER_BYTE 4000
#define DLOCK__FILE_SLOT_BASE 4096
#define DLOCK__FILE_SLOT_SIZE 512

/* A semaphore's permits are bytes of the main range (permits.c). */
#define DLOCK__FILE_PERMITS_MAX DLOCK__FILE_READ_RANGE

/* A descriptor open on a lock file, serving one hold (or one acquire) at
 * a time, and kept in the backend's pool between holds (pool.c). */
typedef struct dlock__file_fd {
	int fd;
	dev_t dev;       /* the file fd was opened on */
	ino_t ino;
	int wd;          /* the removal watch kept on that file (watch.c), or -1 */
	char *path;
	GList path_link; /* in the pool: among the idle ones of path */
	GList lru_link;  /* in the pool: among all idle ones */
} dlock__file_fd;

/* A descriptor on the lock file at path (created if missing): an idle one
 * of the pool, else one newly opened and watched.  DLOCK_OK and *ret, or
 * an error.  It may name a file since removed or replaced: check it
 * against the path once locked. */
int dlock__file_fd_get(file_backend *b, const char *path, dlock__file_fd **ret);
/* Back to the pool, unlocked and its records cleared (the least recently
 * used idle one may be closed for room). */
void dlock__file_fd_put(file_backend *b, dlock__file_fd *lf);
/* Close lf for good (its file was replaced, or the pool has no room);
 * NULL is a no-op. */
void dlock__file_fd_close(file_backend *b, dlock__file_fd *lf);
dlock__file_pool *dlock__file_pool_new(void);
/* Close every idle descriptor: before the watch thread stops. */
void dlock__file_pool_free(file_backend *b);

/* The lock file's path for a resource (g_free); names.c. */
char *dlock__file_path(const file_backend *b, const char *resource);

dlock__backend_acquire_begin_fn dlock__file_acquire_begin;
dlock__backend_acquire_step_fn dlock__file_acquire_step;
dlock__backend_acquire_end_fn dlock__file_acquire_end;
dlock__backend_release_fn dlock__file_release;
dlock__backend_query_fn dlock__file_query;
/* elect.c: leader elections' observers and announcements. */
dlock__backend_watch_fn dlock__file_watch;
dlock__backend_unwatch_fn dlock__file_unwatch;
dlock__backend_announce_fn dlock__file_announce;
/* Whether a holder record names a process of this host that no longer
 * runs: the record of a holder that died, not yet overwritten by the one
 * that holds now. */
bool dlock__file_record_stale(const char *record);

/* Wake waiter whenever the file at path changes (a release rewrites its
 * record and the futex word) or a descriptor opened for writing on it is
 * closed (a holder dying).  Returns a handle for unwatch, or -1 if the
 * file cannot be watched (the waiter then relies on its backoff). */
int dlock__file_watch_add(file_backend *b, const char *path, dlock__waiter *waiter);
void dlock__file_watch_remove(file_backend *b, int handle, dlock__waiter *waiter);
/* Watch the file at path, just opened, for its removal for as long as its
 * descriptor stays open (keeps of one file share a watch): returns the
 * watch for the calls below and unkeep, or -1 if it cannot be had
 * (logged).  Raises no event on the holds' own writes. */
int dlock__file_watch_keep(file_backend *b, const char *path);
void dlock__file_watch_unkeep(file_backend *b, int wd);
/* How many removal events the watch wd has seen: read before the check
 * of a descriptor against its path, and passed to watch_hold. */
unsigned dlock__file_watch_seen(file_backend *b, int wd);
/* Report hold LOST if the held file (fd, kept by wd) stops being the file
 * at path (unlinked or moved away by someone else); path is borrowed
 * until unwatch_hold (the descriptor's).  A removal between the caller's
 * check and this call is checked for here: always if seen is NULL, else
 * if the watch saw an event since *seen. */
void dlock__file_watch_hold(file_backend *b, int wd, const char *path, int fd, dlock__hold *hold,
                            const unsigned *seen);
void dlock__file_unwatch_hold(file_backend *b, int wd, dlock__hold *hold);
void dlock__file_watch_stop(file_backend *b);

/* ---- permits.c: semaphores ---- */
/* DLOCK_EINVAL for more permits than the file backend keeps. */
int dlock__file_permits_check(const char *resource, uint32_t permits);
/* The N stored in the file open on fd, 0 if none. */
uint32_t dlock__file_permits_read(int fd);
/* With the counter byte held: agree on permits with the file (the error
 * of dlock__error_permits() if another N is in use) and take a free
 * permit: 1 and *ret_permit, 0 if all are taken, or a negative code. */
int dlock__file_permit_try(int fd, const char *path, const char *resource, uint32_t permits,
                           int64_t *ret_permit);
/* Let the permit go; the last holder clears the stored N. */
void dlock__file_permit_release(int fd, int64_t permit);
/* Whether found (an F_OFD_GETLK answer over the main range) is a permit
 * of a semaphore of that many permits. */
bool dlock__file_permits_held(uint32_t permits, const struct flock *found);

/* fcntl() an OFD lock of type on [start, start + len) (len 0: to the end
 * of the file, and beyond); never F_OFD_SETLKW (lockfile.c says why). */
int dlock__file_lock_range(int fd, short type, int cmd, off_t start, off_t len);
/* Take a free reader slot on fd, trying from slot first on, and write the
 * record of token there: the slot, or -1 if none could be had. */
int64_t dlock__file_slot_claim(int fd, const char *token, int64_t first);
/* Write token's record into slot (locked by fd already); clear it. */
int dlock__file_slot_write(int fd, int64_t slot, const char *token);
void dlock__file_slot_clear(int fd, int64_t slot);
/* The tokens of the live readers of the file open on fd (g_free each). */
GPtrArray *dlock__file_readers(int fd);
/* Turn a write hold's whole-file lock on fd into a reader's: its main range
 * shared and slot 0 its own, with no moment unlocked.  0, or -1 and
 * errno. */
int dlock__file_downgrade_locks(int fd);

/* The futex word of the lock file open on fd (0 if the file is shorter):
 * read it before a try, and pass it to wait as seen. */
uint32_t dlock__file_wake_read(int fd);

typedef enum dlock__file_wake_result {
	DLOCK__FILE_WAKE_WOKEN,       /* a release (or anything): try again */
	DLOCK__FILE_WAKE_TIMEDOUT,    /* until_us came */
	DLOCK__FILE_WAKE_CANCELED,    /* the waiter was canceled */
	DLOCK__FILE_WAKE_UNSUPPORTED, /* no futex here: wait by inotify instead */
} dlock__file_wake_result;

/* Sleep while the word still reads seen, until until_us (monotonic) or a
 * cancel of waiter.  lf is open on the lock file. */
dlock__file_wake_result dlock__file_wake_wait(file_backend *b, const dlock__file_fd *lf,
                                              uint32_t seen, dlock__waiter *waiter, int64_t until_us);
/* Wake one waiter of the file open on lf: after a release, with change
 * (the word gets a fresh value first); without, to pass on a wake-up that
 * a waiter giving up may have taken. */
void dlock__file_wake_next(file_backend *b, const dlock__file_fd *lf, bool change);
/* Wake every waiter of the file open on lf (the word gets a fresh value,
 * marked as such, first): when the file becomes shared, any reader may
 * share, wherever it sleeps in the queue, and a writer woken first would
 * not pass its wake-up on. */
void dlock__file_wake_all(file_backend *b, const dlock__file_fd *lf);
/* Whether word, as read before a try, was written by a wake of all. */
bool dlock__file_wake_was_all(uint32_t word);
/* The backend's mappings of lock files (wake.c). */
dlock__file_wakes *dlock__file_wakes_new(void);
void dlock__file_wakes_free(dlock__file_wakes *wakes);

/* open() a lock file (O_CLOEXEC added) so that a child made by fork()
 * gets no copy of the descriptor; -1 and errno on failure.  Close it only
 * with dlock__file_close_guarded().  Safe from any thread. */
int dlock__file_open_guarded(const char *path, int flags, mode_t mode);
void dlock__file_close_guarded(int fd);

#endif
