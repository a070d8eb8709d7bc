-- fenced is FencedSet (with a value) and FencedDel (without).
--
--   KEYS[1] the user's key
--   ARGV[1] fence (a decimal integer in [1, 2^53-1], checked by the caller)
--   ARGV[2] value; absent for a delete
--
-- Replies:
--
--   1              accepted: HSET key fence ARGV[1] (and value ARGV[2]), or
--                  for a delete HDEL value, then HSET fence unless it is
--                  already ARGV[1]
--   {0, highest}   refused, writes nothing: the key has accepted a higher
--                  fence, highest (an integer)
--   error          the key holds another type (WRONGTYPE) or a hash without
--                  a valid fence field; writes nothing
--
-- Order: TYPE, HGET (reads), then the writes. The set path writes once (one
-- HSET of both fields). The delete path deletes first, so that it frees
-- memory even when Redis is out of it (a script that has written may write
-- on, and HDEL is not refused on OOM); it writes twice, and on Redis 7+ it
-- first asks redis.acl_check_cmd whether both are allowed, so a denial of
-- either leaves the key as it was (on 6.2, a user allowed HDEL but not HSET
-- would see the value deleted and the fence not raised, with the error).
return guard(function()
local kind = call('TYPE', KEYS[1])
kind = kind.ok or kind
if kind ~= 'none' and kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE redisleader: the key holds a ' .. kind .. ', not a fenced value (a hash with fields value and fence); it was left unchanged')
end
local raw = call('HGET', KEYS[1], 'fence')
if kind == 'hash' then
  local f = raw and string.match(raw, '^%d+$') and tonumber(raw)
  if not f or f > 9007199254740991 then
    return redis.error_reply('ERR redisleader: the key is a hash without a valid fence field (decimal digits, at most 2^53-1), not a fenced value; it was left unchanged')
  end
  if tonumber(ARGV[1]) < f then return {0, f} end
end
if ARGV[2] then
  call('HSET', KEYS[1], 'fence', ARGV[1], 'value', ARGV[2])
  return 1
end
if redis.acl_check_cmd then
  for _, cmd in ipairs({{'HDEL', KEYS[1], 'value'}, {'HSET', KEYS[1], 'fence', ARGV[1]}}) do
    if not redis.acl_check_cmd(unpack(cmd)) then
      return redis.error_reply('NOPERM redisleader: permission denied for ' .. cmd[1] .. ' ' .. KEYS[1] .. ' (ACL): checked before writing')
    end
  end
end
call('HDEL', KEYS[1], 'value')
if raw ~= ARGV[1] then call('HSET', KEYS[1], 'fence', ARGV[1]) end
return 1
end)
