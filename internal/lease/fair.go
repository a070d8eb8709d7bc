package lease

import (
	"context"
	"time"

	"github.com/redisleader/redisleader/internal/wire"
)

// fair.go: the fair protocol as Redis sees it (the waiter that holds it
// is the root's: fair.go there). Fair mode's contract (WithFairness) is in
// the root's doc.go, section Fairness.
//
// The queue of a name lives in the name's slot, next to the lock: a sorted
// set of waiters by arrival (server TIME in µs) and a sorted set of their
// leases (end in server ms). A waiter's place is a lease like a lock: each
// attempt of the waiter gives it one TTL, and the waiter makes its next
// attempt before that lease can run out (the root's acquisition.keepPlace), so the
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

// legacyWake is the payload of an older release's wake-up (see WakeFilter).
const legacyWake = "W"

// WakeFilter lets through the wake-ups for the waiter id: those that carry
// its member id, and legacyWake, the unaddressed wake-up of releases before
// wake-ups were addressed, so that a rolling upgrade does not leave a head
// waiter asleep behind an older session's release.
func WakeFilter(id string) func(payload string) bool {
	return func(payload string) bool { return payload == id || payload == legacyWake }
}

// A FairProtocol is a fair acquisition's protocol: its acquire keeps its
// place in the name's queue, and its release wakes the head waiter.
type FairProtocol struct {
	Args Fair // its place's arguments, boxed once
	// argv is the buffer of fair_acquire's argument vector; only the
	// acquiring goroutine uses it.
	argv [12]any
}

// AcquireCall is fair_acquire with l's and the place's arguments.
func (p *FairProtocol) AcquireCall(l *Lease) wire.Call {
	return wire.Call{Script: FairAcquireRun, Argv: l.Args.FairAcquire(&p.argv, &p.Args)}
}

// RenewCall is the plain renewal: a place is kept by the attempts.
func (p *FairProtocol) RenewCall(l *Lease) wire.Call { return Plain{}.RenewCall(l) }

// ReleaseCall hands the name to heir, or deletes the key and wakes the
// head waiter.
func (p *FairProtocol) ReleaseCall(l *Lease, heir string) wire.Call {
	if heir != "" {
		return l.HandOffCall(heir, "")
	}
	return wire.Call{Script: FairReleaseRun, Argv: l.Args.FairRelease(l.Keys)}
}

// Leave takes the place out of the queue of the lock key lock, with a
// tombstone for ttl, through t, best effort: the caller has no use for an
// error (the place's lease ends within a TTL).
func (p *FairProtocol) Leave(ctx context.Context, t *wire.Combiner, lock, ttl any) {
	_ = t.Call(ctx, time.Time{}, LeaveRun, p.Args.Leave(lock, ttl))
}
