-- SPDX-License-Identifier: MIT
-- Renew holds: one, or every hold of a client due at once (one round for
-- all).  KEYS are their locks; ARGV, for each in the same order, its token
-- and its TTL (ms).  Each is a compare-and-PEXPIRE.  An array: 1 if every
-- one was renewed, else 0; then 1 (renewed) or 0 (not ours) for each.
--@keys lock
--@argv token ttl

local words, out, all = {unpack(ARGV)}, {0}, 1
for i, key in ipairs(KEYS) do
  if redis.pcall('GET', key) == words[2 * i - 1] then
    redis.call('PEXPIRE', key, words[2 * i])
    out[i + 1] = 1
  else
    out[i + 1] = 0
    all = 0
  end
end
out[1] = all
return out
