-- For the scripts that change a key holding our token (ARGV[1]): own()
-- reads the lock key (KEYS[1]) and returns its value, the part after our
-- token, and where the fence ends in that part; or nil when the key is
-- missing or holds another token; or nil and an error reply, written
-- nowhere, when it holds our token but no fence after it.
local function own()
  local cur = call('GET', KEYS[1])
  if not ours(cur) then return nil end
  local rest, nl = ownFence(cur)
  if not nl then
    return nil, redis.error_reply('ERR redisleader: lock key ' .. KEYS[1] .. ' holds our token but no fence; it was left unchanged')
  end
  return cur, rest, nl
end
