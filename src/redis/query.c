/* SPDX-License-Identifier: MIT */
/*
 * Query on Redis: who holds a resource, in one pipelined round trip.
 * The lock is a string (one holder: a dlock token or a peer's value) or a
 * sorted set of readers (lua/queue.lua); GET and ZRANGE are both sent, and
 * the one that does not fit the key's type answers WRONGTYPE, which here
 * only says which it is.  Readers whose lease has ended in the server's
 * time (TIME) but that no script has dropped yet are not listed.  A set
 * with a number of permits beside it is a semaphore's: its members are
 * the permits' holders.
 */
#include <errno.h>
#include <string.h>

#include "clock.h"
#include "error.h"
#include "internal.h"

enum { R_GET, R_READERS, R_PTTL, R_FENCE, R_TIME, R_PERMITS, R_COUNT };

static bool wrong_type(const redisReply *reply)
{
	return reply->type == REDIS_REPLY_ERROR && strncmp(reply->str, "WRONGTYPE", 9) == 0;
}

/* The server's time in ms from a TIME reply, or 0 if it is not one. */
static int64_t server_ms(const redisReply *reply)
{
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
	    reply->element[0]->type != REDIS_REPLY_STRING || reply->element[1]->type != REDIS_REPLY_STRING)
		return 0;
	return g_ascii_strtoll(reply->element[0]->str, NULL, 10) * 1000 +
	       g_ascii_strtoll(reply->element[1]->str, NULL, 10) / 1000;
}

static void take_readers(const redisReply *reply, int64_t now_ms, dlock__server_info *ret)
{
	for (size_t i = 0; i + 1 < reply->elements; i += 2) {
		const redisReply *member = reply->element[i], *score = reply->element[i + 1];

		if (member->type != REDIS_REPLY_STRING || score->type != REDIS_REPLY_STRING ||
		    g_ascii_strtod(score->str, NULL) <= (double)now_ms)
			continue;
		if (!ret->readers)
			ret->readers = g_ptr_array_new_with_free_func(g_free);
		g_ptr_array_add(ret->readers, g_strndup(member->str, member->len));
	}
	if (ret->readers) {
		ret->locked = true;
		ret->shared = true;
	}
}

/*
 * The query's commands on conn that want says, pipelined (each after
 * ASKING when an ASK sent them there), their answers into replies.
 * *ret_redirect: where a cluster's node sent them instead.  An ASK for a
 * key on the master of the slot (a migration moved that key, not
 * necessarily the others) leaves that ASK as the key's answer, the rest
 * read: the caller asks the target for those keys.
 */
static int query_once(redis_backend *b, redis_conn *conn, const char *const *keys, const bool *want,
                      redisReply **replies, redis_redirect *ret_redirect)
{
	static const char *const formats[R_COUNT] = {
		[R_GET] = "GET %s", [R_READERS] = "ZRANGE %s 0 -1 WITHSCORES", [R_PTTL] = "PTTL %s",
		[R_FENCE] = "GET %s", [R_TIME] = "TIME", [R_PERMITS] = "GET %s",
	};
	int rc = DLOCK_OK;

	for (int i = 0; i < R_COUNT; i++) {
		if (!want[i])
			continue;
		if (conn->asking && keys[i])
			redisAppendCommand(conn->ctx, "ASKING");
		if (keys[i])
			redisAppendCommand(conn->ctx, formats[i], keys[i]);
		else
			redisAppendCommand(conn->ctx, formats[i]);
	}
	if (dlock__redis_flush(conn->ctx) != REDIS_OK)
		return dlock__error(DLOCK_EUNAVAILABLE, "%s: %s", b->label, conn->ctx->errstr);
	for (int i = 0; i < R_COUNT && rc == DLOCK_OK; i++) {
		redisReply *asked = NULL;
		redis_redirect redirect = { REDIRECT_NONE, -1, "" };

		if (!want[i])
			continue;
		errno = 0;
		if ((conn->asking && keys[i] && redisGetReply(conn->ctx, (void **)&asked) != REDIS_OK) ||
		    redisGetReply(conn->ctx, (void **)&replies[i]) != REDIS_OK) {
			dlock__redis_io_error(b, conn->ctx, errno == EAGAIN || errno == EWOULDBLOCK,
			                      conn->timeout_us);
			rc = dlock__error_prefix(DLOCK_EUNAVAILABLE, "");
		} else if (b->cluster && (redirect = dlock__redis_redirect_of(replies[i])).kind == REDIRECT_ASK &&
		           !conn->asking) {
			if (ret_redirect->kind == REDIRECT_NONE)
				*ret_redirect = redirect;
		} else if (redirect.kind != REDIRECT_NONE) {
			/* The rest are not read: the connection is closed. */
			*ret_redirect = redirect;
			rc = dlock__error(DLOCK_EUNAVAILABLE, "%s: query: %s", b->label, replies[i]->str);
		} else if (!wrong_type(replies[i]) || i > R_READERS) {
			rc = dlock__redis_reply_error(b, replies[i], "query");
		}
		if (asked)
			freeReplyObject(asked);
	}
	return rc;
}

/* The keys whose answer was an ASK, taken off replies and wanted again
 * (of the migration's target); no other. */
static void want_asked(redisReply **replies, bool *want)
{
	for (int i = 0; i < R_COUNT; i++) {
		want[i] = replies[i] && dlock__redis_redirect_of(replies[i]).kind == REDIRECT_ASK;
		if (want[i]) {
			freeReplyObject(replies[i]);
			replies[i] = NULL;
		}
	}
}

static void replies_clear(redisReply **replies)
{
	for (int i = 0; i < R_COUNT; i++) {
		if (replies[i])
			freeReplyObject(replies[i]);
		replies[i] = NULL;
	}
}

int dlock__redis_query(dlock__backend *backend, const char *resource, int64_t deadline_us,
                       dlock__server_info *ret)
{
	redis_backend *b = redis_of(backend);
	char *key = dlock__redis_key(b, resource);
	char *fence_key = dlock__redis_fence_key(b, resource);
	char *permits_key = g_strconcat(key, ":permits", NULL);
	const char *keys[R_COUNT] = { [R_GET] = key, [R_READERS] = key, [R_PTTL] = key,
	                              [R_FENCE] = fence_key, [R_PERMITS] = permits_key };
	redisReply *replies[R_COUNT] = { NULL };
	bool want[R_COUNT];
	redis_route route;
	int rc;

	if (deadline_us == INT64_MAX)
		deadline_us = dlock__mono_us() + b->command_timeout_ms * 1000;
	dlock__redis_route_init(&route, b->cluster ? key : NULL);
	for (int i = 0; i < R_COUNT; i++)
		want[i] = true;
	for (;;) {
		redis_redirect redirect = { REDIRECT_NONE, -1, "" };
		redis_conn *conn;

		rc = dlock__redis_conn_get(b, &route, NULL, deadline_us, &conn);
		if (rc == DLOCK_ETIMEDOUT)
			rc = dlock__error_prefix(DLOCK_EUNAVAILABLE, ""); /* its own bound: the server is silent */
		if (rc != DLOCK_OK)
			break;
		dlock__redis_conn_timeout(conn, MAX(dlock__remaining_us(deadline_us), 1000));
		conn->asking = route.ask != NULL;
		rc = query_once(b, conn, keys, want, replies, &redirect);
		dlock__redis_conn_put(b, conn, rc == DLOCK_OK);
		if (redirect.kind == REDIRECT_NONE)
			break;
		/* A slot being migrated: its keys are on the source until
		 * moved, then on the target; the ones the source no longer
		 * has are asked of the target, the others' answers kept.
		 * Anything else starts the query over where it is sent. */
		if (rc == DLOCK_OK && redirect.kind == REDIRECT_ASK) {
			want_asked(replies, want);
		} else {
			replies_clear(replies);
			for (int i = 0; i < R_COUNT; i++)
				want[i] = true;
		}
		rc = dlock__redis_route_follow(b, &route, &redirect, NULL, deadline_us);
		if (rc != DLOCK_OK)
			break;
	}
	if (rc != DLOCK_OK)
		goto out;
	if (replies[R_GET]->type == REDIS_REPLY_STRING) {
		ret->locked = true;
		ret->holder_raw = g_strndup(replies[R_GET]->str, replies[R_GET]->len);
	} else if (replies[R_READERS]->type == REDIS_REPLY_ARRAY) {
		take_readers(replies[R_READERS], server_ms(replies[R_TIME]), ret);
		if (ret->locked && replies[R_PERMITS]->type == REDIS_REPLY_STRING)
			ret->permits = (uint32_t)g_ascii_strtoull(replies[R_PERMITS]->str, NULL, 10);
	}
	ret->expires_in_ms = replies[R_PTTL]->type == REDIS_REPLY_INTEGER && replies[R_PTTL]->integer >= 0
	                         ? replies[R_PTTL]->integer : -1;
	if (replies[R_FENCE]->type == REDIS_REPLY_STRING)
		ret->fencing_token = g_ascii_strtoull(replies[R_FENCE]->str, NULL, 10);
	if (b->sentinel) {
		ret->master = dlock__redis_sentinel_master(b->sentinel);
		ret->service = g_strdup(dlock__redis_sentinel_service(b->sentinel));
	}
	if (b->cluster) {
		redis_node *n = dlock__redis_cluster_owner(b->cluster, route.slot, NULL);

		ret->master = n ? g_strdup(n->addr) : NULL;
	}
out:
	replies_clear(replies);
	g_free(key);
	g_free(fence_key);
	g_free(permits_key);
	return rc;
}
