-- release deletes the key if, and only if, it holds our token, and tells
-- subscribers of the name's channel (lock key + ":ch") that it is free.
--
--   KEYS[1] lock key
--   ARGV[1] token
--
-- Replies 1 if deleted, 0 if the key is missing or holds another token (then
-- it writes nothing). Order: GET, PUBLISH "R", DEL: a denied channel leaves
-- the key in place (it expires with its TTL) rather than deleted by a
-- release that reports an error. It is lean (see the prelude; prelude.lua's piece mine).
local ours, no = mine()
if not ours then return no end
local ch = KEYS[1] .. ':ch'
local r = redis.pcall('PUBLISH', ch, 'R')
if type(r) == 'table' then return deny(r, 'PUBLISH', ch) end
r = redis.pcall('DEL', KEYS[1])
if type(r) == 'table' then return deny(r, 'DEL', KEYS[1]) end
return 1
