-- sem_acquire takes one of a semaphore's N permits, or confirms that this
-- token already holds one (internal/lease/semaphore.go: the layout).
--
--   KEYS[1] the permits: a sorted set, member "<token>\n<fence>\n<value>"
--           -> the end of its lease (server TIME in ms)
--   KEYS[2] the name's fence key, KEYS[3] the limit key (N, a decimal)
--   ARGV[1] token, ARGV[2] TTL in ms, ARGV[3] value, ARGV[4] N (checked
--   by the caller: an integer in [1, 1e6]), ARGV[5] the longest TTL in ms
--
-- Replies:
--
--   {1, fence, time}   acquired now, or already ours and live (idempotent: a
--                      retried acquire refreshes the same permit, same fence);
--                      time is the server TIME in us the lease runs from
--   {0, member, left}  all N permits live: the one that ends first, and the
--                      ms until it does
--   error              "ERR redisleader: ..." (written nowhere): the limit
--                      key holds another N (callers disagree) or a value we
--                      did not write; the set is not a sorted set, or holds
--                      a member or a score we could not have written (a
--                      score below 0 or beyond now plus the longest TTL,
--                      such as +inf); the fence key holds no fence
--
-- The fence is max(stored + 1, server TIME in us), stored in the name's
-- fence key (as a lock's). Order: TIME; GET the limit key; ZRANGE the whole
-- set and validate every member (an error leaves everything as it was);
-- GET the fence key; then the writes: ZREM the passed members (purge), and,
-- ours: ZADD XX the new end; room: SET the fence key, SET the limit key
-- (when missing), ZADD the permit; then PEXPIREAT the set at its latest
-- end, so that a name nobody holds leaves no set behind. The limit and
-- fence keys have no TTL. Nothing is published: only a release frees a
-- permit early, and it wakes the waiters.
return guard(function()
local t = call('TIME')
local now, us = nowMs(t), t[1] * 1000000 + t[2]
local n = tonumber(ARGV[4])
local raw = typed('limit', 'a string', 'GET', KEYS[3])
if raw then
  local stored = tonumber(raw)
  if not stored or not string.find(raw, '^[1-9]%d*$') or stored > 1000000 then
    return redis.error_reply('ERR redisleader: limit key ' .. KEYS[3] .. ' holds a value this package did not write; it was left unchanged')
  end
  if stored ~= n then
    return redis.error_reply('ERR redisleader: semaphore limit mismatch: ' .. KEYS[3] .. ' holds N=' .. raw .. ', this caller says N=' .. ARGV[4] ..
      '; the callers of a name must agree (change it with Session.SetSemaphoreLimit)')
  end
end
local all = typed('semaphore', 'a sorted set', 'ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local far = now + tonumber(ARGV[5])
local mine, fence, passed, live, first, firstEnd = nil, nil, {}, 0, nil, nil
for i = 1, #all, 2 do
  local m, e = all[i], tonumber(all[i + 1])
  local tok, f = string.match(m, '^([^\n]+)\n(%d+)\n')
  if not tok or string.find(f, '^0.') or not e or e < 0 or e > far then
    return redis.error_reply('ERR redisleader: semaphore key ' .. KEYS[1] .. ' holds a member or score this package did not write; it was left unchanged')
  end
  if e <= now then
    passed[#passed + 1] = m
  else
    live = live + 1
    if tok == ARGV[1] then mine, fence = m, f end
    if not firstEnd or e < firstEnd then first, firstEnd = m, e end
  end
end
local ends = now + tonumber(ARGV[2])
if not mine and live < n then
  local stored, err = readFence(KEYS[2])
  if err then return err end
  fence = us
  if stored and stored >= us then fence = stored + 1 end
  fence = string.format('%.0f', fence)
end
for i = 1, #passed, 100 do
  call('ZREM', KEYS[1], unpack(passed, i, math.min(i + 99, #passed)))
end
if mine then
  call('ZADD', KEYS[1], 'XX', ends, mine)
elseif live < n then
  call('SET', KEYS[2], fence)
  if not raw then call('SET', KEYS[3], ARGV[4]) end
  call('ZADD', KEYS[1], ends, ARGV[1] .. '\n' .. fence .. '\n' .. ARGV[3])
else
  return {0, first, firstEnd - now}
end
local top = call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
call('PEXPIREAT', KEYS[1], top[2])
return {1, tonumber(fence), us}
end)
