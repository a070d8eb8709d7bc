-- acquire takes the lock, or confirms that this token already holds it.
--
--   KEYS[1] lock key, KEYS[2] fence key
--   ARGV[1] token, ARGV[2] TTL in ms, ARGV[3] value
--
-- Replies:
--
--   {1, fence, time}      acquired now, or already ours (idempotent: a retried
--                         or ambiguous acquire succeeds with the same fence and
--                         a refreshed TTL, never "held by another"); time is
--                         the server TIME in us from which the key's TTL runs
--                         (it expires when the server's clock passes time in
--                         ms plus the TTL)
--   {0, stored, pttl}     held by another owner: its stored value and PTTL in ms
--
-- The fence is max(stored + 1, server TIME in us). Order: GET the lock key;
-- TIME; (held: PEXPIREAT if ours, the only write on that path, else PTTL);
-- GET the fence key and validate it; PUBLISH "A"; SET the fence key; SET the
-- lock key NX PXAT. So a denied command or channel, a key of the wrong type
-- or a fence key that does not hold a fence (an error, never silently reset:
-- fences must not go backwards) leaves both keys untouched, and a failure
-- between the two SETs leaves a gap in the fences, never a lock without a
-- fence. Fences stay monotonic when Redis loses data (restart without
-- persistence, old snapshot) unless the server clock also goes back.
-- Numbers up to 2^53 are exact in Lua; us since 1970 stay below that for
-- centuries. A transfer's reservation for our value (heir) is taken.
return guard(function()
local cur = call('GET', KEYS[1])
return claim(cur, call('TIME'))
end)
