/*
 * The Lua scripts of the lease protocol and its wait queue, and Redlock's,
 * run by EVALSHA.  Each is one atomic step on the server, so no other
 * client can slip between the comparison and the change, and a release
 * hands the lock to the next waiter with no moment at which it is free.
 */
#include <string.h>

#include "clock.h"
#include "error.h"
#include "internal.h"

/*
 * What the scripts share.  KEYS: lock, fence counter, wait queue.
 *
 * The lock is a string (an EXCLUSIVE or WRITE hold: the holder's token,
 * or a peer's value) or a sorted set (READ holds: member = each reader's
 * token, score = the end of its lease in server ms).  The set's expiry
 * follows its latest lease; members whose lease has ended are dropped by
 * readers() before anything looks at them, with ZREMRANGEBYSCORE, so a
 * script costs O(log R) in the number of readers plus what it drops.
 *
 * The queue is a sorted set scored by arrival ticket (an INCR of the
 * counter: unique and increasing), each member
 * "<entry lease end, server ms>|<hold TTL ms><mode><mute>|<wait id>|<owner token>",
 * mode "" for a writer (EXCLUSIVE or WRITE), "r" for a reader: a writer's
 * entry is the one dlock wrote before read-write locks, and such a
 * dlock's release skips a reader's entry as malformed (dead) rather than
 * grant it as a writer.  mute "~" marks a waiter that no message can
 * reach (the server's ACL refused its channel): its grant is neither
 * published nor undone, and its own next try finds the lock its own (a
 * dlock without this skips such an entry as malformed).  An entry
 * whose lease has run out is a waiter that stopped renewing it (its
 * process died, or lost the server): head() drops such entries as it meets
 * them, a bounded number per call.  One more kind of entry, mode "d", at
 * score 0 (ahead of every ticket): a downgrade, the read hold of the owner
 * of the write hold in the lock, whose lease end it carries; the write's
 * release turns it into a reader before anyone queued gets in.  Numbers
 * reach strings through string.format('%d'), never '..', which would
 * round them to 14 digits.
 *
 * fence(): the next fencing token.  A missing counter (INCR gives 1)
 * starts again from the server's clock in microseconds (reseed()), so
 * tokens keep increasing across a restart that lost it.
 * The uncontended paths run before these definitions: defining them costs
 * the server a closure each, on every call.
 * head(now): the first live entry, nil for none, false when too many dead
 * entries came first to look further this time.
 * mine(ticket, id): our entry, if it is still queued.  Ticket "?", sent
 * only by a wait that is ending after a queueing try whose answer never
 * came: that try may have queued an entry under a ticket we never
 * learned, so it is found by wait id, a walk of the whole queue (any
 * second entry of ours is dropped on the way).
 * readers(now): -1 when the lock is a string, else the number of live
 * readers (0: free).
 * add_reader(token, lease end): add or re-score a reader; the set expires
 * with its latest lease.
 * downgrade(): the downgrade entry, and its lease end, token and the
 * write hold's wait id (the random part of the write's token).
 * settle(now): a downgrade whose write hold is gone becomes the reader it
 * stands for if the lock is free (the write released in the background,
 * or expired) or shared; if someone else's string holds it (the write
 * expired and a peer that does not queue took it), the read hold it
 * stands for can no longer be granted in order, and the entry goes: it
 * would otherwise block the queue, and become a reader when the peer
 * lets go.  The read hold's next renewal then reports it LOST.
 * heard(id, mute, n, ticket): tell a waiter of its grant, fencing token
 * n, on its own channel; whether it heard (a mute waiter counts as
 * heard: it finds the grant by its own try).  So does a waiter that the
 * releaser may not tell (its ACL user has no channel rights: PUBLISH is
 * refused): nobody can say whether it listens, and the grant stands for
 * its own next try to find, as a mute one's does.
 * grant(now): the lock is free: hand it to the head writer, or to every
 * reader at the head up to the next writer (a downgrade without a
 * message: its owner knows).  A grant is published on the waiter's own
 * channel as "<fencing token> <ticket>"; one that reaches no subscriber
 * (the waiter is gone) is undone, up to 8.  When nobody took it the lock
 * stays free and "released" goes out on the release channel, so the next
 * live waiter takes it by its own try.  PUBLISH goes through pcall: a
 * user without channel rights still releases, and hands the lock on.
 * ARGV[2] and ARGV[3]: the release channel and the waits' channel prefix.
 */
static const char queue_lua[] =
	"local function reseed()\n"
	"  local t = redis.call('TIME')\n"
	"  redis.call('SET', KEYS[2], t[1] .. string.sub('000000' .. t[2], -6))\n"
	"  return redis.call('INCR', KEYS[2])\n"
	"end\n"
	"local function fence()\n"
	"  local n = redis.call('INCR', KEYS[2])\n"
	"  if n == 1 then n = reseed() end\n"
	"  return n\n"
	"end\n"
	"local function now_ms()\n"
	"  local t = redis.call('TIME')\n"
	"  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
	"end\n"
	"local function head(now)\n"
	"  for _ = 1, 64 do\n"
	"    local e = redis.call('ZRANGE', KEYS[3], 0, 0)\n"
	"    if #e == 0 then return nil end\n"
	"    if (tonumber(string.match(e[1], '^(%d+)|')) or 0) > now then return e[1] end\n"
	"    redis.call('ZREM', KEYS[3], e[1])\n"
	"  end\n"
	"  return false\n"
	"end\n"
	"local function mine(ticket, id)\n"
	"  if ticket == '' then return nil end\n"
	"  if ticket == '?' then\n"
	"    local found\n"
	"    for _, e in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do\n"
	"      if string.match(e, '^%d+|%d+%a?~?|([^|]+)|') == id then\n"
	"        if found then redis.call('ZREM', KEYS[3], e) else found = e end\n"
	"      end\n"
	"    end\n"
	"    return found\n"
	"  end\n"
	"  local m = redis.call('ZRANGEBYSCORE', KEYS[3], ticket, ticket)[1]\n"
	"  if m and string.match(m, '^%d+|%d+%a?~?|([^|]+)|') == id then return m end\n"
	"  return nil\n"
	"end\n"
	"local function readers(now)\n"
	"  local kind = redis.call('TYPE', KEYS[1]).ok\n"
	"  if kind == 'none' then return 0 end\n"
	"  if kind ~= 'zset' then return -1 end\n"
	"  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)\n"
	"  return redis.call('ZCARD', KEYS[1])\n"
	"end\n"
	"local function add_reader(token, lease_end)\n"
	"  redis.call('ZADD', KEYS[1], string.format('%d', lease_end), token)\n"
	"  redis.call('PEXPIREAT', KEYS[1], redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2])\n"
	"end\n"
	"local function downgrade()\n"
	"  local d = redis.call('ZRANGEBYSCORE', KEYS[3], 0, 0)[1]\n"
	"  if not d then return nil end\n"
	"  local t, id, token = string.match(d, '^(%d+)|%d+d|([^|]+)|(.*)$')\n"
	"  return d, tonumber(t), token, id\n"
	"end\n"
	"local function settle(now)\n"
	"  local d, t, token, id = downgrade()\n"
	"  if not d then return end\n"
	"  local kind = redis.call('TYPE', KEYS[1]).ok\n"
	"  if kind == 'string' and\n"
	"     string.match(redis.call('GET', KEYS[1]), '^[^:]*:([^:]*)') == id then return end\n"
	"  redis.call('ZREM', KEYS[3], d)\n"
	"  if (kind == 'none' or kind == 'zset') and token and t > now then add_reader(token, t) end\n"
	"end\n"
	"local function extend_queue(ms)\n"
	"  if redis.call('PTTL', KEYS[3]) < tonumber(ms) then redis.call('PEXPIRE', KEYS[3], ms) end\n"
	"end\n";

static const char grant_lua[] =
	"local function heard(id, mute, n, ticket)\n"
	"  if mute == '~' then return true end\n"
	"  local r = redis.pcall('PUBLISH', ARGV[3] .. id, string.format('%d %d', n, tonumber(ticket)))\n"
	"  return type(r) ~= 'number' or r > 0\n"
	"end\n"
	"local function grant(now)\n"
	"  redis.call('DEL', KEYS[1])\n"
	"  local tries, shared = 0, 0\n"
	"  for _ = 1, 72 do\n"
	"    local e = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')\n"
	"    if #e == 0 then break end\n"
	"    local t, ttl, mode, mute, id, token =\n"
	"      string.match(e[1], '^(%d+)|(%d+)(%a?)(~?)|([^|]+)|(.*)$')\n"
	"    local live = token and tonumber(t) > now\n"
	"    if mode == '' then mode = 'w' end\n"
	"    if live and mode == 'w' and shared > 0 then break end\n"
	"    if live and mode == 's' then break end\n"
	"    redis.call('ZREM', KEYS[3], e[1])\n"
	"    if live and mode == 'd' then\n"
	"      add_reader(token, tonumber(t))\n"
	"      shared = shared + 1\n"
	"    elseif live then\n"
	"      if mode == 'w' then\n"
	"        redis.call('SET', KEYS[1], token, 'PX', ttl)\n"
	"      else\n"
	"        add_reader(token, now + tonumber(ttl))\n"
	"      end\n"
	"      if heard(id, mute, fence(), e[2]) then\n"
	"        if mode == 'w' then return end\n"
	"        shared = shared + 1\n"
	"      else\n"
	"        if mode == 'w' then redis.call('DEL', KEYS[1]) else redis.call('ZREM', KEYS[1], token) end\n"
	"        tries = tries + 1\n"
	"        if tries == 8 then break end\n"
	"      end\n"
	"    end\n"
	"  end\n"
	"  if shared > 0 then return end\n"
	"  redis.call('DEL', KEYS[1])\n"
	"  redis.pcall('PUBLISH', ARGV[2], 'released')\n"
	"end\n";

/*
 * grant_permits(now, N): a semaphore's permit was given back: hand the
 * free permits to the live semaphore waiters at the head of the queue, as
 * grant() hands the lock (the same message, the same undo of a grant that
 * nobody heard, up to 8).  A lock's waiter at the head stops it: it takes
 * the resource by its own try once every permit is back, told by
 * "released" on the release channel, which also goes out when free
 * permits are left for waiters that were not served.
 */
static const char grant_permits_lua[] =
	"local function grant_permits(now, sem)\n"
	"  local tries = 0\n"
	"  for _ = 1, 72 do\n"
	"    if redis.call('ZCARD', KEYS[1]) >= sem then return end\n"
	"    local e = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')\n"
	"    if #e == 0 then return end\n"
	"    local t, ttl, mode, mute, id, token =\n"
	"      string.match(e[1], '^(%d+)|(%d+)(%a?)(~?)|([^|]+)|(.*)$')\n"
	"    local live = token and tonumber(t) > now\n"
	"    if live and mode ~= 's' then break end\n"
	"    redis.call('ZREM', KEYS[3], e[1])\n"
	"    if live then\n"
	"      add_reader(token, now + tonumber(ttl))\n"
	"      if not heard(id, mute, fence(), e[2]) then\n"
	"        redis.call('ZREM', KEYS[1], token)\n"
	"        tries = tries + 1\n"
	"        if tries == 8 then break end\n"
	"      end\n"
	"    end\n"
	"  end\n"
	"  redis.pcall('PUBLISH', ARGV[2], 'released')\n"
	"end\n";

/*
 * Acquire.  ARGV: token, TTL (ms), wait id ("" for a try that does not
 * queue), our ticket ("" when not queued), entry lease (ms), mode ('r'
 * for READ, 'w' otherwise), "~" for a waiter no grant message can reach
 * (else "").
 * Granted: {1, fencing token}.  Otherwise {0, PTTL of the lock}, and when
 * queueing also our ticket and 1 if our entry is the first live one, else
 * 0.  A semaphore's permit (mode "s<N>"): a READ hold at the same key,
 * granted while fewer than N are live, N kept in KEYS[4] with the set's
 * expiry; {-1, the stored N} when the semaphore is in use (a holder, or a
 * live waiter ahead) with another N.  A reader keeps away from a set that
 * is a semaphore's (KEYS[4] present), as a permit does from readers.
 * With no queue the common paths run before the definitions: a writer's
 * SET NX and INCR, a reader's ZADD and INCR when the lock is free or
 * shared.  Over a queue the lock is taken only when it is free
 * (a reader: free or held by readers) and no live entry is ahead of ours:
 * a newcomer never gets ahead of queued waiters, so a reader that comes
 * after a waiting writer waits behind it.  A lock already holding our
 * token was set by an earlier try of this acquire whose answer was lost,
 * or granted to us by a release whose message was lost: it is ours, so a
 * retry is idempotent.  A queueing call adds our entry, or renews its
 * lease in place (same ticket, same position).  The queue expires with
 * its longest entry lease: a queueing call only ever extends it.
 */
static const char acquire_head[] =
	"local token, ttl, mode = ARGV[1], ARGV[2], ARGV[6]\n"
	"local sem = tonumber(string.match(mode, '^s(%d+)$'))\n"
	"local unqueued = redis.call('EXISTS', KEYS[3]) == 0\n"
	"local took = unqueued and mode == 'w' and redis.call('SET', KEYS[1], token, 'NX', 'PX', ttl)\n"
	"if unqueued and mode ~= 'w' then\n"
	"  local kind = redis.call('TYPE', KEYS[1]).ok\n"
	"  local stored = tonumber(redis.call('GET', KEYS[4]))\n"
	"  if kind == 'none' or (kind == 'zset' and stored == sem) then\n"
	"    local t = redis.call('TIME')\n"
	"    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
	"    if kind == 'zset' then redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now) end\n"
	"    if not sem or redis.call('ZCARD', KEYS[1]) < sem then\n"
	"      redis.call('ZADD', KEYS[1], string.format('%d', now + tonumber(ttl)), token)\n"
	"      local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2]\n"
	"      redis.call('PEXPIREAT', KEYS[1], top)\n"
	"      if sem then\n"
	"        redis.call('SET', KEYS[4], sem)\n"
	"        redis.call('PEXPIREAT', KEYS[4], top)\n"
	"      end\n"
	"      took = true\n"
	"    end\n"
	"  end\n"
	"end\n"
	"if took then\n"
	"  local n = redis.call('INCR', KEYS[2])\n"
	"  if n > 1 then return {1, n} end\n"
	"end\n";

static const char acquire_body[] =
	"if took then return {1, reseed()} end\n"
	"local now = now_ms()\n"
	"local m\n"
	"local first = 1\n"
	"if not unqueued then\n"
	"  settle(now)\n"
	"  m = mine(ARGV[4], ARGV[3])\n"
	"  local h = head(now)\n"
	"  if h ~= nil and h ~= m then first = 0 end\n"
	"end\n"
	"local held = readers(now)\n"
	"local stored = tonumber(redis.call('GET', KEYS[4]))\n"
	"if held == 0 and stored then redis.call('DEL', KEYS[4]) stored = nil end\n"
	"local function granted()\n"
	"  if m then redis.call('ZREM', KEYS[3], m) end\n"
	"  return {1, fence()}\n"
	"end\n"
	"if sem then\n"
	"  if held > 0 and not stored then held = -1 end\n"
	"  if stored and stored ~= sem and (held ~= 0 or first == 0) then return {-1, stored} end\n"
	"  if held >= 0 and (redis.call('ZSCORE', KEYS[1], token) or (held < sem and first == 1)) then\n"
	"    add_reader(token, now + tonumber(ttl))\n"
	"    redis.call('SET', KEYS[4], sem)\n"
	"    redis.call('PEXPIREAT', KEYS[4], redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2])\n"
	"    return granted()\n"
	"  end\n"
	"elseif mode == 'r' then\n"
	"  if held >= 0 and not stored and (first == 1 or redis.call('ZSCORE', KEYS[1], token)) then\n"
	"    add_reader(token, now + tonumber(ttl))\n"
	"    return granted()\n"
	"  end\n"
	"elseif held == 0 then\n"
	"  if first == 1 and redis.call('SET', KEYS[1], token, 'NX', 'PX', ttl) then\n"
	"    return granted()\n"
	"  end\n"
	"elseif held < 0 and redis.call('GET', KEYS[1]) == token then\n"
	"  redis.call('PEXPIRE', KEYS[1], ttl)\n"
	"  return granted()\n"
	"end\n"
	"if ARGV[3] == '' then return {0, redis.call('PTTL', KEYS[1])} end\n"
	"local ticket\n"
	"if m then\n"
	"  redis.call('ZREM', KEYS[3], m)\n"
	"  ticket = tonumber(ARGV[4])\n"
	"else\n"
	"  ticket = fence()\n"
	"end\n"
	"local entry = string.format('%d|%d%s%s|%s|%s', now + tonumber(ARGV[5]), tonumber(ttl),\n"
	"                            sem and 's' or mode == 'r' and 'r' or '', ARGV[7], ARGV[3], token)\n"
	"redis.call('ZADD', KEYS[3], ticket, entry)\n"
	"extend_queue(ARGV[5])\n"
	"return {0, redis.call('PTTL', KEYS[1]), ticket, first}\n";

/*
 * Release, and leaving the queue.  ARGV: token, release channel, the
 * waits' channel prefix, our ticket and wait id ("" when not queued), mode
 * ('r' for READ, 'w' otherwise).  Our entry, if any, goes first.  Then 1
 * if the hold was ours, 0 if the lock holds another value or none (the
 * lease had ended).  A writer's release, and a reader's that leaves no
 * reader, frees the lock and grant()s it to the queue.  A reader whose
 * hold is still a downgrade entry (the write not released yet) just
 * removes it: the write's release is then a plain one.  The common cases,
 * no queue and no entry of ours, run before the definitions: a writer's
 * compare-and-delete, a reader's ZREM (with nobody queued there is no one
 * to grant to).
 */
static const char release_head[] =
	"if ARGV[4] == '' and redis.call('EXISTS', KEYS[3]) == 0 then\n"
	"  if ARGV[6] == 'w' then\n"
	"    if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"
	"    redis.call('DEL', KEYS[1])\n"
	"    return 1\n"
	"  end\n"
	"  if redis.call('TYPE', KEYS[1]).ok ~= 'zset' then return 0 end\n"
	"  local t = redis.call('TIME')\n"
	"  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
	"  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)\n"
	"  if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end\n"
	"  local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2]\n"
	"  if top then\n"
	"    redis.call('PEXPIREAT', KEYS[1], top)\n"
	"    redis.call('PEXPIREAT', KEYS[4], top)\n"
	"  else\n"
	"    redis.call('DEL', KEYS[4])\n"
	"  end\n"
	"  return 1\n"
	"end\n";

static const char release_body[] =
	"if ARGV[4] ~= '' then\n"
	"  local m = mine(ARGV[4], ARGV[5])\n"
	"  if m then redis.call('ZREM', KEYS[3], m) end\n"
	"end\n"
	"local now = now_ms()\n"
	"local queued = redis.call('EXISTS', KEYS[3]) == 1\n"
	"local sem = tonumber(string.match(ARGV[6], '^s(%d+)$'))\n"
	"if sem then\n"
	"  if readers(now) <= 0 or redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end\n"
	"  if queued then grant_permits(now, sem) end\n"
	"  local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2]\n"
	"  if top then\n"
	"    redis.call('PEXPIREAT', KEYS[1], top)\n"
	"    redis.call('PEXPIREAT', KEYS[4], top)\n"
	"  else\n"
	"    redis.call('DEL', KEYS[4])\n"
	"  end\n"
	"  return 1\n"
	"end\n"
	"if ARGV[6] == 'r' then\n"
	"  if queued then settle(now) end\n"
	"  local held = readers(now)\n"
	"  if held > 0 and redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then\n"
	"    if held > 1 then\n"
	"      redis.call('PEXPIREAT', KEYS[1], redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2])\n"
	"    elseif queued then\n"
	"      grant(now)\n"
	"    end\n"
	"    return 1\n"
	"  end\n"
	"  local d, _, token = downgrade()\n"
	"  if d and token == ARGV[1] then\n"
	"    redis.call('ZREM', KEYS[3], d)\n"
	"    return 1\n"
	"  end\n"
	"  return 0\n"
	"end\n"
	"if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"
	"if queued then grant(now) else redis.call('DEL', KEYS[1]) end\n"
	"return 1\n";

/*
 * Renew.  KEYS: lock, fence counter, queue.  ARGV: token, TTL (ms), mode,
 * and for a reader made by a downgrade the write hold's token ("" for
 * none).  1 renewed, 0 not ours.  A writer is a compare-and-PEXPIRE before
 * the definitions.  A reader re-scores its own member only; while it is
 * still a downgrade entry, the entry's lease is renewed as long as the
 * lock holds its write hold's token.
 */
static const char renew_head[] =
	"if ARGV[3] == 'w' then\n"
	"  if redis.pcall('GET', KEYS[1]) == ARGV[1] then\n"
	"    return redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
	"  end\n"
	"  return 0\n"
	"end\n";

static const char renew_body[] =
	"local now, ttl = now_ms(), tonumber(ARGV[2])\n"
	"settle(now)\n"
	"local held = readers(now)\n"
	"if held > 0 then\n"
	"  if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end\n"
	"  redis.call('ZADD', KEYS[1], 'XX', string.format('%d', now + ttl), ARGV[1])\n"
	"  local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2]\n"
	"  redis.call('PEXPIREAT', KEYS[1], top)\n"
	"  redis.call('PEXPIREAT', KEYS[4], top)\n"
	"  return 1\n"
	"end\n"
	"if held < 0 and ARGV[4] ~= '' and redis.call('GET', KEYS[1]) == ARGV[4] then\n"
	"  local d, _, token = downgrade()\n"
	"  if d and token == ARGV[1] then\n"
	"    redis.call('ZREM', KEYS[3], d)\n"
	"    redis.call('ZADD', KEYS[3], 0, (string.gsub(d, '^%d+', string.format('%d', now + ttl))))\n"
	"    extend_queue(ttl)\n"
	"    return 1\n"
	"  end\n"
	"end\n"
	"return 0\n";

/*
 * Downgrade: a read hold for the owner of the write hold in the lock,
 * granted at once.  KEYS as for acquire.  ARGV: the write hold's token,
 * the reader's token, its TTL (ms), the write's wait id.  {1, fencing
 * token}, or {0} when the lock does not hold the write's token (its lease
 * ended).  The reader waits, as the downgrade entry at the head of the
 * queue, for the write's release to make it a reader.
 */
static const char downgrade_body[] =
	"if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then return {0} end\n"
	"local ttl = tonumber(ARGV[3])\n"
	"redis.call('ZREMRANGEBYSCORE', KEYS[3], 0, 0)\n"
	"redis.call('ZADD', KEYS[3], 0, string.format('%d|%dd|%s|%s', now_ms() + ttl, ttl, ARGV[4],\n"
	"                                             ARGV[2]))\n"
	"extend_queue(ttl)\n"
	"return {1, fence()}\n";

/*
 * Redlock (SPEC 10): the scripts each master runs.  KEYS: lock, fence
 * counter.  No queue: per-master queues could split a grant.
 *
 * Acquire, ARGV token, TTL (ms): take the lock (or find it ours already:
 * an earlier round's answer was lost) and return {1, the counter} without
 * drawing from it, the counter seeded from the server's clock in
 * microseconds when missing; else {0, PTTL}.
 */
static const char rl_acquire[] =
	"if redis.pcall('GET', KEYS[1]) == ARGV[1] then\n"
	"  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
	"elseif not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then\n"
	"  return {0, redis.call('PTTL', KEYS[1])}\n"
	"end\n"
	"local c = redis.call('GET', KEYS[2])\n"
	"if not c then\n"
	"  local t = redis.call('TIME')\n"
	"  c = t[1] .. string.sub('000000' .. t[2], -6)\n"
	"  redis.call('SET', KEYS[2], c)\n"
	"end\n"
	"return {1, tonumber(c)}\n";

/* The fencing round, ARGV token, the token chosen: the counter becomes
 * max(counter, token), only while the lock is still ours.  1, or 0. */
static const char rl_fence[] =
	"if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"
	"if (tonumber(redis.call('GET', KEYS[2])) or 0) < tonumber(ARGV[2]) then\n"
	"  redis.call('SET', KEYS[2], ARGV[2])\n"
	"end\n"
	"return 1\n";

/* Release, ARGV token, release channel: compare-and-delete, then wake the
 * waiters.  1 if it was ours, else 0. */
static const char rl_release[] =
	"if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"
	"redis.call('DEL', KEYS[1])\n"
	"redis.pcall('PUBLISH', ARGV[2], 'released')\n"
	"return 1\n";

/* Renew, ARGV token, TTL (ms): compare-and-PEXPIRE.  1, or 0. */
static const char rl_renew[] =
	"if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"
	"redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
	"return 1\n";

/* Query: {the lock's value ('' when none, or not a string), its PTTL,
 * the counter (0 when none)}. */
static const char rl_query[] =
	"local v = redis.pcall('GET', KEYS[1])\n"
	"if type(v) ~= 'string' then v = '' end\n"
	"return {v, redis.call('PTTL', KEYS[1]), tonumber(redis.call('GET', KEYS[2])) or 0}\n";

/* Each script's parts, in order, NULL-terminated: joined when the
 * backend opens (one string literal of them all would pass the 4095
 * characters C11 promises). */
static const char *const parts[SCRIPT_COUNT][6] = {
	[SCRIPT_ACQUIRE] = { acquire_head, queue_lua, acquire_body, NULL },
	[SCRIPT_RELEASE] = { release_head, queue_lua, grant_lua, grant_permits_lua, release_body, NULL },
	[SCRIPT_RENEW] = { renew_head, queue_lua, renew_body, NULL },
	[SCRIPT_DOWNGRADE] = { queue_lua, downgrade_body, NULL },
	[SCRIPT_RL_ACQUIRE] = { rl_acquire, NULL },
	[SCRIPT_RL_FENCE] = { rl_fence, NULL },
	[SCRIPT_RL_RELEASE] = { rl_release, NULL },
	[SCRIPT_RL_RENEW] = { rl_renew, NULL },
	[SCRIPT_RL_QUERY] = { rl_query, NULL },
};

const char *dlock__redis_script_body(const dlock__backend *b, redis_script script)
{
	return b->script_body[script];
}

void dlock__redis_release_words(const redis_names *names, const char *token, const char *ticket,
                                const char *id, const char *mode, const char **words)
{
	words[0] = names->key;
	words[1] = names->fence;
	words[2] = names->queue;
	words[3] = names->permits;
	words[4] = token;
	words[5] = names->released;
	words[6] = names->wait;
	words[7] = ticket;
	words[8] = *ticket ? id : "";
	words[9] = mode;
}

void dlock__redis_scripts_init(dlock__backend *b)
{
	for (int i = 0; i < SCRIPT_COUNT; i++) {
		GString *body = g_string_new(NULL);

		for (int k = 0; parts[i][k]; k++)
			g_string_append(body, parts[i][k]);
		b->script_body[i] = g_string_free(body, FALSE);
		b->script_sha[i] = g_compute_checksum_for_string(G_CHECKSUM_SHA1, b->script_body[i], -1);
	}
}

void dlock__redis_scripts_clear(dlock__backend *b)
{
	for (int i = 0; i < SCRIPT_COUNT; i++) {
		g_free(b->script_sha[i]);
		g_free(b->script_body[i]);
	}
}

bool dlock__redis_is_noscript(const redisReply *reply)
{
	return reply->type == REDIS_REPLY_ERROR && reply->len >= 8 &&
	       strncmp(reply->str, "NOSCRIPT", 8) == 0;
}

int dlock__redis_eval(dlock__backend *b, redis_conn *conn, redis_script script, int nkeys,
                      int nargs, const char **words, redisReply **ret)
{
	const char *argv[3 + 11];
	char nkeys_text[8];
	redisReply *reply;
	int argc = 3 + nkeys + nargs;
	int rc;

	g_assert(nkeys + nargs <= 11);
	g_snprintf(nkeys_text, sizeof(nkeys_text), "%d", nkeys);
	argv[0] = "EVALSHA";
	argv[1] = b->script_sha[script];
	argv[2] = nkeys_text;
	memcpy(&argv[3], words, sizeof(*words) * (size_t)(nkeys + nargs));

	rc = dlock__redis_command(b, conn, argc, argv, NULL, &reply);
	if (rc == DLOCK_OK && dlock__redis_is_noscript(reply)) {
		const char *load[3] = { "SCRIPT", "LOAD", b->script_body[script] };

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
		bool reused, timed_out, canceled, unanswered;

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
		/* A timeout means a silent server, not a stale connection: a
		 * new connection would only wait out a second timeout. */
		if (!reused || timed_out || dlock__remaining_us(deadline_us) == 0)
			break;
		/* The pooled connections are likely all stale: start afresh. */
		dlock__redis_pool_clear(b);
	}
	return rc;
}
