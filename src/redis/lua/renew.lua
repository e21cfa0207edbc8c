-- SPDX-License-Identifier: MIT
-- Renew a read hold made by a downgrade (a writer's is renew-write.lua,
-- another reader's renew-read.lua, a permit's renew-permit.lua).
-- KEYS: lock, fence counter, queue, permits.  ARGV: token, TTL (ms), mode,
-- and for a reader made by a downgrade the write hold's token ("" for
-- none).  1 renewed, 0 not ours.  A reader re-scores its own member only;
-- while it is still a downgrade entry, the entry's lease is renewed as
-- long as the lock holds its write hold's token.
--@keys lock fence queue permits
--@argv token ttl mode write_token

--@include queue.lua

local now, ttl = now_ms(), tonumber(ARGV.ttl)
settle(now)
local held = readers(now)
if held > 0 then
  if not redis.call('ZSCORE', KEYS.lock, ARGV.token) then return 0 end
  redis.call('ZADD', KEYS.lock, 'XX', string.format('%d', now + ttl), ARGV.token)
  local top = redis.call('ZRANGE', KEYS.lock, -1, -1, 'WITHSCORES')[2]
  redis.call('PEXPIREAT', KEYS.lock, top)
  redis.call('PEXPIREAT', KEYS.permits, top)
  return 1
end
if held < 0 and ARGV.write_token ~= '' and redis.call('GET', KEYS.lock) == ARGV.write_token then
  local d, _, token = downgrade()
  if d and token == ARGV.token then
    redis.call('ZREM', KEYS.queue, d)
    redis.call('ZADD', KEYS.queue, 0, (string.gsub(d, '^%d+', string.format('%d', now + ttl))))
    extend_queue(ttl)
    return 1
  end
end
return 0
