-- hand_off ends a leadership with a succession: it replaces the lock key, if
-- it holds our token, with a reservation for the heir, "\n<fence>\n<value>"
-- for one TTL, or deletes it when there is no heir; and takes the leader and
-- the heir out of the candidates (the heir enlists again as it takes the
-- name, so a dead or forged one costs one reservation, once).
--
--   KEYS[1] lock key, KEYS[2] queue, KEYS[3] leases (fair mode's; may not
--   exist), KEYS[4] candidates, KEYS[5] their leases
--   ARGV[1] token, ARGV[2] heir's value ("": the best live candidate with a
--   priority above ARGV[3], if any), ARGV[3] our priority ("": none),
--   ARGV[4] our value, ARGV[5] TTL in ms (the reservation's)
--
-- Replies 0 if the key is missing or holds another token (then it writes
-- nothing); 1 if deleted (no heir); {2, heir} if reserved. Order: TIME, GET,
-- the candidate reads, the queue reads, PUBLISH "R" on the name's channel
-- and the wake-ups (to every live fair waiter with an heir, as any of them
-- may be it; else to the head), ZREM us from the candidates, then SET the
-- reservation PX or DEL.
return guard(function()
local now = nowMs(call('TIME'))
local cur = call('GET', KEYS[1])
if not ours(cur) then return 0 end
candidateKeys(KEYS[4], KEYS[5])
local to = ARGV[2]
if to == '' and ARGV[3] ~= '' then to = best(KEYS[4], KEYS[5], now, ARGV[3], ARGV[4]) or '' end
local wake = {}
if to ~= '' then
  for _, m in ipairs(call('ZRANGE', KEYS[2], 0, 999)) do
    if lease(KEYS[3], m, now) then wake[#wake + 1] = m end
  end
else
  wake[1] = headOf(KEYS[2], KEYS[3], nil, now)
end
call('PUBLISH', KEYS[1] .. ':ch', 'R')
for _, m in ipairs(wake) do call('PUBLISH', wakeChannel(KEYS[1], m), m) end
call('ZREM', KEYS[4], ARGV[4], to)
call('ZREM', KEYS[5], ARGV[4], to)
if to == '' then
  call('DEL', KEYS[1])
  return 1
end
local rest, nl = ownFence(cur)
call('SET', KEYS[1], '\n' .. string.sub(rest, 1, (nl or (#rest + 1)) - 1) .. '\n' .. to, 'PX', ARGV[5])
return {2, to}
end)
