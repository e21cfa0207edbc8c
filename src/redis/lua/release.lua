-- SPDX-License-Identifier: MIT
-- Release, and leaving the queue.  ARGV: token, release channel, the
-- waits' channel prefix, our ticket and wait id ("" when not queued), mode
-- ('r' for READ, 'w' otherwise), and the command that publishes (PUBLISH,
-- or SPUBLISH on a cluster).  Our entry, if any, goes first.  Then 1
-- if the hold was ours, 0 if the lock holds another value or none (the
-- lease had ended).  A writer's release, and a reader's that leaves no
-- reader, frees the lock and grant()s it to the queue.  A reader whose
-- hold is still a downgrade entry (the write not released yet) just
-- removes it: the write's release is then a plain one.  The common cases,
-- no queue and no entry of ours, run before the definitions: a writer's
-- compare-and-delete, a reader's ZREM (with nobody queued there is no one
-- to grant to).
--@keys lock fence queue permits
--@argv token released waits ticket wait_id mode publish

if ARGV.ticket == '' and redis.call('EXISTS', KEYS.queue) == 0 then
  if ARGV.mode == 'w' then
    if redis.pcall('GET', KEYS.lock) ~= ARGV.token then return 0 end
    redis.call('DEL', KEYS.lock)
    return 1
  end
  if redis.call('TYPE', KEYS.lock).ok ~= 'zset' then return 0 end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('ZREMRANGEBYSCORE', KEYS.lock, '-inf', now)
  if redis.call('ZREM', KEYS.lock, ARGV.token) == 0 then return 0 end
  local top = redis.call('ZRANGE', KEYS.lock, -1, -1, 'WITHSCORES')[2]
  if top then
    redis.call('PEXPIREAT', KEYS.lock, top)
    redis.call('PEXPIREAT', KEYS.permits, top)
  else
    redis.call('DEL', KEYS.permits)
  end
  return 1
end

--@include fence.lua
--@include queue.lua

-- grant(now): the lock is free: hand it to the head writer, or to every
-- reader at the head up to the next writer (a downgrade without a
-- message: its owner knows).  A grant is published on the waiter's own
-- channel as "<fencing token> <ticket>"; one that reaches no subscriber
-- (the waiter is gone) is undone, up to 8.  When nobody took it the lock
-- stays free and "released" goes out on the release channel, so the next
-- live waiter takes it by its own try.  PUBLISH goes through pcall: a
-- user without channel rights still releases, and hands the lock on.
-- heard(id, mute, n, ticket): tell a waiter of its grant, fencing token
-- n, on its own channel; whether it heard (a mute waiter counts as
-- heard: it finds the grant by its own try).  So does a waiter that the
-- releaser may not tell (its ACL user has no channel rights: PUBLISH is
-- refused): nobody can say whether it listens, and the grant stands for
-- its own next try to find, as a mute one's does.
-- ARGV[2] and ARGV[3]: the release channel and the waits' channel prefix.

local function heard(id, mute, n, ticket)
  if mute == '~' then return true end
  local r = redis.pcall(ARGV.publish, ARGV.waits .. id, string.format('%d %d', n, tonumber(ticket)))
  return type(r) ~= 'number' or r > 0
end
local function grant(now)
  redis.call('DEL', KEYS.lock)
  local tries, shared = 0, 0
  for _ = 1, 72 do
    local e = redis.call('ZRANGE', KEYS.queue, 0, 0, 'WITHSCORES')
    if #e == 0 then break end
    local t, ttl, mode, mute, id, token =
      string.match(e[1], '^(%d+)|(%d+)(%a?)(~?)|([^|]+)|(.*)$')
    local live = token and tonumber(t) > now
    if mode == '' then mode = 'w' end
    if live and mode == 'w' and shared > 0 then break end
    if live and mode == 's' then break end
    redis.call('ZREM', KEYS.queue, e[1])
    if live and mode == 'd' then
      add_reader(token, tonumber(t))
      shared = shared + 1
    elseif live then
      if mode == 'w' then
        redis.call('SET', KEYS.lock, token, 'PX', ttl)
      else
        add_reader(token, now + tonumber(ttl))
      end
      if heard(id, mute, fence(), e[2]) then
        if mode == 'w' then return end
        shared = shared + 1
      else
        if mode == 'w' then redis.call('DEL', KEYS.lock) else redis.call('ZREM', KEYS.lock, token) end
        tries = tries + 1
        if tries == 8 then break end
      end
    end
  end
  if shared > 0 then return end
  redis.call('DEL', KEYS.lock)
  redis.pcall(ARGV.publish, ARGV.released, 'released')
end

-- grant_permits(now, N): a semaphore's permit was given back: hand the
-- free permits to the live semaphore waiters at the head of the queue, as
-- grant() hands the lock (the same message, the same undo of a grant that
-- nobody heard, up to 8).  A lock's waiter at the head stops it: it takes
-- the resource by its own try once every permit is back, told by
-- "released" on the release channel, which also goes out when free
-- permits are left for waiters that were not served.

local function grant_permits(now, sem)
  local tries = 0
  for _ = 1, 72 do
    if redis.call('ZCARD', KEYS.lock) >= sem then return end
    local e = redis.call('ZRANGE', KEYS.queue, 0, 0, 'WITHSCORES')
    if #e == 0 then return end
    local t, ttl, mode, mute, id, token =
      string.match(e[1], '^(%d+)|(%d+)(%a?)(~?)|([^|]+)|(.*)$')
    local live = token and tonumber(t) > now
    if live and mode ~= 's' then break end
    redis.call('ZREM', KEYS.queue, e[1])
    if live then
      add_reader(token, now + tonumber(ttl))
      if not heard(id, mute, fence(), e[2]) then
        redis.call('ZREM', KEYS.lock, token)
        tries = tries + 1
        if tries == 8 then break end
      end
    end
  end
  redis.pcall(ARGV.publish, ARGV.released, 'released')
end

if ARGV.ticket ~= '' then
  local m = mine(ARGV.ticket, ARGV.wait_id)
  if m then redis.call('ZREM', KEYS.queue, m) end
end
local now = now_ms()
local queued = redis.call('EXISTS', KEYS.queue) == 1
local sem = tonumber(string.match(ARGV.mode, '^s(%d+)$'))
if sem then
  if readers(now) <= 0 or redis.call('ZREM', KEYS.lock, ARGV.token) == 0 then return 0 end
  if queued then grant_permits(now, sem) end
  local top = redis.call('ZRANGE', KEYS.lock, -1, -1, 'WITHSCORES')[2]
  if top then
    redis.call('PEXPIREAT', KEYS.lock, top)
    redis.call('PEXPIREAT', KEYS.permits, top)
  else
    redis.call('DEL', KEYS.permits)
  end
  return 1
end
if ARGV.mode == 'r' then
  if queued then settle(now) end
  local held = readers(now)
  if held > 0 and redis.call('ZREM', KEYS.lock, ARGV.token) == 1 then
    if held > 1 then
      redis.call('PEXPIREAT', KEYS.lock, redis.call('ZRANGE', KEYS.lock, -1, -1, 'WITHSCORES')[2])
    elseif queued then
      grant(now)
    end
    return 1
  end
  local d, _, token = downgrade()
  if d and token == ARGV.token then
    redis.call('ZREM', KEYS.queue, d)
    return 1
  end
  return 0
end
if redis.pcall('GET', KEYS.lock) ~= ARGV.token then return 0 end
if queued then grant(now) else redis.call('DEL', KEYS.lock) end
return 1
