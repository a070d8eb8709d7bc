-- release deletes the key if, and only if, it holds our token, and tells
-- subscribers of the name's channel (lock key + ":ch") that it is free.
--
--   KEYS[1] lock key
--   ARGV[1] token
--
-- Replies 1 if deleted, 0 if the key is missing or holds another token (then
-- it writes nothing). Order: GET, PUBLISH "R", DEL: a denied channel leaves
-- the key in place (it expires with its TTL) rather than deleted by a
-- release that reports an error.
return guard(function()
local cur = call('GET', KEYS[1])
if ours(cur) then
  call('PUBLISH', KEYS[1] .. ':ch', 'R')
  call('DEL', KEYS[1])
  return 1
end
return 0
end)
