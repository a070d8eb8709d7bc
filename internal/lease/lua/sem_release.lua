-- sem_release gives a permit back if, and only if, the set holds our
-- member, and tells the waiters of the name (the set's key + ":ch").
--
--   KEYS[1] the permits (sem_acquire.lua)
--   ARGV[1] token, ARGV[2] fence, ARGV[3] value: our member is
--   "<token>\n<fence>\n<value>"
--
-- Fence "0": an acquire whose outcome is unknown gives its permit back (an
-- abandoned attempt, a give-back, the heartbeat's clean-up): its fence was
-- never heard, so the member is found by its token among all of them.
--
-- Replies 1 if removed, 0 if the member is missing (then it writes
-- nothing: a double or late release never frees another's permit).
-- Order: ZSCORE (or ZRANGE), PUBLISH "R", ZREM.
return guard(function()
local m = ARGV[1] .. '\n' .. ARGV[2] .. '\n' .. ARGV[3]
if ARGV[2] == '0' then
  m = nil
  for _, x in ipairs(call('ZRANGE', KEYS[1], 0, -1)) do
    if string.sub(x, 1, #ARGV[1] + 1) == ARGV[1] .. '\n' then m = x break end
  end
  if not m then return 0 end
elseif not call('ZSCORE', KEYS[1], m) then
  return 0
end
call('PUBLISH', KEYS[1] .. ':ch', 'R')
call('ZREM', KEYS[1], m)
return 1
end)
