-- SPDX-License-Identifier: MIT
-- Release, ARGV token, release channel: compare-and-delete, then wake the
-- waiters.  1 if it was ours, else 0.
--@keys lock
--@argv token released

if redis.pcall('GET', KEYS.lock) ~= ARGV.token then return 0 end
redis.call('DEL', KEYS.lock)
redis.pcall('PUBLISH', ARGV.released, 'released')
return 1
