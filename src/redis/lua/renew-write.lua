-- SPDX-License-Identifier: MIT
-- Renew a writer's (or a single holder's) lease: compare-and-PEXPIRE.
-- KEYS: lock.  ARGV: token, TTL (ms).  1 renewed, 0 not ours.  It names
-- the lock alone, so on a cluster it runs wherever the lock key is while
-- the slot migrates, and a hold outlives a migration.
--@keys lock
--@argv token ttl

if redis.pcall('GET', KEYS.lock) == ARGV.token then
  return redis.call('PEXPIRE', KEYS.lock, ARGV.ttl)
end
return 0
