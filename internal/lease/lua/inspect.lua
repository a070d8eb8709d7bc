-- inspect reads the holder and its remaining TTL in one call.
--
--   KEYS[1] lock key
--
-- Replies {stored, pttl in ms}, or nil when nobody holds the key. It writes
-- nothing.
return guard(function()
local cur = call('GET', KEYS[1])
if not cur then return false end
return {cur, call('PTTL', KEYS[1])}
end)
