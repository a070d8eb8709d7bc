-- prefer_renew is renew for a leader with a priority: it also enlists the
-- leader and reports the best live candidate above it.
--
--   KEYS[1] lock key, KEYS[2] candidates, KEYS[3] their leases
--   ARGV[1] token, ARGV[2] TTL in ms, ARGV[3] value, ARGV[4] priority
--
-- Replies 0 if the key is missing or holds another token (then it writes
-- nothing); 1 if renewed; {1, value} if renewed and the candidate with value
-- has a higher priority. Order: GET, the candidate reads, TIME, PEXPIRE,
-- then enlist.
return guard(function()
local cur = call('GET', KEYS[1])
if not ours(cur) then return 0 end
enlisting(2)
local t = call('TIME')
local better = best(KEYS[2], KEYS[3], nowMs(t), ARGV[4], ARGV[3])
call('PEXPIRE', KEYS[1], ARGV[2])
enlist(t, true)
if better then return {1, better} end
return 1
end)
