-- sem_renew extends a permit's lease if, and only if, the set still holds
-- it and it has not ended (internal/lease/semaphore.go).
--
--   KEYS[1] the permits (sem_acquire.lua)
--   ARGV[1] token, ARGV[2] fence, ARGV[3] value: our member is
--   "<token>\n<fence>\n<value>"; ARGV[4] TTL in ms
--
-- Replies 1 if renewed, 0 if the member is missing or its lease has passed
-- (then it writes nothing: a permit that ended may already be another's).
-- Order: TIME, ZSCORE, ZRANGE the latest end (reads), ZADD XX, then
-- PEXPIREAT the set at the latest live end (prelude.lua's piece live: not a
-- forged one, such as +inf, which PEXPIREAT refuses).
return guard(function()
local now, m = nowMs(call('TIME')), ARGV[1] .. '\n' .. ARGV[2] .. '\n' .. ARGV[3]
local e = tonumber(call('ZSCORE', KEYS[1], m))
if not e or e <= now then return 0 end
local ends = now + tonumber(ARGV[4])
local top = call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
call('ZADD', KEYS[1], 'XX', ends, m)
if top[2] and live(top[2], ends) then ends = tonumber(top[2]) end
call('PEXPIREAT', KEYS[1], string.format('%.0f', ends))
return 1
end)
