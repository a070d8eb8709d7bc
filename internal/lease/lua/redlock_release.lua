-- redlock_release is release for a Redlock session: before it deletes the
-- key it raises the node's fence key to the acquisition's fence F (see
-- quorum.acquire), unless the node's clock has already passed F (then any
-- later fence it issues is larger anyway); F 0 (an acquisition that never
-- counted) raises nothing.
--
--   KEYS[1] lock key, KEYS[2] fence key
--   ARGV[1] token, ARGV[2] fence F
--
-- Replies 1 if deleted, 0 (writing nothing) if the key is missing or holds
-- another token. Order: GET the lock key, GET and validate the fence key,
-- TIME, PUBLISH "R", SET the fence key (if below F and TIME in us is not
-- past F), DEL. A fence key that does not hold a fence is an error that
-- writes nothing: the key stays, and expires with its TTL.
return guard(function()
local cur = call('GET', KEYS[1])
if not ours(cur) then return 0 end
local stored, err = readFence(KEYS[2])
if err then return err end
local f = tonumber(ARGV[2])
local raise = f > 0 and (not stored or stored < f)
if raise then
  local t = call('TIME')
  raise = t[1] * 1000000 + t[2] <= f
end
call('PUBLISH', KEYS[1] .. ':ch', 'R')
if raise then call('SET', KEYS[2], ARGV[2]) end
call('DEL', KEYS[1])
return 1
end)
