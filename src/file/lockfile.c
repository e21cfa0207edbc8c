/* SPDX-License-Identifier: MIT */
/*
 * One lock file per resource, locked with an open-file-description lock
 * (F_OFD_SETLK): the lock belongs to the descriptor, so two holds in one
 * process exclude each other, and the kernel releases it when the holder
 * dies.  The fencing counter and the holder's record live in the file and
 * are written under the lock.  Files are never unlinked: after locking, the
 * descriptor is checked against the path, and a replaced file is retried.
 * A released hold's descriptor is kept for the next hold of the resource
 * (pool.c), with the watch that reports the file's removal (watch.c).
 *
 * A READ hold locks the file's main range shared, draws its token under
 * a lock of its own and keeps its holder record in a slot of its own
 * (readers.c); a semaphore's permit is one byte of that range, taken
 * and recorded the same way (permits.c).  A downgrade's read hold waits for its owner's write hold
 * to be released, whose lock then turns into the reader's in place: no
 * other hold gets in between.
 *
 * Waiting keeps the descriptor open and retries F_OFD_SETLK when a
 * release wakes it through the futex in the file (wake.c: one waiter per
 * release), or after a capped backoff, so the deadline holds and a holder
 * that died (the kernel unlocks, nobody wakes) is found.  Where no futex
 * can be had, the watch thread's inotify wakes every waiter on a change of
 * the file (a release's writes) instead.  A blocking F_OFD_SETLKW could not honour a deadline
 * or a cancel: only a signal ends it, and the library owns none.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "clock.h"
#include "error.h"
#include "internal.h"
#include "mutex.h"

#define BACKOFF_FIRST_US (10 * 1000)
#define BACKOFF_CAP_US (200 * 1000)
#define PERMIT_SPIN_US (5 * 1000)
#define CONTENT_MAX 1024

typedef struct file_hold file_hold;
struct file_hold {
	dlock__file_fd *lf; /* NULL while a downgrade waits for its write hold's release */
	int watch;       /* the kept watch the hold is listed on, -1 if none */
	uint64_t fence;
	char *token;     /* the holder's record */
	bool read;
	int64_t permit;  /* a semaphore's permit (its byte), -1 for a lock */
	int64_t slot;    /* a reader's or permit's slot, -1 if it has none */
	dlock__hold *hold; /* the hold this is the data of */
	file_hold *peer; /* a write hold's pending downgrade, and that read hold's
	                  * write hold, each the other's; under b->rw_mu */
};

static void file_hold_free(file_hold *fh)
{
	g_free(fh->token);
	g_free(fh);
}

/* Read "fence N" and "holder TOKEN" from the file; missing parts are 0/NULL. */
static void read_content(int fd, uint64_t *ret_fence, char **ret_holder)
{
	char buf[CONTENT_MAX + 1];
	ssize_t n = pread(fd, buf, CONTENT_MAX, 0);

	*ret_fence = 0;
	if (ret_holder)
		*ret_holder = NULL;
	if (n <= 0)
		return;
	buf[n] = '\0';
	/* Line by line, up to the first NUL (the padding). */
	for (char *line = buf, *end; *line; line = end + 1) {
		end = strchrnul(line, '\n');
		if (g_str_has_prefix(line, "fence "))
			*ret_fence = g_ascii_strtoull(line + 6, NULL, 10);
		else if (ret_holder && g_str_has_prefix(line, "holder ") && line + 7 < end)
			*ret_holder = g_strndup(line + 7, (gsize)(end - line - 7));
		if (!*end)
			break;
	}
}

/*
 * The record, padded with NUL bytes to CONTENT_MAX (readers stop at the
 * first NUL) rather than cut to its length: the file keeps its size, so the
 * futex word further on (wake.c) survives, and no write allocates or frees
 * the file's blocks.  A record too long to pad is cut as before.
 */
static int write_content(int fd, uint64_t fence, const char *holder)
{
	char text[CONTENT_MAX + 1] = { 0 };

	/* Cut to CONTENT_MAX if longer, never the file: readers' slots follow
	 * (readers.c). */
	snprintf(text, sizeof(text), "dlock-file 1\nfence %" PRIu64 "\n%s%s%s", fence,
	         holder ? "holder " : "", holder ? holder : "", holder ? "\n" : "");
	return pwrite(fd, text, CONTENT_MAX, 0) == CONTENT_MAX ? 0 : -1;
}

/*
 * The descriptor still names the file at its path (it was not replaced):
 * one stat of the path, against the file lf was opened on.  Only the
 * inode is asked for: a stat that asks for the times makes the kernel
 * (Linux 6.13 on, for ext4, xfs, btrfs, tmpfs) give the file's next write
 * fine-grained times, and then every write of a record dirties the inode.
 */
static bool same_file(const dlock__file_fd *lf)
{
	struct statx st;

	return statx(AT_FDCWD, lf->path, AT_SYMLINK_NOFOLLOW | AT_STATX_DONT_SYNC, STATX_INO, &st) == 0 &&
	       makedev(st.stx_dev_major, st.stx_dev_minor) == lf->dev && st.stx_ino == lf->ino;
}

/* One try on lf: 1 granted, 0 busy, 2 file replaced, negative error.  A
 * busy file that is no longer at path (removed by someone else while its
 * old holder keeps it) counts as replaced: the new file may be free.  A
 * writer locks the whole file, a reader the main range shared. */
static int try_lock(const dlock__file_fd *lf, bool read)
{
	if (dlock__file_lock_range(lf->fd, read ? F_RDLCK : F_WRLCK, F_OFD_SETLK, 0,
	                           read ? DLOCK__FILE_READ_RANGE : 0) != 0) {
		if (errno == EAGAIN || errno == EACCES || errno == EINTR)
			return same_file(lf) ? 0 : 2;
		return dlock__error(DLOCK_EBACKEND, "file %s: cannot lock: %s", lf->path, g_strerror(errno));
	}
	if (!same_file(lf)) {
		dlock__file_lock_range(lf->fd, F_UNLCK, F_OFD_SETLK, 0, 0);
		return 2;
	}
	return 1;
}

/*
 * The next fencing token of the file open on fd, recorded there.  A file
 * without a counter is new, or a tmp cleaner removed the old one: start
 * from the wall clock in microseconds, past any counter the old file
 * reached (holders come and go slower than one per microsecond), as the
 * Redis backend seeds a lost counter from TIME.  holder is the record to
 * keep in the file with it (a writer's), or NULL.
 */
static uint64_t next_fence(file_backend *b, int fd, const char *path, const char *holder)
{
	uint64_t fence;

	read_content(fd, &fence, NULL);
	if (fence == 0)
		fence = (uint64_t)g_get_real_time();
	fence++;
	if (write_content(fd, fence, holder) != 0)
		dlock__log(b->logger, DLOCK_LOG_WARNING, "file %s: cannot record the holder: %s", path,
		           g_strerror(errno));
	return fence;
}

/*
 * The counter byte, for a reader that holds the main range (readers share
 * the file, so one at a time draws from the counter).  Tried without
 * blocking: a kernel wait (F_OFD_SETLKW) would honour neither the deadline
 * nor a cancel, and a reader stopped while it holds the byte would keep
 * every other reader waiting.  A try gives up after a second (EBUSY).
 */
static int take_counter(int fd, const char *path, dlock__waiter *waiter, const char *resource,
                        int64_t wait_ms, int64_t deadline_us)
{
	int64_t until_us = wait_ms == 0 ? dlock__mono_us() + 1000 * 1000 : deadline_us;
	gulong pause_us = 50;

	for (;;) {
		if (dlock__file_lock_range(fd, F_WRLCK, F_OFD_SETLK, DLOCK__FILE_COUNTER_BYTE, 1) == 0)
			return DLOCK_OK;
		if (errno != EAGAIN && errno != EACCES && errno != EINTR)
			return dlock__error(DLOCK_EBACKEND, "file %s: cannot lock the counter: %s", path,
			                    g_strerror(errno));
		if (dlock__waiter_canceled(waiter))
			return dlock__error_canceled(resource);
		if (dlock__remaining_us(until_us) == 0)
			return wait_ms == 0 ? dlock__error_busy(resource) : dlock__error_timeout(resource, wait_ms);
		/* Another reader holds it for a read and a write of the file. */
		g_usleep(pause_us);
		pause_us = MIN(pause_us * 2, 10 * 1000);
	}
}

/*
 * One try of a semaphore's permit on fd: as try_lock() says, with the
 * counter byte held on success (1), for the token.  The byte is held for
 * moments by other semaphore acquirers and for a whole hold by a writer:
 * a short spin tells the two apart, and the writer's case is busy (0), so
 * the caller waits for its release as for any.
 */
static int try_permit(const dlock__file_fd *lf, const char *resource, uint32_t permits,
                      int64_t *ret_permit)
{
	int fd = lf->fd;
	const char *path = lf->path;
	gulong pause_us = 50;
	int rc;

	for (gulong spun_us = 0;; spun_us += pause_us, pause_us *= 2) {
		if (dlock__file_lock_range(fd, F_WRLCK, F_OFD_SETLK, DLOCK__FILE_COUNTER_BYTE, 1) == 0)
			break;
		if (errno != EAGAIN && errno != EACCES && errno != EINTR)
			return dlock__error(DLOCK_EBACKEND, "file %s: cannot lock the counter: %s", path,
			                    g_strerror(errno));
		if (spun_us >= PERMIT_SPIN_US)
			return same_file(lf) ? 0 : 2;
		g_usleep(pause_us);
	}
	rc = dlock__file_permit_try(fd, path, resource, permits, ret_permit);
	if (rc == 1 && !same_file(lf)) {
		dlock__file_lock_range(fd, F_UNLCK, F_OFD_SETLK, 0, 0);
		return 2;
	}
	if (rc != 1)
		dlock__file_lock_range(fd, F_UNLCK, F_OFD_SETLK, DLOCK__FILE_COUNTER_BYTE, 1);
	if (rc == 0 && !same_file(lf))
		return 2;
	return rc;
}

/* Make hold's data of lf, locked for it (the main range shared for a
 * reader, a permit's byte for a semaphore's holder, each with the counter
 * byte too): draw the token, record the holder, list the hold on the
 * file's kept watch.  seen: the watch's events before the check of lf
 * against its path. */
static void grant(file_backend *b, dlock__hold *hold, dlock__file_fd *lf, bool read,
                  int64_t permit, unsigned seen)
{
	file_hold *fh = g_new0(file_hold, 1);
	const char *path = lf->path;
	int fd = lf->fd;

	fh->lf = lf;
	fh->read = read;
	fh->permit = permit;
	fh->slot = -1;
	fh->hold = hold;
	fh->token = dlock__token_new(dlock__hold_holder(hold));
	if (read || permit >= 0) {
		fh->fence = next_fence(b, fd, path, NULL);
		dlock__file_lock_range(fd, F_UNLCK, F_OFD_SETLK, DLOCK__FILE_COUNTER_BYTE, 1);
		/* From a random slot of the first few hundred: readers rarely
		 * try taken ones, and the file stays short for status to scan. */
		fh->slot = dlock__file_slot_claim(fd, fh->token, g_random_int_range(0, 256));
		if (fh->slot < 0)
			dlock__log(b->logger, DLOCK_LOG_WARNING, "file %s: no slot for the holder record; "
			           "dlock status will not list this %s", path, read ? "reader" : "permit's holder");
	} else {
		fh->fence = next_fence(b, fd, path, fh->token);
	}
	dlock__hold_set_token(hold, fh->fence);
	dlock__hold_set_backend_data(hold, fh);
	fh->watch = lf->wd;
	dlock__file_watch_hold(b, lf->wd, path, fd, hold, &seen);
}

/*
 * A READ hold for an owner holding the write hold write on the same file:
 * granted at once, with a token, but no lock yet -- the write hold's lock
 * becomes this hold's when the write hold is released (pass_to_reader()).
 * Until then it stands on the write hold's lock, so it is watched on the
 * write hold's descriptor: a removal of the file loses both holds at
 * once, not the read hold only when the write hold is released.
 */
static int downgrade(file_backend *b, dlock__hold *hold, dlock__hold *write)
{
	file_hold *fw = dlock__hold_backend_data(write);
	file_hold *fr;

	dlock__mutex_lock(&b->rw_mu, DLOCK__RANK_FILE_RW);
	if (!fw || fw->read || !fw->lf || fw->peer) {
		dlock__mutex_unlock(&b->rw_mu);
		return dlock__error(DLOCK_EBACKEND, "lock '%s': the write hold to downgrade is not there",
		                    dlock__hold_resource(hold));
	}
	fr = g_new0(file_hold, 1);
	fr->watch = -1;
	fr->read = true;
	fr->permit = -1;
	fr->slot = -1;
	fr->hold = hold;
	fr->token = dlock__token_new(dlock__hold_holder(hold));
	fr->fence = fw->fence = next_fence(b, fw->lf->fd, fw->lf->path, fw->token);
	fr->peer = fw;
	fw->peer = fr;
	dlock__hold_set_token(hold, fr->fence);
	dlock__hold_set_backend_data(hold, fr);
	fr->watch = fw->lf->wd;
	dlock__file_watch_hold(b, fr->watch, fw->lf->path, fw->lf->fd, hold, NULL);
	dlock__mutex_unlock(&b->rw_mu);
	return DLOCK_OK;
}

/*
 * One sleep of a waiter on the futex: DLOCK_OK to try again, an error to
 * give up, or 1 when no futex can be had here (wait by inotify instead).
 * The nap is the backoff's cap from the start: releases wake the waiter,
 * and the nap only finds what the futex cannot tell (a holder killed, a
 * release by a dlock too old to wake), as the cap did before.
 *
 * A waiter canceled just after a release woke it would leave the lock
 * free with everyone else asleep: it passes the wake-up on.
 */
static int futex_turn(file_backend *b, const dlock__file_fd *lf, uint32_t word,
                      dlock__waiter *waiter, const char *resource, int64_t wait_ms,
                      int64_t deadline_us, bool *ret_woken)
{
	int64_t until_us = MIN(deadline_us, dlock__mono_us() + BACKOFF_CAP_US);

	*ret_woken = false;
	switch (dlock__file_wake_wait(b, lf, word, waiter, until_us)) {
	case DLOCK__FILE_WAKE_WOKEN:
		*ret_woken = true;
		return DLOCK_OK;
	case DLOCK__FILE_WAKE_TIMEDOUT:
		if (dlock__remaining_us(deadline_us) == 0)
			return dlock__error_timeout(resource, wait_ms);
		return DLOCK_OK;
	case DLOCK__FILE_WAKE_CANCELED:
		dlock__file_wake_next(b, lf, false);
		return dlock__error_canceled(resource);
	case DLOCK__FILE_WAKE_UNSUPPORTED:
		break;
	}
	return 1;
}

/* An acquire's machine (backend.h): what the wait keeps between steps. */
typedef struct file_acquire {
	dlock__wait wait;
	dlock__hold *hold;
	char *path;
	bool read;
	uint32_t permits;
	int64_t permit;        /* the semaphore's permit, once a try has one */
	dlock__file_fd *lf;    /* the lock file, open from the first try on */
	int watch;             /* the inotify watch of the wait, or -1 */
	bool watch_tried;
	bool futex;            /* may sleep on the file's futex: not yet found unsupported,
	                        * and a thread of its own sleeps (not DLOCK__ACQUIRE_ASYNC) */
	bool futex_armed;      /* reads the futex word before each try */
	bool woken;            /* the last futex sleep ended by a release's wake */
} file_acquire;

int dlock__file_acquire_begin(dlock__backend *backend, dlock__hold *hold, dlock__waiter *waiter,
                              int64_t wait_ms, int64_t deadline_us, unsigned flags,
                              void **ret_machine)
{
	file_backend *b = file_of(backend);
	const char *resource = dlock__hold_resource(hold);
	bool read = dlock__hold_mode(hold) == DLOCK__MODE_READ;
	uint32_t permits = dlock__hold_permits(hold);
	file_acquire *m;
	int rc;

	if (read && dlock__hold_downgrade_of(hold))
		return downgrade(b, hold, dlock__hold_downgrade_of(hold));
	if (permits > 1 && (rc = dlock__file_permits_check(resource, permits)) != DLOCK_OK)
		return rc;
	m = g_new0(file_acquire, 1);
	dlock__wait_init(&m->wait, waiter, resource, wait_ms, deadline_us, BACKOFF_FIRST_US);
	m->hold = hold;
	m->path = dlock__file_path(b, resource);
	m->read = read;
	m->permits = permits;
	m->permit = -1;
	m->watch = -1;
	m->futex = !(flags & DLOCK__ACQUIRE_ASYNC);
	*ret_machine = m;
	return DLOCK_OK;
}

/*
 * Tries until the lock is had, a failure, or a wait: on the futex, slept
 * here when this thread is the waiting one; otherwise a turn of the
 * caller's (on the waiter, which the watch's inotify or a release wakes,
 * or the backoff's nap ends).
 */
int dlock__file_acquire_step(dlock__backend *backend, void *machine, dlock__turn *ret_turn)
{
	file_backend *b = file_of(backend);
	file_acquire *m = machine;
	dlock__waiter *waiter = m->wait.waiter;
	const char *resource = m->wait.resource;
	int64_t wait_ms = m->wait.wait_ms, deadline_us = m->wait.deadline_us;
	int rc = dlock__wait_resume(&m->wait, BACKOFF_CAP_US);

	if (rc != DLOCK_OK)
		return rc;
	for (;;) {
		uint64_t seen = dlock__waiter_seq(waiter);
		uint32_t word = 0;
		unsigned events;

		if (!m->lf && (rc = dlock__file_fd_get(b, m->path, &m->lf)) != DLOCK_OK)
			return rc;
		if (m->futex_armed)
			word = dlock__file_wake_read(m->lf->fd);
		events = dlock__file_watch_seen(b, m->lf->wd);
		rc = m->permits > 1 ? try_permit(m->lf, resource, m->permits, &m->permit)
		                    : try_lock(m->lf, m->read);
		if (rc == 1 && m->read) {
			int taken = take_counter(m->lf->fd, m->path, waiter, resource, wait_ms, deadline_us);

			if (taken != DLOCK_OK) {
				dlock__file_lock_range(m->lf->fd, F_UNLCK, F_OFD_SETLK, 0, 0);
				return taken;
			}
		}
		if (rc == 1) {
			grant(b, m->hold, m->lf, m->read, m->permit, events);
			/* A reader woken by a release wakes every waiter: the
			 * readers among them can share, and a writer woken
			 * alone would pass nothing on.  Readers woken that way
			 * find the word marked and wake nobody again. */
			if (m->read && m->woken && !dlock__file_wake_was_all(word))
				dlock__file_wake_all(b, m->lf);
			m->lf = NULL;
			return DLOCK_OK;
		}
		if (rc == 2) {
			/* Replaced under us (or before us, while pooled):
			 * start over on the new file, with a watch on it
			 * rather than on the old one.  The old descriptor is
			 * closed, never pooled again. */
			m->futex_armed = false;
			dlock__file_fd_close(b, m->lf);
			m->lf = NULL;
			dlock__file_watch_remove(b, m->watch, waiter);
			m->watch = -1;
			m->watch_tried = false;
			continue;
		}
		if (rc < 0)
			return rc;
		if (wait_ms == 0)
			return dlock__error_busy(resource);
		/* Tries that a wake-up made in vain, told apart from the
		 * others: with one waiter woken per release there are few. */
		dlock__log(b->logger, DLOCK_LOG_DEBUG, m->woken ? "file %s: busy although woken; waiting again"
		                                                : "file %s: busy; waiting", m->path);
		if (m->futex && !m->futex_armed) {
			/* Read the word from now on, and try once more before
			 * sleeping on it: a release may have come after the try. */
			m->futex_armed = true;
			continue;
		}
		if (m->futex) {
			rc = futex_turn(b, m->lf, word, waiter, resource, wait_ms, deadline_us,
			                &m->woken);
			if (rc <= 0) {
				if (rc != DLOCK_OK)
					return rc;
				continue;
			}
			m->futex = false;
			dlock__log(b->logger, DLOCK_LOG_DEBUG, "file %s: no futex (%s); waiting by inotify",
			           m->path, g_strerror(errno));
		}
		if (!m->watch_tried) {
			/* Once only: without a watch (no inotify instance, or
			 * EMFILE / ENOSPC on the watch) the backoff below is
			 * what wakes us, and asking again would spin. */
			m->watch_tried = true;
			m->watch = dlock__file_watch_add(b, m->path, waiter);
			if (m->watch >= 0)
				continue; /* try once more: a release may have come before the watch */
		}
		return dlock__wait_turn(&m->wait, seen, m->wait.backoff_us, ret_turn);
	}
}

void dlock__file_acquire_end(dlock__backend *backend, void *machine)
{
	file_backend *b = file_of(backend);
	file_acquire *m = machine;

	dlock__file_watch_remove(b, m->watch, m->wait.waiter);
	if (m->lf) {
		/* A try that failed holds nothing; unlocked all the same
		 * before another hold may take it. */
		dlock__file_lock_range(m->lf->fd, F_UNLCK, F_OFD_SETLK, 0, 0);
		dlock__file_fd_put(b, m->lf);
	}
	g_free(m->path);
	g_free(m);
}

/*
 * The release of a write hold whose owner made a read hold by a downgrade
 * (fr, pending): the write lock becomes the reader's in place, so no
 * waiting writer gets in between, and the descriptor is the read hold's
 * from now on, as its watch already was (downgrade()).  Every waiter is
 * woken: readers may share, and one wake-up could go to a writer, who
 * cannot get in and does not pass it on.  b->rw_mu held (the read hold's release
 * takes it too).  False if the locks could not be changed: the read hold
 * is then lost, as it never held alone, and unlisted from the watch
 * before the write hold's release pools the descriptor.
 * The writer's record is cleared while the lock is still ours alone: once
 * it is shared, readers draw tokens from the counter beside it, and a
 * rewrite of the counter after that would hand a later holder a token
 * again.
 */
static bool pass_to_reader(file_backend *b, file_hold *fw, file_hold *fr)
{
	write_content(fw->lf->fd, fw->fence, NULL);
	if (dlock__file_downgrade_locks(fw->lf->fd) != 0) {
		dlock__log(b->logger, DLOCK_LOG_WARNING, "file %s: cannot turn the write lock into a read "
		           "lock: %s", fw->lf->path, g_strerror(errno));
		dlock__hold_report(fr->hold, DLOCK_STATE_LOST);
		dlock__file_unwatch_hold(b, fr->watch, fr->hold);
		fr->watch = -1;
		return false;
	}
	if (dlock__file_slot_write(fw->lf->fd, 0, fr->token) == 0)
		fr->slot = 0;
	fr->lf = fw->lf;
	fw->lf = NULL;
	dlock__file_wake_all(b, fr->lf);
	return true;
}

/*
 * Clear the holder record (a writer's in the main record, keeping the
 * counter; a reader's slot), unlock, and give the descriptor back to the
 * pool (pool.c).  The explicit unlock is what releases: it applies to the
 * open file description, so it holds even if another process has a copy
 * of the descriptor (a child made without running our fork handler).  The
 * futex wakes one waiter (wake.c), after the unlock; its write of the
 * word is also the change that wakes waiters by inotify (watch.c).  A
 * read hold still waiting for its write hold's release (a downgrade) has
 * only its listing on the watch to undo.
 */
int dlock__file_release(dlock__backend *backend, dlock__hold *hold)
{
	file_backend *b = file_of(backend);
	file_hold *fh = dlock__hold_backend_data(hold);
	file_hold *peer;

	if (!fh)
		return DLOCK_OK;
	dlock__hold_set_backend_data(hold, NULL);
	dlock__mutex_lock(&b->rw_mu, DLOCK__RANK_FILE_RW);
	peer = fh->peer;
	if (peer)
		peer->peer = fh->peer = NULL;
	if (peer && !fh->read && pass_to_reader(b, fh, peer)) {
		dlock__file_unwatch_hold(b, fh->watch, hold);
		dlock__mutex_unlock(&b->rw_mu);
		file_hold_free(fh);
		return DLOCK_OK;
	}
	dlock__mutex_unlock(&b->rw_mu);
	if (fh->lf) {
		int fd = fh->lf->fd;

		dlock__file_unwatch_hold(b, fh->watch, hold);
		if (fh->read || fh->permit >= 0)
			dlock__file_slot_clear(fd, fh->slot);
		else
			write_content(fd, fh->fence, NULL);
		if (fh->permit >= 0)
			dlock__file_permit_release(fd, fh->permit);
		dlock__file_lock_range(fd, F_UNLCK, F_OFD_SETLK, 0, 0);
		dlock__file_wake_next(b, fh->lf, true);
		dlock__file_fd_put(b, fh->lf);
	} else {
		dlock__file_unwatch_hold(b, fh->watch, hold);
	}
	file_hold_free(fh);
	return DLOCK_OK;
}

int dlock__file_query(dlock__backend *backend, const char *resource, int64_t deadline_us,
                      dlock__server_info *ret)
{
	file_backend *b = file_of(backend);
	char *path = dlock__file_path(b, resource);
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0,
		            .l_len = DLOCK__FILE_READ_RANGE };
	char *holder = NULL;
	int fd, rc = DLOCK_OK;

	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		if (errno != ENOENT)
			rc = dlock__error(DLOCK_EUNAVAILABLE, "file %s: cannot open: %s", path, g_strerror(errno));
		g_free(path);
		return rc; /* no file: never locked */
	}
	if (fcntl(fd, F_OFD_GETLK, &fl) != 0) {
		rc = dlock__error(DLOCK_EBACKEND, "file %s: cannot test the lock: %s", path, g_strerror(errno));
	} else if (dlock__file_permits_held(dlock__file_permits_read(fd), &fl)) {
		/* A semaphore: its permits' holders, each in a slot. */
		read_content(fd, &ret->fencing_token, NULL);
		ret->permits = dlock__file_permits_read(fd);
		ret->locked = ret->shared = true;
		ret->readers = dlock__file_readers(fd);
	} else {
		read_content(fd, &ret->fencing_token, &holder);
		ret->locked = fl.l_type != F_UNLCK;
		ret->shared = fl.l_type == F_RDLCK;
		ret->holder_raw = ret->locked && !ret->shared && !dlock__file_record_stale(holder) ? holder
		                                                                                 : NULL;
		if (!ret->holder_raw)
			g_free(holder);
		if (ret->shared)
			ret->readers = dlock__file_readers(fd);
	}
	ret->expires_in_ms = -1;
	close(fd);
	g_free(path);
	return rc;
}
