-- request_send stores a transfer request, replacing any other, and hints
-- the leader on the key's own channel (pub/sub is a hint: the leader reads
-- the key). With ARGV[3] 'NX' it stores it only if the key does not exist:
-- a leader puts back a request it took but whose term could not honour it.
--
--   KEYS[1] the request key
--   ARGV[1] the request ("<id> <fence>\n<value>"), ARGV[2] its TTL in ms,
--   ARGV[3] 'NX' or ''
--
-- Replies 1, or 0 when ARGV[3] is 'NX' and the key exists.
return guard(function()
if ARGV[3] == 'NX' then
  if not call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2], 'NX') then return 0 end
else
  call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
call('PUBLISH', KEYS[1], 'T')
return 1
end)
