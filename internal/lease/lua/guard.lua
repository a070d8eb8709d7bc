-- For every script but the lean ones (acquire, release, renew), after the
-- prelude:
--
-- call(...) is redis.call, except that it notes the command and its first
-- argument before redis.call and forgets them when it returns, so that a
-- failed call (redis.call raises) ends the script's body, through the one
-- pcall of guard, with them noted.
--
-- guard(body) runs body under one pcall and returns its reply; an error
-- ends it with that call's error, read as a table's err or as a message
-- (what pcall hands back differs between Redis versions: 7.0 turns an
-- error table into its message), an ACL denial named by deny. A Lua
-- runtime error (nothing noted) becomes "ERR <message>".
--
-- ours(v) tells whether a lock value v (or nil) holds our token, ARGV[1] of
-- every script that takes one; ownFence(v), for such a v, returns the part
-- after our token ("<fence>\n<value>") and where the fence ends in it (the
-- index of its newline, nil if none).
--
-- nowMs(t) is TIME's reply t in ms.
local rcall, cmd, target = redis.call
local function call(...)
  cmd, target = ...
  local r = rcall(...)
  cmd = nil
  return r
end
local function ours(v) return v and string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. '\n' end
local function ownFence(v)
  local rest = string.sub(v, #ARGV[1] + 2)
  return rest, string.find(rest, '\n', 1, true)
end
local function nowMs(t) return t[1] * 1000 + math.floor(t[2] / 1000) end
local function guard(body)
  local ok, res = pcall(body)
  if ok then return res end
  if not cmd then return redis.error_reply('ERR ' .. tostring(res)) end
  return deny({err = type(res) == 'table' and res.err or tostring(res)}, string.upper(cmd), target)
end
