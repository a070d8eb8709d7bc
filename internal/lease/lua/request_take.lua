-- request_take takes a transfer request: the one stored, if its id is
-- ARGV[1] (the requester's own, for any term), or, if ARGV[1] is '', if its
-- fence is ARGV[2] and the lock key still holds the leader's token ARGV[5]
-- (a leader's take: a request addressed to its term, which a term that has
-- ended never consumes). It deletes it, or, if ARGV[3] is not '', replaces
-- it with ARGV[3] for ARGV[4] ms (the requester's readdress or refresh;
-- run again, it finds ARGV[3] and stores it again) and hints the leader if
-- that changed it. Anything else (another requester's request, one for
-- another term, a value that is no request) is left as it is.
--
--   KEYS[1] the request key, KEYS[2] the name's lock key
--   ARGV[1] requester id or '', ARGV[2] fence or '', ARGV[3] the request
--   to store or '', ARGV[4] its TTL in ms or '', ARGV[5] the leader's token
--   or ''
--
-- Replies {1 if it took it else 0, what the key held}, or nil if the key
-- does not exist.
return guard(function()
local v = call('GET', KEYS[1])
if not v then return false end
local id, fence = string.match(v, '^(%S+) (%d+)\n')
local mine = id ~= nil and id == ARGV[1]
if id ~= nil and ARGV[1] == '' and fence == ARGV[2] and ARGV[5] ~= '' then
  local held = call('GET', KEYS[2])
  mine = held and string.sub(held, 1, #ARGV[5] + 1) == ARGV[5] .. '\n'
end
if mine and ARGV[3] ~= '' then
  call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
  if ARGV[3] ~= v then call('PUBLISH', KEYS[1], 'T') end
elseif mine then
  call('DEL', KEYS[1])
end
return {mine and 1 or 0, v}
end)
