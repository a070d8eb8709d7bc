-- sem_limit sets a semaphore's limit N: the one explicit way to change it
-- (Session.SetSemaphoreLimit).
--
--   KEYS[1] the limit key, KEYS[2] the permits (sem_acquire.lua)
--   ARGV[1] N (checked by the caller: an integer in [1, 1e6])
--
-- Replies the N it replaced (0: none). Holders keep their permits: under
-- a lower N no new permit is given until fewer than N are live. A value we
-- did not write in the limit key is an error, and left unchanged. Order:
-- GET, PUBLISH "L" on the name's channel (a higher N may admit waiters
-- now), SET.
return guard(function()
local raw = typed('limit', 'a string', 'GET', KEYS[1])
if raw and not (string.find(raw, '^[1-9]%d*$') and tonumber(raw) <= 1000000) then
  return redis.error_reply('ERR redisleader: limit key ' .. KEYS[1] .. ' holds a value this package did not write; it was left unchanged')
end
call('PUBLISH', KEYS[2] .. ':ch', 'L')
call('SET', KEYS[1], ARGV[1])
return tonumber(raw) or 0
end)
