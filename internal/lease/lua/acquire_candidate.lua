-- acquire_candidate is acquire for a candidate with a priority: it also
-- enlists the candidate (cand.lua), whatever the outcome.
--
--   KEYS[1] lock key, KEYS[2] fence key, KEYS[3] candidates, KEYS[4] their
--   leases
--   ARGV[1] token, ARGV[2] TTL in ms, ARGV[3] value, ARGV[4] priority
--
-- Replies as acquire. Order: GET the lock key, the candidate reads, then as
-- acquire, then (after the writes) enlist.
return guard(function()
local cur = call('GET', KEYS[1])
enlisting(3)
local t = call('TIME')
local now = t[1] * 1000000 + t[2]
if cur then
  if ours(cur) then
    call('PEXPIREAT', KEYS[1], expiresAt(t))
    local rest, nl = ownFence(cur)
    return {1, tonumber(string.sub(rest, 1, nl - 1)), now}
  end
  if not heir(cur) then
    local pttl = call('PTTL', KEYS[1])
    enlist(t, false, pttl)
    return {0, cur, pttl}
  end
end
local fence, err = take(t, cur)
if err then return err end
enlist(t, true)
return {1, fence, now}
end)
