-- Renew.  KEYS: lock, fence counter, queue.  ARGV: token, TTL (ms), mode,
-- and for a reader made by a downgrade the write hold's token ("" for
-- none).  1 renewed, 0 not ours.  A writer is a compare-and-PEXPIRE before
-- the definitions.  A reader re-scores its own member only; while it is
-- still a downgrade entry, the entry's lease is renewed as long as the
-- lock holds its write hold's token.

if ARGV[3] == 'w' then
  if redis.pcall('GET', KEYS[1]) == ARGV[1] then
    return redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  return 0
end

--@include queue.lua

local now, ttl = now_ms(), tonumber(ARGV[2])
settle(now)
local held = readers(now)
if held > 0 then
  if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
  redis.call('ZADD', KEYS[1], 'XX', string.format('%d', now + ttl), ARGV[1])
  local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2]
  redis.call('PEXPIREAT', KEYS[1], top)
  redis.call('PEXPIREAT', KEYS[4], top)
  return 1
end
if held < 0 and ARGV[4] ~= '' and redis.call('GET', KEYS[1]) == ARGV[4] then
  local d, _, token = downgrade()
  if d and token == ARGV[1] then
    redis.call('ZREM', KEYS[3], d)
    redis.call('ZADD', KEYS[3], 0, (string.gsub(d, '^%d+', string.format('%d', now + ttl))))
    extend_queue(ttl)
    return 1
  end
end
return 0
