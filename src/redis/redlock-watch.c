/* SPDX-License-Identifier: MIT */
/*
 * Keeping a Redlock hold (docs/redis.md, "Keeping a hold"): one thread
 * per Redlock backend ("dlock-redlock") renews each hold on every master
 * at once, every TTL/3 -- the holds due with the same master timeout in
 * one round, one script per master, the hold nearest the end of its
 * validity first -- and judges each by quorum:
 *   - a quorum confirms: the lease counts again from that round's send
 *     (RECONNECTED if it was SUSPENDED);
 *   - more masters than a quorum can spare show the key gone or another's:
 *     LOST at once;
 *   - otherwise SUSPENDED, and the round is tried again sooner.
 * The validity of the last confirmed round (TTL less the drift, from its
 * send) running out is LOST, with the watchdog on or off.  A round never
 * runs past the nearest end of any hold's validity, so a loss is declared
 * on time while renewals wait on silent masters.  A hold that is LOST,
 * whoever found it (this thread, or the core's clock: abandon), is renewed
 * no more and released on every master in the background: rounds that ran
 * there without their answers may have kept its key for another TTL.
 */
#include <inttypes.h>

#include "clock.h"
#include "error.h"
#include "mutex.h"
#include "redlock.h"
#include "scripts-lua.h"

/* A round that missed the quorum is tried again after this (or sooner,
 * TTL/10 for short leases). */
#define RETRY_US (200 * 1000)
#define MAX_SLEEP_US (10 * 1000 * 1000)
/* The most holds renewed in one round. */
#define BATCH_MAX 128u

typedef struct redlock_watch {
	redlock_backend *rl;
	GMutex mu;                /* guards everything below (rank REDLOCK_WATCH) */
	GCond cond;
	GPtrArray *leases;        /* rl_lease *, referenced */
	bool stop;
} redlock_watch;

static int64_t lease_end_us(const rl_lease *lease)
{
	return lease->confirmed_us + lease->ttl_ms * 1000 - dlock__redlock_drift_us(lease->ttl_ms);
}

static int64_t renew_period_us(const rl_lease *lease)
{
	return lease->ttl_ms * 1000 / 3;
}

/*
 * The hold is lost: no more rounds, and its key goes from every master in
 * the background (those without it answer "not ours"), once; its release
 * then has nothing left to do.  Not released yet; w->mu held.
 */
static void lose_locked(redlock_watch *w, rl_lease *lease)
{
	dlock__mutex_assert_held(&w->mu);
	lease->lost = true;
	if (lease->cleaned)
		return;
	lease->cleaned = true;
	dlock__redlock_release_later(w->rl, lease);
}

/* What a round told of lease: ours masters renewed it, not_ours showed
 * its key gone or another's; sent_us: the round's send.  Under w->mu. */
static void judge_locked(redlock_watch *w, rl_lease *lease, int ours, int not_ours, int64_t sent_us)
{
	redlock_backend *rl = w->rl;

	dlock__mutex_assert_held(&w->mu);
	if (lease->released || lease->lost)
		return;
	/* A quorum's answer counts only while the hold is still valid: past
	 * its end the core already takes it as lost. */
	if (ours >= rl->quorum && dlock__boot_us() < lease_end_us(lease)) {
		lease->confirmed_us = sent_us;
		dlock__hold_set_valid_until(lease->hold, lease_end_us(lease));
		lease->next_renew_us = sent_us + renew_period_us(lease);
		if (lease->suspended) {
			lease->suspended = false;
			dlock__log(rl->logger, DLOCK_LOG_INFO, "%s: %s renewed by a quorum again", rl->label,
			           lease->key.names.key);
			dlock__hold_report(lease->hold, DLOCK_STATE_RECONNECTED);
		}
	} else if (not_ours > rl->n_masters - rl->quorum) {
		lose_locked(w, lease);
		dlock__log(rl->logger, DLOCK_LOG_WARNING, "%s: %s no longer holds our token on %d of %d "
		           "masters: lock lost", rl->label, lease->key.names.key, not_ours, rl->n_masters);
		dlock__hold_report(lease->hold, DLOCK_STATE_LOST);
	} else {
		lease->next_renew_us = dlock__boot_us() + MIN(RETRY_US, lease->ttl_ms * 100);
		if (!lease->suspended) {
			lease->suspended = true;
			dlock__log(rl->logger, DLOCK_LOG_WARNING, "%s: %s renewed on %d of %d masters, short "
			           "of a quorum of %d", rl->label, lease->key.names.key, ours,
			           rl->n_masters, rl->quorum);
			dlock__hold_report(lease->hold, DLOCK_STATE_SUSPENDED);
		}
	}
}

/* A renewal round's tally, hold by hold. */
typedef struct tally {
	redlock_watch *w;
	rl_lease *const *leases;
	int n;
	int64_t sent_us;
	int *ours, *not_ours;
	bool *judged;
} tally;

/* A master's answer in a renewal round: counted for each hold, and a hold
 * that a quorum has renewed is judged at once, while the round goes on
 * for holds still open (a silent master may yet give them a quorum). */
static void answered(void *data, const redisReply *reply)
{
	tally *t = data;

	/* An answer of another form than asked counts as none. */
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements != (size_t)t->n + 1)
		return;
	dlock__mutex_lock(&t->w->mu, DLOCK__RANK_REDLOCK_WATCH);
	for (int i = 0; i < t->n; i++) {
		const redisReply *e = reply->element[i + 1];

		if (e->type != REDIS_REPLY_INTEGER)
			continue;
		if (e->integer == 1)
			t->ours[i]++;
		else
			t->not_ours[i]++;
		if (!t->judged[i] && t->ours[i] >= t->w->rl->quorum) {
			t->judged[i] = true;
			judge_locked(t->w, t->leases[i], t->ours[i], t->not_ours[i], t->sent_us);
		}
	}
	dlock__mutex_unlock(&t->w->mu);
}

/*
 * One renewal round of n leases at once, ending by until_us (monotonic);
 * under no lock.  Each master renews them all in one script and answers
 * for each.  A hold is judged as soon as a quorum renewed it, else when
 * the round ends; the round ends early, as one hold's renewal does, once
 * every hold has a quorum or cannot get one.
 */
static void renew(redlock_watch *w, rl_lease *const *leases, int n, int64_t until_us)
{
	redlock_backend *rl = w->rl;
	const char **words = g_new(const char *, 3 * n);
	char *ttls = g_malloc((size_t)n * 24);
	tally t = { w, leases, n, dlock__boot_us(), g_new0(int, n), g_new0(int, n), g_new0(bool, n) };
	/* A quorum renewed is a renewal: a silent master does not hold up
	 * the round past its grace. */
	rl_request req = { SCRIPT_RL_RENEW, words, NULL, rl->quorum, leases[0]->key.names.key,
	                   leases[0]->master_timeout_ms, false, false, n, answered, &t };
	rl_call calls[RL_MASTERS_MAX];

	for (int i = 0; i < n; i++) {
		g_snprintf(&ttls[24 * i], 24, "%" PRId64, leases[i]->ttl_ms);
		words[i] = leases[i]->key.names.key;
		words[n + 2 * i] = leases[i]->key.token;
		words[n + 2 * i + 1] = &ttls[24 * i];
	}
	dlock__redlock_round(rl, &req, NULL, until_us, calls, NULL);
	dlock__mutex_lock(&w->mu, DLOCK__RANK_REDLOCK_WATCH);
	for (int i = 0; i < n; i++)
		if (!t.judged[i])
			judge_locked(w, leases[i], t.ours[i], t.not_ours[i], t.sent_us);
	dlock__mutex_unlock(&w->mu);
	dlock__redlock_calls_clear(calls, rl->n_masters);
	g_free(t.ours);
	g_free(t.not_ours);
	g_free(t.judged);
	g_free(ttls);
	g_free(words);
}

/* Declare LOST the holds whose validity has run out; returns the
 * nearest end among the others.  Under the mutex. */
static int64_t expire(redlock_watch *w, int64_t now)
{
	int64_t nearest = INT64_MAX;

	for (guint i = 0; i < w->leases->len; i++) {
		rl_lease *lease = w->leases->pdata[i];

		if (lease->lost)
			continue;
		if (now >= lease_end_us(lease)) {
			lose_locked(w, lease);
			dlock__log(w->rl->logger, DLOCK_LOG_WARNING, "%s: %s: its validity ran out without a "
			           "quorum renewing it: lock lost", w->rl->label, lease->key.names.key);
			dlock__hold_report(lease->hold, DLOCK_STATE_LOST);
			continue;
		}
		nearest = MIN(nearest, lease_end_us(lease));
	}
	return nearest;
}

/* The hold whose validity ends sooner first (w->mu held). */
static gint by_end(gconstpointer a, gconstpointer b)
{
	int64_t x = lease_end_us(*(rl_lease *const *)a), y = lease_end_us(*(rl_lease *const *)b);

	return (x > y) - (x < y);
}

static gpointer watch_main(gpointer data)
{
	redlock_watch *w = data;
	GPtrArray *due = g_ptr_array_new_with_free_func((GDestroyNotify)dlock__redlock_lease_unref);
	GPtrArray *round = g_ptr_array_new();

	dlock__mutex_lock(&w->mu, DLOCK__RANK_REDLOCK_WATCH);
	while (!w->stop) {
		int64_t now = dlock__boot_us();
		int64_t nearest_end = expire(w, now);
		int64_t next = MIN(nearest_end, now + MAX_SLEEP_US);
		rl_lease *head = NULL;

		/* The round's head: the hold due now whose validity ends
		 * soonest.  With none, sleep until the next is due. */
		for (guint i = 0; i < w->leases->len; i++) {
			rl_lease *lease = w->leases->pdata[i];

			if (lease->lost || !lease->renew)
				continue;
			if (lease->next_renew_us > now)
				next = MIN(next, lease->next_renew_us);
			else if (!head || lease_end_us(lease) < lease_end_us(head))
				head = lease;
		}
		if (!head) {
			g_cond_wait_until(&w->cond, &w->mu, dlock__mono_us() + MAX(next - now, 1000));
			continue;
		}
		/* With it, the holds of its master timeout due now, or within
		 * a quarter of their period: renewed a little early, the holds
		 * of a client come due together from then on. */
		g_ptr_array_set_size(due, 0);
		for (guint i = 0; i < w->leases->len; i++) {
			rl_lease *lease = w->leases->pdata[i];

			if (!lease->lost && lease->renew && lease->master_timeout_ms == head->master_timeout_ms &&
			    lease->next_renew_us <= now + renew_period_us(lease) / 4)
				g_ptr_array_add(due, dlock__redlock_lease_ref(lease));
		}
		/* One round of them, soonest end first, BATCH_MAX at most.
		 * Then the next round is chosen afresh, so that a hold falling
		 * due meanwhile does not wait behind every round of holds in
		 * trouble (those wait for their retry, sooner than their next
		 * period, as holds not yet due).  A round ends by its master
		 * timeout (one that misses the quorum for a hold SUSPENDs it),
		 * and never past the nearest end of any hold's validity. */
		g_ptr_array_sort(due, by_end);
		g_ptr_array_set_size(round, 0);
		g_ptr_array_add(round, head);
		for (guint i = 0; i < due->len && round->len < BATCH_MAX; i++)
			if (due->pdata[i] != head)
				g_ptr_array_add(round, due->pdata[i]);
		dlock__mutex_unlock(&w->mu);
		renew(w, (rl_lease *const *)round->pdata, (int)round->len,
		      dlock__mono_us() + MIN(MAX(nearest_end - dlock__boot_us(), 1000),
		                             ((rl_lease *)round->pdata[0])->master_timeout_ms * 1000));
		dlock__mutex_lock(&w->mu, DLOCK__RANK_REDLOCK_WATCH);
	}
	dlock__mutex_unlock(&w->mu);
	g_ptr_array_unref(round);
	g_ptr_array_unref(due);
	return NULL;
}

static gpointer watch_new(gpointer data, bool *ret_start)
{
	redlock_watch *w = g_new0(redlock_watch, 1);

	w->rl = data;
	g_mutex_init(&w->mu);
	g_cond_init(&w->cond);
	w->leases = g_ptr_array_new_with_free_func((GDestroyNotify)dlock__redlock_lease_unref);
	return w;
}

void dlock__redlock_watch(redlock_backend *rl, rl_lease *lease)
{
	redlock_watch *w = dlock__lazy_thread_get(&rl->watch_thread, &rl->lazy_mu, DLOCK__RANK_THREAD_START, "dlock-redlock",
	                                          watch_new, watch_main, rl);

	dlock__mutex_lock(&w->mu, DLOCK__RANK_REDLOCK_WATCH);
	lease->next_renew_us = lease->confirmed_us + renew_period_us(lease);
	dlock__hold_set_valid_until(lease->hold, lease_end_us(lease));
	g_ptr_array_add(w->leases, dlock__redlock_lease_ref(lease));
	g_cond_signal(&w->cond);
	dlock__mutex_unlock(&w->mu);
}

bool dlock__redlock_unwatch(redlock_backend *rl, rl_lease *lease, bool *ret_lost)
{
	redlock_watch *w = dlock__lazy_thread_peek(&rl->watch_thread);
	bool troubled;

	if (!w)
		return false;
	dlock__mutex_lock(&w->mu, DLOCK__RANK_REDLOCK_WATCH);
	lease->released = true;
	troubled = lease->suspended || lease->lost;
	*ret_lost = lease->lost;
	g_ptr_array_remove_fast(w->leases, lease);
	dlock__mutex_unlock(&w->mu);
	return troubled;
}

void dlock__redlock_abandon(dlock__backend *backend, dlock__hold *hold)
{
	redlock_backend *rl = redlock_of(backend);
	rl_lease *lease = dlock__hold_backend_data(hold);
	redlock_watch *w = dlock__lazy_thread_peek(&rl->watch_thread);

	if (!lease || !w)
		return;
	dlock__mutex_lock(&w->mu, DLOCK__RANK_REDLOCK_WATCH);
	if (!lease->released)
		lose_locked(w, lease);
	dlock__mutex_unlock(&w->mu);
}

static void watch_tell_stop(gpointer data)
{
	redlock_watch *w = data;

	dlock__mutex_lock(&w->mu, DLOCK__RANK_REDLOCK_WATCH);
	w->stop = true;
	g_cond_signal(&w->cond);
	dlock__mutex_unlock(&w->mu);
}

void dlock__redlock_watch_stop(redlock_backend *rl)
{
	redlock_watch *w = dlock__lazy_thread_stop(&rl->watch_thread, &rl->lazy_mu, DLOCK__RANK_THREAD_START, watch_tell_stop);

	if (!w)
		return;
	g_ptr_array_unref(w->leases);
	g_mutex_clear(&w->mu);
	g_cond_clear(&w->cond);
	g_free(w);
}
