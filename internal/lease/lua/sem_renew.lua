-- sem_renew extends a permit's lease if, and only if, the set still holds
-- it and it has not ended (internal/lease/semaphore.go).
--
--   KEYS[1] the permits (sem_acquire.lua)
--   ARGV[1] token, ARGV[2] fence, ARGV[3] value: our member is
--   "<token>\n<fence>\n<value>"; ARGV[4] TTL in ms
--
-- Replies 1 if renewed, 0 if the member is missing or its lease has passed
-- (then it writes nothing: a permit that ended may already be another's).
-- Order: TIME, ZSCORE (reads), ZADD XX, then PEXPIREAT the set at its
-- latest end.
return guard(function()
local now, m = nowMs(call('TIME')), ARGV[1] .. '\n' .. ARGV[2] .. '\n' .. ARGV[3]
local e = tonumber(call('ZSCORE', KEYS[1], m))
if not e or e <= now then return 0 end
call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[4]), m)
local top = call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
call('PEXPIREAT', KEYS[1], top[2])
return 1
end)
