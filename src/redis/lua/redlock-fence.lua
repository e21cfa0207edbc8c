-- SPDX-License-Identifier: MIT
-- The fencing round, ARGV token, the token chosen: the counter becomes
-- max(counter, token), only while the lock is still ours.  1, or 0.
--@keys lock fence
--@argv token fence_token

if redis.pcall('GET', KEYS.lock) ~= ARGV.token then return 0 end
if (tonumber(redis.call('GET', KEYS.fence)) or 0) < tonumber(ARGV.fence_token) then
  redis.call('SET', KEYS.fence, ARGV.fence_token)
end
return 1
