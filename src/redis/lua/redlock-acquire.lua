-- Redlock (SPEC 10): the scripts each master runs.  KEYS: lock, fence
-- counter.  No queue: per-master queues could split a grant.
--
-- Acquire, ARGV token, TTL (ms): take the lock (or find it ours already:
-- an earlier round's answer was lost) and return {1, the counter} without
-- drawing from it, the counter seeded from the server's clock in
-- microseconds when missing; else {0, PTTL}.

if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
elseif not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {0, redis.call('PTTL', KEYS[1])}
end
local c = redis.call('GET', KEYS[2])
if not c then
  local t = redis.call('TIME')
  c = t[1] .. string.sub('000000' .. t[2], -6)
  redis.call('SET', KEYS[2], c)
end
return {1, tonumber(c)}
