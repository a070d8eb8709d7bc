package redisleader

import (
	"context"
	"github.com/redisleader/redisleader/internal/wire"
	"strconv"
	"time"

	"github.com/redisleader/redisleader/internal/lease"
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
	keys lease.Keys
	// proto is its protocol, which holds its place's arguments
	// (internal/lease/fair.go).
	proto lease.FairProtocol
	sub   *wire.Subscription // the acquisition's, when it blocks
}

// newWaiter prepares a fair acquisition of k. join: it waits in the queue
// when it cannot take the lock at once.
func (s *Session) newWaiter(k lease.Keys, join bool) *waiter {
	w := &waiter{id: s.id + "." + strconv.FormatUint(s.waiterSeq.Add(1), 10), keys: k}
	w.proto.Args = lease.NewFair(k, w.id, join)
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
		cl := w.proto.LeaveCall(w.keys.Lock, s.ttlArg)
		_ = s.wire.Combiner().Call(ctx, time.Time{}, cl.Script, cl.Argv)
	})
}
