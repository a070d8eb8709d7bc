-- renew extends the TTL if, and only if, the key holds our token.
--
--   KEYS[1] lock key
--   ARGV[1] token, ARGV[2] TTL in ms
--
-- Replies 1 if renewed, 0 if the key is missing or holds another token. It
-- publishes nothing; its one write (PEXPIRE) comes last.
return guard(function()
local cur = call('GET', KEYS[1])
if ours(cur) then
  return call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
end)
