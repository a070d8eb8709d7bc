-- redlock_renew is renew for a Redlock session: it also writes back the
-- acquisition's fence F (see quorum.acquire), so that the node's fence key
-- is at least F and its lock value carries F. It is also the acquire's
-- write-back round, when there is one (quorum.raiseFence).
--
--   KEYS[1] lock key, KEYS[2] fence key
--   ARGV[1] token, ARGV[2] TTL in ms, ARGV[3] fence F
--
-- Replies 1 if renewed, 0 (writing nothing) if the key is missing or holds
-- another token. Order: GET the lock key, GET and validate the fence key,
-- SET the fence key (if below F), SET the lock key KEEPTTL (if its fence is
-- not F), PEXPIRE. A fence key that does not hold a fence, or our token
-- without a fence after it, is an error that writes nothing (see prelude.lua's piece fence),
-- and a failure between the two SETs leaves the lock with this node's own,
-- smaller fence: a gap, never a fence key behind a lock.
return guard(function()
local cur, rest, nl = own()
if not cur then return rest or 0 end
local stored, err = readFence(KEYS[2])
if err then return err end
local f = tonumber(ARGV[3])
if not stored or stored < f then call('SET', KEYS[2], ARGV[3]) end
if tonumber(string.sub(rest, 1, nl - 1)) ~= f then
  call('SET', KEYS[1], ARGV[1] .. '\n' .. ARGV[3] .. string.sub(rest, nl), 'KEEPTTL')
end
return call('PEXPIRE', KEYS[1], ARGV[2])
end)
