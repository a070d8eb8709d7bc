-- sem_release gives a permit back if, and only if, the set holds our
-- member, and tells the waiters of the name (the set's key + ":ch").
--
--   KEYS[1] the permits (sem_acquire.lua)
--   ARGV[1] token, ARGV[2] fence, ARGV[3] value: our member is
--   "<token>\n<fence>\n<value>"
--
-- Replies 1 if removed, 0 if the member is missing (then it writes
-- nothing: a double or late release never frees another's permit).
-- Order: ZSCORE, PUBLISH "R", ZREM.
return guard(function()
local m = ARGV[1] .. '\n' .. ARGV[2] .. '\n' .. ARGV[3]
if not call('ZSCORE', KEYS[1], m) then return 0 end
call('PUBLISH', KEYS[1] .. ':ch', 'R')
call('ZREM', KEYS[1], m)
return 1
end)
