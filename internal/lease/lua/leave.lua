-- leave takes a waiter that gives up out of the queue, leaves its tombstone
-- for one TTL (an attempt of its still on its way finds it and writes
-- nothing) and, if the lock is free, wakes the (new) head waiter.
--
--   KEYS[1] lock key, KEYS[2] queue, KEYS[3] leases
--   ARGV[1] waiter (member), ARGV[2] TTL in ms
--
-- Replies 1 if the waiter was queued, else 0. Order: TIME, ZSCORE, EXISTS,
-- the queue reads, PUBLISH the head's wake-up (as fair_acquire), ZREM from
-- the queue, ZADD the tombstone, PEXPIREAT the leases (to the latest lease
-- or tombstone end).
return guard(function()
local now = nowMs(call('TIME'))
local placed = call('ZSCORE', KEYS[2], ARGV[1])
local ends = now + tonumber(ARGV[2])
local keep = keepUntil(KEYS[3], ends)
if call('EXISTS', KEYS[1]) == 0 then
  local head = headOf(KEYS[2], KEYS[3], ARGV[1], now)
  if head then call('PUBLISH', wakeChannel(KEYS[1], head), head) end
end
call('ZREM', KEYS[2], ARGV[1])
call('ZADD', KEYS[3], string.format('%.0f', -ends), ARGV[1])
call('PEXPIREAT', KEYS[3], string.format('%.0f', keep))
if placed then return 1 end
return 0
end)
