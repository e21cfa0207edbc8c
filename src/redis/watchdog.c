/*
 * The watchdog: two threads per backend, one ("dlock-watchdog") that keeps
 * leases alive and one ("dlock-expiry") that notices when they end.
 *
 * Every TTL/3 it renews each lease with the renew script (a writer's is a
 * compare-and-PEXPIRE, a reader's re-scores its own member);
 * due renewals go out pipelined on the watchdog's own connection, so one
 * slow server costs one timeout, not one per lease.  Outcomes:
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
#include "internal.h"
#include "lease.h"
#include "mutex.h"
#include "scripts-lua.h"
#include "thread.h"

#define CLEANUP_FIRST_US (100 * 1000)
#define CLEANUP_CAP_US (2 * 1000 * 1000)
#define CLEANUP_TIMEOUT_US (500 * 1000)
/* Renewal retries after no answer: a growing pause between them, so a far
 * end that takes each connection and closes it is not asked ten times a
 * second for the rest of the lease. */
#define RETRY_FIRST_US (100 * 1000)
#define RETRY_CAP_US (2 * 1000 * 1000)
/* The longest sleep: bounds how late a resumed machine notices expiry. */
#define MAX_SLEEP_US (250 * 1000)
/* Renewal I/O ends this long before a lease's end, for the loss check. */
#define IO_SLACK_US (5 * 1000)

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
	GMutex mu;            /* guards everything below but ctx and retry_us
	                       * (rank REDIS_WATCHDOG) */
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
	bool map_stale;       /* a cluster's master was lost: ask for the map first */
	bool finishing;       /* the last attempts at close, threads joined */
};

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

/*
 * On a cluster the watchdog keeps a connection per node: the one of node
 * becomes wd->ctx, the one in use goes back to the idle ones.  node NULL
 * (a slot no master serves): none, and ensure_connection() fails.
 */
static void use_node(redis_watchdog *wd, redis_node *node)
{
	if (wd->node == node && (node || !wd->b->cluster))
		return;
	if (wd->ctx && wd->node)
		g_hash_table_insert(wd->idle, wd->node, wd->ctx);
	else if (wd->ctx)
		redisFree(wd->ctx);
	wd->ctx = node ? g_hash_table_lookup(wd->idle, node) : NULL;
	if (wd->ctx)
		g_hash_table_steal(wd->idle, node);
	wd->node = node;
}

/* Use the connection to the master of key's slot (a cluster's), the map
 * asked for first if a master was lost or the slot has none. */
static void use_node_of(redis_watchdog *wd, const char *key)
{
	redis_cluster *c = wd->b->cluster;
	int slot = dlock__redis_slot(key);

	if ((wd->map_stale || !dlock__redis_cluster_owner(c, slot, NULL)) &&
	    dlock__redis_cluster_refresh(wd->b, NULL, dlock__mono_us() + CLEANUP_TIMEOUT_US) == DLOCK_OK)
		wd->map_stale = false;
	use_node(wd, dlock__redis_cluster_owner(c, slot, NULL));
}

static bool ensure_connection(redis_watchdog *wd, int64_t budget_us)
{
	int64_t timeout_us = MIN(budget_us, wd->b->connect_timeout_ms * 1000);
	int rc;

	if (wd->ctx && !wd->ctx->err && dlock__redis_conn_current(wd->b, wd->ctx_epoch))
		return true;
	if (wd->ctx) {
		redisFree(wd->ctx);
		wd->ctx = NULL;
	}
	if (wd->b->cluster && !wd->node)
		return false;
	wd->ctx_epoch = dlock__redis_master_epoch(wd->b);
	wd->ctx = wd->node ? dlock__redis_connect_node(wd->b, wd->node, NULL, timeout_us, &rc)
	                   : dlock__redis_connect(wd->b, timeout_us, true, &rc);
	if (!wd->ctx)
		dlock__log(wd->b->logger, DLOCK_LOG_WARNING, "watchdog: %s", dlock_last_error_message());
	return wd->ctx != NULL;
}

static void set_timeout(redisContext *ctx, int64_t us)
{
	struct timeval tv = { (time_t)(us / 1000000), (suseconds_t)(us % 1000000) };

	if (us < 1000)
		tv.tv_usec = 1000;
	redisSetTimeout(ctx, tv);
}

/* The renewal script of lease and its words (ttl: room for the TTL). */
static redis_script renew_words(const redis_lease *lease, char ttl[24], const char **words)
{
	g_snprintf(ttl, 24, "%" G_GINT64_FORMAT, lease->ttl_ms);
	if (strcmp(lease->mode, "w") == 0) {
		words[RENEW_WRITE_KEY_LOCK] = lease->names.key;
		words[RENEW_WRITE_ARG_TOKEN] = lease->token;
		words[RENEW_WRITE_ARG_TTL] = ttl;
		return SCRIPT_RENEW_WRITE;
	}
	/* A hold of the lock's set names no more keys than it needs: on a
	 * cluster a migration refuses a script whose keys it has split. */
	if (!lease->under && lease->mode[0] == 'r') {
		words[RENEW_READ_KEY_LOCK] = lease->names.key;
		words[RENEW_READ_ARG_TOKEN] = lease->token;
		words[RENEW_READ_ARG_TTL] = ttl;
		return SCRIPT_RENEW_READ;
	}
	if (!lease->under && lease->mode[0] == 's') {
		words[RENEW_PERMIT_KEY_LOCK] = lease->names.key;
		words[RENEW_PERMIT_KEY_PERMITS] = lease->names.permits;
		words[RENEW_PERMIT_ARG_TOKEN] = lease->token;
		words[RENEW_PERMIT_ARG_TTL] = ttl;
		return SCRIPT_RENEW_PERMIT;
	}
	words[RENEW_KEY_LOCK] = lease->names.key;
	words[RENEW_KEY_FENCE] = lease->names.fence;
	words[RENEW_KEY_QUEUE] = lease->names.queue;
	words[RENEW_KEY_PERMITS] = lease->names.permits;
	words[RENEW_ARG_TOKEN] = lease->token;
	words[RENEW_ARG_TTL] = ttl;
	words[RENEW_ARG_MODE] = lease->mode;
	words[RENEW_ARG_WRITE_TOKEN] = lease->under ? lease->under : "";
	return SCRIPT_RENEW;
}

static void append_renew(redisContext *ctx, const redis_lease *lease, bool by_body)
{
	char ttl[24], nkeys[8];
	const char *words[SCRIPT_WORDS_MAX], *argv[SCRIPT_ARGV_MAX];
	redis_script script = renew_words(lease, ttl, words);
	int argc = dlock__redis_script_argv(script, by_body, words, argv, nkeys);

	redisAppendCommandArgv(ctx, argc, argv, NULL);
}

/*
 * Renew one lease through the cluster's routing (a pooled connection,
 * redirections followed, ASK included), by deadline_us: for a lease whose
 * batch renewal a node sent elsewhere (its slot moved or is migrating).
 * 1 renewed, 0 not ours, -1 no verdict.
 */
static int renew_routed(redis_backend *b, const redis_lease *lease, int64_t deadline_us)
{
	char ttl[24];
	const char *words[SCRIPT_WORDS_MAX];
	redis_script script = renew_words(lease, ttl, words);
	redis_ack ack = dlock__redis_ack_for(b, lease->ttl_ms);
	redisReply *reply = NULL;
	bool uncertain = false;
	int result = -1;

	if (dlock__redis_eval_pooled(b, NULL, dlock__mono_us() + MAX(deadline_us - dlock__boot_us(), 0), script,
	                             words, &ack, &reply, &uncertain, NULL) != DLOCK_OK) {
		dlock__log(b->logger, DLOCK_LOG_WARNING, "%s: renewal: %s", b->label, dlock_last_error_message());
		return -1;
	}
	if (reply->type == REDIS_REPLY_INTEGER && (ack.n == 0 || ack.acked >= ack.n || reply->integer != 1))
		result = reply->integer == 1 ? 1 : 0;
	freeReplyObject(reply);
	return result;
}

/* What one renewal reply says: 1 renewed, 0 not ours any more, -1 no
 * verdict (an error reply is logged; one from a server that is no master
 * now has the master looked for again). */
/* Whether reply is a cluster's redirection.  A slot moved: the retry
 * goes to its new master.  An ASK or TRYAGAIN (a migration under way) is
 * retried after the usual pause. */
static bool redirected(redis_backend *b, const redisReply *reply, const char *what)
{
	redis_redirect redirect;

	if (!b->cluster)
		return false;
	redirect = dlock__redis_redirect_of(reply);
	if (redirect.kind == REDIRECT_MOVED)
		dlock__redis_cluster_moved(b->cluster, redirect.slot, redirect.addr);
	if (redirect.kind == REDIRECT_NONE)
		return false;
	dlock__log(b->logger, DLOCK_LOG_INFO, "%s: %s: %s", b->label, what, reply->str);
	return true;
}

static int renew_result(redis_backend *b, const redisReply *reply)
{
	if (reply->type == REDIS_REPLY_INTEGER)
		return reply->integer == 1 ? 1 : 0;
	/* A server demoted or restarting: the next batch looks for the master. */
	if (dlock__redis_not_master(reply))
		dlock__redis_master_doubt(b);
	dlock__log(b->logger, DLOCK_LOG_WARNING, "%s: renewal error: %s", b->label,
	           reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
	return -1;
}

/*
 * Read one reply per lease in order into results, for the leases
 * numbered by which (all of due when which is NULL).  With noscript, the
 * numbers of the leases that answered NOSCRIPT are collected there and
 * their results left at -1.  Stops at the first I/O failure (ctx->err).
 */
static void read_renewals(redis_watchdog *wd, guint n, const guint *which, int *results,
                          GArray *noscript, GArray *moved)
{
	for (guint k = 0; k < n && !wd->ctx->err; k++) {
		guint i = which ? which[k] : k;
		redisReply *reply = NULL;

		if (redisGetReply(wd->ctx, (void **)&reply) != REDIS_OK)
			break;
		if (noscript && dlock__redis_is_noscript(reply))
			g_array_append_val(noscript, i);
		else if (redirected(wd->b, reply, "renewal"))
			g_array_append_val(moved, i);
		else
			results[i] = renew_result(wd->b, reply);
		freeReplyObject(reply);
	}
}

/*
 * With min-replicas, the renewals count only once that many replicas have
 * them: WAIT on the same connection, after the batch (it covers every
 * write the connection made).  Fewer, or no answer, and the renewals that
 * went through are counted as unanswered (results -1): the leases count
 * from their last renewal that reached the replicas.  So are they when the
 * connection failed after some of the batch's answers: no WAIT ran.
 */
static void wait_for_replicas(redis_watchdog *wd, GPtrArray *due, int *results, int64_t deadline_us)
{
	redis_backend *b = wd->b;
	int64_t ttl_ms = INT64_MAX;
	redisReply *reply = NULL;
	redis_ack ack;
	int acked = -1;
	bool renewed = false;

	for (guint i = 0; i < due->len; i++) {
		const redis_lease *lease = due->pdata[i];

		renewed = renewed || results[i] == 1;
		ttl_ms = MIN(ttl_ms, lease->ttl_ms);
	}
	if (b->min_replicas == 0 || !renewed)
		return;
	if (!wd->ctx->err) {
		ack = dlock__redis_ack_for(b, ttl_ms);
		dlock__redis_ack_within(&ack, deadline_us - dlock__boot_us());
		set_timeout(wd->ctx, MAX(MIN(deadline_us - dlock__boot_us(),
		                             (b->command_timeout_ms + ack.timeout_ms) * 1000), 1000));
		redisAppendCommand(wd->ctx, "WAIT %d %" G_GINT64_FORMAT, ack.n, ack.timeout_ms);
		if (dlock__redis_flush(wd->ctx) == REDIS_OK &&
		    redisGetReply(wd->ctx, (void **)&reply) == REDIS_OK && reply->type == REDIS_REPLY_INTEGER)
			acked = (int)MIN(reply->integer, G_MAXINT);
		if (reply)
			freeReplyObject(reply);
		if (acked >= ack.n)
			return;
		dlock__log(b->logger, DLOCK_LOG_WARNING, "%s: renewals acknowledged by %d of the %d "
		           "replicas asked for (min-replicas) within %" G_GINT64_FORMAT " ms: counted as "
		           "unanswered", b->label, MAX(acked, 0), ack.n, ack.timeout_ms);
	}
	for (guint i = 0; i < due->len; i++)
		if (results[i] == 1)
			results[i] = -1;
}

/*
 * Renew the due leases in one pipelined batch, within budget_us.  Runs
 * without wd->mu; the leases are referenced.  Results are applied under
 * wd->mu, skipping leases released or lost meanwhile.
 *
 * Every reply in the pipeline belongs to one lease, in order, so all of
 * them are read before anything is sent again: the leases that answered
 * NOSCRIPT (the script cache was flushed, or the server restarted) are
 * then renewed by the script's body in a second batch.  Re-sending one
 * at once would take the next lease's pipelined reply for its answer.
 */
static void renew_on_node(redis_watchdog *wd, GPtrArray *due, int64_t budget_us)
{
	redis_backend *b = wd->b;
	int64_t sent_us = dlock__boot_us();
	int64_t deadline_us = sent_us + budget_us;
	int *results = g_new0(int, due->len); /* 1 renewed, 0 not ours, -1 no answer */
	GArray *noscript = g_array_new(FALSE, FALSE, sizeof(guint));
	GArray *moved = g_array_new(FALSE, FALSE, sizeof(guint)); /* sent elsewhere */
	bool connected, answered = false, unanswered = false;

	for (guint i = 0; i < due->len; i++)
		results[i] = -1;
	connected = ensure_connection(wd, budget_us);
	wd->map_stale = wd->map_stale || (b->cluster && !connected);
	if (connected) {
		set_timeout(wd->ctx, MIN(deadline_us - dlock__boot_us(), b->command_timeout_ms * 1000));
		sent_us = dlock__boot_us();
		for (guint i = 0; i < due->len; i++)
			append_renew(wd->ctx, due->pdata[i], false);
		/* A failed send leaves ctx->err set, and the reads below fail. */
		dlock__redis_flush(wd->ctx);
		read_renewals(wd, due->len, NULL, results, noscript, moved);
		if (noscript->len > 0 && !wd->ctx->err && deadline_us - dlock__boot_us() > 0) {
			set_timeout(wd->ctx, MIN(deadline_us - dlock__boot_us(), b->command_timeout_ms * 1000));
			for (guint k = 0; k < noscript->len; k++)
				append_renew(wd->ctx, due->pdata[g_array_index(noscript, guint, k)], true);
			dlock__redis_flush(wd->ctx);
			read_renewals(wd, noscript->len, &g_array_index(noscript, guint, 0), results, NULL, moved);
		}
		/* A verdict on any lease proves the connection: retries start
		 * over from the shortest pause (also when replicas lag). */
		for (guint i = 0; i < due->len; i++)
			answered = answered || results[i] != -1;
		wait_for_replicas(wd, due, results, deadline_us);
		if (wd->ctx->err) {
			dlock__log(b->logger, DLOCK_LOG_WARNING, "%s: renewal failed: %s", b->label, wd->ctx->errstr);
			redisFree(wd->ctx);
			wd->ctx = NULL;
			wd->map_stale = b->cluster != NULL;
		} else if (!dlock__redis_conn_current(b, wd->ctx_epoch)) {
			/* The master was doubted while the batch ran (a switch
			 * announced, or READONLY): what the old one answered says
			 * nothing of the key on the new one, where the others
			 * ask.  No verdict: retried at once on the master of the
			 * moment. */
			dlock__log(b->logger, DLOCK_LOG_INFO, "%s: renewal answered by a server no longer "
			           "taken for the master: renewing on the new one", b->label);
			for (guint i = 0; i < due->len; i++)
				results[i] = -1;
			redisFree(wd->ctx);
			wd->ctx = NULL;
			wd->retry_us = RETRY_FIRST_US;
		}
	}
	/* A cluster's node sent these elsewhere: each follows its slot. */
	for (guint k = 0; k < moved->len; k++) {
		guint i = g_array_index(moved, guint, k);

		results[i] = renew_routed(b, due->pdata[i], deadline_us);
		answered = answered || results[i] != -1;
	}

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
	g_array_unref(noscript);
	g_array_unref(moved);
	g_free(results);
}

/*
 * Renew the due leases, a batch per master on a cluster (the master of
 * each lease's slot in the map; the map asked for first when a master was
 * lost or a slot has none).  Elsewhere one batch.
 */
static void renew_batch(redis_watchdog *wd, GPtrArray *due, int64_t budget_us)
{
	redis_backend *b = wd->b;
	GHashTable *groups;
	GHashTableIter iter;
	gpointer node, leases;
	int64_t deadline_us = dlock__boot_us() + budget_us;

	if (!b->cluster) {
		renew_on_node(wd, due, budget_us);
		return;
	}
	for (guint i = 0; i < due->len && !wd->map_stale; i++) {
		const redis_lease *lease = due->pdata[i];

		wd->map_stale = !dlock__redis_cluster_owner(b->cluster, dlock__redis_slot(lease->names.key), NULL);
	}
	if (wd->map_stale && dlock__redis_cluster_refresh(b, NULL, dlock__mono_us() + budget_us / 2) == DLOCK_OK)
		wd->map_stale = false;
	groups = g_hash_table_new_full(NULL, NULL, NULL, (GDestroyNotify)g_ptr_array_unref);
	for (guint i = 0; i < due->len; i++) {
		redis_lease *lease = due->pdata[i];
		redis_node *n = dlock__redis_cluster_owner(b->cluster, dlock__redis_slot(lease->names.key), NULL);
		GPtrArray *group = g_hash_table_lookup(groups, n);

		if (!group) {
			group = g_ptr_array_new_with_free_func((GDestroyNotify)dlock__redis_lease_unref);
			g_hash_table_insert(groups, n, group);
		}
		g_ptr_array_add(group, dlock__redis_lease_ref(lease));
	}
	g_hash_table_iter_init(&iter, groups);
	while (g_hash_table_iter_next(&iter, &node, &leases)) {
		use_node(wd, node);
		renew_on_node(wd, leases, MAX(deadline_us - dlock__boot_us(), 1000));
	}
	g_hash_table_unref(groups);
}

/*
 * One attempt at a deferred release, on the watchdog's connection.  An
 * error reply is tried again later; no answer ends the round.  While a
 * try with this token may still run on the server, "not ours" proves
 * nothing: the attempt waits for the server to be done with it first.
 */
static dlock__cleanup_result release_once(gpointer data, gpointer ctx)
{
	deferred_release *c = data;
	redis_watchdog *wd = ctx;
	redis_backend *b = wd->b;
	const char *words[SCRIPT_WORDS_MAX], *argv[SCRIPT_ARGV_MAX];
	dlock__cleanup_result result = DLOCK__CLEANUP_RETRY;
	char nkeys[8];
	int argc;
	redisReply *reply;

	/* The last attempt at close cannot wait: it deletes what it can. */
	if (!dlock__redis_kept_settled(c->kept) && !wd->finishing)
		return DLOCK__CLEANUP_RETRY;
	if (b->cluster)
		use_node_of(wd, c->names.key);
	if (!ensure_connection(wd, CLEANUP_TIMEOUT_US))
		return DLOCK__CLEANUP_UNANSWERED;
	set_timeout(wd->ctx, MIN(CLEANUP_TIMEOUT_US, b->command_timeout_ms * 1000));
	if (c->redlock) {
		words[RL_RELEASE_KEY_LOCK] = c->names.key;
		words[RL_RELEASE_ARG_TOKEN] = c->token;
		words[RL_RELEASE_ARG_RELEASED] = c->names.released;
		argc = dlock__redis_script_argv(SCRIPT_RL_RELEASE, true, words, argv, nkeys);
	} else {
		dlock__redis_release_words(&c->names, c->token, c->ticket, c->id, c->mode,
		                           dlock__redis_publish_command(b), words);
		argc = dlock__redis_script_argv(SCRIPT_RELEASE, true, words, argv, nkeys);
	}
	reply = dlock__redis_call(wd->ctx, argc, argv, NULL);
	if (!reply) {
		redisFree(wd->ctx);
		wd->ctx = NULL;
		wd->map_stale = b->cluster != NULL;
		return DLOCK__CLEANUP_UNANSWERED;
	}
	redirected(b, reply, "deferred release");
	if (reply->type == REDIS_REPLY_INTEGER) {
		result = DLOCK__CLEANUP_DONE;
		dlock__log(b->logger, DLOCK_LOG_INFO, "%s: deferred release of %s done", b->label,
		           c->names.key);
	}
	freeReplyObject(reply);
	return result;
}

static const dlock__cleanup_ops release_ops = { release_once, deferred_release_free };

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
				renew_batch(wd, due, budget);
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
