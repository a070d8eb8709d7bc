package redisleader

import "github.com/redisleader/redisleader/internal/wire"

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
// of server time per call. ours(v) tells whether a lock value v (or nil)
// holds our token, ARGV[1] of every script that takes one.
func guarded(body string) string {
	return `local rcall, cmd, target = redis.call
local function call(...)
  cmd, target = ...
  local r = rcall(...)
  cmd = nil
  return r
end
local function ours(v) return v and string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. '\n' end
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

// luaTake is Lua for the acquire scripts, after luaFence:
// take(t, over) takes the free lock (over: the reservation for us that it
// holds, see heir) for ARGV[1] (token) with ARGV[3] (value) and
// ARGV[2] (TTL in ms), given TIME's reply t, and returns its fence, or nil
// and an error reply, written nowhere, when the fence key (KEYS[2]) does
// not hold a fence. The fence is max(stored + 1, server TIME in µs); when
// it is TIME's, its decimal is TIME's two strings joined (the µs padded to
// six digits), sparing string.format. The key expires at expiresAt(t): t in
// ms plus the TTL, so that its expiry is known from t exactly (Redis would
// otherwise count PX from the start of the script, a little before TIME;
// Redlock relies on this, see quorum.acquire). Order: GET and validate the
// fence key, PUBLISH "A" on the name's channel, SET the fence key, SET the
// lock key (KEYS[1]) NX PXAT (over: PXAT). heir(v) tells whether a lock
// value v is a transfer's reservation for our value (transfer.go).
const luaTake = `local function expiresAt(t)
  return string.format('%.0f', t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(ARGV[2]))
end
local function take(t, over)
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
  if over then
    call('SET', KEYS[1], ARGV[1] .. '\n' .. fs .. '\n' .. ARGV[3], 'PXAT', expiresAt(t))
  else
    call('SET', KEYS[1], ARGV[1] .. '\n' .. fs .. '\n' .. ARGV[3], 'NX', 'PXAT', expiresAt(t))
  end
  return fence
end
local function heir(v)
  if not v or ARGV[3] == '' or string.sub(v, 1, 1) ~= '\n' then return false end
  local nl = string.find(v, '\n', 2, true)
  return nl ~= nil and string.sub(v, nl + 1) == ARGV[3]
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
var acquireScript = wire.NewScript("611ab7117fc37c31d21080378b8109836d05798c", guarded(luaFence+luaTake+luaCand+`
local cur = call('GET', KEYS[1])
enlisting(3)
local t = call('TIME')
local now = t[1] * 1000000 + t[2]
if cur then
  if ours(cur) then
    call('PEXPIREAT', KEYS[1], expiresAt(t))
    local f = string.sub(cur, #ARGV[1] + 2)
    return {1, tonumber(string.sub(f, 1, string.find(f, '\n', 1, true) - 1)), now}
  end
  if not heir(cur) then
    local pttl = call('PTTL', KEYS[1])
    enlist(t, false, pttl)
    return {0, cur, pttl}
  end
end
local fence, err = take(t, cur)
if err then return err end
enlist(t, true)
return {1, fence, now}
`))

// renewScript extends the TTL if, and only if, the key holds our token.
//
//	KEYS[1] lock key
//	ARGV[1] token, ARGV[2] TTL in ms
//
// Replies 1 if renewed, 0 if the key is missing or holds another token. It
// publishes nothing; its one write (PEXPIRE) comes last.
var renewScript = wire.NewScript("30982895f18002d10306968ac33bc14fa5eb508a", guarded(`
local cur = call('GET', KEYS[1])
if ours(cur) then
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
var releaseScript = wire.NewScript("9a05a3d9ec04aae3a44954dcea53552d2f79c92a", guarded(`
local cur = call('GET', KEYS[1])
if ours(cur) then
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
  if not ours(cur) then return nil end
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
var proclaimScript = wire.NewScript("78bf8654f3ea91c472e038fe529d4d77fa249855", guarded(luaOwn+`
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
var inspectScript = wire.NewScript("5f4c12438354f4abf8e2fe3b13dda9fe2cb67d2e", guarded(`
local cur = call('GET', KEYS[1])
if not cur then return false end
return {cur, call('PTTL', KEYS[1])}
`))

// releaseArgs returns the release script's arguments for l, made fresh for
// each call (a script call fills in the first two slots).
func releaseArgs(l *Lock) []any { return []any{nil, nil, 1, l.lockArg, l.tokenArg} }

// releaseCall is the release script call for l on one server: in fair mode,
// the one that also wakes the head waiter.
func releaseCall(l *Lock) wire.Call {
	l.mu.Lock()
	sc := l.succ
	l.mu.Unlock()
	if sc != nil {
		return l.handOffCall(sc)
	}
	if l.s.cfg.fair {
		return wire.Call{Script: fairReleaseScript, Argv: []any{nil, nil, 3, l.lockArg, l.keys.queue(), l.keys.leases(), l.tokenArg}}
	}
	return wire.Call{Script: releaseScript, Argv: releaseArgs(l)}
}

// proclaimArgs returns the proclaim script's arguments for the seq'th
// Proclaim of l's term, of value.
func proclaimArgs(l *Lock, seq int64, value string) []any {
	return []any{nil, nil, 2, l.lockArg, l.keys.seq(), l.tokenArg, seq, value}
}
