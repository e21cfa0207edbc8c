/*
 * Acquire, release and query on Redis.
 *
 * Acquire tries once (the uncontended path is one EVALSHA round trip).
 * If the lock is held elsewhere it registers with the subscriber for the
 * lock's release channel and tries again each time it is woken: when the
 * subscription is confirmed, when a release is published, when the
 * subscriber reconnects, or when min(PTTL, a capped backoff) passes, which
 * covers a holder that crashed and never publishes.
 */
#include <inttypes.h>
#include <string.h>

#include "clock.h"
#include "error.h"
#include "internal.h"
#include "lease.h"

#define BACKOFF_FIRST_US (50 * 1000)
#define BACKOFF_CAP_US (1000 * 1000)
/* After a release found the server unreachable, later releases within this
 * time defer at once instead of each waiting out its own timeout. */
#define RELEASE_DEFER_US (1000 * 1000)

typedef enum try_result {
	TRY_GRANTED,
	TRY_BUSY,
	TRY_FAILED,    /* an answer we can trust: nothing was set */
	TRY_UNCERTAIN  /* no answer: the script may have set our key */
} try_result;

/* One EVALSHA of the acquire script, bounded by deadline_us; a cancel of
 * waiter interrupts it.  The connection of an attempt left unanswered is
 * kept in lease->kept (dlock__redis_conn_keep()). */
static try_result try_once(dlock__backend *b, redis_lease *lease, dlock__waiter *waiter,
                           const char *fence_key, int64_t deadline_us, uint64_t *ret_token,
                           int64_t *ret_pttl, int64_t *ret_sent_us, int *ret_rc)
{
	char ttl[24];
	const char *words[4] = { lease->key, fence_key, lease->token, ttl };
	redisReply *reply;
	bool uncertain = false;
	try_result result;
	int rc;

	g_snprintf(ttl, sizeof(ttl), "%" G_GINT64_FORMAT, lease->ttl_ms);
	*ret_sent_us = dlock__boot_us();
	rc = dlock__redis_eval_pooled(b, waiter, deadline_us, SCRIPT_ACQUIRE, 2, 2, words, &reply,
	                              &uncertain, lease->kept);
	if (rc != DLOCK_OK) {
		*ret_rc = rc;
		if (uncertain && (rc == DLOCK_EUNAVAILABLE || rc == DLOCK_ECANCELED))
			return TRY_UNCERTAIN;
		return TRY_FAILED;
	}
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
	    reply->element[0]->type != REDIS_REPLY_INTEGER ||
	    reply->element[1]->type != REDIS_REPLY_INTEGER) {
		*ret_rc = dlock__error(DLOCK_EBACKEND, "%s: unexpected reply to the acquire script", b->label);
		result = TRY_FAILED;
	} else if (reply->element[0]->integer == 1) {
		*ret_token = (uint64_t)reply->element[1]->integer;
		result = TRY_GRANTED;
	} else {
		*ret_pttl = reply->element[1]->integer;
		result = TRY_BUSY;
	}
	freeReplyObject(reply);
	return result;
}

static redis_lease *lease_new(dlock__backend *b, dlock__hold *hold)
{
	/* Reference-counted (the watchdog keeps one while it renews). */
	redis_lease *lease = g_atomic_rc_box_new0(redis_lease);
	const char *resource = dlock__hold_resource(hold);

	lease->hold = dlock__hold_ref(hold);
	lease->key = dlock__redis_key(b, resource);
	lease->channel = dlock__redis_channel(b, resource);
	lease->token = dlock__token_new(dlock__hold_holder(hold));
	lease->ttl_ms = dlock__hold_ttl_ms(hold);
	lease->renew = dlock__hold_watchdog(hold);
	lease->kept = g_array_new(FALSE, FALSE, sizeof(int));
	return lease;
}

/*
 * Whether a grant whose try was sent at sent_us (CLOCK_BOOTTIME) is still
 * alive now.  The lease counts from the send, as the watchdog counts it;
 * an answer that comes later than that (the server paused, or the link
 * stalled, in between) brings a hold that is dead or about to be declared
 * lost.  One more margin is asked for, so the watchdog cannot declare the
 * hold lost before the caller has it.
 */
static bool grant_alive(const redis_lease *lease, int64_t sent_us)
{
	return dlock__boot_us() + dlock__lease_margin_us(lease->ttl_ms) <
	       dlock__lease_end_us(sent_us, lease->ttl_ms);
}

/* How long to sleep before the next try when woken by nothing else: the
 * lock's remaining time if that comes first, else the backoff.  A peer may
 * set any expiry Redis takes (up to about 9.2e18 ms), so the PTTL is
 * compared before it is turned into microseconds. */
static int64_t next_sleep_us(int64_t pttl_ms, int64_t backoff_us)
{
	if (pttl_ms >= 0 && pttl_ms < backoff_us / 1000)
		return MIN(pttl_ms * 1000 + 1000, backoff_us);
	return backoff_us;
}

int dlock__redis_acquire(dlock__backend *b, dlock__hold *hold, dlock__waiter *waiter,
                         int64_t wait_ms, int64_t deadline_us)
{
	const char *resource = dlock__hold_resource(hold);
	redis_lease *lease = lease_new(b, hold);
	char *fence_key = dlock__redis_fence_key(b, resource);
	int64_t backoff_us = BACKOFF_FIRST_US;
	bool subscribed = false;
	bool uncertain = false; /* a try may have set our key unseen */
	bool first = true;
	uint64_t token = 0;
	int rc = DLOCK_OK;

	for (;;) {
		uint64_t seen = dlock__waiter_seq(waiter);
		int64_t pttl = -1, sent_us = 0;
		try_result result;

		if (dlock__waiter_canceled(waiter)) {
			rc = dlock__error_canceled(resource);
			break;
		}
		if (dlock__remaining_us(deadline_us) == 0) {
			rc = dlock__error_timeout(resource, wait_ms);
			break;
		}
		result = try_once(b, lease, waiter, fence_key, deadline_us, &token, &pttl, &sent_us, &rc);
		if (result == TRY_GRANTED && !grant_alive(lease, sent_us)) {
			/* Not a grant.  Our token may still be in the key: a later
			 * try renews it from its own send, a failure deletes it. */
			uncertain = true;
			first = false;
			rc = dlock__error(DLOCK_EUNAVAILABLE, "%s: the grant of '%s' came after its %" PRId64
			                  " ms lease had run out", b->label, resource, lease->ttl_ms);
			dlock__log(b->logger, DLOCK_LOG_WARNING, "%s", dlock_last_error_message());
			if (wait_ms == 0)
				break;
			/* No pause: that answer alone took longer than the lease. */
			continue;
		}
		if (result == TRY_GRANTED) {
			/* Earlier tries the server is done with are no concern. */
			if (dlock__redis_kept_settled(lease->kept)) {
				g_array_unref(lease->kept);
				lease->kept = NULL;
			}
			lease->confirmed_us = sent_us;
			dlock__hold_set_token(hold, token);
			dlock__hold_set_backend_data(hold, lease);
			dlock__redis_watch(b, lease);
			rc = DLOCK_OK;
			break;
		}
		if (result == TRY_UNCERTAIN)
			uncertain = true;
		if (result != TRY_BUSY && rc == DLOCK_ECANCELED) {
			rc = dlock__error_canceled(resource);
			break;
		}
		if (result != TRY_BUSY) {
			/* A first try that cannot reach the server fails fast; once
			 * waiting, a dropped connection is retried until the deadline. */
			if (first || rc == DLOCK_EBACKEND || rc == DLOCK_ETIMEDOUT)
				break;
		}
		first = false;
		if (result == TRY_BUSY && wait_ms == 0) {
			rc = dlock__error_busy(resource);
			break;
		}
		if (!subscribed) {
			dlock__redis_sub_add(b, lease->channel, waiter);
			subscribed = true;
		}
		rc = dlock__waiter_turn(waiter, seen, resource, wait_ms, deadline_us,
		                        next_sleep_us(pttl, backoff_us), &backoff_us, BACKOFF_CAP_US);
		if (rc != DLOCK_OK)
			break;
	}
	if (subscribed)
		dlock__redis_sub_remove(b, lease->channel, waiter);
	g_free(fence_key);
	if (rc != DLOCK_OK) {
		/* A try whose answer never came may have set our key (later tries
		 * with the same token would have found it ours), or may still: make
		 * sure it goes, once the server is done with that try. */
		if (uncertain || lease->kept->len > 0) {
			dlock__redis_cleanup_later(b, lease->key, lease->channel, lease->token,
			                           dlock__boot_us() + lease->ttl_ms * 1000, lease->kept);
			lease->kept = NULL;
		}
		dlock__redis_lease_unref(lease);
	}
	return rc;
}

static int release_now(dlock__backend *b, redis_lease *lease, int *ret_deleted)
{
	const char *words[3] = { lease->key, lease->token, lease->channel };
	/* The whole release, a reconnect included, fits in one command timeout. */
	int64_t deadline_us = dlock__mono_us() + b->command_timeout_ms * 1000;
	redisReply *reply;
	bool uncertain = false;
	int rc;

	rc = dlock__redis_eval_pooled(b, NULL, deadline_us, SCRIPT_RELEASE, 1, 2, words, &reply,
	                              &uncertain, NULL);
	if (rc != DLOCK_OK)
		return rc;
	/* After an attempt without an answer, "not ours" may mean that attempt
	 * deleted it: only a clean first answer proves the lease had ended. */
	*ret_deleted = (reply->type == REDIS_REPLY_INTEGER && reply->integer == 1) || uncertain;
	freeReplyObject(reply);
	return DLOCK_OK;
}

/* The connections of the acquire's tries left unanswered, or NULL. */
static GArray *take_kept(redis_lease *lease)
{
	GArray *kept = lease->kept;

	lease->kept = NULL;
	return kept;
}

static bool release_deferred(dlock__backend *b)
{
	bool defer;

	g_mutex_lock(&b->pool_mu);
	defer = dlock__mono_us() < b->release_defer_until_us;
	g_mutex_unlock(&b->pool_mu);
	return defer;
}

/*
 * End a hold: stop the watchdog for it, then compare-and-delete.  If the
 * server is unreachable (or the watchdog already found it so), the delete
 * goes on in the background and the caller is not kept waiting.
 */
int dlock__redis_release(dlock__backend *b, dlock__hold *hold)
{
	redis_lease *lease = dlock__hold_backend_data(hold);
	bool lost = false, suspended;
	int deleted = 0;
	int rc;

	if (!lease)
		return DLOCK_OK;
	dlock__hold_set_backend_data(hold, NULL);
	suspended = dlock__redis_unwatch(b, lease, &lost);
	if (!suspended && release_deferred(b))
		suspended = true; /* a release just found the server unreachable */
	if (suspended) {
		dlock__redis_cleanup_later(b, lease->key, lease->channel, lease->token,
		                           dlock__boot_us() + lease->ttl_ms * 1000, take_kept(lease));
		rc = lost ? DLOCK_ELOST : DLOCK_OK;
	} else if ((rc = release_now(b, lease, &deleted)) != DLOCK_OK) {
		dlock__log(b->logger, DLOCK_LOG_WARNING, "release of '%s' deferred: %s", lease->key,
		           dlock_last_error_message());
		if (rc == DLOCK_EUNAVAILABLE) {
			g_mutex_lock(&b->pool_mu);
			b->release_defer_until_us = dlock__mono_us() + RELEASE_DEFER_US;
			g_mutex_unlock(&b->pool_mu);
		}
		dlock__redis_cleanup_later(b, lease->key, lease->channel, lease->token,
		                           dlock__boot_us() + lease->ttl_ms * 1000, take_kept(lease));
		rc = DLOCK_OK;
	} else {
		rc = deleted ? DLOCK_OK : DLOCK_ELOST;
		/* An earlier try of the acquire, left unanswered, may still set
		 * the key again after this delete. */
		if (lease->kept)
			dlock__redis_cleanup_later(b, lease->key, lease->channel, lease->token,
			                           dlock__boot_us() + lease->ttl_ms * 1000, take_kept(lease));
	}
	dlock__redis_lease_unref(lease);
	return rc;
}

/* GET lock, PTTL lock, GET counter: pipelined, one round trip. */
int dlock__redis_query(dlock__backend *b, const char *resource, int64_t deadline_us,
                       dlock__server_info *ret)
{
	char *key = dlock__redis_key(b, resource);
	char *fence_key = dlock__redis_fence_key(b, resource);
	redisReply *replies[3] = { NULL, NULL, NULL };
	redis_conn *conn;
	int rc;

	if (deadline_us == INT64_MAX)
		deadline_us = dlock__mono_us() + b->command_timeout_ms * 1000;
	rc = dlock__redis_conn_get(b, NULL, deadline_us, &conn);
	if (rc != DLOCK_OK)
		goto out;
	dlock__redis_conn_timeout(conn, MAX(dlock__remaining_us(deadline_us), 1000));
	redisAppendCommand(conn->ctx, "GET %s", key);
	redisAppendCommand(conn->ctx, "PTTL %s", key);
	redisAppendCommand(conn->ctx, "GET %s", fence_key);
	if (dlock__redis_flush(conn->ctx) != REDIS_OK)
		rc = dlock__error(DLOCK_EUNAVAILABLE, "%s: %s", b->label, conn->ctx->errstr);
	for (int i = 0; i < 3 && rc == DLOCK_OK; i++) {
		if (redisGetReply(conn->ctx, (void **)&replies[i]) != REDIS_OK)
			rc = dlock__error(DLOCK_EUNAVAILABLE, "%s: %s", b->label, conn->ctx->errstr);
		else
			rc = dlock__redis_reply_error(b, replies[i], "query");
	}
	dlock__redis_conn_put(b, conn, rc == DLOCK_OK);
	if (rc != DLOCK_OK)
		goto out;
	if (replies[0]->type == REDIS_REPLY_STRING) {
		ret->locked = true;
		ret->holder_raw = g_strndup(replies[0]->str, replies[0]->len);
	}
	ret->expires_in_ms = replies[1]->type == REDIS_REPLY_INTEGER && replies[1]->integer >= 0
	                         ? replies[1]->integer : -1;
	if (replies[2]->type == REDIS_REPLY_STRING)
		ret->fencing_token = g_ascii_strtoull(replies[2]->str, NULL, 10);
out:
	for (int i = 0; i < 3; i++)
		if (replies[i])
			freeReplyObject(replies[i]);
	g_free(key);
	g_free(fence_key);
	return rc;
}
