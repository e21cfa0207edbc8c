-- SPDX-License-Identifier: MIT
-- Renew, ARGV token, TTL (ms): compare-and-PEXPIRE.  1, or 0.
--@keys lock
--@argv token ttl

if redis.pcall('GET', KEYS.lock) ~= ARGV.token then return 0 end
redis.call('PEXPIRE', KEYS.lock, ARGV.ttl)
return 1
