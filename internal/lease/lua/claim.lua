-- For acquire and acquire_candidate, after take.lua: claim(cur, t, after)
-- is acquire's reply given the lock key's value cur and TIME's reply t (see
-- acquire.lua): ours, it refreshes the TTL (PEXPIREAT); held by another, it
-- reads its PTTL; free or reserved for us, it takes it (take). after(t,
-- leads, pttl), if given, runs after the writes (acquire_candidate's
-- enlist).
local function claim(cur, t, after)
  local now = t[1] * 1000000 + t[2]
  if cur then
    if ours(cur) then
      call('PEXPIREAT', KEYS[1], expiresAt(t))
      local rest, nl = ownFence(cur)
      return {1, tonumber(string.sub(rest, 1, nl - 1)), now}
    end
    if not heir(cur) then
      local pttl = call('PTTL', KEYS[1])
      if after then after(t, false, pttl) end
      return {0, cur, pttl}
    end
  end
  local fence, err = take(t, cur)
  if err then return err end
  if after then after(t, true) end
  return {1, fence, now}
end
