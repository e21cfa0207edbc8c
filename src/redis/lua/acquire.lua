-- SPDX-License-Identifier: MIT
-- Acquire.  ARGV: token, TTL (ms), wait id ("" for a try that does not
-- queue), our ticket ("" when not queued), entry lease (ms), mode ('r'
-- for READ, 'w' otherwise), "~" for a waiter no grant message can reach
-- (else "").
-- Granted: {1, fencing token}.  Otherwise {0, PTTL of the lock}, and when
-- queueing also our ticket and 1 if our entry is the first live one, else
-- 0.  A semaphore's permit (mode "s<N>"): a READ hold at the same key,
-- granted while fewer than N are live, N kept in KEYS.permits with the set's
-- expiry; {-1, the stored N} when the semaphore is in use (a holder, or a
-- live waiter ahead) with another N.  A reader keeps away from a set that
-- is a semaphore's (KEYS.permits present), as a permit does from readers.
-- With no queue the common paths run before the queue's definitions: a
-- writer's SET NX, a reader's ZADD when the lock is free or shared, and
-- the token.  Over a queue the lock is taken only when it is free
-- (a reader: free or held by readers) and no live entry is ahead of ours:
-- a newcomer never gets ahead of queued waiters, so a reader that comes
-- after a waiting writer waits behind it.  A lock already holding our
-- token was set by an earlier try of this acquire whose answer was lost,
-- or granted to us by a release whose message was lost: it is ours, so a
-- retry is idempotent.  A queueing call adds our entry, or renews its
-- lease in place (same ticket, same position).  The queue expires with
-- its longest entry lease: a queueing call only ever extends it.
--@keys lock fence queue permits
--@argv token ttl wait_id ticket entry_lease mode unreachable

--@include fence.lua

local token, ttl, mode = ARGV.token, ARGV.ttl, ARGV.mode
local sem = tonumber(string.match(mode, '^s(%d+)$'))
local unqueued = redis.call('EXISTS', KEYS.queue) == 0
local took = unqueued and mode == 'w' and redis.call('SET', KEYS.lock, token, 'NX', 'PX', ttl)
if unqueued and mode ~= 'w' then
  local kind = redis.call('TYPE', KEYS.lock).ok
  local stored = tonumber(redis.call('GET', KEYS.permits))
  if kind == 'none' or (kind == 'zset' and stored == sem) then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    if kind == 'zset' then redis.call('ZREMRANGEBYSCORE', KEYS.lock, '-inf', now) end
    if not sem or redis.call('ZCARD', KEYS.lock) < sem then
      redis.call('ZADD', KEYS.lock, string.format('%d', now + tonumber(ttl)), token)
      local top = redis.call('ZRANGE', KEYS.lock, -1, -1, 'WITHSCORES')[2]
      redis.call('PEXPIREAT', KEYS.lock, top)
      if sem then
        redis.call('SET', KEYS.permits, sem)
        redis.call('PEXPIREAT', KEYS.permits, top)
      end
      took = true
    end
  end
end
if took then return {1, fence()} end

--@include queue.lua

local now = now_ms()
local m
local first = 1
if not unqueued then
  settle(now)
  m = mine(ARGV.ticket, ARGV.wait_id)
  local h = head(now)
  if h ~= nil and h ~= m then first = 0 end
end
local held = readers(now)
local stored = tonumber(redis.call('GET', KEYS.permits))
if held == 0 and stored then redis.call('DEL', KEYS.permits) stored = nil end
local function granted()
  if m then redis.call('ZREM', KEYS.queue, m) end
  return {1, fence()}
end
if sem then
  if held > 0 and not stored then held = -1 end
  if stored and stored ~= sem and (held ~= 0 or first == 0) then return {-1, stored} end
  if held >= 0 and (redis.call('ZSCORE', KEYS.lock, token) or (held < sem and first == 1)) then
    add_reader(token, now + tonumber(ttl))
    redis.call('SET', KEYS.permits, sem)
    redis.call('PEXPIREAT', KEYS.permits, redis.call('ZRANGE', KEYS.lock, -1, -1, 'WITHSCORES')[2])
    return granted()
  end
elseif mode == 'r' then
  if held >= 0 and not stored and (first == 1 or redis.call('ZSCORE', KEYS.lock, token)) then
    add_reader(token, now + tonumber(ttl))
    return granted()
  end
elseif held == 0 then
  if first == 1 and redis.call('SET', KEYS.lock, token, 'NX', 'PX', ttl) then
    return granted()
  end
elseif held < 0 and redis.call('GET', KEYS.lock) == token then
  redis.call('PEXPIRE', KEYS.lock, ttl)
  return granted()
end
if ARGV.wait_id == '' then return {0, redis.call('PTTL', KEYS.lock)} end
local ticket
if m then
  redis.call('ZREM', KEYS.queue, m)
  ticket = tonumber(ARGV.ticket)
else
  ticket = fence()
end
local entry = string.format('%d|%d%s%s|%s|%s', now + tonumber(ARGV.entry_lease), tonumber(ttl),
                            sem and 's' or mode == 'r' and 'r' or '', ARGV.unreachable, ARGV.wait_id, token)
redis.call('ZADD', KEYS.queue, ticket, entry)
extend_queue(ARGV.entry_lease)
return {0, redis.call('PTTL', KEYS.lock), ticket, first}
