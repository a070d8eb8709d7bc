-- The prelude: its base (up to the first piece) starts every script; the
-- pieces below it ("-- ==== piece NAME ====") are the shared helpers, each
-- defined once here, which a script takes only when the table in
-- internal/lease/scripts.go names them (a definition costs server time on
-- every call), so a script's text is read in two files: here and its own.
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
-- for <cmd> <target> (ACL): <what Redis said>", a key of another type
-- "WRONGTYPE redisleader: key <target> holds a value this package did not
-- write (another type); it was left unchanged", any other error stays as
-- Redis said it. The lean scripts (acquire, release, renew) call
-- redis.pcall and hand its error to deny: no wrapper, no pcall, no helper
-- they do not use (each costs server time on every call; see prelude.lua's piece guard for
-- the others).
local function deny(r, cmd, target)
  local e = r.err
  if string.sub(e, 1, 6) == 'NOPERM' or string.find(e, "executing the script can't", 1, true) or string.find(e, 'ACL failure', 1, true) then
    e = 'NOPERM redisleader: permission denied for ' .. cmd .. (target and ' ' .. target or '') .. ' (ACL): ' .. e
  elseif target and string.find(e, 'WRONGTYPE', 1, true) then
    e = 'WRONGTYPE redisleader: key ' .. target .. ' holds a value this package did not write (another type); it was left unchanged'
  end
  return redis.error_reply(e)
end
-- ==== piece guard ====
-- For every script but the lean ones (acquire, release, renew), after the
-- prelude:
--
-- call(...) is redis.call, except that it notes the command and its first
-- argument before redis.call and forgets them when it returns, so that a
-- failed call (redis.call raises) ends the script's body, through the one
-- pcall of guard, with them noted.
--
-- guard(body) runs body under one pcall and returns its reply; an error
-- ends it with that call's error, read as a table's err or as a message
-- (what pcall hands back differs between Redis versions: 7.0 turns an
-- error table into its message), an ACL denial named by deny. A Lua
-- runtime error (nothing noted) becomes "ERR <message>".
--
-- ours(v) tells whether a lock value v (or nil) holds our token, ARGV[1] of
-- every script that takes one; ownFence(v), for such a v, returns the part
-- after our token ("<fence>\n<value>") and where the fence ends in it (the
-- index of its newline, nil if none).
--
-- nowMs(t) is TIME's reply t in ms.
local rcall, cmd, target = redis.call
local function call(...)
  cmd, target = ...
  local r = rcall(...)
  cmd = nil
  return r
end
local function ours(v) return v and string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. '\n' end
local function ownFence(v)
  local rest = string.sub(v, #ARGV[1] + 2)
  return rest, string.find(rest, '\n', 1, true)
end
local function nowMs(t) return t[1] * 1000 + math.floor(t[2] / 1000) end
local function guard(body)
  local ok, res = pcall(body)
  if ok then return res end
  if not cmd then return redis.error_reply('ERR ' .. tostring(res)) end
  return deny({err = type(res) == 'table' and res.err or tostring(res)}, string.upper(cmd), target)
end
-- ==== piece typed ====
-- For the scripts that read a key someone else may have written with
-- another type, after prelude.lua's piece guard: typed(what, kind, ...) is
-- call(...), whose second argument is a key, except that a key of another
-- type ends the script (through guard) with an error naming it:
-- "redisleader: <what> key <key> holds a value this package did not write
-- (not <kind>); it was left unchanged". Any other error stays as call's.
local function typed(what, kind, ...)
  local ok, r = pcall(call, ...)
  if ok then return r end
  if not string.find(type(r) == 'table' and r.err or tostring(r), 'WRONGTYPE', 1, true) then error(r, 0) end
  cmd = nil
  error('redisleader: ' .. what .. ' key ' .. select(2, ...) .. ' holds a value this package did not write (not ' .. kind .. '); it was left unchanged', 0)
end
-- ==== piece fence ====
-- fenceOf(raw, key) returns the fence that raw, the value of the fence key
-- key, holds, or nil and an error reply, written nowhere, when it holds
-- anything else (someone else wrote it): fences must not go backwards, so a
-- foreign value is neither reset nor touched. A fence is an integer in
-- [0, 2^53-1), exact in Lua's doubles, written as this package writes
-- numbers: in decimal, without sign, spaces, exponent or leading zero.
local function fenceOf(raw, key)
  local f = (raw == '0' or string.find(raw, '^[1-9]%d*$')) and tonumber(raw)
  if not f or f >= 9007199254740991 then
    return nil, redis.error_reply('ERR redisleader: fence key ' .. key .. ' does not hold a fence (a decimal integer in [0, 2^53-1), no sign or leading zero); it was left unchanged')
  end
  return f
end
-- ==== piece readfence ====
-- For the scripts that read a fence key, after prelude.lua's piece fence
-- (the acquire scripts read theirs in take, and do not pay for this
-- definition): readFence(key) reads the fence key: its fence (fenceOf), nil
-- when the key does not exist, or nil and an error reply when GET fails
-- (deny).
local function readFence(key)
  local raw = redis.pcall('GET', key)
  if not raw then return nil end
  if type(raw) == 'table' then return nil, deny(raw, 'GET', key) end
  return fenceOf(raw, key)
end
-- ==== piece take ====
-- For the acquire scripts, after prelude.lua's piece fence:
--
-- take(t, over, now) takes the free lock (over: the reservation for us
-- that it holds, see heir) for ARGV[1] (token) with ARGV[3] (value) and
-- ARGV[2] (TTL in ms), given TIME's reply t (and now, t in us, if known),
-- and returns its fence, or nil and an error reply, written nowhere, when
-- the fence key (KEYS[2]) does not hold a fence or a command fails (deny).
-- The fence is max(stored + 1, server TIME in us); when it is TIME's, its
-- decimal is TIME's two strings joined (the us padded to six digits),
-- sparing a number's formatting, and a stored fence of plain digits is
-- compared with it as a string (shorter, or as long and before it), sparing
-- tonumber of a 16-digit decimal (strtod's slow path); anything else goes
-- through fenceOf. The key expires at expiresAt(now): now in ms plus the
-- TTL, so that its expiry is known from t exactly (Redis would otherwise
-- count PX from the start of the script, a little before TIME; Redlock
-- relies on this, see quorum.acquire); a decimal string, which
-- string.format's integer conversion writes for a fraction of what
-- redis.pcall's conversion of a number ("%.17g") costs.
-- Order: GET and validate the fence key, PUBLISH "A" on the name's
-- channel, SET the fence key, SET the lock key (KEYS[1]) NX PXAT (over:
-- XX PXAT).
--
-- heir(v) tells whether a lock value v is a transfer's reservation,
-- "\n<fence>\n<value>", for our value.
local function expiresAt(now)
  return string.format('%d', math.floor(now / 1000) + ARGV[2])
end
local function take(t, over, now)
  now = now or t[1] * 1000000 + t[2]
  local fence, fs = now, t[1] .. string.sub('00000', #t[2]) .. t[2]
  local raw = redis.pcall('GET', KEYS[2])
  if type(raw) == 'table' then return nil, deny(raw, 'GET', KEYS[2]) end
  if raw and not (string.find(raw, '^[1-9]%d*$') and (#raw < #fs or #raw == #fs and raw < fs)) then
    local stored, err = fenceOf(raw, KEYS[2])
    if err then return nil, err end
    if stored >= now then
      fence = stored + 1
      fs = string.format('%.0f', fence)
    end
  end
  local ch = KEYS[1] .. ':ch'
  local r = redis.pcall('PUBLISH', ch, 'A')
  if type(r) == 'table' then return nil, deny(r, 'PUBLISH', ch) end
  r = redis.pcall('SET', KEYS[2], fs)
  if r.err then return nil, deny(r, 'SET', KEYS[2]) end
  r = redis.pcall('SET', KEYS[1], ARGV[1] .. '\n' .. fs .. '\n' .. ARGV[3], over and 'XX' or 'NX', 'PXAT', expiresAt(now))
  if r and r.err then return nil, deny(r, 'SET', KEYS[1]) end
  return fence
end
local function heir(v)
  if not v or ARGV[3] == '' or string.byte(v) ~= 10 then return false end
  local nl = string.find(v, '\n', 2, true)
  return nl ~= nil and string.sub(v, nl + 1) == ARGV[3]
end
-- ==== piece claim ====
-- For acquire and acquire_candidate, after prelude.lua's piece take:
-- claim(cur, t, after) is acquire's reply given the lock key's value cur
-- and TIME's reply t, each as redis.pcall returned it (an error table:
-- that call failed, see deny): ours, it refreshes the TTL (SET of the same
-- value XX PXAT: the required ACL rule has SET, not PEXPIREAT); held by
-- another, it reads its PTTL; free or reserved for us, it takes it (take), and when the fence
-- is TIME's (the common case) replies that one integer, sparing Redis the
-- conversion of a table. after(t, leads, pttl), if given, runs after the
-- writes (acquire_candidate's enlist).
local function claim(cur, t, after)
  if type(cur) == 'table' then return deny(cur, 'GET', KEYS[1]) end
  if t.err then return deny(t, 'TIME') end
  local now = t[1] * 1000000 + t[2]
  if cur then
    local n = #ARGV[1]
    if string.sub(cur, 1, n) == ARGV[1] and string.byte(cur, n + 1) == 10 then
      local nl = string.find(cur, '\n', n + 2, true)
      if not nl then
        return redis.error_reply('ERR redisleader: lock key ' .. KEYS[1] .. ' holds our token but no fence; it was left unchanged')
      end
      local r = redis.pcall('SET', KEYS[1], cur, 'XX', 'PXAT', expiresAt(now))
      if r and r.err then return deny(r, 'SET', KEYS[1]) end
      return {1, tonumber(string.sub(cur, n + 2, nl - 1)), now}
    end
    if not heir(cur) then
      local pttl = redis.pcall('PTTL', KEYS[1])
      if type(pttl) == 'table' then return deny(pttl, 'PTTL', KEYS[1]) end
      if after then after(t, false, pttl) end
      return {0, cur, pttl}
    end
  end
  local fence, err = take(t, cur, now)
  if err then return err end
  if after then after(t, true) end
  if fence == now then return fence end
  return {1, fence, now}
end
-- ==== piece mine ====
-- For release and renew: mine() reads the lock key (KEYS[1]) and tells
-- whether it holds our token (ARGV[1]): true; or false and the reply to
-- give, 0 (the key is missing or holds another token) or deny's error (GET
-- failed).
local function mine()
  local cur = redis.pcall('GET', KEYS[1])
  if type(cur) ~= 'string' then
    if cur then return false, deny(cur, 'GET', KEYS[1]) end
    return false, 0
  end
  local n = #ARGV[1]
  return string.sub(cur, 1, n) == ARGV[1] and string.byte(cur, n + 1) == 10, 0
end
-- ==== piece own ====
-- For the scripts that change a key holding our token (ARGV[1]): own()
-- reads the lock key (KEYS[1]) and returns its value, the part after our
-- token, and where the fence ends in that part; or nil when the key is
-- missing or holds another token; or nil and an error reply, written
-- nowhere, when it holds our token but no fence after it.
local function own()
  local cur = call('GET', KEYS[1])
  if not ours(cur) then return nil end
  local rest, nl = ownFence(cur)
  if not nl then
    return nil, redis.error_reply('ERR redisleader: lock key ' .. KEYS[1] .. ' holds our token but no fence; it was left unchanged')
  end
  return cur, rest, nl
end
-- ==== piece live ====
-- For the scripts of fair mode and of priorities (prelude.lua's pieces
-- queue and cand) and for sem_renew, whose sorted sets hold lease ends in
-- server ms:
-- live(e, now) tells whether a lease end e (a score, or nil) is live at
-- now; passed, or further than far, two of the longest TTLs (48 h: not
-- ours, a forged one), it is not.
local far = 2 * 86400000
local function live(e, now)
  e = tonumber(e)
  return e ~= nil and e > now and e <= now + far
end
-- ==== piece queue ====
-- For the scripts of fair mode, after prelude.lua's piece live, which keep
-- a name's waiters in two sorted sets: the queue (member -> arrival, server TIME in us) and the leases
-- (member -> end of the waiter's lease, server time in ms). A member is
-- "<session id>.<n>"; the session's wake-up channel for the name is lock
-- key + ":w:" + session id. A waiter that gave up leaves a tombstone in the
-- leases, -(end of a TTL), so that an attempt of its still on its way (its
-- caller gone) cannot queue a ghost. now is the server time in ms (nowMs).
--
--   lease(leases, m, now)   m's lease end, or nil when m has none or it is
--                           not live (remembered for the script's run)
--   gone(leases, m, now)    whether m has a live tombstone
--   pruneRange(now)         ZRANGEBYSCORE bounds of the passed leases and
--                           tombstones
--   headOf(queue, leases, skip, now)  the first member with a live lease
--                           other than skip (nil if none), and the members
--                           without one queued before it
--   wakeChannel(lock, m)    m's session's wake-up channel
--   zremAll(key, ms)        ZREM every member of ms, 100 at a time
--   keepUntil(leases, at)   the latest of at, every live lease end and
--                           every live tombstone end: when the queue keys
--                           may expire
local leaseOf = {}
local function lease(key, m, now)
  if leaseOf[m] == nil then
    local e = tonumber(call('ZSCORE', key, m))
    if live(e, now) then leaseOf[m] = e else leaseOf[m] = false end
  end
  return leaseOf[m] or nil
end
local function gone(key, m, now)
  local e = tonumber(call('ZSCORE', key, m))
  return e ~= nil and live(-e, now)
end
local function pruneRange(now)
  return string.format('(%.0f', -now), string.format('%.0f', now)
end
local function headOf(queue, leases, skip, now)
  local dead, i = {}, 0
  while true do
    local c = call('ZRANGE', queue, i, i + 15)
    if #c == 0 then return nil, dead end
    for _, m in ipairs(c) do
      if m ~= skip then
        if lease(leases, m, now) then return m, dead end
        dead[#dead + 1] = m
      end
    end
    i = i + #c
  end
end
local function wakeChannel(lock, m)
  return lock .. ':w:' .. string.match(m, '^[^.]*')
end
local function zremAll(key, ms)
  for i = 1, #ms, 100 do
    call('ZREM', key, unpack(ms, i, math.min(i + 99, #ms)))
  end
end
local function keepUntil(leases, at)
  local top = call('ZRANGE', leases, -1, -1, 'WITHSCORES')
  if top[2] and live(top[2], at) then at = tonumber(top[2]) end
  local low = call('ZRANGE', leases, 0, 0, 'WITHSCORES')
  if low[2] and live(-tonumber(low[2]), at) then at = -tonumber(low[2]) end
  return at
end
-- ==== piece cand ====
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
--   best(ck, lk, now, above, skip)  the live candidate with the highest
--                  priority above the decimal above, other than skip and
--                  other than "" (nil if none among the best 16), of those
--                  this package can have written: a priority within
--                  2^53-1, a value of at most 64 KiB
local candKeys
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
  local c = call('ZRANGE', ck, '9007199254740991', '(' .. above, 'BYSCORE', 'REV', 'LIMIT', 0, 16)
  for _, m in ipairs(c) do
    if m ~= skip and m ~= '' and #m <= 65536 and live(call('ZSCORE', lk, m), now) then return m end
  end
  return nil
end
