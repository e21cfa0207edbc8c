-- Acquire.  ARGV: token, TTL (ms), wait id ("" for a try that does not
-- queue), our ticket ("" when not queued), entry lease (ms), mode ('r'
-- for READ, 'w' otherwise), "~" for a waiter no grant message can reach
-- (else "").
-- Granted: {1, fencing token}.  Otherwise {0, PTTL of the lock}, and when
-- queueing also our ticket and 1 if our entry is the first live one, else
-- 0.  A semaphore's permit (mode "s<N>"): a READ hold at the same key,
-- granted while fewer than N are live, N kept in KEYS[4] with the set's
-- expiry; {-1, the stored N} when the semaphore is in use (a holder, or a
-- live waiter ahead) with another N.  A reader keeps away from a set that
-- is a semaphore's (KEYS[4] present), as a permit does from readers.
-- With no queue the common paths run before the definitions: a writer's
-- SET NX and INCR, a reader's ZADD and INCR when the lock is free or
-- shared.  Over a queue the lock is taken only when it is free
-- (a reader: free or held by readers) and no live entry is ahead of ours:
-- a newcomer never gets ahead of queued waiters, so a reader that comes
-- after a waiting writer waits behind it.  A lock already holding our
-- token was set by an earlier try of this acquire whose answer was lost,
-- or granted to us by a release whose message was lost: it is ours, so a
-- retry is idempotent.  A queueing call adds our entry, or renews its
-- lease in place (same ticket, same position).  The queue expires with
-- its longest entry lease: a queueing call only ever extends it.

local token, ttl, mode = ARGV[1], ARGV[2], ARGV[6]
local sem = tonumber(string.match(mode, '^s(%d+)$'))
local unqueued = redis.call('EXISTS', KEYS[3]) == 0
local took = unqueued and mode == 'w' and redis.call('SET', KEYS[1], token, 'NX', 'PX', ttl)
if unqueued and mode ~= 'w' then
  local kind = redis.call('TYPE', KEYS[1]).ok
  local stored = tonumber(redis.call('GET', KEYS[4]))
  if kind == 'none' or (kind == 'zset' and stored == sem) then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    if kind == 'zset' then redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now) end
    if not sem or redis.call('ZCARD', KEYS[1]) < sem then
      redis.call('ZADD', KEYS[1], string.format('%d', now + tonumber(ttl)), token)
      local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2]
      redis.call('PEXPIREAT', KEYS[1], top)
      if sem then
        redis.call('SET', KEYS[4], sem)
        redis.call('PEXPIREAT', KEYS[4], top)
      end
      took = true
    end
  end
end
if took then
  local n = redis.call('INCR', KEYS[2])
  if n > 1 then return {1, n} end
end

--@include queue.lua

if took then return {1, reseed()} end
local now = now_ms()
local m
local first = 1
if not unqueued then
  settle(now)
  m = mine(ARGV[4], ARGV[3])
  local h = head(now)
  if h ~= nil and h ~= m then first = 0 end
end
local held = readers(now)
local stored = tonumber(redis.call('GET', KEYS[4]))
if held == 0 and stored then redis.call('DEL', KEYS[4]) stored = nil end
local function granted()
  if m then redis.call('ZREM', KEYS[3], m) end
  return {1, fence()}
end
if sem then
  if held > 0 and not stored then held = -1 end
  if stored and stored ~= sem and (held ~= 0 or first == 0) then return {-1, stored} end
  if held >= 0 and (redis.call('ZSCORE', KEYS[1], token) or (held < sem and first == 1)) then
    add_reader(token, now + tonumber(ttl))
    redis.call('SET', KEYS[4], sem)
    redis.call('PEXPIREAT', KEYS[4], redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2])
    return granted()
  end
elseif mode == 'r' then
  if held >= 0 and not stored and (first == 1 or redis.call('ZSCORE', KEYS[1], token)) then
    add_reader(token, now + tonumber(ttl))
    return granted()
  end
elseif held == 0 then
  if first == 1 and redis.call('SET', KEYS[1], token, 'NX', 'PX', ttl) then
    return granted()
  end
elseif held < 0 and redis.call('GET', KEYS[1]) == token then
  redis.call('PEXPIRE', KEYS[1], ttl)
  return granted()
end
if ARGV[3] == '' then return {0, redis.call('PTTL', KEYS[1])} end
local ticket
if m then
  redis.call('ZREM', KEYS[3], m)
  ticket = tonumber(ARGV[4])
else
  ticket = fence()
end
local entry = string.format('%d|%d%s%s|%s|%s', now + tonumber(ARGV[5]), tonumber(ttl),
                            sem and 's' or mode == 'r' and 'r' or '', ARGV[7], ARGV[3], token)
redis.call('ZADD', KEYS[3], ticket, entry)
extend_queue(ARGV[5])
return {0, redis.call('PTTL', KEYS[1]), ticket, first}
