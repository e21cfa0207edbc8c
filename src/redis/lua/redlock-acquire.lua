-- SPDX-License-Identifier: MIT
-- Redlock (docs/redis.md, "Redlock"): the scripts each master runs.
-- KEYS: lock, fence counter.  No queue: per-master queues could split a
-- grant.
--
-- Acquire, ARGV token, TTL (ms): take the lock (or find it ours already:
-- an earlier round's answer was lost) and return {1, the counter} without
-- drawing from it, the counter seeded from the server's clock in
-- microseconds when missing; else {0, PTTL}.
-- A counter at 2^53 - 2^20 or beyond (set by hand) is refused before
-- anything changes, as fence.lua refuses it: tonumber() would round it,
-- and the token drawn from it (the largest counter + 1) would repeat one
-- handed out, or fall to 1 past 2^63.
--@keys lock fence
--@argv token ttl

local c = redis.call('GET', KEYS.fence)
if c and (tonumber(c) or 0) >= 9007199253692416 then
  return redis.error_reply('ERR dlock: the fencing counter ' .. KEYS.fence .. ' is at ' .. c ..
                           ': from 2^53 - 2^20 on tokens cannot stay exact (delete it, or set it lower)')
end
if redis.pcall('GET', KEYS.lock) == ARGV.token then
  redis.call('PEXPIRE', KEYS.lock, ARGV.ttl)
elseif not redis.call('SET', KEYS.lock, ARGV.token, 'NX', 'PX', ARGV.ttl) then
  return {0, redis.call('PTTL', KEYS.lock)}
end
if not c then
  local t = redis.call('TIME')
  c = t[1] .. string.sub('000000' .. t[2], -6)
  redis.call('SET', KEYS.fence, c)
end
return {1, tonumber(c)}
