-- fair_release is release for fair mode: besides "R" on the name's channel
-- it wakes the head waiter, and only it, on its session's wake-up channel.
--
--   KEYS[1] lock key, KEYS[2] queue, KEYS[3] leases
--   ARGV[1] token
--
-- Replies 1 if deleted, 0 if the key is missing or holds another token
-- (then it writes nothing). Order: TIME, GET, the queue reads, PUBLISH "R",
-- PUBLISH the head's wake-up (as fair_acquire), DEL. It leaves the queue as
-- it is: the next acquire prunes it.
return guard(function()
local now = nowMs(call('TIME'))
local cur = call('GET', KEYS[1])
if ours(cur) then
  local head = headOf(KEYS[2], KEYS[3], nil, now)
  call('PUBLISH', KEYS[1] .. ':ch', 'R')
  if head then call('PUBLISH', wakeChannel(KEYS[1], head), head) end
  call('DEL', KEYS[1])
  return 1
end
return 0
end)
