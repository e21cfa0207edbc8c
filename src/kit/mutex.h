/* SPDX-License-Identifier: MIT */
/*
 * The library's mutexes and the one order they are taken in.
 *
 * Every mutex has a rank in the table below, and a thread takes mutexes
 * only in increasing rank: it may take a mutex only while every mutex it
 * holds ranks lower.  The condition wait releasing and retaking a mutex
 * does not count.  Whatever ranks last may be taken under anything and
 * takes nothing itself.  No network I/O is done under any of them but
 * the election's turn, which a resignation keeps across its release.
 *
 * Each struct's comment says which of its fields its mutex guards.
 *
 * Built with lock_order_check (on in sanitizer builds), every take checks
 * the order against what the thread holds, and every *_locked helper
 * checks that its caller holds the mutex it names; a breach prints both
 * places on stderr and aborts, as a failed assertion does -- the one
 * output of the library that does not go through its log callback, and
 * only in builds that check.  Otherwise these are g_mutex_lock() and
 * g_mutex_unlock(), the checks cost nothing, and src/kit/mutex.c is not
 * built.
 */
#ifndef DLOCK_KIT_MUTEX_H
#define DLOCK_KIT_MUTEX_H

#include <glib.h>

typedef enum dlock__rank {
	DLOCK__RANK_NONE = 0,
	/* src/recipes/election.c: one resignation at a time, across its release */
	DLOCK__RANK_ELECTION_TURN,
	/* src/recipes/election.c: an election's state; its announcements and
	 * RESIGNED are queued under it */
	DLOCK__RANK_ELECTION,
	/* src/redis/redlock-watch.c: a Redlock's watched holds; a lost hold's
	 * release is queued on every master under it */
	DLOCK__RANK_REDLOCK_WATCH,
	/* src/redis/watchdog.c: a server's watched holds */
	DLOCK__RANK_REDIS_WATCHDOG,
	/* src/zk: the backend's sessions, then one session's state; a hold
	 * granted on a reconnecting session is marked SUSPENDED under it */
	DLOCK__RANK_ZK_BACKEND,
	DLOCK__RANK_ZK_SESSION,
	/* src/file/lockfile.c: a write hold and the read hold its downgrade
	 * made; the file's locks and records change under it (local fcntl and
	 * pwrite, no waiting on anyone) */
	DLOCK__RANK_FILE_RW,
	/* src/file/watch.c: the watched lock files */
	DLOCK__RANK_FILE_WATCH,
	/* src/common/hold.c: a hold's phase and counts; state reports from
	 * backend threads take it, then post callback events */
	DLOCK__RANK_HOLD,
	/* src/common/core.h: a client's live holds and handles, its threads */
	DLOCK__RANK_CLIENT,
	/* src/common/core.h: a handle's options, calls and hold */
	DLOCK__RANK_LOCK,
	/* src/zk/internal.h: one request's answer */
	DLOCK__RANK_ZK_CALL,
	/* starting a backend's threads (lazy_mu) */
	DLOCK__RANK_THREAD_START,
	/* src/redis/redlock.h: a Redlock's release deferral */
	DLOCK__RANK_REDLOCK,
	/* src/redis/internal.h: a server's idle connections */
	DLOCK__RANK_REDIS_POOL,
	/* src/redis/subscriber.c: the subscriber's channels */
	DLOCK__RANK_REDIS_SUB,
	/* src/redis/sentinel.c: the sentinels' order, the master in use */
	DLOCK__RANK_REDIS_SENTINEL,
	/* src/redis/cluster.c: a cluster's slot map and nodes */
	DLOCK__RANK_REDIS_CLUSTER,
	/* src/file/pool.c: a backend's idle lock file descriptors */
	DLOCK__RANK_FILE_POOL,
	/* src/file/wake.c: the mapped wake words */
	DLOCK__RANK_FILE_WAKE,
	/* src/kit/waiter.c: one waiting thread */
	DLOCK__RANK_WAITER,
	/* src/kit/stepper.c: the stepper's tasks, queues and timers; a waiter's
	 * wake pokes its task under the waiter's mutex */
	DLOCK__RANK_STEPPER,
	/* src/common/callback.c: the callbacks waiting for the program's
	 * dispatch, queued under the client's and the handle's mutexes */
	DLOCK__RANK_DELIVERY,
	/* src/common/callback.c: a flush's mark */
	DLOCK__RANK_CALLBACK_MARK,
	/* src/common/announce.c: the announcing thread's queue */
	DLOCK__RANK_ANNOUNCE,
	/* src/kit/resolve.c: a name lookup's result */
	DLOCK__RANK_RESOLVE,
	/* src/kit/log.h: the logger's callback */
	DLOCK__RANK_LOG,
	DLOCK__RANK_COUNT
} dlock__rank;

/* Only in builds with the check (src/kit/mutex.c), and in the check's own
 * test: the rank's name, "DLOCK__RANK_HOLD" as "hold"; the checked forms:
 * take mu at rank, checking the order (a breach is written to stderr and
 * aborts, as a failed assertion does); let it go; abort unless this thread
 * holds mu.  The library goes through the macros below. */
const char *dlock__rank_name(dlock__rank rank);

void dlock__mutex_lock_checked(GMutex *mu, dlock__rank rank, const char *file, int line);
void dlock__mutex_unlock_checked(GMutex *mu, const char *file, int line);
void dlock__mutex_assert_held_checked(const GMutex *mu, const char *file, int line);
/* Whether this thread holds mu (counted only by the checked forms). */
gboolean dlock__mutex_held(const GMutex *mu);

#ifdef DLOCK_LOCK_ORDER_CHECK
#define dlock__mutex_lock(mu, rank) dlock__mutex_lock_checked(mu, rank, __FILE__, __LINE__)
#define dlock__mutex_unlock(mu) dlock__mutex_unlock_checked(mu, __FILE__, __LINE__)
#define dlock__mutex_assert_held(mu) dlock__mutex_assert_held_checked(mu, __FILE__, __LINE__)
#else
#define dlock__mutex_lock(mu, rank) ((void)(rank), g_mutex_lock(mu))
#define dlock__mutex_unlock(mu) g_mutex_unlock(mu)
#define dlock__mutex_assert_held(mu) ((void)(mu))
#endif

#endif
