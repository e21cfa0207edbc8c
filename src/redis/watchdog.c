/* SPDX-License-Identifier: MIT */
/*
 * The watchdog: two threads per backend, one ("dlock-watchdog") that keeps
 * leases alive and one ("dlock-expiry") that notices when they end.
 *
 * Every TTL/3 it renews each lease with the renew script (a writer's is a
 * compare-and-PEXPIRE, a reader's re-scores its own member);
 * due renewals go out pipelined on the watchdog's own connection (renew.c,
 * which does the watchdog's I/O), so one slow server costs one timeout,
 * not one per lease.  Outcomes:
 *   renewed                 the lease now counts from the renewal's send time
 *                           (RECONNECTED if it was suspended);
 *   another value, no key   LOST at once;
 *   no answer               SUSPENDED; renewals go on, with a pause that
 *                           doubles from 100 ms to 2 s (reset by any answer)
 *                           but still leaves a last try before the lease ends.
 * Whatever happens, a lease whose time, counted from the last good send and
 * less a safety margin, has run out is LOST — before the server could have
 * given the lock to anyone else.  With the watchdog off for a lease, only
 * that last rule applies.  A lease that is LOST is renewed no more, and one
 * that renewals may have kept alive on the server without their answers
 * (or that the core found past its end first, dlock__redis_lease_abandon)
 * gets a deferred release: others get the lock at once instead of after
 * that last renewal's TTL, or never while the owner does not release.  Lease times use CLOCK_BOOTTIME, which keeps
 * counting through a suspended machine, as the server's clock does.
 *
 * That last rule is the expiry thread's alone, and it never does I/O: it
 * sleeps until the nearest lease end and only takes the mutex.  So a loss
 * is declared on time whatever the renewing thread is blocked on — a
 * renewal for a longer lease, a reconnect, a deferred delete — and
 * whichever leases that I/O was bounded by.
 *
 * The renewing thread also retries deletes that could not be done at
 * release time (server unreachable, or an acquire whose answer never
 * came), on the deferred-cleanup queue of src/kit/cleanup.h: 100 ms
 * doubling to 2 s, until done or the lease has ended anyway.  The delete
 * for a try left unanswered waits until the server is done with the try's
 * connection (dlock__redis_conn_settled()): sent on another connection, it
 * could otherwise run first and find nothing, and the try set the key
 * after it, for a whole lease.
 */
#include <inttypes.h>
#include <string.h>

#include "cleanup.h"
#include "clock.h"
#include "error.h"
#include "lease.h"
#include "mutex.h"
#include "thread.h"
#include "watchdog.h"

#define CLEANUP_FIRST_US (100 * 1000)
#define CLEANUP_CAP_US (2 * 1000 * 1000)
/* The longest sleep: bounds how late a resumed machine notices expiry. */
#define MAX_SLEEP_US (250 * 1000)
/* Renewal I/O ends this long before a lease's end, for the loss check. */
#define IO_SLACK_US (5 * 1000)

redis_lease *dlock__redis_lease_ref(redis_lease *lease)
{
	return g_atomic_rc_box_acquire(lease);
}

static void lease_clear(redis_lease *lease)
{
	dlock__hold_unref(lease->hold);
	dlock__redis_kept_close(lease->kept);
	dlock__redis_names_clear(&lease->names);
	g_free(lease->id);
	g_free(lease->under);
	g_free(lease->token);
}

void dlock__redis_lease_unref(redis_lease *lease)
{
	if (lease)
		g_atomic_rc_box_release_full(lease, (GDestroyNotify)lease_clear);
}

static void deferred_release_free(gpointer data)
{
	deferred_release *c = data;

	dlock__redis_names_clear(&c->names);
	g_free(c->token);
	g_free(c->ticket);
	g_free(c->id);
	dlock__redis_kept_close(c->kept);
	g_free(c);
}

static int64_t lease_expiry_us(const redis_lease *lease)
{
	return dlock__lease_end_us(lease->confirmed_us, lease->ttl_ms);
}

static int64_t renew_period_us(const redis_lease *lease)
{
	return lease->ttl_ms * 1000 / 3;
}

/*
 * When to retry a renewal that got no answer: after the watchdog's current
 * backoff, but never later than the lease's last chance, a command timeout
 * (or a renewal period, if shorter) before its end, so that a server back
 * in time still saves it.  Past that point the backoff alone applies; the
 * expiry thread declares the loss when the time is up.
 */
static int64_t renew_retry_us(const redis_watchdog *wd, const redis_lease *lease, int64_t now)
{
	int64_t last_chance = lease_expiry_us(lease) -
	                      MIN(renew_period_us(lease), wd->b->command_timeout_ms * 1000);
	int64_t at = now + MIN(wd->retry_us, renew_period_us(lease));

	if (now < last_chance && at > last_chance)
		at = last_chance;
	return at;
}

static const dlock__cleanup_ops release_ops;

/* Queue the deferred release of lease's key (see dlock__redis_cleanup_later()).
 * wd->mu held. */
static void cleanup_add_locked(redis_watchdog *wd, const redis_lease *lease, const char *ticket,
                               int64_t expires_us, GArray *kept, bool redlock)
{
	dlock__mutex_assert_held(&wd->mu);
	deferred_release *c = g_new0(deferred_release, 1);

	c->redlock = redlock;
	dlock__redis_names_copy(&c->names, &lease->names);
	c->token = g_strdup(lease->token);
	c->ticket = g_strdup(ticket);
	c->id = g_strdup(lease->id);
	g_strlcpy(c->mode, lease->mode, sizeof(c->mode));
	c->kept = kept;
	dlock__cleanups_add(wd->cleanups, &release_ops, c, expires_us, dlock__boot_us());
	g_cond_signal(&wd->cond);
}

/*
 * The lease is lost: no more renewals.  With cleanup, its key may still be
 * ours on the server -- a renewal ran there without its answer reaching
 * us, or reached us after the core had found the lease over -- and would
 * keep everyone out for another TTL, or for good while renewals go on:
 * compare-and-delete it in the background, once (release then queues no
 * second one).  No renewal sent from now on, so a TTL from now bounds it.
 * Not released yet (the caller checked); wd->mu held.
 */
static void lose_locked(redis_watchdog *wd, redis_lease *lease, bool cleanup)
{
	dlock__mutex_assert_held(&wd->mu);
	GArray *kept;

	lease->lost = true;
	if (!cleanup || lease->cleaned)
		return;
	lease->cleaned = true;
	/* The acquire's unanswered tries (set before the lease was watched,
	 * taken by release only after it is unwatched). */
	kept = lease->kept;
	lease->kept = NULL;
	cleanup_add_locked(wd, lease, "", dlock__boot_us() + lease->ttl_ms * 1000, kept, false);
}

/* Declare lost every lease whose time has run out.  wd->mu held. */
static void expire_leases(redis_watchdog *wd, int64_t now)
{
	for (guint i = 0; i < wd->leases->len; i++) {
		redis_lease *lease = wd->leases->pdata[i];

		if (!lease->lost && now >= lease_expiry_us(lease)) {
			/* Only a renewed lease can have outlived its time on the server. */
			lose_locked(wd, lease, lease->renew);
			dlock__log(wd->b->logger, DLOCK_LOG_WARNING, "%s: lease of %s ran out before it could be renewed",
			           wd->b->label, lease->names.key);
			dlock__hold_report(lease->hold, DLOCK_STATE_LOST);
		}
	}
}

static const dlock__cleanup_ops release_ops = { dlock__redis_release_once, deferred_release_free };

void dlock__redis_watchdog_apply(redis_watchdog *wd, GPtrArray *due, const int *results, int64_t sent_us,
                                 bool answered)
{
	redis_backend *b = wd->b;
	bool unanswered = false;

	/* A verdict on any lease proves the connection: retries start over
	 * from the shortest pause. */
	if (answered)
		wd->retry_us = RETRY_FIRST_US;
	dlock__mutex_lock(&wd->mu, DLOCK__RANK_REDIS_WATCHDOG);
	for (guint i = 0; i < due->len; i++) {
		redis_lease *lease = due->pdata[i];

		if (lease->released || lease->lost)
			continue;
		if (results[i] == 1) {
			lease->confirmed_us = sent_us;
			dlock__hold_set_valid_until(lease->hold, lease_expiry_us(lease));
			lease->next_renew_us = sent_us + renew_period_us(lease);
			if (lease->suspended) {
				lease->suspended = false;
				dlock__hold_report(lease->hold, DLOCK_STATE_RECONNECTED);
			}
		} else if (results[i] == 0) {
			lose_locked(wd, lease, false); /* nothing of ours left to delete */
			dlock__log(b->logger, DLOCK_LOG_WARNING, "%s: %s no longer holds our token: lock lost",
			           b->label, lease->names.key);
			dlock__hold_report(lease->hold, DLOCK_STATE_LOST);
		} else {
			lease->next_renew_us = renew_retry_us(wd, lease, dlock__boot_us());
			unanswered = true;
			if (!lease->suspended) {
				lease->suspended = true;
				dlock__hold_report(lease->hold, DLOCK_STATE_SUSPENDED);
			}
		}
	}
	dlock__mutex_unlock(&wd->mu);
	if (unanswered && !answered)
		wd->retry_us = MIN(wd->retry_us * 2, RETRY_CAP_US);
}

static gpointer watchdog_main(gpointer data)
{
	redis_watchdog *wd = data;
	GPtrArray *due = g_ptr_array_new_with_free_func((GDestroyNotify)dlock__redis_lease_unref);
	GPtrArray *due_cleanups = g_ptr_array_new();

	dlock__mutex_lock(&wd->mu, DLOCK__RANK_REDIS_WATCHDOG);
	while (!wd->stop) {
		int64_t now = dlock__boot_us();
		int64_t next = now + MAX_SLEEP_US;
		int64_t budget = INT64_MAX;
		/* The master was doubted (a switch heard): every lease is
		 * renewed at once on the master of the moment, where its key,
		 * if replicated, lives only as long as its last renewal that
		 * reached the replica.  Seen within MAX_SLEEP_US. */
		bool follow = !dlock__redis_conn_current(wd->b, wd->seen_epoch);

		wd->seen_epoch = dlock__redis_master_epoch(wd->b);
		g_ptr_array_set_size(due, 0);
		for (guint i = 0; i < wd->leases->len; i++) {
			redis_lease *lease = wd->leases->pdata[i];

			if (lease->lost || !lease->renew)
				continue;
			if (follow)
				lease->next_renew_us = MIN(lease->next_renew_us, now);
			if (lease->next_renew_us <= now) {
				g_ptr_array_add(due, dlock__redis_lease_ref(lease));
				budget = MIN(budget, renew_period_us(lease));
			} else {
				next = MIN(next, lease->next_renew_us);
			}
		}
		/* Renewal I/O ends before the first due lease's end: an answer
		 * after it could not save the lease (the expiry thread has
		 * declared it lost), and the next renewals should not wait. */
		for (guint i = 0; i < due->len; i++) {
			redis_lease *lease = due->pdata[i];

			budget = MIN(budget, MAX(lease_expiry_us(lease) - now - IO_SLACK_US, 1000));
		}
		g_ptr_array_set_size(due_cleanups, 0);
		next = MIN(next, dlock__cleanups_due(wd->cleanups, now, due_cleanups));

		if (due->len > 0 || due_cleanups->len > 0) {
			dlock__mutex_unlock(&wd->mu);
			if (due->len > 0)
				dlock__redis_renew_batch(wd, due, budget);
			if (due_cleanups->len > 0)
				dlock__cleanups_attempt(wd->cleanups, due_cleanups);
			dlock__mutex_lock(&wd->mu, DLOCK__RANK_REDIS_WATCHDOG);
			dlock__cleanups_settle(wd->cleanups, dlock__boot_us());
			continue;
		}
		wd->wake_us = now + MAX(MIN(next - now, MAX_SLEEP_US), 1000);
		g_cond_wait_until(&wd->cond, &wd->mu, dlock__mono_us() + (wd->wake_us - now));
		wd->wake_us = 0;
	}
	dlock__mutex_unlock(&wd->mu);
	g_ptr_array_unref(due);
	g_ptr_array_unref(due_cleanups);
	return NULL;
}

/*
 * The expiry thread: sleep until the nearest lease end (or MAX_SLEEP_US,
 * which bounds how late a resumed machine notices; with no lease, until
 * one comes), then declare lost every lease whose time has run out.
 * Never does I/O, so nothing the renewing thread waits on can delay it.
 * A renewal that extends a lease meanwhile costs only an early wake-up.
 */
static gpointer expiry_main(gpointer data)
{
	redis_watchdog *wd = data;
	bool lingered = false; /* slept on a timer with nothing to watch */

	dlock__mutex_lock(&wd->mu, DLOCK__RANK_REDIS_WATCHDOG);
	while (!wd->stop) {
		int64_t now = dlock__boot_us();
		int64_t next = INT64_MAX;

		expire_leases(wd, now);
		for (guint i = 0; i < wd->leases->len; i++) {
			redis_lease *lease = wd->leases->pdata[i];

			if (!lease->lost)
				next = MIN(next, lease_expiry_us(lease));
		}
		/* Nothing to watch: one timed sleep before the untimed one.  A
		 * program that takes and drops locks in a loop registers its
		 * next lease while this thread is on a timer ending before that
		 * lease does, so it pays no wake-up for it (dlock__redis_watch()
		 * signals only a thread that would sleep past the lease's end);
		 * an idle one costs a single wake-up after its last lease. */
		if (next != INT64_MAX) {
			lingered = false;
		} else if (!lingered) {
			lingered = true;
			next = now + MAX_SLEEP_US;
		}
		if (next == INT64_MAX) {
			wd->expiry_wake_us = INT64_MAX;
			g_cond_wait(&wd->expiry_cond, &wd->mu);
			lingered = false;
		} else {
			wd->expiry_wake_us = MAX(MIN(next, now + MAX_SLEEP_US), now + 1000);
			g_cond_wait_until(&wd->expiry_cond, &wd->mu,
			                  dlock__mono_us() + (wd->expiry_wake_us - now));
		}
		wd->expiry_wake_us = 0;
	}
	dlock__mutex_unlock(&wd->mu);
	return NULL;
}

/* The watchdog's state, with its expiry thread already running; the
 * renewing thread is started on it next. */
static gpointer watchdog_new(gpointer data, bool *ret_start)
{
	redis_watchdog *wd = g_new0(redis_watchdog, 1);

	wd->b = data;
	wd->retry_us = RETRY_FIRST_US;
	wd->seen_epoch = dlock__redis_master_epoch(wd->b);
	g_mutex_init(&wd->mu);
	g_cond_init(&wd->cond);
	g_cond_init(&wd->expiry_cond);
	wd->leases = g_ptr_array_new_with_free_func((GDestroyNotify)dlock__redis_lease_unref);
	wd->cleanups = dlock__cleanups_new(wd, CLEANUP_FIRST_US, CLEANUP_CAP_US);
	wd->idle = g_hash_table_new_full(NULL, NULL, NULL, (GDestroyNotify)redisFree);
	wd->expiry = dlock__thread_new("dlock-expiry", expiry_main, wd);
	return wd;
}

static redis_watchdog *watchdog_get(redis_backend *b)
{
	return dlock__lazy_thread_get(&b->watchdog_thread, &b->lazy_mu, DLOCK__RANK_THREAD_START, "dlock-watchdog", watchdog_new,
	                              watchdog_main, b);
}

void dlock__redis_watch(redis_backend *b, redis_lease *lease)
{
	redis_watchdog *wd = watchdog_get(b);

	dlock__mutex_lock(&wd->mu, DLOCK__RANK_REDIS_WATCHDOG);
	lease->next_renew_us = lease->confirmed_us + renew_period_us(lease);
	/* The core judges the lease's end by the clock too, so that a caller
	 * resumed after a pause never sees it held before this thread runs. */
	dlock__hold_set_valid_until(lease->hold, lease_expiry_us(lease));
	g_ptr_array_add(wd->leases, dlock__redis_lease_ref(lease));
	/* Wake a thread only if it would sleep past this lease's first event
	 * for it: on the uncontended path no thread switch is paid. */
	if (lease->renew && wd->wake_us != 0 && lease->next_renew_us < wd->wake_us)
		g_cond_signal(&wd->cond);
	if (wd->expiry_wake_us != 0 && lease_expiry_us(lease) < wd->expiry_wake_us)
		g_cond_signal(&wd->expiry_cond);
	dlock__mutex_unlock(&wd->mu);
}

bool dlock__redis_unwatch(redis_backend *b, redis_lease *lease, bool *ret_lost)
{
	redis_watchdog *wd = dlock__lazy_thread_peek(&b->watchdog_thread);
	bool troubled;

	if (!wd)
		return false;
	dlock__mutex_lock(&wd->mu, DLOCK__RANK_REDIS_WATCHDOG);
	lease->released = true;
	troubled = lease->suspended || lease->lost;
	*ret_lost = lease->lost;
	g_ptr_array_remove_fast(wd->leases, lease);
	dlock__mutex_unlock(&wd->mu);
	return troubled;
}

void dlock__redis_lease_abandon(redis_backend *b, redis_lease *lease)
{
	redis_watchdog *wd = dlock__lazy_thread_peek(&b->watchdog_thread);

	if (!wd)
		return; /* never watched: there is no lease to keep */
	dlock__mutex_lock(&wd->mu, DLOCK__RANK_REDIS_WATCHDOG);
	if (!lease->released)
		lose_locked(wd, lease, true);
	dlock__mutex_unlock(&wd->mu);
}

static void queue_release(redis_backend *b, const redis_lease *lease, const char *ticket,
                          int64_t expires_us, GArray *kept, bool redlock)
{
	redis_watchdog *wd = watchdog_get(b);

	dlock__mutex_lock(&wd->mu, DLOCK__RANK_REDIS_WATCHDOG);
	cleanup_add_locked(wd, lease, ticket, expires_us, kept, redlock);
	dlock__mutex_unlock(&wd->mu);
}

void dlock__redis_cleanup_later(redis_backend *b, const redis_lease *lease, const char *ticket,
                                int64_t expires_us, GArray *kept)
{
	queue_release(b, lease, ticket, expires_us, kept, false);
}

void dlock__redis_cleanup_later_redlock(redis_backend *b, const redis_lease *lease,
                                        int64_t expires_us, GArray *kept)
{
	queue_release(b, lease, "", expires_us, kept, true);
}

/*
 * Stop the thread.  Deferred deletes get one last bounded attempt first,
 * so a client freed right after a failed release still removes its key
 * when the server is back.
 */
static void watchdog_tell_stop(gpointer data)
{
	redis_watchdog *wd = data;

	dlock__mutex_lock(&wd->mu, DLOCK__RANK_REDIS_WATCHDOG);
	wd->stop = true;
	g_cond_signal(&wd->cond);
	g_cond_signal(&wd->expiry_cond);
	dlock__mutex_unlock(&wd->mu);
}

void dlock__redis_watchdog_stop(redis_backend *b)
{
	redis_watchdog *wd = dlock__lazy_thread_stop(&b->watchdog_thread, &b->lazy_mu, DLOCK__RANK_THREAD_START, watchdog_tell_stop);

	if (!wd)
		return;
	g_thread_join(wd->expiry);

	wd->finishing = true;
	dlock__cleanups_finish(wd->cleanups);
	g_ptr_array_unref(wd->leases);
	if (wd->ctx)
		redisFree(wd->ctx);
	g_hash_table_unref(wd->idle);
	g_cond_clear(&wd->cond);
	g_cond_clear(&wd->expiry_cond);
	g_mutex_clear(&wd->mu);
	g_free(wd);
}
