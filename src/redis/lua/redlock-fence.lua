-- The fencing round, ARGV token, the token chosen: the counter becomes
-- max(counter, token), only while the lock is still ours.  1, or 0.

if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if (tonumber(redis.call('GET', KEYS[2])) or 0) < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2])
end
return 1
