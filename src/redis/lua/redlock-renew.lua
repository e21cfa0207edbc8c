-- Renew, ARGV token, TTL (ms): compare-and-PEXPIRE.  1, or 0.

if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
