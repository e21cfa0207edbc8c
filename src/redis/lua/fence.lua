-- fence(): the next fencing token, which also serves as a queue ticket:
-- the larger of the counter + 1 and the server's clock in microseconds,
-- stored back as the counter.  The clock keeps tokens increasing across
-- whatever loses the counter's latest increments: a restart without it,
-- or a failover to a replica that missed them (while the Redis hosts'
-- clocks differ by less than a failover takes).  The counter is written
-- through string.format('%d'), never '..', and is exact below 2^53 (the
-- clock reaches that in about 2255).  Defined ahead of acquire's
-- uncontended path, which draws from it too.
local function fence()
  local t = redis.call('TIME')
  local n = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local c = tonumber(redis.call('GET', KEYS.fence))
  if c and c >= n then n = c + 1 end
  redis.call('SET', KEYS.fence, string.format('%d', n))
  return n
end
