-- request_send stores a transfer request, replacing any other, and hints
-- the leader on the key's own channel (pub/sub is a hint: the leader reads
-- the key). With ARGV[3] 'NX' it stores it only if the key does not exist:
-- a leader puts back a request it took but whose term could not honour it.
--
--   KEYS[1] the request key
--   ARGV[1] the request ("<id> <fence>\n<value>"), ARGV[2] its TTL in ms,
--   ARGV[3] 'NX' or ''
--
-- Replies 1, or 0 when ARGV[3] is 'NX' and the key exists. A key that holds
-- anything but a request of any version (one has a newline: RequestValue),
-- which someone else wrote, is an error that leaves it as it was. Order:
-- GET, PUBLISH "T", SET.
return guard(function()
local v = call('GET', KEYS[1])
if v and not string.find(v, '\n', 1, true) then
  return redis.error_reply('ERR redisleader: transfer request key ' .. KEYS[1] .. ' holds a value this package did not write; it was left unchanged')
end
if v and ARGV[3] == 'NX' then return 0 end
call('PUBLISH', KEYS[1], 'T')
call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
end)
