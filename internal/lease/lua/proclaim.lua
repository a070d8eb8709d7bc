-- proclaim replaces the value stored with our token, keeping the token, the
-- fence and the TTL, and tells subscribers of the name's channel; unless a
-- later Proclaim of the same term is stored already. Each Proclaim of a
-- term carries the next number of the term's sequence (1, 2, ...; the
-- acquire stands for 0), kept in the seq key as "<token>\n<sequence>", so
-- that a request that reaches Redis late (its caller gave up while it was
-- on its way) never overwrites the value of one sent after it.
--
--   KEYS[1] lock key, KEYS[2] seq key
--   ARGV[1] token, ARGV[2] sequence, ARGV[3] the new value
--
-- Replies 1 if stored, or if this very sequence is stored already (a resent
-- request: it writes nothing); 2 if a greater one is (it writes nothing); 0
-- if the lock key is missing or holds another token (it writes nothing). A
-- seq key with another token is another term's, and is replaced; one that
-- holds anything but "<token>\n<sequence>" (someone else wrote it) is an
-- error reply that leaves both keys as they were, as is our token without a
-- fence after it. Order: GET the lock key, GET the seq key, PUBLISH "A", SET
-- the seq key, SET the lock key KEEPTTL: a denied command or channel leaves
-- both keys as they were, and a failure between the two SETs only leaves
-- the former value, which no earlier request can then overwrite either.
return guard(function()
local cur, rest, nl = own()
if not cur then return rest or 0 end
local last, raw = 0, call('GET', KEYS[2])
if raw then
  local snl = string.find(raw, '\n', 1, true)
  local s = snl and string.sub(raw, snl + 1)
  local n = s and (s == '0' or string.find(s, '^[1-9]%d*$')) and tonumber(s) -- a number as we write one
  if not n then
    return redis.error_reply('ERR redisleader: key ' .. KEYS[2] .. ' does not hold a proclaim sequence; it was left unchanged')
  end
  if string.sub(raw, 1, snl) == ARGV[1] .. '\n' then last = n end
end
local seq = tonumber(ARGV[2])
if seq == last then return 1 end
if seq < last then return 2 end
call('PUBLISH', KEYS[1] .. ':ch', 'A')
call('SET', KEYS[2], ARGV[1] .. '\n' .. ARGV[2])
call('SET', KEYS[1], string.sub(cur, 1, #ARGV[1] + 1 + nl) .. ARGV[3], 'KEEPTTL')
return 1
end)
