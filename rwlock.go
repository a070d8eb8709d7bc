package redisleader

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redisleader/redisleader/internal/lease"
)

// rwlock.go: the RWLock handle, its acquisitions, Holders and the rule
// that refuses an upgrade. Its leases are kept on the lease floor
// (internal/lease/rwlock.go: the keys, the protocol) through the seam a
// semaphore's permits use (Session.acquireAs with a shared protocol).

// An RWLock is a session's handle on a read-write lock: many readers or
// one writer hold its name at once, across sessions. Each grant is a
// *Lock: renewed by the heartbeat, fenced (fences increase across the
// name's grants), ended at its deadline, released by Release or Close; a
// dead holder's share is free once its lease ends. A waiting writer posts
// an intent, a lease of its own, that stops new readers (a stream of
// readers cannot starve it; a dead waiter's intent ends within a TTL). A
// session holding a read lease that asks to write, or the reverse, gets
// an error matching ErrInvalid: upgrades are refused, never deadlocked.
// Redlock sessions refuse read-write locks. Safe for concurrent use.
type RWLock struct {
	s           *Session
	keys        lease.Keys
	value       string
	read, write *lease.RWArgs // boxed once for every acquire
}

// An RWLockOption configures an RWLock (Session.RWLock).
type RWLockOption interface {
	applyRWLock(*RWLock) error
}

type rwLockOptionFunc func(*RWLock) error

func (f rwLockOptionFunc) applyRWLock(rw *RWLock) error { return f(rw) }

// WithRWValue publishes value with each read or write lease the RWLock
// acquires, for Holders to show (at most 64 KiB; the default is empty).
func WithRWValue(value string) RWLockOption {
	return rwLockOptionFunc(func(rw *RWLock) error {
		if err := checkValue(value); err != nil {
			return fmt.Errorf("WithRWValue: %w", err)
		}
		rw.value = value
		return nil
	})
}

// errRedlockRW refuses a read-write lock on a Redlock session.
var errRedlockRW = invalidf("read-write locks are not available on a Redlock session (readers and writers on a majority of independent nodes are not one fact: two quorums could admit a reader and a writer)")

// RWLock returns the session's handle on the read-write lock name. It
// does no I/O. A bad name, a bad option or a Redlock session return an
// error matching ErrInvalid.
func (s *Session) RWLock(name string, opts ...RWLockOption) (*RWLock, error) {
	k, err := lease.RWKeysOf(name)
	if err != nil {
		return nil, err
	}
	if s.unsupported[permitting] != nil {
		return nil, errRedlockRW
	}
	rw := &RWLock{s: s, keys: k}
	if err := eachOption("RWLockOption", opts, func(o RWLockOption) error { return o.applyRWLock(rw) }); err != nil {
		return nil, err
	}
	rw.read, rw.write = lease.NewRWArgs(lease.RoleRead, rw.value), lease.NewRWArgs(lease.RoleWrite, rw.value)
	return rw, nil
}

// Name returns the read-write lock's name.
func (rw *RWLock) Name() string { return rw.keys.Name }

// RLock acquires a read lease, blocking until no writer holds or waits,
// ctx ends or the session closes: a release wakes the waiters at once
// (pub/sub). Errors are those of Session.Lock, and the upgrade rule's (see
// RWLock).
func (rw *RWLock) RLock(ctx context.Context) (*Lock, error) { return rw.acquire(ctx, false, block) }

// Lock acquires the write lease, blocking until no reader or other writer
// holds, ctx ends or the session closes; meanwhile its intent stops new
// readers. A Lock that gives up withdraws its intent. On a name whose
// write lease this session holds, it returns an error matching ErrLocked.
func (rw *RWLock) Lock(ctx context.Context) (*Lock, error) { return rw.acquire(ctx, true, block) }

// TryRLock makes one attempt to acquire a read lease: an error matching
// ErrLocked if a writer holds or waits.
func (rw *RWLock) TryRLock(ctx context.Context) (*Lock, error) {
	return rw.acquire(ctx, false, tryOnce)
}

// TryLock makes one attempt to acquire the write lease: an error matching
// ErrLocked if anyone holds or another writer waits. It posts no intent.
func (rw *RWLock) TryLock(ctx context.Context) (*Lock, error) { return rw.acquire(ctx, true, tryOnce) }

// acquire acquires a read or write lease in mode md, after the upgrade
// rule; a writer that gives up withdraws its intent (rw_acquire posts one
// when it must wait, and a blocking writer's failure leaves it there).
func (rw *RWLock) acquire(ctx context.Context, write bool, md mode) (*Lock, error) {
	if err := rw.s.rwRule(rw.keys.Name, write); err != nil {
		return nil, err
	}
	p := &lease.RWProtocol{A: rw.read}
	if write {
		p.A, p.Wait = rw.write, md != tryOnce
	}
	// Registered across the acquisition and the withdraw, so that Close,
	// which ends a waiting Lock, waits for its intent's withdraw too.
	if err := rw.s.enter(); err != nil {
		return nil, err
	}
	defer rw.s.work.Done()
	l, err := rw.s.acquireAs(ctx, acquisition{keys: rw.keys, value: rw.value, mode: md, shared: p})
	if err != nil && p.Wait && p.Token != "" {
		rw.withdraw(ctx, p)
	}
	if errors.Is(err, ErrLocked) && md == tryOnce {
		role := "read"
		if write {
			role = "write"
		}
		return nil, fmt.Errorf("redisleader: rwlock %q: no %s lease now: %w", rw.keys.Name, role, err)
	}
	return l, err
}

// withdraw removes the intent a writer that gave up may have posted with
// its last token (and the lease, if an attempt whose reply was lost took
// it), best effort: within ctx, or in the background once ctx has ended.
// Otherwise the intent ends with its lease, within a TTL.
// The caller must be registered with s.work.
func (rw *RWLock) withdraw(ctx context.Context, p *lease.RWProtocol) {
	l := &lease.Lease{Keys: rw.keys, Token: p.Token, Args: lease.Args{Lock: rw.keys.Lock, Token: p.Token}, Proto: p}
	rw.s.bestEffortCleanup(ctx, func(ctx context.Context) { rw.s.place.Release(ctx, lease.Ending{Lease: l}) })
}

// rwRule refuses an acquisition of the read-write lock name that this
// session's held leases of it forbid: a write lease while it holds a read
// one (an upgrade: two readers upgrading at once would wait for each other
// for ever), a read lease while it holds the write one (a downgrade), and a
// second write lease (a session never waits for itself).
func (s *Session) rwRule(name string, write bool) error {
	var mine []*Lock
	s.mu.Lock()
	for l := range s.reg.locks {
		if _, ok := l.lease.Proto.(*lease.RWProtocol); ok && l.lease.Keys.Name == name {
			mine = append(mine, l)
		}
	}
	s.mu.Unlock()
	for _, l := range mine {
		held := l.lease.Proto.(*lease.RWProtocol).Write()
		switch {
		case !l.Held():
		case held && write:
			return &heldError{name}
		case held:
			return invalidf("rwlock %q: this session holds its write lease and asks to read: a downgrade is refused (release the write lease, then RLock)", name)
		case write:
			return invalidf("rwlock %q: this session holds a read lease of it and asks to write: an upgrade is refused, as it would deadlock when two readers upgrade at once (release the read lease, then Lock)", name)
		}
	}
	return nil
}

// An RWHolder is a read or write lease held now, as Holders reads it.
type RWHolder struct {
	Write bool          // the write lease; else a read lease
	Value string        // published with WithRWValue
	Fence int64         // the lease's fence
	TTL   time.Duration // left on its lease on the server when read
}

// Holders reads the leases held now, in the order they end, and how many
// writers wait (their intents live now). Tokens are never shown. Data
// this package did not write in the lock's key is an error naming the key.
func (rw *RWLock) Holders(ctx context.Context) (holders []RWHolder, waiting int, err error) {
	if err := rw.s.enter(); err != nil {
		return nil, 0, err
	}
	defer rw.s.work.Done()
	cl := lease.RWHoldersCall(rw.keys)
	members, err := lease.DecodeRWHolders(rw.keys, rw.s.wire.Combiner().Call(ctx, time.Time{}, cl.Script, cl.Argv))
	if err != nil {
		return nil, 0, fmt.Errorf("redisleader: holders of rwlock %q: %w", rw.keys.Name, err)
	}
	for _, m := range members {
		if m.Role == lease.RoleIntent {
			waiting++
			continue
		}
		holders = append(holders, RWHolder{Write: m.Role == lease.RoleWrite, Value: m.Value, Fence: m.Fence, TTL: m.TTL})
	}
	return holders, waiting, nil
}
