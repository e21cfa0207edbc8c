/* SPDX-License-Identifier: MIT */
/*
 * What the watchdog's files share (watchdog.c: the leases, the threads,
 * loss and the deferred-release queue; renew.c: the I/O of renewals and
 * deferred releases on the watchdog's own connections).  The rest of the
 * backend sees internal.h's functions only.
 */
#ifndef DLOCK_REDIS_WATCHDOG_H
#define DLOCK_REDIS_WATCHDOG_H

#include <stdbool.h>
#include <stdint.h>

#include "cleanup.h"
#include "internal.h"

/* One attempt of a deferred release, and a map question, wait this long. */
#define CLEANUP_TIMEOUT_US (500 * 1000)
/* Renewal retries after no answer: a growing pause between them, so a far
 * end that takes each connection and closes it is not asked ten times a
 * second for the rest of the lease. */
#define RETRY_FIRST_US (100 * 1000)
#define RETRY_CAP_US (2 * 1000 * 1000)

/* A release to do again: compare-and-delete key if it still holds token,
 * and announce it on channel, once the server is done with the
 * connections of the tries left unanswered (kept). */
typedef struct deferred_release {
	redis_names names;
	char *token;
	char *ticket;         /* of the queue entry to remove, or "" */
	char *id;
	char mode[16];        /* the lease's */
	GArray *kept;         /* int, or NULL */
	bool redlock;         /* a Redlock master's share of a hold: by Redlock's
	                       * own release script, which wakes its waiters */
} deferred_release;

struct redis_watchdog {
	redis_backend *b;
	GMutex mu;            /* guards everything below but what is marked thread
	                       * only and retry_us (rank REDIS_WATCHDOG) */
	GCond cond;
	bool stop;
	GPtrArray *leases;    /* redis_lease *, referenced */
	dlock__cleanups *cleanups; /* deferred_release *, run by the renewing thread */
	int64_t wake_us;      /* CLOCK_BOOTTIME the thread sleeps until; 0 busy */
	GThread *expiry;      /* declares leases lost when their time runs out; the
	                       * renewing thread is b->watchdog_thread's */
	GCond expiry_cond;
	int64_t expiry_wake_us; /* CLOCK_BOOTTIME the expiry thread sleeps until; 0 busy */
	redisContext *ctx;    /* the watchdog's own connection; thread only */
	int ctx_epoch;        /* the backend's master epoch when ctx was made */
	redis_node *node;     /* a cluster's node ctx leads to; thread only */
	GHashTable *idle;     /* a cluster's other nodes' connections (redis_node * ->
	                       * redisContext *); thread only */
	int seen_epoch;       /* the master epoch the leases were last renewed in */
	int64_t retry_us;     /* pause before the next renewal retry; reset by an answer */
	bool map_stale;       /* a cluster's master was lost: ask for the map first;
	                       * thread only */
	bool finishing;       /* the last attempts at close, threads joined */
};

/*
 * Renew the due leases (referenced), within budget_us: a pipelined batch
 * on the watchdog's connection (per master on a cluster).  Runs without
 * wd->mu; the results go to dlock__redis_watchdog_apply().
 */
void dlock__redis_renew_batch(redis_watchdog *wd, GPtrArray *due, int64_t budget_us);
/*
 * The results of a batch sent at sent_us (CLOCK_BOOTTIME), one per lease
 * of due: 1 renewed, 0 not ours any more (LOST), -1 no verdict
 * (SUSPENDED, retried after the watchdog's pause); answered: some lease
 * got a verdict.  Takes wd->mu; skips leases released or lost meanwhile.
 */
void dlock__redis_watchdog_apply(redis_watchdog *wd, GPtrArray *due, const int *results, int64_t sent_us,
                                 bool answered);
/* One attempt at a deferred_release (data) by the watchdog (ctx): the
 * cleanup queue's attempt (src/kit/cleanup.h). */
dlock__cleanup_result dlock__redis_release_once(gpointer data, gpointer ctx);

#endif
