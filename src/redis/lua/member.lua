-- SPDX-License-Identifier: MIT
-- The prelude of renew-read.lua and renew-permit.lua: renew_member()
-- re-scores our own member of the lock's set (ARGV.token, ARGV.ttl from
-- the server's time) and moves the lock's expiry to the latest member's;
-- the new expiry, or nil if the member is not ours any more (gone, or
-- its lease over).  It names the lock alone.

local function renew_member()
  if redis.call('TYPE', KEYS.lock).ok ~= 'zset' then return nil end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local score = tonumber(redis.call('ZSCORE', KEYS.lock, ARGV.token))
  if not score or score <= now then return nil end
  redis.call('ZADD', KEYS.lock, 'XX', string.format('%d', now + tonumber(ARGV.ttl)), ARGV.token)
  local top = redis.call('ZRANGE', KEYS.lock, -1, -1, 'WITHSCORES')[2]
  redis.call('PEXPIREAT', KEYS.lock, top)
  return top
end
