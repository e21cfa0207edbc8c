-- Downgrade: a read hold for the owner of the write hold in the lock,
-- granted at once.  KEYS as for acquire.  ARGV: the write hold's token,
-- the reader's token, its TTL (ms), the write's wait id.  {1, fencing
-- token}, or {0} when the lock does not hold the write's token (its lease
-- ended).  The reader waits, as the downgrade entry at the head of the
-- queue, for the write's release to make it a reader.

--@include queue.lua

if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then return {0} end
local ttl = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[3], 0, 0)
redis.call('ZADD', KEYS[3], 0, string.format('%d|%dd|%s|%s', now_ms() + ttl, ttl, ARGV[4],
                                             ARGV[2]))
extend_queue(ttl)
return {1, fence()}
