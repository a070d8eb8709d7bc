-- For the scripts of fair mode, which keep a name's waiters in two sorted
-- sets: the queue (member -> arrival, server TIME in us) and the leases
-- (member -> end of the waiter's lease, server time in ms). A member is
-- "<session id>.<n>"; the session's wake-up channel for the name is lock
-- key + ":w:" + session id. A waiter that gave up leaves a tombstone in the
-- leases, -(end of a TTL), so that an attempt of its still on its way (its
-- caller gone) cannot queue a ghost. now is the server time in ms (nowMs).
--
--   lease(leases, m, now)   m's lease end, or nil when m has none or it has
--                           passed (remembered for the script's run)
--   gone(leases, m, now)    whether m has a live tombstone
--   pruneRange(now)         ZRANGEBYSCORE bounds of the passed leases and
--                           tombstones
--   headOf(queue, leases, skip, now)  the first member with a live lease
--                           other than skip (nil if none), and the members
--                           without one queued before it
--   wakeChannel(lock, m)    m's session's wake-up channel
--   zremAll(key, ms)        ZREM every member of ms, 100 at a time
--   keepUntil(leases, at)   the latest of at, every lease end and every
--                           tombstone end: when the queue keys may expire
local leaseOf = {}
local function lease(key, m, now)
  if leaseOf[m] == nil then
    local e = tonumber(call('ZSCORE', key, m))
    if e and e > now then leaseOf[m] = e else leaseOf[m] = false end
  end
  return leaseOf[m] or nil
end
local function gone(key, m, now)
  local e = tonumber(call('ZSCORE', key, m))
  return e ~= nil and e < 0 and -e > now
end
local function pruneRange(now)
  return string.format('(%.0f', -now), string.format('%.0f', now)
end
local function headOf(queue, leases, skip, now)
  local dead, i = {}, 0
  while true do
    local c = call('ZRANGE', queue, i, i + 15)
    if #c == 0 then return nil, dead end
    for _, m in ipairs(c) do
      if m ~= skip then
        if lease(leases, m, now) then return m, dead end
        dead[#dead + 1] = m
      end
    end
    i = i + #c
  end
end
local function wakeChannel(lock, m)
  return lock .. ':w:' .. string.match(m, '^[^.]*')
end
local function zremAll(key, ms)
  for i = 1, #ms, 100 do
    call('ZREM', key, unpack(ms, i, math.min(i + 99, #ms)))
  end
end
local function keepUntil(leases, at)
  local top = call('ZRANGE', leases, -1, -1, 'WITHSCORES')
  if top[2] and tonumber(top[2]) > at then at = tonumber(top[2]) end
  local low = call('ZRANGE', leases, 0, 0, 'WITHSCORES')
  if low[2] and -tonumber(low[2]) > at then at = -tonumber(low[2]) end
  return at
end
