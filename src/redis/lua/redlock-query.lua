-- SPDX-License-Identifier: MIT
-- Query: {the lock's value ('' when none, or not a string), its PTTL,
-- the counter (0 when none)}.
--@keys lock fence

local v = redis.pcall('GET', KEYS.lock)
if type(v) ~= 'string' then v = '' end
return {v, redis.call('PTTL', KEYS.lock), tonumber(redis.call('GET', KEYS.fence)) or 0}
