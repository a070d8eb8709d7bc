package redisleader

import (
	"context"
	"github.com/redisleader/redisleader/internal/wire"
	"strconv"
	"time"
)

// Fair mode (WithFairness; its contract is in doc.go, section Fairness).
//
// The queue of a name lives in the name's slot, next to the lock: a sorted
// set of waiters by arrival (server TIME in µs) and a sorted set of their
// leases (end in server ms). A waiter's place is a lease like a lock: each
// attempt of the waiter gives it one TTL, and the waiter makes its next
// attempt before that lease can run out (acquisition.keepPlace), so the
// re-checks it makes about once per TTL anyway keep its place and it costs
// no command of its own. A waiter whose lease has passed is skipped and
// pruned by every script that reads the queue, so nobody waits behind it;
// if it comes back it joins again, at the back. A waiter that gives up
// takes its place out and
// leaves a tombstone (a negative lease) for one TTL, so that an attempt of
// its still on its way cannot queue it again as a ghost at its old place.
// Both queue keys expire with the latest lease or tombstone (each write
// sets PEXPIREAT to it), so no queue key outlives its last waiter by more
// than a TTL.
//
// An acquire takes the lock only if it is free and no waiter with a live
// lease arrived earlier; otherwise a blocking one (Lock, Campaign, Run)
// joins the queue, idempotently (one place per acquisition, whatever its
// attempts), and TryLock fails. A release wakes the head waiter only: the
// message is its member id, on its session's channel (lock key + ":w:" +
// session id), and the watcher hands it to that waiter alone, so the
// session's other waiters sleep on (a forged one costs an attempt), and the
// head hears it even while it waits out an error. Wake-ups are hints: the head waiter also
// tries again when the holder's lease can have expired, and every other
// waiter when the holder's or the head's lease can have (either may have
// died, and the waiter may be the head by then); an
// attempt that finds the lock free with a live head waiting wakes that head
// again. A restart without persistence or a flushed script cache loses
// nothing that matters: waiters join again on their next attempt, in the
// order of those attempts.
//
// A default-mode session ignores the queue (it takes a free lock at once,
// and its release wakes nobody in particular). Safety does not depend on
// the mode: the lock key is taken the same way in both.

// legacyWake is the payload of an older release's wake-up (see
// waiter.accept).
const legacyWake = "W"

// accept lets through the wake-ups for w: those that carry its member id,
// and legacyWake, the unaddressed wake-up of releases before wake-ups were
// addressed, so that a rolling upgrade does not leave a head waiter asleep
// behind an older session's release. Without a waiter (default mode) it is
// nil: every message on the name's channel counts.
func (w *waiter) accept() func(payload string) bool {
	if w == nil {
		return nil
	}
	return func(payload string) bool { return payload == w.id || payload == legacyWake }
}

// A waiter is one fair acquisition's place in a name's queue, kept across
// its attempts (and their tokens).
type waiter struct {
	id   string
	keys keys
	// argv is fairAcquireScript's argument vector {_, _, 4, lock key, fence
	// key, queue, leases, token, TTL, value, id, join}; the token slot is
	// set for each Lock of the acquisition. Only the acquiring goroutine
	// uses it.
	argv [12]any
	sub  *wire.Subscription // the acquisition's, when it blocks
}

// Argument slots of waiter.argv.
const waiterToken = 7

// newWaiter prepares a fair acquisition of k. join: it waits in the queue
// when it cannot take the lock at once.
func (s *Session) newWaiter(k keys, value string, join bool) *waiter {
	w := &waiter{id: s.id + "." + strconv.FormatUint(s.waiterSeq.Add(1), 10), keys: k}
	q, l := k.queue(), k.leases()
	j := "0"
	if join {
		j = "1"
	}
	w.argv = [12]any{nil, nil, 4, k.lock, k.fence, q, l, nil, s.ttlArg, value, w.id, j}
	return w
}

// addWaiter registers w as queued, so that the session wakes it when it
// takes w's name (wakeWaitersLocked).
func (s *Session) addWaiter(w *waiter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.reg.waiting[w] = struct{}{}
	}
}

// dropWaiter unregisters w (see addWaiter).
func (s *Session) dropWaiter(w *waiter) {
	s.mu.Lock()
	delete(s.reg.waiting, w)
	s.mu.Unlock()
}

// leave gives up a fair acquisition's place, if it may have one: it is
// removed from the queue, best effort (if that fails, its lease ends within
// a TTL), with a tombstone that keeps an attempt still on its way from
// queueing it again. Like dispose, it runs within ctx, or in the background
// once ctx has ended. The caller must be
// registered with s.work.
func (a *acquisition) leave(ctx context.Context) {
	if a.w == nil || !a.queued {
		return
	}
	a.queued = false
	s, w := a.s, a.w
	s.dropWaiter(w)
	s.bestEffortCleanup(ctx, func(ctx context.Context) {
		_ = s.wire.Combiner().Call(ctx, time.Time{}, leaveScript, []any{nil, nil, 3, w.keys.lock, w.keys.queue(), w.keys.leases(), w.id, s.ttlArg})
	})
}

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
// A candidate with a priority (priority.go) appends its two keys and its
// priority, and is enlisted whatever the outcome; a transfer's reservation
// for our value (transfer.go) is taken whoever waits.
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
var fairAcquireScript = wire.NewScript("e0478b77c454f39ae8170ea97fa102fe704dca20", guarded(luaFence+luaTake+luaQueue+luaCand+`
local cur = call('GET', KEYS[1])
local placed = call('ZSCORE', KEYS[3], ARGV[4])
enlisting(5)
if ours(cur) then
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
if (not cur and (not head or head == ARGV[4])) or heir(cur) then
  local fence, err = take(t, cur)
  if err then return err end
  dead[#dead + 1] = ARGV[4]
  zremAll(KEYS[3], dead)
  zremAll(KEYS[4], dead)
  enlist(t, true)
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
enlist(t, false, pttl)
return {0, cur or false, pttl, ahead, headLeft}
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
var leaveScript = wire.NewScript("ba6443a60761d629d7689c326c9c3a679ca94882", guarded(luaQueue+`
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
var fairReleaseScript = wire.NewScript("d80da16bd11db92f9f6f3fb566fc04dd955cbb2d", guarded(luaQueue+`
local cur = call('GET', KEYS[1])
if ours(cur) then
  local head = headOf(KEYS[2], KEYS[3], nil)
  call('PUBLISH', KEYS[1] .. ':ch', 'R')
  if head then call('PUBLISH', wakeChannel(KEYS[1], head), head) end
  call('DEL', KEYS[1])
  return 1
end
return 0
`))
