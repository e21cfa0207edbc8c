/* SPDX-License-Identifier: MIT */
/*
 * The watchdog's I/O (watchdog.c is the rest): renewal batches and
 * deferred releases, on the watchdog's own connection -- one per master
 * on a cluster, where the due leases go out in a batch per master and a
 * lease a node sends elsewhere is renewed on its own through the routing.
 *
 * A renewal names only the keys its hold always has (lua/renew-*.lua),
 * so on a cluster it runs wherever they are while a slot migrates.  With
 * min-replicas a batch counts only once a WAIT after it says the replicas
 * have it.
 */
#include <string.h>

#include "clock.h"
#include "error.h"
#include "log.h"
#include "scripts-lua.h"
#include "watchdog.h"

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
	bool connected, answered = false;

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

	dlock__redis_watchdog_apply(wd, due, results, sent_us, answered);
	g_array_unref(noscript);
	g_array_unref(moved);
	g_free(results);
}

/*
 * Renew the due leases, a batch per master on a cluster (the master of
 * each lease's slot in the map; the map asked for first when a master was
 * lost or a slot has none).  Elsewhere one batch.
 */
void dlock__redis_renew_batch(redis_watchdog *wd, GPtrArray *due, int64_t budget_us)
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
dlock__cleanup_result dlock__redis_release_once(gpointer data, gpointer ctx)
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

