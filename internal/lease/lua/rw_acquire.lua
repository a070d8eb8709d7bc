-- rw_acquire takes a read-write lock's read or write lease, or confirms
-- that this token already holds it; a writer that must wait posts its
-- intent, which stops new readers (internal/lease/rwlock.go: the layout).
--
--   KEYS[1] the holders: a sorted set, member "<token>\n<fence>\n<role><value>"
--           -> the end of its lease (server TIME in ms); role "r" a reader,
--           "w" the writer, "i" a waiting writer's intent (fence 0)
--   KEYS[2] the name's fence key
--   ARGV[1] token, ARGV[2] TTL in ms, ARGV[3] role ("r" or "w") and value,
--   ARGV[4] the longest TTL in ms, ARGV[5] "1": a writer that must wait
--   posts its intent (a blocking Lock), "0": it does not (TryLock)
--
-- Replies:
--
--   {1, fence, time}   granted now, or already ours and live (idempotent: a
--                      retried acquire refreshes the same lease, same fence);
--                      time is the server TIME in us the lease runs from
--   {0, member, left}  refused: the member we wait for (the writer; for a
--                      reader, else a writer's intent; for a writer, else a
--                      reader or an earlier intent), and the ms until we try
--                      again: its end, for a writer at most half a TTL, so
--                      that its intent (renewed by every attempt) never
--                      lapses while it waits
--   error              "ERR redisleader: ..." (written nowhere): the set is
--                      not a sorted set, or holds a member or a score we
--                      could not have written; the fence key holds no fence
--
-- Who is granted: a reader when no writer holds and no other writer's
-- intent is live (writer preference); a writer when nobody else holds,
-- and it has posted its intent or no other intent is live (so a writer
-- that releases and asks again queues behind the one that waited).
-- Order: TIME; ZRANGE the whole set and validate every member (an error
-- leaves everything as it was); GET the fence key; then the writes: ZREM
-- the passed members (purge), and, ours: ZADD XX the new end; granted: ZREM
-- our intent, SET the fence key, ZADD the lease; a writer refused: ZADD
-- its intent's new end (posting it); then PEXPIREAT the set at its latest end. Nothing
-- is published: a release, or a withdrawn intent, wakes the waiters.
return guard(function()
local t = call('TIME')
local now, us = nowMs(t), t[1] * 1000000 + t[2]
local all = typed('rwlock', 'a sorted set', 'ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local role, ttl = string.sub(ARGV[3], 1, 1), tonumber(ARGV[2])
local far = now + tonumber(ARGV[4])
local mine, mineRole, fence, passed = nil, nil, nil, {}
local by, byEnd = {}, {}
for i = 1, #all, 2 do
  local m, e = all[i], tonumber(all[i + 1])
  local tok, f, r = string.match(m, '^([^\n]+)\n(%d+)\n([rwi])')
  if not tok or string.find(f, '^0.') or not e or e < 0 or e > far or (r == 'i') ~= (f == '0') then
    return redis.error_reply('ERR redisleader: rwlock key ' .. KEYS[1] .. ' holds a member or score this package did not write; it was left unchanged')
  end
  if e <= now then
    passed[#passed + 1] = m
  elseif tok == ARGV[1] then
    mine, mineRole, fence = m, r, f
  elseif not byEnd[r] or e < byEnd[r] then
    by[r], byEnd[r] = m, e
  end
end
for i = 1, #passed, 100 do
  call('ZREM', KEYS[1], unpack(passed, i, math.min(i + 99, #passed)))
end
local wait, waitEnd
if mineRole == role then
  call('ZADD', KEYS[1], 'XX', now + ttl, mine)
elseif by.w then
  wait, waitEnd = by.w, byEnd.w
elseif role == 'r' and by.i then
  wait, waitEnd = by.i, byEnd.i
elseif role == 'w' and by.r then
  wait, waitEnd = by.r, byEnd.r
elseif role == 'w' and by.i and mineRole ~= 'i' then
  wait, waitEnd = by.i, byEnd.i
else
  local stored, err = readFence(KEYS[2])
  if err then return err end
  fence = us
  if stored and stored >= us then fence = stored + 1 end
  fence = string.format('%.0f', fence)
  if mine then call('ZREM', KEYS[1], mine) end
  call('SET', KEYS[2], fence)
  call('ZADD', KEYS[1], now + ttl, ARGV[1] .. '\n' .. fence .. '\n' .. ARGV[3])
end
local left
if wait then
  left = waitEnd - now
  if role == 'w' then left = math.min(left, math.floor(ttl / 2)) end
  if role == 'w' and ARGV[5] == '1' then
    call('ZADD', KEYS[1], now + ttl, mine or (ARGV[1] .. '\n0\ni' .. string.sub(ARGV[3], 2)))
  end
end
local top = call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if top[2] then call('PEXPIREAT', KEYS[1], top[2]) end
if wait then return {0, wait, left} end
return {1, tonumber(fence), us}
end)
