-- For acquire and acquire_candidate, after take.lua: claim(cur, t, after)
-- is acquire's reply given the lock key's value cur and TIME's reply t,
-- each as redis.pcall returned it (an error table: that call failed, see
-- deny): ours, it refreshes the TTL (PEXPIREAT); held by another, it reads
-- its PTTL; free or reserved for us, it takes it (take). after(t, leads,
-- pttl), if given, runs after the writes (acquire_candidate's enlist).
local function claim(cur, t, after)
  if type(cur) == 'table' then return deny(cur, 'GET', KEYS[1]) end
  if t.err then return deny(t, 'TIME') end
  local now = t[1] * 1000000 + t[2]
  if cur then
    local n = #ARGV[1]
    if string.sub(cur, 1, n) == ARGV[1] and string.byte(cur, n + 1) == 10 then
      local nl = string.find(cur, '\n', n + 2, true)
      if not nl then
        return redis.error_reply('ERR redisleader: lock key ' .. KEYS[1] .. ' holds our token but no fence; it was left unchanged')
      end
      local r = redis.pcall('PEXPIREAT', KEYS[1], expiresAt(now))
      if type(r) == 'table' then return deny(r, 'PEXPIREAT', KEYS[1]) end
      return {1, tonumber(string.sub(cur, n + 2, nl - 1)), now}
    end
    if not heir(cur) then
      local pttl = redis.pcall('PTTL', KEYS[1])
      if type(pttl) == 'table' then return deny(pttl, 'PTTL', KEYS[1]) end
      if after then after(t, false, pttl) end
      return {0, cur, pttl}
    end
  end
  local fence, err = take(t, cur, now)
  if err then return err end
  if after then after(t, true) end
  return {1, fence, now}
end
