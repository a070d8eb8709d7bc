package redisleader

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Every script does its reads and its PUBLISH before its first write, so a
// command that fails for a reason retrying cannot fix (a user's ACL that
// denies the command or the channel, a key of the wrong type, a foreign
// fence) leaves Redis exactly as it was. A command the user's ACL denies ends
// the script with a NOPERM error naming the command and its key or channel
// (Redis 7.0 words a denial inside a script as "ERR The user executing the
// script can't …" without saying what it denied); see guarded and denied.

// guarded wraps a script body: in it, call(…) is redis.call, except that an
// ACL denial becomes an error reply "NOPERM redisleader: permission denied
// for <COMMAND> <key or channel> (ACL): <what Redis said>". call notes the
// command and its first argument before redis.call and forgets them when it
// returns, so a failed call (redis.call raises) ends the body, through one
// pcall around it, with them noted, and the script replies with that call's
// error, read as a table's err or as a message: what pcall hands back
// differs between Redis versions (7.0 turns an error table into its
// message). A Lua runtime error (nothing noted) becomes "ERR <message>".
// One pcall per script, none per call: a per-call pcall cost about 0.1 µs
// of server time per call.
func guarded(body string) string {
	return `local rcall, cmd, target = redis.call
local function call(...)
  cmd, target = ...
  local r = rcall(...)
  cmd = nil
  return r
end
local ok, res = pcall(function()
` + body + `end)
if ok then return res end
if not cmd then return redis.error_reply('ERR ' .. tostring(res)) end
local e = type(res) == 'table' and res.err or tostring(res)
if string.sub(e, 1, 6) == 'NOPERM' or string.find(e, "executing the script can't", 1, true) or string.find(e, 'ACL failure', 1, true) then
  e = 'NOPERM redisleader: permission denied for ' .. string.upper(cmd) .. (target and ' ' .. target or '') .. ' (ACL): ' .. e
end
return redis.error_reply(e)
`
}

// luaFence is a Lua function for scripts that read a fence key: readFence(key)
// returns the fence it holds (nil when the key does not exist), or an error
// reply, written nowhere, when it holds anything else (someone else wrote
// it): fences must not go backwards, so a foreign value is neither reset nor
// touched. A fence is an integer in [0, 2^53−1), exact in Lua's doubles.
const luaFence = `local function readFence(key)
  local raw = call('GET', key)
  if not raw then return nil end
  local f = tonumber(raw)
  if not f or f < 0 or f >= 9007199254740991 or f % 1 ~= 0 then
    return nil, redis.error_reply('ERR redisleader: fence key ' .. key .. ' does not hold a fence (an integer in [0, 2^53-1)); it was left unchanged')
  end
  return f
end
`

// luaTake is a Lua function for the acquire scripts, after luaFence:
// take(t) takes the free lock for ARGV[1] (token) with ARGV[3] (value) and
// ARGV[2] (TTL in ms), given TIME's reply t, and returns its fence, or nil
// and an error reply, written nowhere, when the fence key (KEYS[2]) does
// not hold a fence. The fence is max(stored + 1, server TIME in µs); when
// it is TIME's, its decimal is TIME's two strings joined (the µs padded to
// six digits), sparing string.format. The key expires at expiresAt(t): t in
// ms plus the TTL, so that its expiry is known from t exactly (Redis would
// otherwise count PX from the start of the script, a little before TIME;
// Redlock relies on this, see quorum.acquire). Order: GET and validate the
// fence key, PUBLISH "A" on the name's channel, SET the fence key, SET the
// lock key (KEYS[1]) NX PXAT.
const luaTake = `local function expiresAt(t)
  return string.format('%.0f', t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(ARGV[2]))
end
local function take(t)
  local fence = t[1] * 1000000 + t[2]
  local stored, err = readFence(KEYS[2])
  if err then return nil, err end
  local fs
  if stored and stored >= fence then
    fence = stored + 1
    fs = string.format('%.0f', fence)
  else
    fs = t[1] .. string.sub('00000', #t[2]) .. t[2]
  end
  call('PUBLISH', KEYS[1] .. ':ch', 'A')
  call('SET', KEYS[2], fs)
  call('SET', KEYS[1], ARGV[1] .. '\n' .. fs .. '\n' .. ARGV[3], 'NX', 'PXAT', expiresAt(t))
  return fence
end
`

// acquireScript takes the lock, or confirms that this token already holds it.
//
//	KEYS[1] lock key, KEYS[2] fence key
//	ARGV[1] token, ARGV[2] TTL in ms, ARGV[3] value
//
// Replies:
//
//	{1, fence, time}      acquired now, or already ours (idempotent: a retried
//	                      or ambiguous acquire succeeds with the same fence and
//	                      a refreshed TTL, never "held by another"); time is
//	                      the server TIME in µs from which the key's TTL runs
//	                      (it expires when the server's clock passes time in
//	                      ms plus the TTL)
//	{0, stored, pttl}     held by another owner: its stored value and PTTL in ms
//
// The fence is max(stored + 1, server TIME in µs). Order: GET the lock key;
// TIME; (held: PEXPIREAT if ours, the only write on that path, else PTTL);
// GET the fence key and validate it; PUBLISH "A"; SET the fence key; SET the
// lock key NX PXAT. So a denied command or channel, a key of the wrong type
// or a fence key that does not hold a fence (an error, never silently reset:
// fences must not go backwards) leaves both keys untouched, and a failure
// between the two SETs leaves a gap in the fences, never a lock without a
// fence. Fences stay monotonic when Redis loses data (restart without
// persistence, old snapshot) unless the server clock also goes back.
// Numbers up to 2^53 are exact in Lua; µs since 1970 stay below that for
// centuries.
var acquireScript = newScript("3241015d82dc789d637e73b30aea5a5ad3d87c51", guarded(luaFence+luaTake+`
local cur = call('GET', KEYS[1])
local t = call('TIME')
local now = t[1] * 1000000 + t[2]
if cur then
  if string.sub(cur, 1, #ARGV[1] + 1) == ARGV[1] .. '\n' then
    call('PEXPIREAT', KEYS[1], expiresAt(t))
    local f = string.sub(cur, #ARGV[1] + 2)
    return {1, tonumber(string.sub(f, 1, string.find(f, '\n', 1, true) - 1)), now}
  end
  return {0, cur, call('PTTL', KEYS[1])}
end
local fence, err = take(t)
if err then return err end
return {1, fence, now}
`))

// renewScript extends the TTL if, and only if, the key holds our token.
//
//	KEYS[1] lock key
//	ARGV[1] token, ARGV[2] TTL in ms
//
// Replies 1 if renewed, 0 if the key is missing or holds another token. It
// publishes nothing; its one write (PEXPIRE) comes last.
var renewScript = newScript("d8ffc81c8661a17aa1f752ad49c26452a00d4f6d", guarded(`
local cur = call('GET', KEYS[1])
if cur and string.sub(cur, 1, #ARGV[1] + 1) == ARGV[1] .. '\n' then
  return call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`))

// releaseScript deletes the key if, and only if, it holds our token, and
// tells subscribers of the name's channel (lock key + ":ch") that it is free.
//
//	KEYS[1] lock key
//	ARGV[1] token
//
// Replies 1 if deleted, 0 if the key is missing or holds another token (then
// it writes nothing). Order: GET, PUBLISH "R", DEL: a denied channel leaves
// the key in place (it expires with its TTL) rather than deleted by a
// release that reports an error.
var releaseScript = newScript("1b001ca5a8eb6125d68f399f7aa88dc8c9b2dc01", guarded(`
local cur = call('GET', KEYS[1])
if cur and string.sub(cur, 1, #ARGV[1] + 1) == ARGV[1] .. '\n' then
  call('PUBLISH', KEYS[1] .. ':ch', 'R')
  call('DEL', KEYS[1])
  return 1
end
return 0
`))

// luaOwn is a Lua function for the scripts that change a key holding our
// token (ARGV[1]): own() reads the lock key (KEYS[1]) and returns its value,
// the part after our token, and where the fence ends in that part; or nil
// when the key is missing or holds another token; or nil and an error
// reply, written nowhere, when it holds our token but no fence after it.
const luaOwn = `local function own()
  local cur = call('GET', KEYS[1])
  if not cur or string.sub(cur, 1, #ARGV[1] + 1) ~= ARGV[1] .. '\n' then return nil end
  local rest = string.sub(cur, #ARGV[1] + 2)
  local nl = string.find(rest, '\n', 1, true)
  if not nl then
    return nil, redis.error_reply('ERR redisleader: lock key ' .. KEYS[1] .. ' holds our token but no fence; it was left unchanged')
  end
  return cur, rest, nl
end
`

// proclaimScript replaces the value stored with our token, keeping the token,
// the fence and the TTL, and tells subscribers of the name's channel; unless
// a later Proclaim of the same term is stored already. Each Proclaim of a
// term carries the next number of the term's sequence (1, 2, …; the acquire
// stands for 0), kept in the seq key as "<token>\n<sequence>", so that a
// request that reaches Redis late (its caller gave up while it was on its
// way) never overwrites the value of one sent after it.
//
//	KEYS[1] lock key, KEYS[2] seq key
//	ARGV[1] token, ARGV[2] sequence, ARGV[3] the new value
//
// Replies 1 if stored, or if this very sequence is stored already (a
// resent request: it writes nothing); 2 if a greater one is (it writes
// nothing); 0 if the lock key is missing or holds another token (it writes
// nothing). A seq key with another token is another term's, and is
// replaced; one that holds anything but "<token>\n<sequence>" (someone else
// wrote it) is an error reply that leaves both keys as they were, as is our
// token without a fence after it. Order: GET the lock key, GET the seq key,
// PUBLISH "A", SET the seq key, SET the lock key KEEPTTL: a denied command
// or channel leaves both keys as they were, and a failure between the two
// SETs only leaves the former value, which no earlier request can then
// overwrite either.
var proclaimScript = newScript("77f9f85b75b4882b4a2447fe7a1183a60136145f", guarded(luaOwn+`
local cur, rest, nl = own()
if not cur then return rest or 0 end
local last, raw = 0, call('GET', KEYS[2])
if raw then
  local snl = string.find(raw, '\n', 1, true)
  local n = snl and tonumber(string.sub(raw, snl + 1))
  if not n or n < 0 or n % 1 ~= 0 then
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
`))

// inspectScript reads the holder and its remaining TTL in one call.
//
//	KEYS[1] lock key
//
// Replies {stored, pttl in ms}, or nil when nobody holds the key. It writes
// nothing.
var inspectScript = newScript("4def2136b9cf25535681a54676d86b5afdf25b8e", guarded(`
local cur = call('GET', KEYS[1])
if not cur then return false end
return {cur, call('PTTL', KEYS[1])}
`))

// redlockRenewScript is renewScript for a Redlock session: it also writes
// back the acquisition's fence F (see quorum.acquire), so that the node's
// fence key is at least F and its lock value carries F. It is also the
// acquire's write-back round, when there is one (quorum.raiseFence).
//
//	KEYS[1] lock key, KEYS[2] fence key
//	ARGV[1] token, ARGV[2] TTL in ms, ARGV[3] fence F
//
// Replies 1 if renewed, 0 (writing nothing) if the key is missing or holds
// another token. Order: GET the lock key, GET and validate the fence key,
// SET the fence key (if below F), SET the lock key KEEPTTL (if its fence is
// not F), PEXPIRE. A fence key that does not hold a fence, or our token
// without a fence after it, is an error that writes nothing (see luaFence),
// and a failure between the two SETs leaves the lock with this node's own,
// smaller fence: a gap, never a fence key behind a lock.
var redlockRenewScript = newScript("32c87a260a903e6c8b8db2869fbc6cbc8bd442ec", guarded(luaFence+luaOwn+`
local cur, rest, nl = own()
if not cur then return rest or 0 end
local stored, err = readFence(KEYS[2])
if err then return err end
local f = tonumber(ARGV[3])
if not stored or stored < f then call('SET', KEYS[2], ARGV[3]) end
if tonumber(string.sub(rest, 1, nl - 1)) ~= f then
  call('SET', KEYS[1], ARGV[1] .. '\n' .. ARGV[3] .. string.sub(rest, nl), 'KEEPTTL')
end
return call('PEXPIRE', KEYS[1], ARGV[2])
`))

// redlockReleaseScript is releaseScript for a Redlock session: before it
// deletes the key it raises the node's fence key to the acquisition's
// fence F (see quorum.acquire), unless the node's clock has already passed
// F (then any later fence it issues is larger anyway); F 0 (an acquisition
// that never counted) raises nothing.
//
//	KEYS[1] lock key, KEYS[2] fence key
//	ARGV[1] token, ARGV[2] fence F
//
// Replies 1 if deleted, 0 (writing nothing) if the key is missing or holds
// another token. Order: GET the lock key, GET and validate the fence key,
// TIME, PUBLISH "R", SET the fence key (if below F and TIME in µs is not
// past F), DEL. A fence key that does not hold a fence is an error that
// writes nothing: the key stays, and expires with its TTL.
var redlockReleaseScript = newScript("5ff1fe6743f0a219664be15240de2bf334d9037d", guarded(luaFence+`
local cur = call('GET', KEYS[1])
if not cur or string.sub(cur, 1, #ARGV[1] + 1) ~= ARGV[1] .. '\n' then return 0 end
local stored, err = readFence(KEYS[2])
if err then return err end
local f = tonumber(ARGV[2])
local raise = f > 0 and (not stored or stored < f)
if raise then
  local t = call('TIME')
  raise = t[1] * 1000000 + t[2] <= f
end
call('PUBLISH', KEYS[1] .. ':ch', 'R')
if raise then call('SET', KEYS[2], ARGV[2]) end
call('DEL', KEYS[1])
return 1
`))

// luaQueue is Lua for the scripts of fair mode (fair.go), which keep a
// name's waiters in two sorted sets: the queue (member → arrival, server
// TIME in µs) and the leases (member → end of the waiter's lease, server
// time in ms). A member is "<session id>.<n>"; the session's wake-up channel
// for the name is lock key + ":w:" + session id. A waiter that gave up
// leaves a tombstone in the leases, −(end of a TTL), so that an attempt of
// its still on its way (its caller gone) cannot queue a ghost. It reads TIME
// into t and now (ms) and defines:
//
//	lease(leases, m)        m's lease end, or nil when m has none or it has passed
//	gone(leases, m)         whether m has a live tombstone
//	pruneRange              ZRANGEBYSCORE bounds of the passed leases and tombstones
//	headOf(queue, leases, skip)  the first member with a live lease other
//	                        than skip (nil if none), and the members without
//	                        one queued before it
//	wakeChannel(lock, m)    m's session's wake-up channel
//	zremAll(key, ms)        ZREM every member of ms, 100 at a time
//	keepUntil(leases, at)   the latest of at, every lease end and every
//	                        tombstone end: when the queue keys may expire
const luaQueue = `local t = call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local leaseOf = {}
local function lease(key, m)
  if leaseOf[m] == nil then
    local e = tonumber(call('ZSCORE', key, m))
    if e and e > now then leaseOf[m] = e else leaseOf[m] = false end
  end
  return leaseOf[m] or nil
end
local function gone(key, m)
  local e = tonumber(call('ZSCORE', key, m))
  return e ~= nil and e < 0 and -e > now
end
local pruneFrom, pruneTo = string.format('(%.0f', -now), string.format('%.0f', now)
local function headOf(queue, leases, skip)
  local dead, i = {}, 0
  while true do
    local c = call('ZRANGE', queue, i, i + 15)
    if #c == 0 then return nil, dead end
    for _, m in ipairs(c) do
      if m ~= skip then
        if lease(leases, m) then return m, dead end
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
  if top[2] and tonumber(top[2]) > at then at = tonumber(top[2]) end
  local low = call('ZRANGE', leases, 0, 0, 'WITHSCORES')
  if low[2] and -tonumber(low[2]) > at then at = -tonumber(low[2]) end
  return at
end
`

// fairAcquireScript is acquireScript for fair mode: it takes the lock only
// if it is free and no waiter with a live lease arrived before us, and
// otherwise (join) queues us, or refreshes our place and its lease.
//
//	KEYS[1] lock key, KEYS[2] fence key, KEYS[3] queue, KEYS[4] leases
//	ARGV[1] token, ARGV[2] TTL in ms, ARGV[3] value, ARGV[4] waiter (member),
//	ARGV[5] "1": join the queue if not acquired (Lock), "0": never (TryLock)
//
// Replies:
//
//	{1, fence}   acquired now, or already ours (as acquireScript); our place
//	             is removed
//	{0, stored or nil, pttl or -2, ahead, headLeft}  not acquired: the
//	             holder's stored value and PTTL (nil and -2: free, but
//	             waiters came first), an upper bound of the live waiters
//	             ahead of us (0: we are the head; -2: we gave up, an attempt
//	             that arrived after its caller left, which writes nothing),
//	             and the ms left on the head waiter's lease
//
// Order: GET the lock key, ZSCORE our place, TIME, the queue reads
// (tombstone, head, passed leases and tombstones, the latest lease), then (taking) GET and validate the
// fence key, PUBLISH "A" on the name's channel, SET the fence, SET the lock
// NX PX, ZREM us and the waiters whose leases passed; or (not taking, the
// lock free) PUBLISH the head's member id, its wake-up, on its session's
// wake-up channel (it may have missed its wake-up, or just become the head
// because the one before it died),
// then (join) ZREM the dead, ZADD our place (kept if we have a live one) and
// lease, and PEXPIREAT both queue keys to the latest lease end, so that no
// queue key outlives its last waiter's lease.
var fairAcquireScript = newScript("de65db4a46c36572da66e99fc3ae43187635e331", guarded(luaFence+luaTake+luaQueue+`
local cur = call('GET', KEYS[1])
local placed = call('ZSCORE', KEYS[3], ARGV[4])
if cur and string.sub(cur, 1, #ARGV[1] + 1) == ARGV[1] .. '\n' then
  if placed then
    call('ZREM', KEYS[3], ARGV[4])
    call('ZREM', KEYS[4], ARGV[4])
  end
  call('PEXPIRE', KEYS[1], ARGV[2])
  local f = string.sub(cur, #ARGV[1] + 2)
  return {1, tonumber(string.sub(f, 1, string.find(f, '\n', 1, true) - 1))}
end
if gone(KEYS[4], ARGV[4]) then return {0, cur or false, -2, -2, 0} end
local head, dead = headOf(KEYS[3], KEYS[4], nil)
if placed and not lease(KEYS[4], ARGV[4]) then placed = false end
local stale = call('ZRANGEBYSCORE', KEYS[4], pruneFrom, pruneTo, 'LIMIT', 0, 64)
for _, m in ipairs(stale) do dead[#dead + 1] = m end
local ttl = tonumber(ARGV[2])
if not cur and (not head or head == ARGV[4]) then
  local fence, err = take(t)
  if err then return err end
  dead[#dead + 1] = ARGV[4]
  zremAll(KEYS[3], dead)
  zremAll(KEYS[4], dead)
  return {1, fence}
end
local pttl, ahead, headLeft = -2, 0, ttl
if cur then pttl = call('PTTL', KEYS[1]) end
if head and head ~= ARGV[4] then
  headLeft = lease(KEYS[4], head) - now
  if placed then ahead = call('ZRANK', KEYS[3], ARGV[4]) else ahead = call('ZCARD', KEYS[3]) end
  ahead = math.max(1, ahead - #dead)
end
local keep = keepUntil(KEYS[4], now + ttl)
if not cur and head then call('PUBLISH', wakeChannel(KEYS[1], head), head) end
if ARGV[5] == '1' then
  zremAll(KEYS[3], dead)
  zremAll(KEYS[4], dead)
  if not placed then call('ZADD', KEYS[3], string.format('%.0f', t[1] * 1000000 + t[2]), ARGV[4]) end
  call('ZADD', KEYS[4], string.format('%.0f', now + ttl), ARGV[4])
  call('PEXPIREAT', KEYS[3], string.format('%.0f', keep))
  call('PEXPIREAT', KEYS[4], string.format('%.0f', keep))
end
return {0, cur or false, pttl, ahead, headLeft}
`))

// keepPlaceScript renews a waiter's lease, if it still has a live one: a
// waiter whose lease passed has lost its place and joins again, at the
// back, on its next attempt.
//
//	KEYS[1] queue, KEYS[2] leases
//	ARGV[1] waiter (member), ARGV[2] TTL in ms
//
// Replies 1 if renewed, 0 if the waiter has no live place (then it writes
// nothing). It publishes nothing; its writes (ZADD the lease, PEXPIREAT
// both keys to the latest lease end) come last.
var keepPlaceScript = newScript("f3b84e0970988642612b02eded093ad3cb755338", guarded(luaQueue+`
if not lease(KEYS[2], ARGV[1]) or not call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
local until_ = now + tonumber(ARGV[2])
local keep = keepUntil(KEYS[2], until_)
call('ZADD', KEYS[2], string.format('%.0f', until_), ARGV[1])
call('PEXPIREAT', KEYS[1], string.format('%.0f', keep))
call('PEXPIREAT', KEYS[2], string.format('%.0f', keep))
return 1
`))

// leaveScript takes a waiter that gives up out of the queue, leaves its
// tombstone for one TTL (an attempt of its still on its way finds it and
// writes nothing) and, if the lock is free, wakes the (new) head waiter.
//
//	KEYS[1] lock key, KEYS[2] queue, KEYS[3] leases
//	ARGV[1] waiter (member), ARGV[2] TTL in ms
//
// Replies 1 if the waiter was queued, else 0. Order: ZSCORE, EXISTS, the
// queue reads, PUBLISH the head's wake-up (as fairAcquireScript), ZREM from the
// queue, ZADD the tombstone, PEXPIREAT the leases (to the latest lease or
// tombstone end).
var leaveScript = newScript("64b3aa50b8c9596df7eabe2e1ce02d7462990d6d", guarded(luaQueue+`
local placed = call('ZSCORE', KEYS[2], ARGV[1])
local ends = now + tonumber(ARGV[2])
local keep = keepUntil(KEYS[3], ends)
if call('EXISTS', KEYS[1]) == 0 then
  local head = headOf(KEYS[2], KEYS[3], ARGV[1])
  if head then call('PUBLISH', wakeChannel(KEYS[1], head), head) end
end
call('ZREM', KEYS[2], ARGV[1])
call('ZADD', KEYS[3], string.format('%.0f', -ends), ARGV[1])
call('PEXPIREAT', KEYS[3], string.format('%.0f', keep))
if placed then return 1 end
return 0
`))

// fairReleaseScript is releaseScript for fair mode: besides "R" on the
// name's channel it wakes the head waiter, and only it, on its session's
// wake-up channel.
//
//	KEYS[1] lock key, KEYS[2] queue, KEYS[3] leases
//	ARGV[1] token
//
// Replies 1 if deleted, 0 if the key is missing or holds another token
// (then it writes nothing). Order: GET, the queue reads, PUBLISH "R",
// PUBLISH the head's wake-up (as fairAcquireScript), DEL. It leaves the
// queue as it is: the next acquire prunes it.
var fairReleaseScript = newScript("3d0b5d67b200f426ec201e2e3a769bb87996c105", guarded(luaQueue+`
local cur = call('GET', KEYS[1])
if cur and string.sub(cur, 1, #ARGV[1] + 1) == ARGV[1] .. '\n' then
  local head = headOf(KEYS[2], KEYS[3], nil)
  call('PUBLISH', KEYS[1] .. ':ch', 'R')
  if head then call('PUBLISH', wakeChannel(KEYS[1], head), head) end
  call('DEL', KEYS[1])
  return 1
end
return 0
`))

// processor runs one command: a client, or a pipeline that queues it.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// script is a Lua script run as EVALSHA, falling back to EVAL when the server
// does not have it cached (NOSCRIPT: after SCRIPT FLUSH, a restart or a
// failover), exactly as go-redis's Script.Run does, so a flushed script cache
// costs one extra round trip and is never mistaken for a lost lock. Unlike
// Script.Run it takes the whole argument vector, so the hot path reuses
// arguments it boxed once: Script.Run boxes the command name, the SHA and
// every key again on every call, four or more allocations that were a sixth
// of an acquire+release pair.
type script struct {
	src any // the source, boxed once
	sha any // its hex SHA-1, boxed once
}

// scripts lists every script newScript made, for TestScriptSHAs.
var scripts []*script

// newScript returns the script src, run as EVALSHA sha. sha is src's hex
// SHA-1, written out next to each script rather than computed: hashing here,
// at start-up, panics under GODEBUG=fips140=only (SHA-1 is not FIPS 140
// approved), which regulated users run. TestScriptSHAs checks every script's
// SHA and prints the right one for a script that changed; a wrong one would
// make every call fall back to EVAL, costing a round trip.
func newScript(sha, src string) *script {
	s := &script{src: src, sha: sha}
	scripts = append(scripts, s)
	return s
}

// run executes the script once. argv is {_, _, numkeys, keys..., args...};
// run fills the first two slots.
func (s *script) run(ctx context.Context, c processor, argv []any) (cmd *redis.Cmd) {
	argv[0], argv[1] = "evalsha", s.sha
	cmd = redis.NewCmd(ctx, argv...)
	defer func() {
		if v := recover(); v != nil {
			cmd.SetErr(&hookPanicError{v})
		}
	}()
	_ = c.Process(ctx, cmd)
	// HasErrorPrefix allocates even for a nil error: test for nil first.
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		argv[0], argv[1] = "eval", s.src
		cmd = redis.NewCmd(ctx, argv...)
		_ = c.Process(ctx, cmd)
	}
	denied(cmd, argv)
	return cmd
}

// denied rewrites two errors of a script call: a server without the
// command ("unknown command", whose text would quote the call's arguments:
// tokens, values) says only which command; and an ACL denial becomes an
// *aclError that says what was denied. A denial inside the script already names the command and
// its key or channel (see guarded); any other (of the EVALSHA or EVAL, of
// one of its keys, or of a command the client sent for it, such as CLUSTER
// SLOTS) comes with the script call's command and keys, and Redis's text
// says which it was.
func denied(cmd *redis.Cmd, argv []any) {
	err := cmd.Err()
	if err == nil {
		return
	}
	if redis.HasErrorPrefix(err, "unknown command") { // HasErrorPrefix drops a leading "ERR "
		// Redis quotes the first arguments, which hold tokens and values.
		cmd.SetErr(&scriptError{fmt.Sprintf("ERR unknown command '%s': scripting is disabled or renamed on this server",
			strings.ToUpper(fmt.Sprint(argv[0])))})
		return
	}
	if !redis.HasErrorPrefix(err, "NOPERM") {
		return
	}
	msg := err.Error()
	if what, ok := strings.CutPrefix(msg, "NOPERM redisleader: "); ok {
		cmd.SetErr(&aclError{what})
		return
	}
	n, _ := argv[2].(int)
	keys := make([]string, 0, n)
	for _, k := range argv[3 : 3+n] {
		keys = append(keys, fmt.Sprint(k))
	}
	cmd.SetErr(&aclError{fmt.Sprintf("permission denied running %s on keys %s (ACL): %s",
		strings.ToUpper(fmt.Sprint(argv[0])), strings.Join(keys, " "), msg)})
}

// runAll executes the script once per argument vector in one round trip; see
// runCalls.
func (s *script) runAll(ctx context.Context, c Client, argvs [][]any, acks replicaAcks) ([]*redis.Cmd, error) {
	calls := make([]call, len(argvs))
	for i, argv := range argvs {
		calls[i] = call{s, argv}
	}
	return runCalls(ctx, c, calls, acks)
}

// call is one script call of a pipeline: the script and its argument vector.
type call struct {
	s    *script
	argv []any
}

// runCalls executes every call in one round trip (a pipeline; on Redis
// Cluster one per node), and re-sends as EVAL, in a second round trip, those
// that met a server without their script. Replies and errors are read from
// the returned commands, in the order of calls. With acks on (n > 0) each
// pipeline ends with WAIT on the same connection, and runCalls returns an
// error unless enough replicas acknowledged every write (see
// replicaAcks.check). A single call without acks is sent as a plain command.
func runCalls(ctx context.Context, c Client, calls []call, acks replicaAcks) ([]*redis.Cmd, error) {
	if len(calls) == 1 && acks.n == 0 {
		return []*redis.Cmd{calls[0].s.run(ctx, c, calls[0].argv)}, nil
	}
	cmds := make([]*redis.Cmd, len(calls))
	pipe := c.Pipeline()
	for i, cl := range calls {
		cl.argv[0], cl.argv[1] = "evalsha", cl.s.sha
		cmds[i] = redis.NewCmd(ctx, cl.argv...)
		_ = pipe.Process(ctx, cmds[i])
	}
	wait := acks.queue(ctx, pipe)
	failUnsent(cmds, execPipeline(ctx, pipe))
	// Scan every reply: Exec reports only the first error, and on Cluster
	// one node may have lost the script while another timed out.
	var (
		retry   redis.Pipeliner
		retried []*redis.Cmd
	)
	for i, cl := range calls {
		if err := cmds[i].Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			if retry == nil {
				retry = c.Pipeline()
			}
			cl.argv[0], cl.argv[1] = "eval", cl.s.src
			cmds[i] = redis.NewCmd(ctx, cl.argv...)
			_ = retry.Process(ctx, cmds[i])
			retried = append(retried, cmds[i])
		}
	}
	var wait2 *redis.IntCmd
	if retry != nil {
		wait2 = acks.queue(ctx, retry)
		failUnsent(retried, execPipeline(ctx, retry))
	}
	for i, cl := range calls {
		denied(cmds[i], cl.argv)
	}
	return cmds, acks.check(wait, wait2)
}

// execPipeline runs a pipeline and returns its error: that of its first failed
// command, or one that kept every command from running (a hook on the
// client that refused the pipeline, say), or a *hookPanicError.
func execPipeline(ctx context.Context, pipe redis.Pipeliner) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &hookPanicError{v}
		}
	}()
	_, err = pipe.Exec(ctx)
	return err
}

// failUnsent gives err, the error of the pipeline that ran cmds, to every
// command that got neither a reply nor an error: one that a pipeline which
// failed as a whole never ran; and a hook's panic to every command.
func failUnsent(cmds []*redis.Cmd, err error) {
	if err == nil {
		return
	}
	_, panicked := err.(*hookPanicError)
	for _, cmd := range cmds {
		if panicked || (cmd.Err() == nil && cmd.Val() == nil) {
			cmd.SetErr(err)
		}
	}
}

// hookPanicError is the error of each command that a hook on the user's
// client panicked while running, before or after the command reached Redis.
// The panic goes no further: the library sends commands on its own
// goroutines too (Observe's reads, renewals, background deletes, Redlock's
// node calls), where it would end the process. For an acquire, the outcome
// is then unknown, and its token is deleted as after any lost reply. It does
// not unwrap to the panic value: a value that reads as a Redis error (say
// WRONGTYPE) is not Redis's reply, and must not be classified as one.
type hookPanicError struct{ v any }

// Error names the panic value's type, not the value, which can quote a
// command or its reply (tokens, the holder's among them).
func (e *hookPanicError) Error() string {
	return fmt.Sprintf("redisleader: a hook on the client panicked (with a %T value, not shown: it can quote tokens)", e.v)
}
