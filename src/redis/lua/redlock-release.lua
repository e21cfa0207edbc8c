-- Release, ARGV token, release channel: compare-and-delete, then wake the
-- waiters.  1 if it was ours, else 0.

if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.pcall('PUBLISH', ARGV[2], 'released')
return 1
