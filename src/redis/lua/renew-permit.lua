-- SPDX-License-Identifier: MIT
-- Renew a semaphore permit's lease.  KEYS: lock, permits.  ARGV: token,
-- TTL (ms).  1 renewed, 0 not ours.  The number of permits lives as long
-- as the latest permit.  It names the two keys a semaphore in use always
-- has, so on a cluster it runs wherever they are while the slot migrates.
--@keys lock permits
--@argv token ttl

--@include member.lua

local top = renew_member()
if not top then return 0 end
redis.call('PEXPIREAT', KEYS.permits, top)
return 1
