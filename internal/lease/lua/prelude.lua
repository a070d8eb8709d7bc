-- The prelude of every script (internal/lease/scripts.go puts it first).
--
-- Every script does its reads and its PUBLISH before its first write, so a
-- command that fails for a reason retrying cannot fix (a user's ACL that
-- denies the command or the channel, a key of the wrong type, a foreign
-- fence) leaves Redis exactly as it was. A command the user's ACL denies
-- ends the script with a NOPERM error naming the command and its key or
-- channel (Redis 7.0 words a denial inside a script as "ERR The user
-- executing the script can't ..." without saying what it denied).
--
-- deny(r, cmd, target) is the error reply for r, the error table that
-- redis.pcall returned for cmd (upper case) on target (a key or channel,
-- or nil): an ACL denial becomes "NOPERM redisleader: permission denied
-- for <cmd> <target> (ACL): <what Redis said>", any other error stays as
-- Redis said it. The lean scripts (acquire, release, renew) call
-- redis.pcall and hand its error to deny: no wrapper, no pcall, no helper
-- they do not use (each costs server time on every call; see guard.lua for
-- the others).
local function deny(r, cmd, target)
  local e = r.err
  if string.sub(e, 1, 6) == 'NOPERM' or string.find(e, "executing the script can't", 1, true) or string.find(e, 'ACL failure', 1, true) then
    e = 'NOPERM redisleader: permission denied for ' .. cmd .. (target and ' ' .. target or '') .. ' (ACL): ' .. e
  end
  return redis.error_reply(e)
end
