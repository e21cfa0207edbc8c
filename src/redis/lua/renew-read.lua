-- SPDX-License-Identifier: MIT
-- Renew a READ hold's lease (one not made by a downgrade: that one is
-- renew.lua's).  KEYS: lock.  ARGV: token, TTL (ms).  1 renewed, 0 not
-- ours.  It names the lock alone, so on a cluster it runs wherever the
-- lock key is while the slot migrates, and a read hold outlives a
-- migration, as a write hold does (renew-write.lua).
--@keys lock
--@argv token ttl

--@include member.lua

if renew_member() then return 1 end
return 0
