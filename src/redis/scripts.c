/*
 * The three Lua scripts of the lease protocol, run by EVALSHA.  Each is one
 * atomic step on the server, so no other client can slip between the
 * comparison and the change.
 */
#include <string.h>

#include "clock.h"
#include "error.h"
#include "internal.h"

/*
 * Acquire.  KEYS: lock, fence counter.  ARGV: token, ttl (ms).
 * Granted: {1, fencing token}.  Held elsewhere: {0, PTTL of the lock}.
 * A lock already holding our token was set by an earlier try of this same
 * acquire whose answer was lost: it is ours, so a retry is idempotent.
 * A missing counter (INCR gives 1) starts again from the server's clock in
 * microseconds, so tokens keep increasing across a restart that lost it;
 * the common path is one SET and one INCR.
 */
static const char acquire_lua[] =
	"if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then\n"
	"  local n = redis.call('INCR', KEYS[2])\n"
	"  if n == 1 then\n"
	"    local t = redis.call('TIME')\n"
	"    redis.call('SET', KEYS[2], t[1] .. string.sub('000000' .. t[2], -6))\n"
	"    n = redis.call('INCR', KEYS[2])\n"
	"  end\n"
	"  return {1, n}\n"
	"end\n"
	"if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
	"  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
	"  return {1, redis.call('INCR', KEYS[2])}\n"
	"end\n"
	"return {0, redis.call('PTTL', KEYS[1])}\n";

/*
 * Release.  KEYS: lock.  ARGV: token, release channel.  1 when deleted,
 * 0 when the lock holds another value (or none).  PUBLISH goes through
 * pcall: a user without channel rights still releases.
 */
static const char release_lua[] =
	"if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
	"  redis.call('DEL', KEYS[1])\n"
	"  redis.pcall('PUBLISH', ARGV[2], 'released')\n"
	"  return 1\n"
	"end\n"
	"return 0\n";

/* Renew.  KEYS: lock.  ARGV: token, ttl (ms).  1 renewed, 0 not ours. */
static const char renew_lua[] =
	"if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
	"  return redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
	"end\n"
	"return 0\n";

static const char *const bodies[SCRIPT_COUNT] = {
	[SCRIPT_ACQUIRE] = acquire_lua,
	[SCRIPT_RELEASE] = release_lua,
	[SCRIPT_RENEW] = renew_lua,
};

const char *dlock__redis_script_body(redis_script script)
{
	return bodies[script];
}

void dlock__redis_scripts_init(dlock__backend *b)
{
	for (int i = 0; i < SCRIPT_COUNT; i++)
		b->script_sha[i] = g_compute_checksum_for_string(G_CHECKSUM_SHA1, bodies[i], -1);
}

void dlock__redis_scripts_clear(dlock__backend *b)
{
	for (int i = 0; i < SCRIPT_COUNT; i++)
		g_free(b->script_sha[i]);
}

bool dlock__redis_is_noscript(const redisReply *reply)
{
	return reply->type == REDIS_REPLY_ERROR && reply->len >= 8 &&
	       strncmp(reply->str, "NOSCRIPT", 8) == 0;
}

int dlock__redis_eval(dlock__backend *b, redis_conn *conn, redis_script script, int nkeys,
                      int nargs, const char **words, redisReply **ret)
{
	const char *argv[3 + 8];
	char nkeys_text[8];
	redisReply *reply;
	int argc = 3 + nkeys + nargs;
	int rc;

	g_assert(nkeys + nargs <= 8);
	g_snprintf(nkeys_text, sizeof(nkeys_text), "%d", nkeys);
	argv[0] = "EVALSHA";
	argv[1] = b->script_sha[script];
	argv[2] = nkeys_text;
	memcpy(&argv[3], words, sizeof(*words) * (size_t)(nkeys + nargs));

	rc = dlock__redis_command(b, conn, argc, argv, NULL, &reply);
	if (rc == DLOCK_OK && dlock__redis_is_noscript(reply)) {
		const char *load[3] = { "SCRIPT", "LOAD", bodies[script] };

		freeReplyObject(reply);
		rc = dlock__redis_command(b, conn, 3, load, NULL, &reply);
		if (rc != DLOCK_OK)
			return rc;
		rc = dlock__redis_reply_error(b, reply, "SCRIPT LOAD");
		freeReplyObject(reply);
		if (rc != DLOCK_OK)
			return rc;
		rc = dlock__redis_command(b, conn, argc, argv, NULL, &reply);
	}
	if (rc != DLOCK_OK)
		return rc;
	rc = dlock__redis_reply_error(b, reply, "script");
	if (rc != DLOCK_OK) {
		freeReplyObject(reply);
		return rc;
	}
	*ret = reply;
	return DLOCK_OK;
}

int dlock__redis_eval_pooled(dlock__backend *b, dlock__waiter *waiter, int64_t deadline_us,
                             redis_script script, int nkeys, int nargs, const char **words,
                             redisReply **ret, bool *ret_uncertain, GArray *kept)
{
	int rc = DLOCK_EUNAVAILABLE;

	for (int attempt = 0; attempt < 2; attempt++) {
		redis_conn *conn;
		bool reused, timed_out, canceled;

		rc = dlock__redis_conn_get(b, waiter, deadline_us, &conn);
		if (rc != DLOCK_OK)
			return rc;
		reused = conn->reused;
		/* Unchanged on the common path, so no system call is spent on it. */
		dlock__redis_conn_timeout(conn, MIN(dlock__remaining_us(deadline_us),
		                                    b->command_timeout_ms * 1000));
		/* The cancel path shuts this socket down to end the wait. */
		if (!dlock__waiter_io_begin(waiter, conn->ctx->fd)) {
			dlock__redis_conn_put(b, conn, true);
			return dlock__error(DLOCK_ECANCELED, "%s: canceled", b->label);
		}
		rc = dlock__redis_eval(b, conn, script, nkeys, nargs, words, ret);
		timed_out = conn->timed_out;
		canceled = dlock__waiter_io_end(waiter);
		if (rc == DLOCK_EUNAVAILABLE && kept) {
			int fd = dlock__redis_conn_keep(conn);

			if (fd >= 0)
				g_array_append_val(kept, fd);
		}
		/* A canceled connection may have been shut down: never pool it. */
		dlock__redis_conn_put(b, conn, rc != DLOCK_EUNAVAILABLE && !canceled);
		if (rc != DLOCK_EUNAVAILABLE)
			return rc;
		*ret_uncertain = true;
		if (canceled)
			return dlock__error(DLOCK_ECANCELED, "%s: canceled while waiting for an answer",
			                    b->label);
		/* A timeout means a silent server, not a stale connection: a
		 * new connection would only wait out a second timeout. */
		if (!reused || timed_out || dlock__remaining_us(deadline_us) == 0)
			break;
		/* The pooled connections are likely all stale: start afresh. */
		dlock__redis_pool_clear(b);
	}
	return rc;
}
