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
// for <COMMAND> <key or channel> (ACL): <what Redis said>". A failed call
// ends the body through Lua's error and pcall, and the script replies with
// the failed call's error: the reply is kept aside rather than passed
// through error, because what pcall hands back differs between Redis
// versions (7.0 turns an error table into its message). A Lua runtime error
// becomes "ERR <message>".
func guarded(body string) string {
	return `local failed
local function call(...)
  local r = redis.pcall(...)
  if type(r) == 'table' and r.err then
    local e = r.err
    if string.sub(e, 1, 6) == 'NOPERM' or string.find(e, "executing the script can't", 1, true) or string.find(e, 'ACL failure', 1, true) then
      local cmd, target = ...
      e = 'NOPERM redisleader: permission denied for ' .. string.upper(cmd) .. (target and ' ' .. target or '') .. ' (ACL): ' .. e
    end
    failed = {err = e}
    error(e)
  end
  return r
end
local ok, res = pcall(function()
` + body + `end)
if ok then return res end
return failed or redis.error_reply('ERR ' .. tostring(res))
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

// acquireScript takes the lock, or confirms that this token already holds it.
//
//	KEYS[1] lock key, KEYS[2] fence key
//	ARGV[1] token, ARGV[2] TTL in ms, ARGV[3] value
//
// Replies:
//
//	{1, fence}            acquired now, or already ours (idempotent: a retried
//	                      or ambiguous acquire succeeds with the same fence and
//	                      a refreshed TTL, never "held by another")
//	{0, stored, pttl}     held by another owner: its stored value and PTTL in ms
//
// The fence is max(stored + 1, server TIME in µs). Order: GET the lock key
// (held: PEXPIRE if ours, the only write on that path, else PTTL); TIME; GET
// the fence key and validate it; PUBLISH "A"; SET the fence key; SET the lock
// key NX PX. So a denied command or channel, a key of the wrong type or a
// fence key that does not hold a fence (an error, never silently reset:
// fences must not go backwards) leaves both keys untouched, and a failure
// between the two SETs leaves a gap in the fences, never a lock without a
// fence. Fences stay monotonic when Redis loses data (restart without
// persistence, old snapshot) unless the server clock also goes back.
// Numbers up to 2^53 are exact in Lua; µs since 1970 stay below that for
// centuries.
var acquireScript = newScript("adfa6203c3181568eda5aa9095060784e921ff69", guarded(luaFence+`
local cur = call('GET', KEYS[1])
if cur then
  if string.sub(cur, 1, #ARGV[1] + 1) == ARGV[1] .. '\n' then
    call('PEXPIRE', KEYS[1], ARGV[2])
    local f = string.sub(cur, #ARGV[1] + 2)
    return {1, tonumber(string.sub(f, 1, string.find(f, '\n', 1, true) - 1))}
  end
  return {0, cur, call('PTTL', KEYS[1])}
end
local t = call('TIME')
local fence = t[1] * 1000000 + t[2]
local stored, err = readFence(KEYS[2])
if err then return err end
if stored and stored >= fence then fence = stored + 1 end
local fs = string.format('%.0f', fence)
call('PUBLISH', KEYS[1] .. ':ch', 'A')
call('SET', KEYS[2], fs)
call('SET', KEYS[1], ARGV[1] .. '\n' .. fs .. '\n' .. ARGV[3], 'NX', 'PX', ARGV[2])
return {1, fence}
`))

// renewScript extends the TTL if, and only if, the key holds our token.
//
//	KEYS[1] lock key
//	ARGV[1] token, ARGV[2] TTL in ms
//
// Replies 1 if renewed, 0 if the key is missing or holds another token. It
// publishes nothing; its one write (PEXPIRE) comes last.
var renewScript = newScript("1e304e2c2703f3409f4e2e03d0c75af59f69dc90", guarded(`
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
var releaseScript = newScript("de4963080d2432cd69524c1e5f559971ab3ec2fe", guarded(`
local cur = call('GET', KEYS[1])
if cur and string.sub(cur, 1, #ARGV[1] + 1) == ARGV[1] .. '\n' then
  call('PUBLISH', KEYS[1] .. ':ch', 'R')
  call('DEL', KEYS[1])
  return 1
end
return 0
`))

// proclaimScript replaces the value stored with our token, keeping the token,
// the fence and the TTL, and tells subscribers of the name's channel.
//
//	KEYS[1] lock key
//	ARGV[1] token, ARGV[2] the new value
//
// Replies 1 if stored, 0 if the key is missing or holds another token (then
// it writes nothing). Order: GET, PUBLISH "A", SET KEEPTTL: a denied command
// or channel, or our token without a fence after it (an error reply), leaves
// the key as it was.
var proclaimScript = newScript("6899a416464681aa5e76803a85ef13ffaac098d8", guarded(`
local cur = call('GET', KEYS[1])
if not cur or string.sub(cur, 1, #ARGV[1] + 1) ~= ARGV[1] .. '\n' then return 0 end
local rest = string.sub(cur, #ARGV[1] + 2)
local nl = string.find(rest, '\n', 1, true)
if not nl then
  return redis.error_reply('ERR redisleader: lock key ' .. KEYS[1] .. ' holds our token but no fence; it was left unchanged')
end
call('PUBLISH', KEYS[1] .. ':ch', 'A')
call('SET', KEYS[1], string.sub(cur, 1, #ARGV[1] + 1 + nl) .. ARGV[2], 'KEEPTTL')
return 1
`))

// inspectScript reads the holder and its remaining TTL in one call.
//
//	KEYS[1] lock key
//
// Replies {stored, pttl in ms}, or nil when nobody holds the key. It writes
// nothing.
var inspectScript = newScript("009128c0dd808478e53d54a107cbade81174533d", guarded(`
local cur = call('GET', KEYS[1])
if not cur then return false end
return {cur, call('PTTL', KEYS[1])}
`))

// raiseScript writes the fence a Redlock acquisition chose back to a node:
// into its lock value (so that Leader reads it) and, if larger, into the
// node's fence key.
//
//	KEYS[1] lock key, KEYS[2] fence key
//	ARGV[1] token, ARGV[2] fence, ARGV[3] value
//
// Replies 1, or 0 (writing nothing) if the key does not hold our token.
// Order: GET the lock key, GET and validate the fence key, SET the fence
// key (if larger), SET the lock key KEEPTTL. A fence key that does not hold
// a fence is an error that writes nothing (see luaFence), and a failure
// between the two SETs leaves the lock with this node's own, smaller fence:
// a gap, never a fence key behind a lock.
var raiseScript = newScript("31571c8adcb8abaa8f6d25a378484d4c778f0a5d", guarded(luaFence+`
local cur = call('GET', KEYS[1])
if not cur or string.sub(cur, 1, #ARGV[1] + 1) ~= ARGV[1] .. '\n' then return 0 end
local stored, err = readFence(KEYS[2])
if err then return err end
if not stored or stored < tonumber(ARGV[2]) then call('SET', KEYS[2], ARGV[2]) end
call('SET', KEYS[1], ARGV[1] .. '\n' .. ARGV[2] .. '\n' .. ARGV[3], 'KEEPTTL')
return 1
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
func (s *script) run(ctx context.Context, c processor, argv []any) *redis.Cmd {
	argv[0], argv[1] = "evalsha", s.sha
	cmd := redis.NewCmd(ctx, argv...)
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

// denied turns an ACL denial of a script call into an *aclError that says
// what was denied. A denial inside the script already names the command and
// its key or channel (see guarded); any other (of the EVALSHA or EVAL, of
// one of its keys, or of a command the client sent for it, such as CLUSTER
// SLOTS) comes with the script call's command and keys, and Redis's text
// says which it was.
func denied(cmd *redis.Cmd, argv []any) {
	err := cmd.Err()
	if err == nil || !redis.HasErrorPrefix(err, "NOPERM") {
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

// runAll executes the script once per argument vector in one round trip (a
// pipeline; on Redis Cluster one per node), and re-sends as EVAL, in a
// second round trip, those that met a server without the script. Replies
// and errors are read from the returned commands, in the order of argvs.
// With acks on (n > 0) each pipeline ends with WAIT on the same connection,
// and runAll returns an error unless enough replicas acknowledged every
// write (see replicaAcks.check). A single vector without acks is sent as a
// plain command.
func (s *script) runAll(ctx context.Context, c Client, argvs [][]any, acks replicaAcks) ([]*redis.Cmd, error) {
	if len(argvs) == 1 && acks.n == 0 {
		return []*redis.Cmd{s.run(ctx, c, argvs[0])}, nil
	}
	cmds := make([]*redis.Cmd, len(argvs))
	pipe := c.Pipeline()
	for i, argv := range argvs {
		argv[0], argv[1] = "evalsha", s.sha
		cmds[i] = redis.NewCmd(ctx, argv...)
		_ = pipe.Process(ctx, cmds[i])
	}
	wait := acks.queue(ctx, pipe)
	_, _ = pipe.Exec(ctx) // errors are per command
	// Scan every reply: Exec reports only the first error, and on Cluster
	// one node may have lost the script while another timed out.
	var retry redis.Pipeliner
	for i, argv := range argvs {
		if err := cmds[i].Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			if retry == nil {
				retry = c.Pipeline()
			}
			argv[0], argv[1] = "eval", s.src
			cmds[i] = redis.NewCmd(ctx, argv...)
			_ = retry.Process(ctx, cmds[i])
		}
	}
	var wait2 *redis.IntCmd
	if retry != nil {
		wait2 = acks.queue(ctx, retry)
		_, _ = retry.Exec(ctx)
	}
	for i, argv := range argvs {
		denied(cmds[i], argv)
	}
	return cmds, acks.check(wait, wait2)
}
