-- For the scripts that enlist a candidate with a priority (acquire_candidate,
-- fair_acquire, prefer_renew) or pick one (hand_off, candidates). ARGV[3] is
-- the candidate's value; its priority is the last ARGV, a decimal string
-- (never turned into a Lua number, which keeps 14 digits when it becomes a
-- string again).
--
--   candidateKeys(ck, lk)  reads: raises an error, before any write, when
--                  the candidates ck or their leases lk hold anything but
--                  a sorted set (someone else wrote it), which names the
--                  key and says what to do; the key is left unchanged. It
--                  reads with ZSCORE (not TYPE: the ACL rule has no TYPE),
--                  under its own pcall, so that WRONGTYPE becomes that
--                  error; any other error goes on as it came (see guard)
--   enlisting(i)   before any write: KEYS[i] and KEYS[i+1], if given, are
--                  the candidates and their leases (candidateKeys)
--   enlist(t, leads, wait)  after the writes, given TIME's reply t, if
--                  enlisting found the keys: enlists the candidate until its
--                  next attempt can have come, plus a TTL (ARGV[2]): a
--                  follower's next attempt comes within a TTL or, waiting
--                  for the holder, once the holder's lease can have expired
--                  (wait, its PTTL in ms); one TTL when it leads (its
--                  renewals keep it; it dies with its lease). It prunes up
--                  to 16 passed entries, and has both keys expire with the
--                  latest lease
--   live(e, now)   whether a lease end e (a score, or nil) is live at now:
--                  passed, or further than two of the longest TTLs (48 h:
--                  not ours, a forged one) is not
--   best(ck, lk, now, above, skip)  the live candidate with the highest
--                  priority above the decimal above, other than skip and
--                  other than "" (nil if none among the best 16)
local candKeys
local far = 2 * 86400000
local function live(e, now)
  e = tonumber(e)
  return e ~= nil and e > now and e <= now + far
end
local function candidateKeys(ck, lk)
  for _, k in ipairs({ck, lk}) do
    local ok, e = pcall(call, 'ZSCORE', k, '')
    if not ok then
      if string.sub(type(e) == 'table' and e.err or tostring(e), 1, 9) ~= 'WRONGTYPE' then error(e, 0) end
      cmd = nil
      error('redisleader: candidate key ' .. k .. ' holds a value this package did not write (not a sorted set); it was left unchanged: delete it to campaign with a priority', 0)
    end
  end
end
local function enlisting(i)
  if not KEYS[i + 1] then return end
  candKeys = {KEYS[i], KEYS[i + 1]}
  candidateKeys(KEYS[i], KEYS[i + 1])
end
local function enlist(t, leads, wait)
  if not candKeys then return end
  local ck, lk = candKeys[1], candKeys[2]
  local now = nowMs(t)
  local passed = call('ZRANGEBYSCORE', lk, '-inf', string.format('%.0f', now), 'LIMIT', 0, 16)
  local forged = call('ZRANGEBYSCORE', lk, string.format('(%.0f', now + far), '+inf', 'LIMIT', 0, 16)
  for _, m in ipairs(forged) do passed[#passed + 1] = m end
  if #passed > 0 then
    call('ZREM', ck, unpack(passed))
    call('ZREM', lk, unpack(passed))
  end
  local ttl = tonumber(ARGV[2])
  local ends = now + ttl
  if not leads then ends = ends + math.min(math.max(ttl, tonumber(wait) or 0), far / 2) end
  call('ZADD', ck, ARGV[#ARGV], ARGV[3])
  call('ZADD', lk, string.format('%.0f', ends), ARGV[3])
  local top = call('ZRANGE', lk, -1, -1, 'WITHSCORES')
  if top[2] and live(top[2], now) and tonumber(top[2]) > ends then ends = tonumber(top[2]) end
  call('PEXPIREAT', ck, string.format('%.0f', ends))
  call('PEXPIREAT', lk, string.format('%.0f', ends))
end
local function best(ck, lk, now, above, skip)
  local c = call('ZRANGE', ck, '+inf', '(' .. above, 'BYSCORE', 'REV', 'LIMIT', 0, 16)
  for _, m in ipairs(c) do
    if m ~= skip and m ~= '' and live(call('ZSCORE', lk, m), now) then return m end
  end
  return nil
end
