/* SPDX-License-Identifier: MIT */
/*
 * Running the Lua scripts of the lease protocol and its wait queue, and
 * Redlock's, by EVALSHA.  Each is one atomic step on the server, so no
 * other client can slip between the comparison and the change, and a
 * release hands the lock to the next waiter with no moment at which it is
 * free.  The scripts themselves are the files of lua/, each saying what
 * it takes and answers; embed.py makes them C at build time.
 */
#include <errno.h>
#include <string.h>

#include "clock.h"
#include "error.h"
#include "internal.h"
#include "log.h"
#include "scripts-lua.h"

G_STATIC_ASSERT(ACQUIRE_WORDS <= SCRIPT_WORDS_MAX && RELEASE_WORDS <= SCRIPT_WORDS_MAX &&
                RENEW_WORDS <= SCRIPT_WORDS_MAX && RENEW_WRITE_WORDS <= SCRIPT_WORDS_MAX &&
                RENEW_READ_WORDS <= SCRIPT_WORDS_MAX && RENEW_PERMIT_WORDS <= SCRIPT_WORDS_MAX &&
                DOWNGRADE_WORDS <= SCRIPT_WORDS_MAX &&
                RL_ACQUIRE_WORDS <= SCRIPT_WORDS_MAX && RL_FENCE_WORDS <= SCRIPT_WORDS_MAX &&
                RL_RELEASE_WORDS <= SCRIPT_WORDS_MAX && RL_RENEW_WORDS <= SCRIPT_WORDS_MAX &&
                RL_QUERY_WORDS <= SCRIPT_WORDS_MAX);

void dlock__redis_release_words(const redis_names *names, const char *token, const char *ticket,
                                const char *id, const char *mode, const char *publish,
                                const char **words)
{
	words[RELEASE_KEY_LOCK] = names->key;
	words[RELEASE_KEY_FENCE] = names->fence;
	words[RELEASE_KEY_QUEUE] = names->queue;
	words[RELEASE_KEY_PERMITS] = names->permits;
	words[RELEASE_ARG_TOKEN] = token;
	words[RELEASE_ARG_RELEASED] = names->released;
	words[RELEASE_ARG_WAITS] = names->wait;
	words[RELEASE_ARG_TICKET] = ticket;
	words[RELEASE_ARG_WAIT_ID] = *ticket ? id : "";
	words[RELEASE_ARG_MODE] = mode;
	words[RELEASE_ARG_PUBLISH] = publish;
}

int dlock__redis_script_words_for(redis_script script, int keys)
{
	int per_key = dlock__redis_script_words[script] - dlock__redis_script_keys[script];

	return keys * (1 + per_key);
}

int dlock__redis_script_argv(redis_script script, bool by_body, const char *const *words,
                             const char **argv, char nkeys_text[8])
{
	return dlock__redis_script_argv_keys(script, by_body, words, dlock__redis_script_keys[script],
	                                     argv, nkeys_text);
}

int dlock__redis_script_argv_keys(redis_script script, bool by_body, const char *const *words,
                                  int keys, const char **argv, char nkeys_text[8])
{
	int nwords = keys == dlock__redis_script_keys[script] ? dlock__redis_script_words[script]
	                                                      : dlock__redis_script_words_for(script, keys);

	g_snprintf(nkeys_text, 8, "%d", keys);
	argv[0] = by_body ? "EVAL" : "EVALSHA";
	argv[1] = by_body ? dlock__redis_script_text[script] : dlock__redis_script_sha1[script];
	argv[2] = nkeys_text;
	memcpy(&argv[3], words, sizeof(*words) * (size_t)nwords);
	return 3 + nwords;
}

bool dlock__redis_is_noscript(const redisReply *reply)
{
	return reply->type == REDIS_REPLY_ERROR && reply->len >= 8 &&
	       strncmp(reply->str, "NOSCRIPT", 8) == 0;
}

redis_ack dlock__redis_ack_for(const redis_backend *b, int64_t ttl_ms)
{
	redis_ack ack = { b->min_replicas, b->replica_timeout_ms, -1 };

	if (ack.timeout_ms == 0)
		ack.timeout_ms = MAX(MIN(b->command_timeout_ms, ttl_ms / 10), 1);
	return ack;
}

/*
 * The server ends a WAIT on its timer, which runs hz times a second: the
 * answer comes up to 1000/hz ms after the timeout, 100 ms at the default
 * hz of 10.
 */
#define WAIT_LATE_MS 100

/*
 * At most three quarters of what is left once the server's lateness is
 * set aside, so that a WAIT's answer, the count of replicas a caller's
 * message names, still comes back in time.
 */
void dlock__redis_ack_within(redis_ack *ack, int64_t left_us)
{
	ack->timeout_ms = MAX(MIN(ack->timeout_ms, (left_us / 1000 - WAIT_LATE_MS) / 4 * 3), 1);
}

/*
 * How long one script's answers may take, the NOSCRIPT round trips
 * included: the connection's timeout when the script is sent.  The
 * socket's timeout counts per read, so each read gets only what is left
 * of it (end_us, monotonic): a script answered just before it ran out
 * would otherwise give the WAIT after it a whole timeout more, past the
 * caller's deadline.
 */
typedef struct answer_bound {
	int64_t us;     /* the whole, for the message; <= 0: the timeout alone */
	int64_t end_us;
} answer_bound;

static void bound_read(redis_conn *conn, const answer_bound *bound)
{
	if (bound->us > 0)
		dlock__redis_conn_timeout(conn, MAX(bound->end_us - dlock__mono_us(), 1));
}

static bool read_reply(redis_conn *conn, const answer_bound *bound, redisReply **ret)
{
	bound_read(conn, bound);
	return redisGetReply(conn->ctx, (void **)ret) == REDIS_OK;
}

/*
 * The script's command, and with ack the WAIT after it on the same
 * connection, sent together; on a cluster node an ASK sent us to, ASKING
 * before it.  A script's answer without WAIT's is no answer: the caller
 * cannot tell whether the script's writes reached the replicas.
 */
static int script_command(redis_backend *b, redis_conn *conn, int argc, const char **argv,
                          redis_ack *ack, const answer_bound *bound, redisReply **ret)
{
	char n[16], ms[24];
	const char *wait[3] = { "WAIT", n, ms }, *asking[1] = { "ASKING" };
	redisReply *reply = NULL, *acked = NULL, *asked = NULL;
	bool with_wait = ack && ack->n > 0;

	if (!with_wait && !conn->asking) {
		bound_read(conn, bound);
		return dlock__redis_command(b, conn, argc, argv, NULL, ret);
	}
	if (with_wait) {
		g_snprintf(n, sizeof(n), "%d", ack->n);
		/* 0 would wait forever */
		g_snprintf(ms, sizeof(ms), "%" G_GINT64_FORMAT, MAX(ack->timeout_ms, 1));
	}
	errno = 0;
	if ((conn->asking && redisAppendCommandArgv(conn->ctx, 1, asking, NULL) != REDIS_OK) ||
	    redisAppendCommandArgv(conn->ctx, argc, argv, NULL) != REDIS_OK ||
	    (with_wait && redisAppendCommandArgv(conn->ctx, 3, wait, NULL) != REDIS_OK) ||
	    dlock__redis_flush(conn->ctx) != REDIS_OK ||
	    (conn->asking && !read_reply(conn, bound, &asked)) || !read_reply(conn, bound, &reply) ||
	    (with_wait && !read_reply(conn, bound, &acked))) {
		if (asked)
			freeReplyObject(asked);
		if (reply)
			freeReplyObject(reply);
		conn->timed_out = errno == EAGAIN || errno == EWOULDBLOCK;
		return dlock__redis_io_error(b, conn->ctx, conn->timed_out,
		                             bound->us > 0 ? bound->us : conn->timeout_us);
	}
	if (asked)
		freeReplyObject(asked);
	if (with_wait) {
		ack->acked = acked->type == REDIS_REPLY_INTEGER ? (int)MIN(acked->integer, G_MAXINT) : -1;
		if (acked->type == REDIS_REPLY_ERROR)
			dlock__log(b->logger, DLOCK_LOG_WARNING, "%s: WAIT: %s", b->label, acked->str);
		freeReplyObject(acked);
	}
	*ret = reply;
	return DLOCK_OK;
}

int dlock__redis_eval(redis_backend *b, redis_conn *conn, redis_script script,
                      const char *const *words, redis_ack *ack, redisReply **ret)
{
	const char *argv[SCRIPT_ARGV_MAX];
	char nkeys_text[8];
	redisReply *reply;
	int argc = dlock__redis_script_argv(script, false, words, argv, nkeys_text);
	answer_bound bound = { conn->timeout_us, dlock__mono_us() + conn->timeout_us };
	int rc;

	conn->redirect.kind = REDIRECT_NONE;
	rc = script_command(b, conn, argc, argv, ack, &bound, &reply);
	/* On a cluster a node's script cache is its own: a script is
	 * loaded on each node it is sent to, after every redirection. */
	if (rc == DLOCK_OK && dlock__redis_is_noscript(reply)) {
		const char *load[3] = { "SCRIPT", "LOAD", dlock__redis_script_text[script] };

		freeReplyObject(reply);
		bound_read(conn, &bound);
		rc = dlock__redis_command(b, conn, 3, load, NULL, &reply);
		if (rc != DLOCK_OK)
			return rc;
		rc = dlock__redis_reply_error(b, reply, "SCRIPT LOAD");
		freeReplyObject(reply);
		if (rc != DLOCK_OK)
			return rc;
		/* The first WAIT (the connection wrote before) may have taken
		 * its time: this one gets only part of what is left, as the
		 * first did of the caller's deadline. */
		if (ack && ack->n > 0 && bound.us > 0)
			dlock__redis_ack_within(ack, bound.end_us - dlock__mono_us());
		rc = script_command(b, conn, argc, argv, ack, &bound, &reply);
	}
	if (rc != DLOCK_OK)
		return rc;
	conn->not_master = dlock__redis_not_master(reply);
	if (b->cluster)
		conn->redirect = dlock__redis_redirect_of(reply);
	if (conn->redirect.kind != REDIRECT_NONE) {
		rc = dlock__error(DLOCK_EUNAVAILABLE, "%s: script: %.*s", b->label, (int)reply->len, reply->str);
		freeReplyObject(reply);
		return rc;
	}
	rc = dlock__redis_reply_error(b, reply, "script");
	if (rc != DLOCK_OK) {
		freeReplyObject(reply);
		return rc;
	}
	*ret = reply;
	return DLOCK_OK;
}

/*
 * A cluster's master could not be reached, or lost the connection: its
 * idle connections go too, and the map is asked again after a pause (a
 * replica may be taking over).  DLOCK_OK to send again; else the error
 * that ends the command, which keeps what went wrong in its message.
 */
static int cluster_lost(redis_backend *b, redis_route *route, redis_node *node, dlock__waiter *waiter,
                        int64_t deadline_us)
{
	char *why = g_strdup(dlock_last_error_message());
	int rc;

	if (node)
		dlock__redis_node_pool_clear(b, node);
	rc = dlock__redis_route_lost(b, route, waiter, deadline_us, why);
	g_free(why);
	return rc;
}

int dlock__redis_eval_pooled(redis_backend *b, dlock__waiter *waiter, int64_t deadline_us,
                             redis_script script, const char *const *words, redis_ack *ack,
                             redisReply **ret, bool *ret_uncertain, GArray *kept)
{
	redis_route route;
	int rc = DLOCK_EUNAVAILABLE, resends = 0;

	/* Every key of a script is in one slot: its first decides. */
	dlock__redis_route_init(&route, b->cluster ? words[0] : NULL);
	for (;;) {
		redis_conn *conn;
		redis_redirect redirect;
		redis_node *node;
		bool reused, timed_out, canceled, unanswered, stale;

		rc = dlock__redis_conn_get(b, &route, waiter, deadline_us, &conn);
		if (rc == DLOCK_EUNAVAILABLE && b->cluster) {
			if ((rc = cluster_lost(b, &route, NULL, waiter, deadline_us)) == DLOCK_OK)
				continue;
		}
		if (rc != DLOCK_OK)
			return rc;
		reused = conn->reused;
		node = conn->node;
		/* Unchanged on the common path, so no system call is spent on
		 * it.  A WAIT gets its own time on top, within the deadline:
		 * only part of what is left, so that its answer can still come
		 * back in time (dlock__redis_ack_within()). */
		if (ack && ack->n > 0)
			dlock__redis_ack_within(ack, dlock__remaining_us(deadline_us));
		dlock__redis_conn_timeout(conn, MIN(dlock__remaining_us(deadline_us),
		                                    (b->command_timeout_ms +
		                                     (ack && ack->n > 0 ? ack->timeout_ms : 0)) * 1000));
		/* The cancel path shuts this socket down to end the wait. */
		if (!dlock__waiter_io_begin(waiter, conn->ctx->fd)) {
			dlock__redis_conn_put(b, conn, true);
			return dlock__error(DLOCK_ECANCELED, "%s: canceled", b->label);
		}
		conn->not_master = false;
		conn->asking = route.ask != NULL;
		rc = dlock__redis_eval(b, conn, script, words, ack, ret);
		timed_out = conn->timed_out;
		redirect = conn->redirect;
		canceled = dlock__waiter_io_end(waiter);
		/* A node that sent the script elsewhere ran nothing. */
		if (redirect.kind != REDIRECT_NONE) {
			dlock__redis_conn_put(b, conn, !canceled);
			if (canceled)
				return dlock__error(DLOCK_ECANCELED, "%s: canceled", b->label);
			rc = dlock__redis_route_follow(b, &route, &redirect, waiter, deadline_us);
			if (rc != DLOCK_OK)
				return rc;
			continue;
		}
		/* A connection made before the master was last doubted (the
		 * sentinels announced a switch meanwhile) may have run the
		 * script on the old master, which answers as one for seconds
		 * after the switch: what it answered holds nowhere the others
		 * look.  Sent again, on the new master (the scripts are
		 * idempotent for one token); what it did on the old one goes
		 * with that server's demotion, or with the lease. */
		stale = rc == DLOCK_OK && !dlock__redis_conn_current(b, conn->epoch);
		if (stale) {
			freeReplyObject(*ret);
			*ret = NULL;
			*ret_uncertain = true;
			rc = dlock__error(DLOCK_EUNAVAILABLE, "%s: the master changed while the script ran",
			                  b->label);
		}
		/* A server that answered it is no master ran nothing: connect
		 * again, to the master of the moment (found afresh). */
		if (conn->not_master || stale) {
			dlock__redis_conn_put(b, conn, false);
			if (resends++ > 0 || canceled || dlock__remaining_us(deadline_us) == 0)
				return canceled ? dlock__error(DLOCK_ECANCELED, "%s: canceled", b->label) : rc;
			continue;
		}
		unanswered = rc == DLOCK_EUNAVAILABLE || rc == DLOCK_ETIMEDOUT;
		if (unanswered && kept) {
			int fd = dlock__redis_conn_keep(conn);

			if (fd >= 0)
				g_array_append_val(kept, fd);
		}
		/* A canceled connection may have been shut down, and an
		 * unanswered one may still get its answer: never pool either. */
		dlock__redis_conn_put(b, conn, !unanswered && !canceled);
		if (!unanswered)
			return rc;
		*ret_uncertain = true;
		if (canceled)
			return dlock__error(DLOCK_ECANCELED, "%s: canceled while waiting for an answer",
			                    b->label);
		/* A cluster's master gone (refused, reset, closed): a replica
		 * may be taking its slots.  The scripts are idempotent for one
		 * token, so a copy that ran finds its own work done. */
		if (b->cluster && !timed_out) {
			if ((rc = cluster_lost(b, &route, node, waiter, deadline_us)) == DLOCK_OK)
				continue;
			return rc;
		}
		/* A timeout means a silent server, not a stale connection: a
		 * new connection would only wait out a second timeout. */
		if (!reused || timed_out || resends++ > 0 || dlock__remaining_us(deadline_us) == 0)
			break;
		/* The pooled connections are likely all stale: start afresh. */
		dlock__redis_pool_clear(b);
	}
	return rc;
}
