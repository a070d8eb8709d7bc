-- Takes a transfer request: the one stored, if its id is ARGV[1] (the
-- requester's own, for any term), or, if ARGV[1] is '', if its fence is
-- ARGV[2] (a leader's take: a request addressed to its term). It deletes
-- it, or, if ARGV[3] is not '', replaces it with ARGV[3] for ARGV[4] ms
-- (the requester's readdress or refresh; run again, it finds ARGV[3] and
-- stores it again) and hints the leader if that changed it. Anything else
-- (another requester's request, one for another term, a value that is no
-- request) is left as it is.
--
-- Replies {1 if it took it else 0, what the key held}, or nil if the key
-- does not exist.
local v = redis.call('GET', KEYS[1])
if not v then return false end
local id, fence = string.match(v, '^(%S+) (%d+)\n')
local mine = id ~= nil and (id == ARGV[1] or ARGV[1] == '' and fence == ARGV[2])
if mine and ARGV[3] ~= '' then
  redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
  if ARGV[3] ~= v then redis.call('PUBLISH', KEYS[1], 'T') end
elseif mine then
  redis.call('DEL', KEYS[1])
end
return {mine and 1 or 0, v}
