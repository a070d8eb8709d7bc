-- renew extends the TTL if, and only if, the key holds our token.
--
--   KEYS[1] lock key
--   ARGV[1] token, ARGV[2] TTL in ms
--
-- Replies 1 if renewed, 0 if the key is missing or holds another token. It
-- publishes nothing; its one write (PEXPIRE) comes last. It is lean (see
-- the prelude).
local cur = redis.pcall('GET', KEYS[1])
if type(cur) ~= 'string' then
  if cur then return deny(cur, 'GET', KEYS[1]) end
  return 0
end
local n = #ARGV[1]
if string.sub(cur, 1, n) ~= ARGV[1] or string.byte(cur, n + 1) ~= 10 then return 0 end
local r = redis.pcall('PEXPIRE', KEYS[1], ARGV[2])
if type(r) == 'table' then return deny(r, 'PEXPIRE', KEYS[1]) end
return r
