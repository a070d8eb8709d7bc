-- fair_acquire is acquire for fair mode: it takes the lock only if it is
-- free and no waiter with a live lease arrived before us, and otherwise
-- (join) queues us, or refreshes our place and its lease.
--
--   KEYS[1] lock key, KEYS[2] fence key, KEYS[3] queue, KEYS[4] leases
--   ARGV[1] token, ARGV[2] TTL in ms, ARGV[3] value, ARGV[4] waiter (member),
--   ARGV[5] "1": join the queue if not acquired (Lock), "0": never (TryLock)
--
-- Replies:
--
--   {1, fence}   acquired now, or already ours (as acquire); our place is
--                removed
--   {0, stored or nil, pttl or -2, ahead, headLeft}  not acquired: the
--                holder's stored value and PTTL (nil and -2: free, but
--                waiters came first), an upper bound of the live waiters
--                ahead of us (0: we are the head; -2: we gave up, an attempt
--                that arrived after its caller left, which writes nothing),
--                and the ms left on the head waiter's lease
--
-- A candidate with a priority appends its two keys (KEYS[5], KEYS[6]) and
-- its priority (ARGV[6]), and is enlisted whatever the outcome (prelude.lua's piece cand);
-- a transfer's reservation for our value is taken whoever waits.
--
-- Order: TIME, GET the lock key, ZSCORE our place, the queue reads
-- (tombstone, head, passed leases and tombstones, the latest lease), then
-- (taking) GET and validate the fence key, PUBLISH "A" on the name's
-- channel, SET the fence, SET the lock NX PX, ZREM us and the waiters whose
-- leases passed; or (not taking, the lock free) PUBLISH the head's member
-- id, its wake-up, on its session's wake-up channel (it may have missed its
-- wake-up, or just become the head because the one before it died), then
-- (join) ZREM the dead, ZADD our place (kept if we have a live one) and
-- lease, and PEXPIREAT both queue keys to the latest lease end, so that no
-- queue key outlives its last waiter's lease.
return guard(function()
local t = call('TIME')
local now = nowMs(t)
local cur = call('GET', KEYS[1])
local placed = call('ZSCORE', KEYS[3], ARGV[4])
enlisting(5)
if ours(cur) then
  if placed then
    call('ZREM', KEYS[3], ARGV[4])
    call('ZREM', KEYS[4], ARGV[4])
  end
  call('PEXPIRE', KEYS[1], ARGV[2])
  local rest, nl = ownFence(cur)
  return {1, tonumber(string.sub(rest, 1, nl - 1))}
end
if gone(KEYS[4], ARGV[4], now) then return {0, cur or false, -2, -2, 0} end
local head, dead = headOf(KEYS[3], KEYS[4], nil, now)
if placed and not lease(KEYS[4], ARGV[4], now) then placed = false end
local pruneFrom, pruneTo = pruneRange(now)
local stale = call('ZRANGEBYSCORE', KEYS[4], pruneFrom, pruneTo, 'LIMIT', 0, 64)
for _, m in ipairs(stale) do dead[#dead + 1] = m end
local ttl = tonumber(ARGV[2])
if (not cur and (not head or head == ARGV[4])) or heir(cur) then
  local fence, err = take(t, cur)
  if err then return err end
  dead[#dead + 1] = ARGV[4]
  zremAll(KEYS[3], dead)
  zremAll(KEYS[4], dead)
  enlist(t, true)
  return {1, fence}
end
local pttl, ahead, headLeft = -2, 0, ttl
if cur then pttl = call('PTTL', KEYS[1]) end
if head and head ~= ARGV[4] then
  headLeft = lease(KEYS[4], head, now) - now
  if placed then ahead = call('ZRANK', KEYS[3], ARGV[4]) else ahead = call('ZCARD', KEYS[3]) end
  ahead = math.max(1, ahead - #dead)
end
local keep = keepUntil(KEYS[4], now + ttl)
if not cur and head then call('PUBLISH', wakeChannel(KEYS[1], head), head) end
if ARGV[5] == '1' then
  zremAll(KEYS[3], dead)
  zremAll(KEYS[4], dead)
  if not placed then call('ZADD', KEYS[3], string.format('%.0f', t[1] * 1000000 + t[2]), ARGV[4]) end
  call('ZADD', KEYS[4], string.format('%.0f', now + ttl), ARGV[4])
  call('PEXPIREAT', KEYS[3], string.format('%.0f', keep))
  call('PEXPIREAT', KEYS[4], string.format('%.0f', keep))
end
enlist(t, false, pttl)
return {0, cur or false, pttl, ahead, headLeft}
end)
