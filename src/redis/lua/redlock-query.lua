-- Query: {the lock's value ('' when none, or not a string), its PTTL,
-- the counter (0 when none)}.

local v = redis.pcall('GET', KEYS[1])
if type(v) ~= 'string' then v = '' end
return {v, redis.call('PTTL', KEYS[1]), tonumber(redis.call('GET', KEYS[2])) or 0}
