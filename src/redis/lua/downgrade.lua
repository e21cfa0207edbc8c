-- SPDX-License-Identifier: MIT
-- Downgrade: a read hold for the owner of the write hold in the lock,
-- granted at once.  KEYS as for acquire.  ARGV: the write hold's token,
-- the reader's token, its TTL (ms), the write's wait id.  {1, fencing
-- token}, or {0} when the lock does not hold the write's token (its lease
-- ended).  The reader waits, as the downgrade entry at the head of the
-- queue, for the write's release to make it a reader.
--@keys lock fence queue
--@argv write_token token ttl wait_id

--@include fence.lua
--@include queue.lua

if redis.pcall('GET', KEYS.lock) ~= ARGV.write_token then return {0} end
local ttl = tonumber(ARGV.ttl)
redis.call('ZREMRANGEBYSCORE', KEYS.queue, 0, 0)
redis.call('ZADD', KEYS.queue, 0, string.format('%d|%dd|%s|%s', now_ms() + ttl, ttl, ARGV.wait_id,
                                             ARGV.token))
extend_queue(ttl)
return {1, fence()}
