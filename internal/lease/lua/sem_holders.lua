-- sem_holders reads a semaphore's permits and limit, writing nothing.
--
--   KEYS[1] the permits (sem_acquire.lua), KEYS[2] the limit key
--
-- Replies {now in ms, limit or false, member, end, member, end, ...}: every
-- member with its end, live or not; the caller judges them (and never
-- shows a token).
return guard(function()
local now = nowMs(call('TIME'))
local all = call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
table.insert(all, 1, call('GET', KEYS[2]))
table.insert(all, 1, now)
return all
end)
