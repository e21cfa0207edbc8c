-- SPDX-License-Identifier: MIT
-- What the scripts share.  KEYS (declared by the including script):
-- lock, fence counter, wait queue.
--
-- The lock is a string (an EXCLUSIVE or WRITE hold: the holder's token,
-- or a peer's value) or a sorted set (READ holds: member = each reader's
-- token, score = the end of its lease in server ms).  The set's expiry
-- follows its latest lease; members whose lease has ended are dropped by
-- readers() before anything looks at them, with ZREMRANGEBYSCORE, so a
-- script costs O(log R) in the number of readers plus what it drops.
--
-- The queue is a sorted set scored by arrival ticket (drawn as a
-- fencing token is, fence.lua: unique and increasing), each member
-- "<entry lease end, server ms>|<hold TTL ms><mode><mute>|<wait id>|<owner token>",
-- mode "" for a writer (EXCLUSIVE or WRITE), "r" for a reader: a writer's
-- entry is the one dlock wrote before read-write locks, and such a
-- dlock's release skips a reader's entry as malformed (dead) rather than
-- grant it as a writer.  mute "~" marks a waiter that no message can
-- reach (the server's ACL refused its channel): its grant is neither
-- published nor undone, and its own next try finds the lock its own (a
-- dlock without this skips such an entry as malformed).  An entry
-- whose lease has run out is a waiter that stopped renewing it (its
-- process died, or lost the server): head() drops such entries as it meets
-- them, a bounded number per call.  One more kind of entry, mode "d", at
-- score 0 (ahead of every ticket): a downgrade, the read hold of the owner
-- of the write hold in the lock, whose lease end it carries; the write's
-- release turns it into a reader before anyone queued gets in.  Numbers
-- reach strings through string.format('%d'), never '..', which would
-- round them to 14 digits.
--
-- The uncontended paths run before these definitions: defining them costs
-- the server a closure each, on every call.
-- head(now): the first live entry, nil for none, false when too many dead
-- entries came first to look further this time.
-- mine(ticket, id): our entry, if it is still queued.  Ticket "?", sent
-- only by a wait that is ending after a queueing try whose answer never
-- came: that try may have queued an entry under a ticket we never
-- learned, so it is found by wait id, a walk of the whole queue (any
-- second entry of ours is dropped on the way).
-- readers(now): -1 when the lock is a string, else the number of live
-- readers (0: free).
-- add_reader(reader, lease end): add or re-score a reader (its owner
-- token); the set expires with its latest lease.
-- downgrade(): the downgrade entry, and its lease end, its reader's token
-- and the write hold's wait id (the random part of the write's token).
-- settle(now): a downgrade whose write hold is gone becomes the reader it
-- stands for if the lock is free (the write released in the background,
-- or expired) or shared; if someone else's string holds it (the write
-- expired and a peer that does not queue took it), the read hold it
-- stands for can no longer be granted in order, and the entry goes: it
-- would otherwise block the queue, and become a reader when the peer
-- lets go.  The read hold's next renewal then reports it LOST.

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function head(now)
  for _ = 1, 64 do
    local e = redis.call('ZRANGE', KEYS.queue, 0, 0)
    if #e == 0 then return nil end
    if (tonumber(string.match(e[1], '^(%d+)|')) or 0) > now then return e[1] end
    redis.call('ZREM', KEYS.queue, e[1])
  end
  return false
end
local function mine(ticket, id)
  if ticket == '' then return nil end
  if ticket == '?' then
    local found
    for _, e in ipairs(redis.call('ZRANGE', KEYS.queue, 0, -1)) do
      if string.match(e, '^%d+|%d+%a?~?|([^|]+)|') == id then
        if found then redis.call('ZREM', KEYS.queue, e) else found = e end
      end
    end
    return found
  end
  local m = redis.call('ZRANGEBYSCORE', KEYS.queue, ticket, ticket)[1]
  if m and string.match(m, '^%d+|%d+%a?~?|([^|]+)|') == id then return m end
  return nil
end
local function readers(now)
  local kind = redis.call('TYPE', KEYS.lock).ok
  if kind == 'none' then return 0 end
  if kind ~= 'zset' then return -1 end
  redis.call('ZREMRANGEBYSCORE', KEYS.lock, '-inf', now)
  return redis.call('ZCARD', KEYS.lock)
end
local function add_reader(reader, lease_end)
  redis.call('ZADD', KEYS.lock, string.format('%d', lease_end), reader)
  redis.call('PEXPIREAT', KEYS.lock, redis.call('ZRANGE', KEYS.lock, -1, -1, 'WITHSCORES')[2])
end
local function downgrade()
  local d = redis.call('ZRANGEBYSCORE', KEYS.queue, 0, 0)[1]
  if not d then return nil end
  local t, id, reader = string.match(d, '^(%d+)|%d+d|([^|]+)|(.*)$')
  return d, tonumber(t), reader, id
end
local function settle(now)
  local d, t, reader, id = downgrade()
  if not d then return end
  local kind = redis.call('TYPE', KEYS.lock).ok
  if kind == 'string' and
     string.match(redis.call('GET', KEYS.lock), '^[^:]*:([^:]*)') == id then return end
  redis.call('ZREM', KEYS.queue, d)
  if (kind == 'none' or kind == 'zset') and reader and t > now then add_reader(reader, t) end
end
local function extend_queue(ms)
  if redis.call('PTTL', KEYS.queue) < tonumber(ms) then redis.call('PEXPIRE', KEYS.queue, ms) end
end
