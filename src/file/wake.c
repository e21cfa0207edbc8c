/* SPDX-License-Identifier: MIT */
/*
 * One waiter woken per release: a futex in the lock file.
 *
 * The last 32-bit word of the lock file's first page (offset WAKE_OFFSET)
 * is a futex shared by every process that maps the file: the kernel keys a
 * shared futex by inode and offset, so waiters in any process sleep on the
 * same queue.  A waiter reads the word, tries the lock, and if it is busy
 * sleeps in FUTEX_WAIT for as long as the word keeps that value.  A
 * release unlocks, writes a fresh value into the word, and wakes ONE
 * sleeper (FUTEX_WAKE 1): the kernel's queue is first come, first woken,
 * and only holds threads that are still asleep, so a dead waiter is never
 * chosen.  Unlocking before writing means a waiter whose try failed either
 * sees the new value when it goes to sleep (and tries again at once) or is
 * already queued when the wake comes: no release is missed.
 *
 * When the file becomes shared -- a write lock turned into a read lock by
 * a downgrade, or a reader granted after a release woke it -- every
 * sleeper is woken instead: the readers among them may all share, and
 * one wake-up could go to a writer, who cannot get in and passes nothing
 * on.  Such a wake writes a value with WAKE_ALL_MARK set, so the readers
 * it woke see that everyone was woken and do not wake them all again.
 *
 * The word is read and written with pread/pwrite, never through the
 * mapping: a file someone else truncated would make a mapped access raise
 * SIGBUS in the host program, while the kernel's own accesses in the futex
 * calls just fail (EFAULT), and the waiter then falls back to inotify.
 * The holder's record at the start of the file is shorter than the page;
 * a holder truncating the file to its record zeroes the word, which is
 * only one more change of value (the fresh values are never 0).
 *
 * The mapping is made through a read-only open file description of its
 * own, never the one that holds or waits for the lock: a mapping keeps
 * its file description alive, and a child made by fork() inherits it, so
 * a mapping of the lock's description would keep the lock held after its
 * holder died, as an inherited descriptor would (forkguard.c).
 *
 * The wait also includes the waiter's cancel word (a private futex), so a
 * cancel ends it at once, and it ends at the caller's deadline or nap on
 * the monotonic clock.  Releases the futex does not see -- a holder killed
 * (the kernel unlocks, nobody writes), a dlock too old to write the word --
 * are found by the nap, whose backoff is capped as before.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "mutex.h"

#define WAKE_PAGE 4096
#define WAKE_OFFSET (WAKE_PAGE - 4)
#define WAKE_ALL_MARK 2u /* in a value written by a wake of every sleeper */
#define CACHE_MAX 64

uint32_t dlock__file_wake_read(int fd)
{
	uint32_t word = 0;

	if (pread(fd, &word, sizeof(word), WAKE_OFFSET) != (ssize_t)sizeof(word))
		return 0; /* a shorter file: the word reads as zero */
	return word;
}

/* The word in a shared mapping of the first page of the file at lf's
 * path, which must still be the file open on lf; NULL if it cannot be
 * mapped.  Only the kernel touches it (see above). */
static const uint32_t *map_word(const dlock__file_fd *lf)
{
	int rfd = open(lf->path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	void *page = MAP_FAILED;
	struct stat st;

	if (rfd < 0)
		return NULL;
	if (fstat(rfd, &st) == 0 && st.st_dev == lf->dev && st.st_ino == lf->ino)
		page = mmap(NULL, WAKE_PAGE, PROT_READ, MAP_SHARED, rfd, 0);
	close(rfd);
	return page == MAP_FAILED ? NULL : (const uint32_t *)((const char *)page + WAKE_OFFSET);
}

static void unmap_word(gpointer word)
{
	munmap((char *)word - WAKE_OFFSET, WAKE_PAGE);
}

/*
 * The mappings, kept for the backend's life: opening and mapping a file
 * and faulting its page in costs several times the release itself, and a
 * program usually locks the same few resources again and again.  At most
 * CACHE_MAX paths are kept (beyond, a mapping serves one call).  A mapping
 * is never unmapped while the backend lives -- a thread may be asleep on
 * it or about to wake it -- so the mapping of a replaced file is only
 * retired, and unmapped when the backend closes.
 */
typedef struct wake_map {
	dev_t dev;
	ino_t ino;
	const uint32_t *word;
} wake_map;

struct dlock__file_wakes {
	GMutex mu;           /* guards both tables (rank FILE_WAKE) */
	GHashTable *by_path; /* char * -> wake_map * */
	GPtrArray *retired;  /* words of replaced files */
};

dlock__file_wakes *dlock__file_wakes_new(void)
{
	dlock__file_wakes *w = g_new0(dlock__file_wakes, 1);

	g_mutex_init(&w->mu);
	w->by_path = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
	w->retired = g_ptr_array_new_with_free_func(unmap_word);
	return w;
}

void dlock__file_wakes_free(dlock__file_wakes *w)
{
	GHashTableIter iter;
	gpointer value;

	g_hash_table_iter_init(&iter, w->by_path);
	while (g_hash_table_iter_next(&iter, NULL, &value))
		unmap_word((gpointer)((wake_map *)value)->word);
	g_hash_table_unref(w->by_path);
	g_ptr_array_unref(w->retired);
	g_mutex_clear(&w->mu);
	g_free(w);
}

/* The word of the file open on lf, or NULL; *ret_own: the caller unmaps
 * it after use (the cache had no room, or another thread mapped the same
 * file meanwhile).  The file is known by the device and inode lf was
 * opened on, with no stat.  The mapping is made outside the mutex. */
static const uint32_t *word_get(dlock__file_wakes *w, const dlock__file_fd *lf, bool *ret_own)
{
	const uint32_t *word = NULL;
	wake_map *m;

	*ret_own = false;
	dlock__mutex_lock(&w->mu, DLOCK__RANK_FILE_WAKE);
	m = g_hash_table_lookup(w->by_path, lf->path);
	if (m && m->dev == lf->dev && m->ino == lf->ino)
		word = m->word;
	dlock__mutex_unlock(&w->mu);
	if (word || !(word = map_word(lf)))
		return word;
	dlock__mutex_lock(&w->mu, DLOCK__RANK_FILE_WAKE);
	m = g_hash_table_lookup(w->by_path, lf->path);
	if (m && m->dev == lf->dev && m->ino == lf->ino) {
		*ret_own = true;
	} else if (m) {
		g_ptr_array_add(w->retired, (gpointer)m->word);
		*m = (wake_map){ .dev = lf->dev, .ino = lf->ino, .word = word };
	} else if (g_hash_table_size(w->by_path) < CACHE_MAX) {
		m = g_new(wake_map, 1);
		*m = (wake_map){ .dev = lf->dev, .ino = lf->ino, .word = word };
		g_hash_table_insert(w->by_path, g_strdup(lf->path), m);
	} else {
		*ret_own = true;
	}
	dlock__mutex_unlock(&w->mu);
	return word;
}

static void word_put(const uint32_t *word, bool own)
{
	if (own)
		unmap_word((gpointer)word);
}

dlock__file_wake_result dlock__file_wake_wait(file_backend *b, const dlock__file_fd *lf,
                                              uint32_t seen, dlock__waiter *waiter, int64_t until_us)
{
	struct futex_waitv v[2] = { 0 };
	struct timespec ts = { .tv_sec = until_us / G_USEC_PER_SEC,
	                       .tv_nsec = (until_us % G_USEC_PER_SEC) * 1000 };
	const uint32_t *word;
	bool own;
	long r;
	int err;

	if (!(word = word_get(b->wakes, lf, &own)))
		return DLOCK__FILE_WAKE_UNSUPPORTED;
	v[0].val = seen;
	v[0].uaddr = (uintptr_t)word;
	v[0].flags = FUTEX_32; /* shared: other processes wake it */
	v[1].val = 0;
	v[1].uaddr = (uintptr_t)dlock__waiter_cancel_word(waiter);
	v[1].flags = FUTEX_32 | FUTEX_PRIVATE_FLAG;
	/* g_get_monotonic_time() is CLOCK_MONOTONIC, the clock given here. */
	r = syscall(SYS_futex_waitv, v, 2, 0, &ts, CLOCK_MONOTONIC);
	err = errno;
	word_put(word, own);
	if (r == 0 || (r < 0 && (err == EAGAIN || err == EINTR)))
		return dlock__waiter_canceled(waiter) ? DLOCK__FILE_WAKE_CANCELED : DLOCK__FILE_WAKE_WOKEN;
	if (r == 1)
		return DLOCK__FILE_WAKE_CANCELED;
	if (err == ETIMEDOUT)
		return DLOCK__FILE_WAKE_TIMEDOUT;
	errno = err;
	return DLOCK__FILE_WAKE_UNSUPPORTED; /* ENOSYS before Linux 5.16, EFAULT */
}

/* Wake one sleeper of the file, or all, after a change of the word if
 * asked: a fresh value, with WAKE_ALL_MARK set for all. */
static void wake(file_backend *b, const dlock__file_fd *lf, bool change, bool all)
{
	uint32_t fresh = g_random_int() | 1;
	const uint32_t *word;
	bool own;

	fresh = all ? fresh | WAKE_ALL_MARK : fresh & ~WAKE_ALL_MARK;
	if (change && pwrite(lf->fd, &fresh, sizeof(fresh), WAKE_OFFSET) != (ssize_t)sizeof(fresh))
		return;
	if (!(word = word_get(b->wakes, lf, &own)))
		return;
	syscall(SYS_futex, word, FUTEX_WAKE, all ? INT_MAX : 1, NULL, NULL, 0);
	word_put(word, own);
}

void dlock__file_wake_next(file_backend *b, const dlock__file_fd *lf, bool change)
{
	wake(b, lf, change, false);
}

void dlock__file_wake_all(file_backend *b, const dlock__file_fd *lf)
{
	wake(b, lf, true, true);
}

bool dlock__file_wake_was_all(uint32_t word)
{
	return (word & WAKE_ALL_MARK) != 0;
}
