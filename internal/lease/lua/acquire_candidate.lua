-- acquire_candidate is acquire for a candidate with a priority: it also
-- enlists the candidate (prelude.lua's piece cand), whatever the outcome.
--
--   KEYS[1] lock key, KEYS[2] fence key, KEYS[3] candidates, KEYS[4] their
--   leases
--   ARGV[1] token, ARGV[2] TTL in ms, ARGV[3] value, ARGV[4] priority
--
-- Replies as acquire. Order: GET the lock key, the candidate reads, then as
-- acquire, then (after the writes) enlist.
return guard(function()
local cur = redis.pcall('GET', KEYS[1])
if type(cur) == 'table' then return deny(cur, 'GET', KEYS[1]) end
enlisting(3)
return claim(cur, redis.pcall('TIME'), enlist)
end)
