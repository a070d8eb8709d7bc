-- sem_release gives a permit back if, and only if, the set holds our
-- member, and tells the waiters of the name (the set's key + ":ch").
--
--   KEYS[1] the permits (sem_acquire.lua)
--   ARGV[1] our member "<token>\n<fence>\n<value>"
--
-- Replies 1 if removed, 0 if the member is missing (then it writes
-- nothing: a double or late release never frees another's permit).
-- Order: ZSCORE, PUBLISH "R", ZREM.
return guard(function()
if not call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
call('PUBLISH', KEYS[1] .. ':ch', 'R')
call('ZREM', KEYS[1], ARGV[1])
return 1
end)
