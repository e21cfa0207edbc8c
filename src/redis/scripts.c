/*
 * The three Lua scripts of the lease protocol and its wait queue, run by
 * EVALSHA.  Each is one atomic step on the server, so no other client can
 * slip between the comparison and the change, and a release hands the
 * lock to the next waiter with no moment at which it is free.
 */
#include <string.h>

#include "clock.h"
#include "error.h"
#include "internal.h"

/*
 * What the acquire and release scripts share.  KEYS: lock, fence counter,
 * wait queue.  The queue is a sorted set scored by arrival ticket (an INCR
 * of the counter: unique and increasing), each member
 * "<entry lease end, server ms>|<hold TTL ms>|<wait id>|<owner token>".
 * An entry whose lease has run out is a waiter that stopped renewing it (its
 * process died, or lost the server): head() drops such entries as it meets
 * them, a bounded number per call.  Numbers reach strings through
 * string.format('%d'), never '..', which would round them to 14 digits.
 *
 * fence(): the next fencing token.  A missing counter (INCR gives 1)
 * starts again from the server's clock in microseconds (reseed()), so
 * tokens keep increasing across a restart that lost it.
 * The uncontended paths run before these definitions: defining them costs
 * the server a closure each, on every call.
 * head(now): the first live entry, nil for none, false when too many dead
 * entries came first to look further this time.
 * mine(ticket, id): our entry, if it is still queued.
 */
#define QUEUE_LUA \
	"local function reseed()\n" \
	"  local t = redis.call('TIME')\n" \
	"  redis.call('SET', KEYS[2], t[1] .. string.sub('000000' .. t[2], -6))\n" \
	"  return redis.call('INCR', KEYS[2])\n" \
	"end\n" \
	"local function fence()\n" \
	"  local n = redis.call('INCR', KEYS[2])\n" \
	"  if n == 1 then n = reseed() end\n" \
	"  return n\n" \
	"end\n" \
	"local function now_ms()\n" \
	"  local t = redis.call('TIME')\n" \
	"  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n" \
	"end\n" \
	"local function head(now)\n" \
	"  for _ = 1, 64 do\n" \
	"    local e = redis.call('ZRANGE', KEYS[3], 0, 0)\n" \
	"    if #e == 0 then return nil end\n" \
	"    if (tonumber(string.match(e[1], '^(%d+)|')) or 0) > now then return e[1] end\n" \
	"    redis.call('ZREM', KEYS[3], e[1])\n" \
	"  end\n" \
	"  return false\n" \
	"end\n" \
	"local function mine(ticket, id)\n" \
	"  if ticket == '' then return nil end\n" \
	"  local m = redis.call('ZRANGEBYSCORE', KEYS[3], ticket, ticket)[1]\n" \
	"  if m and string.match(m, '^%d+|%d+|([^|]+)|') == id then return m end\n" \
	"  return nil\n" \
	"end\n"

/*
 * Acquire.  ARGV: token, TTL (ms), wait id ("" for a try that does not
 * queue), our ticket ("" when not queued), entry lease (ms).
 * Granted: {1, fencing token}.  Otherwise {0, PTTL of the lock}, and when
 * queueing also our ticket and 1 if our entry is the first live one, else
 * 0.
 * With no queue the common path is SET NX and INCR, before the
 * definitions.  Over a queue
 * the lock is taken only when it is free and no live entry is ahead of
 * ours: a newcomer never gets ahead of queued waiters.  A lock already
 * holding our token was set by an earlier try of this acquire whose answer
 * was lost, or granted to us by a release whose message was lost: it is
 * ours, so a retry is idempotent.  A queueing call adds our entry, or
 * renews its lease in place (same ticket, same position).  The entry lease
 * is the same for every client, so the queue's expiry, set to it by each
 * queueing call, covers every entry.
 */
static const char acquire_lua[] =
	"local token, ttl = ARGV[1], ARGV[2]\n"
	"local unqueued = redis.call('EXISTS', KEYS[3]) == 0\n"
	"local took = unqueued and redis.call('SET', KEYS[1], token, 'NX', 'PX', ttl)\n"
	"if took then\n"
	"  local n = redis.call('INCR', KEYS[2])\n"
	"  if n > 1 then return {1, n} end\n"
	"end\n"
	QUEUE_LUA
	"if took then return {1, reseed()} end\n"
	"local now, m\n"
	"local first = 1\n"
	"if not unqueued then\n"
	"  now = now_ms()\n"
	"  m = mine(ARGV[4], ARGV[3])\n"
	"  local h = head(now)\n"
	"  if h ~= nil and h ~= m then first = 0 end\n"
	"  if first == 1 then\n"
	"    if redis.call('SET', KEYS[1], token, 'NX', 'PX', ttl) then\n"
	"      if m then redis.call('ZREM', KEYS[3], m) end\n"
	"      return {1, fence()}\n"
	"    end\n"
	"  end\n"
	"end\n"
	"if redis.call('GET', KEYS[1]) == token then\n"
	"  redis.call('PEXPIRE', KEYS[1], ttl)\n"
	"  if m then redis.call('ZREM', KEYS[3], m) end\n"
	"  return {1, fence()}\n"
	"end\n"
	"if ARGV[3] == '' then return {0, redis.call('PTTL', KEYS[1])} end\n"
	"now = now or now_ms()\n"
	"local ticket\n"
	"if m then\n"
	"  redis.call('ZREM', KEYS[3], m)\n"
	"  ticket = tonumber(ARGV[4])\n"
	"else\n"
	"  ticket = fence()\n"
	"end\n"
	"local entry = string.format('%d|%d|%s|%s', now + tonumber(ARGV[5]), tonumber(ttl),\n"
	"                            ARGV[3], token)\n"
	"redis.call('ZADD', KEYS[3], ticket, entry)\n"
	"redis.call('PEXPIRE', KEYS[3], ARGV[5])\n"
	"return {0, redis.call('PTTL', KEYS[1]), ticket, first}\n";

/*
 * Release, and leaving the queue.  ARGV: token, release channel, the
 * waits' channel prefix, our ticket and wait id ("" when not queued).
 * Our entry, if any, goes first.  Then, if the lock holds our token: 1,
 * and it is handed to the first live waiter, popped from the queue (dead
 * ones before it are dropped, up to 64): the lock set to that waiter's
 * token with its TTL, a fencing token drawn, and "<fencing token>
 * <ticket>" published on the waiter's own channel.  A grant that reaches
 * no subscriber (the waiter is gone) is overwritten by the next, up to 8;
 * when none took it the lock is deleted and "released" goes out
 * on the release channel, to every waiter, so that the next live one
 * takes it by its own try.  With no queue nothing is published: a waiter
 * not queued yet tries once its channel is confirmed, and finds the lock
 * free.  0 when the lock holds another value or none.  PUBLISH goes
 * through pcall: a user without channel rights still releases.  The
 * common case, no queue and no entry of ours, is a compare-and-delete
 * before the definitions.
 */
static const char release_lua[] =
	"if ARGV[4] == '' and redis.call('EXISTS', KEYS[3]) == 0 then\n"
	"  if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"
	"  redis.call('DEL', KEYS[1])\n"
	"  return 1\n"
	"end\n"
	QUEUE_LUA
	"if ARGV[4] ~= '' then\n"
	"  local m = mine(ARGV[4], ARGV[5])\n"
	"  if m then redis.call('ZREM', KEYS[3], m) end\n"
	"end\n"
	"if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"
	"if redis.call('EXISTS', KEYS[3]) == 1 then\n"
	"  local now, tries = now_ms(), 0\n"
	"  for _ = 1, 72 do\n"
	"    local e = redis.call('ZPOPMIN', KEYS[3])\n"
	"    if #e == 0 then break end\n"
	"    local t, ttl, id, token = string.match(e[1], '^(%d+)|(%d+)|([^|]+)|(.*)$')\n"
	"    if token and tonumber(t) > now then\n"
	"      redis.call('SET', KEYS[1], token, 'PX', ttl)\n"
	"      local n = fence()\n"
	"      local heard = redis.pcall('PUBLISH', ARGV[3] .. id,\n"
	"                                string.format('%d %d', n, tonumber(e[2])))\n"
	"      if type(heard) == 'number' and heard > 0 then return 1 end\n"
	"      tries = tries + 1\n"
	"      if tries == 8 then break end\n"
	"    end\n"
	"  end\n"
	"  redis.call('DEL', KEYS[1])\n"
	"  redis.pcall('PUBLISH', ARGV[2], 'released')\n"
	"  return 1\n"
	"end\n"
	"redis.call('DEL', KEYS[1])\n"
	"return 1\n";

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

void dlock__redis_release_words(const redis_names *names, const char *token, const char *ticket,
                                const char *id, const char **words)
{
	words[0] = names->key;
	words[1] = names->fence;
	words[2] = names->queue;
	words[3] = token;
	words[4] = names->released;
	words[5] = names->wait;
	words[6] = ticket;
	words[7] = *ticket ? id : "";
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
