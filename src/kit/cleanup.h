/* SPDX-License-Identifier: MIT */
/*
 * Deferred cleanup: server-side deletes that could not be done when they
 * were due (a release while the server was unreachable, an acquire whose
 * answer never came), retried in the background until they are done or
 * until the lease or session that would end them anyway has ended.
 *
 * The queue owns the items, their order, their backoff, the give-up rule
 * and the last bounded attempt at close; the backend supplies only the
 * attempt (one try, no waiting beyond its own I/O timeout) and runs the
 * queue on a thread it already has.  The queue has no lock of its own:
 * the owner's mutex guards it, and only the thread that runs it removes
 * items, so the attempts may run without that mutex while other threads
 * add (dlock__cleanups_due(), _attempt(), _settle()) or with it held
 * (dlock__cleanups_run()).
 */
#ifndef DLOCK_KIT_CLEANUP_H
#define DLOCK_KIT_CLEANUP_H

#include <stdint.h>

#include <glib.h>

typedef enum dlock__cleanup_result {
	DLOCK__CLEANUP_DONE,       /* done, or handed to something that finishes it */
	DLOCK__CLEANUP_RETRY,      /* not done: again after the backoff */
	DLOCK__CLEANUP_UNANSWERED, /* no answer: again after the backoff, and the rest
	                            * of this round waits too (same server) */
	DLOCK__CLEANUP_GIVE_UP     /* cannot be done: dropped */
} dlock__cleanup_result;

/* One kind of cleanup: its attempt, given the item's data and the queue's
 * context, and how its data is freed when the queue drops it. */
typedef struct dlock__cleanup_ops {
	dlock__cleanup_result (*attempt)(gpointer data, gpointer ctx);
	GDestroyNotify free;
} dlock__cleanup_ops;

typedef struct dlock__cleanups dlock__cleanups;

/*
 * A queue whose attempts get ctx.  After an item's first try, its retries
 * wait first_us, doubling up to cap_us; with first_us 0 an item is due
 * again at every run (a backend that runs the queue only on an event,
 * such as a reconnect).
 */
dlock__cleanups *dlock__cleanups_new(gpointer ctx, int64_t first_us, int64_t cap_us);
/* Drop every item untried and free the queue.  NULL is a no-op. */
void dlock__cleanups_free(dlock__cleanups *q);
/* The last bounded attempt at close: one try of every item, due or not,
 * in order, stopping at the first unanswered; then dlock__cleanups_free(). */
void dlock__cleanups_finish(dlock__cleanups *q);

/*
 * Queue data (taken) for its first try at now_us (CLOCK_BOOTTIME).
 * ends_us (CLOCK_BOOTTIME) is when the lease that would end it anyway
 * ends: past it the item is dropped, tried or not; INT64_MAX if only its
 * session's end ends it (the owner then calls dlock__cleanups_clear()).
 */
void dlock__cleanups_add(dlock__cleanups *q, const dlock__cleanup_ops *ops, gpointer data,
                         int64_t ends_us, int64_t now_us);
/* Drop every item untried: the session that would end them has ended. */
void dlock__cleanups_clear(dlock__cleanups *q);
guint dlock__cleanups_len(const dlock__cleanups *q);

/*
 * One round in three steps.  _due() (owner's mutex held) puts the items
 * due at now_us into batch, in order, and returns the earliest time
 * another is due (INT64_MAX: none).  _attempt() tries each item of the
 * batch once, stopping at the first unanswered; it needs the mutex only
 * if the attempts do.  _settle() (mutex held) drops the items done,
 * given up or past their end, and backs off every other item whose time
 * had come -- tried in this round or not.
 */
int64_t dlock__cleanups_due(dlock__cleanups *q, int64_t now_us, GPtrArray *batch);
void dlock__cleanups_attempt(dlock__cleanups *q, GPtrArray *batch);
void dlock__cleanups_settle(dlock__cleanups *q, int64_t now_us);
/* The three in one, for attempts that run under the owner's mutex. */
void dlock__cleanups_run(dlock__cleanups *q, int64_t now_us);

#endif
