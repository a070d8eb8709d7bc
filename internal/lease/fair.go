package lease

import "github.com/redisleader/redisleader/internal/wire"

// fair.go: the fair protocol as Redis sees it (the waiter that holds it,
// its place and wake-ups, is the root's: fair.go there).

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

// LeaveCall takes the place out of the queue of the lock key lock, with a
// tombstone for ttl.
func (p *FairProtocol) LeaveCall(lock, ttl any) wire.Call {
	return wire.Call{Script: LeaveRun, Argv: p.Args.Leave(lock, ttl)}
}
