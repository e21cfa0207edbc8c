-- Redlock (docs/redis.md, "Redlock"): the scripts each master runs.
-- KEYS: lock, fence counter.  No queue: per-master queues could split a
-- grant.
--
-- Acquire, ARGV token, TTL (ms): take the lock (or find it ours already:
-- an earlier round's answer was lost) and return {1, the counter} without
-- drawing from it, the counter seeded from the server's clock in
-- microseconds when missing; else {0, PTTL}.
--@keys lock fence
--@argv token ttl

if redis.pcall('GET', KEYS.lock) == ARGV.token then
  redis.call('PEXPIRE', KEYS.lock, ARGV.ttl)
elseif not redis.call('SET', KEYS.lock, ARGV.token, 'NX', 'PX', ARGV.ttl) then
  return {0, redis.call('PTTL', KEYS.lock)}
end
local c = redis.call('GET', KEYS.fence)
if not c then
  local t = redis.call('TIME')
  c = t[1] .. string.sub('000000' .. t[2], -6)
  redis.call('SET', KEYS.fence, c)
end
return {1, tonumber(c)}
