-- renew extends the TTL if, and only if, the key holds our token.
--
--   KEYS[1] lock key
--   ARGV[1] token, ARGV[2] TTL in ms
--
-- Replies 1 if renewed, 0 if the key is missing or holds another token. It
-- publishes nothing; its one write (PEXPIRE) comes last. It is lean (see
-- the prelude; prelude.lua's piece mine).
local ours, no = mine()
if not ours then return no end
local r = redis.pcall('PEXPIRE', KEYS[1], ARGV[2])
if type(r) == 'table' then return deny(r, 'PEXPIRE', KEYS[1]) end
return r
