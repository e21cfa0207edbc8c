-- SPDX-License-Identifier: MIT
-- fence(): the next fencing token, which also serves as a queue ticket:
-- the larger of the counter + 1 and the server's clock in microseconds,
-- stored back as the counter.  The clock keeps tokens increasing across
-- whatever loses the counter's latest increments: a restart without it,
-- or a failover to a replica that missed them (while the Redis hosts'
-- clocks differ by less than a failover takes).  The counter is written
-- through string.format('%d'), never '..', and is exact below 2^53 (the
-- clock reaches that in about 2255).  Defined ahead of acquire's
-- uncontended path, which draws from it too.
--
-- A counter set near 2^53 or beyond (by hand: the clock is far from it)
-- is refused before the script changes anything: Lua's numbers are
-- doubles, so counter + 1 would round to the counter itself or below it,
-- and one past 2^63 would be written back negative -- a token repeated,
-- or going back.  The margin of 2^20 below 2^53 covers the most tokens
-- one script draws (a release granting every reader at the head), so no
-- script can cross 2^53 halfway.  The counter is read once, here: only
-- fence() changes it afterwards, and keeps fence_at in step.
local fence_at = tonumber(redis.call('GET', KEYS.fence))
if fence_at and fence_at >= 9007199253692416 then
  return redis.error_reply('ERR dlock: the fencing counter ' .. KEYS.fence .. ' is at ' ..
                           redis.call('GET', KEYS.fence) .. ': from 2^53 - 2^20 on tokens cannot stay ' ..
                           'exact (delete it, or set it lower)')
end
local function fence()
  local t = redis.call('TIME')
  local n = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if fence_at and fence_at >= n then n = fence_at + 1 end
  fence_at = n
  redis.call('SET', KEYS.fence, string.format('%d', n))
  return n
end
