package redisleader

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// An Election is a named leadership contest: a lock whose holder publishes a
// value (its identity, such as host:port) that everyone can read. Create it
// with Session.Election. An Election holds no state of its own and is safe
// for concurrent use; every Campaign is a separate acquisition.
type Election struct {
	s    *Session
	keys keys
}

// Leader describes who leads an election.
type Leader struct {
	// Value is what the leader passed to Campaign or Run, or last to Proclaim.
	Value string
	// Fence is the leader's fencing token; it is never zero for a leader.
	// Observe sends a Leader with Fence 0 when nobody leads.
	Fence int64
	// TTL is what was left of the leader's lease on the Redis server when it
	// was read (the leader renews it).
	TTL time.Duration
}

// Election returns the election called name in this session. It does no I/O.
// A bad name returns an error matching ErrInvalid (the naming rule is in the
// package documentation).
func (s *Session) Election(name string) (*Election, error) {
	k, err := keysOf(name)
	if err != nil {
		return nil, err
	}
	return &Election{s: s, keys: k}, nil
}

// Name returns the election's name.
func (e *Election) Name() string { return e.keys.name }

// Campaign blocks until this candidate leads, and returns its leadership as a
// Lock: Done is closed when leadership ends and Err says why, Fence is the
// leader's fencing token, Value is value (until Proclaim changes it), and
// Release resigns, as Resign does. While another candidate leads, Campaign
// waits as the package documentation describes (section Waiting).
//
// Campaign returns ctx's error (joined with the last Redis error, if any)
// when ctx ends and ErrSessionClosed when the session closes, promptly in
// both cases, leaving no key behind; an error matching ErrInvalid when value
// is longer than 64 KiB; an error matching ErrLocked when this session
// already leads (a session never waits for itself); or a Redis error that
// retrying cannot fix. Transient Redis errors are retried.
func (e *Election) Campaign(ctx context.Context, value string) (*Lock, error) {
	if err := checkValue(value); err != nil {
		return nil, err
	}
	return e.s.acquire(ctx, e.keys, value, block)
}

// TryCampaign makes one attempt to lead with value, as TryLock does for a
// lock: it returns the leadership as Campaign does, or an error matching
// ErrLocked (with the leader's fence) when another candidate leads or this
// session already does, without waiting. It returns an error matching
// ErrInvalid for a value over 64 KiB, ErrSessionClosed, or a Redis error; in
// the last case the key is released with this attempt's token in case the
// attempt took effect.
func (e *Election) TryCampaign(ctx context.Context, value string) (*Lock, error) {
	if err := checkValue(value); err != nil {
		return nil, err
	}
	return e.s.acquire(ctx, e.keys, value, tryOnce)
}

// Resign ends this session's leadership of the election, if it leads
// (whether Campaign or Run won it), as the leadership Lock's Release does.
// For a term of Run it then waits until Run has deleted the key, returning
// what the delete returned, or until ctx ends, returning an error that wraps
// ctx's; from inside onElected it does not wait (see the package
// documentation, section Elections). Run then campaigns again, as when
// onElected returns nil; to stop campaigning, end Run's context.
//
// When this session does not lead the election (it never did, or its
// leadership has ended already), Resign returns nil and writes nothing, as
// etcd's does; but while Run has yet to delete a resigned term's key, it
// waits for that delete too. It does not stop a Campaign or Run that is
// still campaigning. Otherwise it returns what Release returns.
func (e *Election) Resign(ctx context.Context) error {
	l := e.s.leading(e.keys.name)
	if l == nil {
		l = e.s.resignedTerm(e.keys.name)
	}
	if l == nil {
		return nil
	}
	return l.release(ctx, true)
}

// Proclaim publishes value as this leader's new value without resigning:
// the key keeps its token, its fence and its TTL, so the leadership, its
// Lock and its fencing token stay as they are; Leader and Observe report the
// new value with the same Fence, and the leadership's Lock.Value returns it.
//
// Proclaim returns an error matching ErrInvalid, without Redis I/O, when value
// is longer than 64 KiB, and on a Redlock session (a value stored on only
// some nodes could not be told apart from the former one by readers);
// ErrSessionClosed when the session is closed; and an error matching
// ErrNotLeader, writing nothing, when this session does not lead the
// election. When Redis says the key no longer holds this leadership's token,
// the leadership ends with ErrNotOwner and the error matches both
// ErrNotLeader and ErrNotOwner. The call is bounded by ctx, the call timeout
// and the leadership's local deadline. Proclaim does not wait for replicas
// (WithReplicaAcks): after a failover the former value may come back.
//
// After any other error (a Redis error, or ctx ending while the request was
// on its way) the stored value may be the former one or this one, even
// later (the request can still reach Redis), and Lock.Value keeps the
// former, the last one a Proclaim returned nil for; Proclaim again. Once a
// Proclaim has returned nil, no earlier Proclaim of the leadership
// overwrites its value: calls on one leadership run one at a time, each
// carries the next number of the term's sequence, which Redis keeps (in the
// key redisleader:{name}:seq), and a request that reaches Redis after a
// later one's writes nothing.
func (e *Election) Proclaim(ctx context.Context, value string) error {
	if err := checkValue(value); err != nil {
		return err
	}
	if _, redlock := e.s.place.(*quorum); redlock {
		return errRedlockProclaim
	}
	if err := e.s.Err(); err != nil {
		return err
	}
	l := e.s.leading(e.keys.name)
	if l == nil {
		return fmt.Errorf("redisleader: proclaim %q: %w", e.keys.name, ErrNotLeader)
	}
	return l.proclaim(ctx, value)
}

// proclaim stores value as the leadership's value in Redis, then here.
func (l *Lock) proclaim(ctx context.Context, value string) error {
	l.mu.Lock()
	if l.proclaiming == nil {
		l.proclaiming = make(chan struct{}, 1)
	}
	turn := l.proclaiming
	l.mu.Unlock()
	select {
	case turn <- struct{}{}:
		defer func() { <-turn }()
	case <-ctx.Done():
		return fmt.Errorf("redisleader: proclaim %q: %w", l.keys.name, ctx.Err())
	}
	deadline, ok := l.liveDeadline(time.Now())
	if !ok {
		return fmt.Errorf("redisleader: proclaim %q: %w", l.keys.name, ErrNotLeader)
	}
	l.proclaimed++
	stored, err := l.s.place.proclaim(ctx, l, l.proclaimed, value, deadline)
	switch {
	case errors.Is(err, errSuperseded):
		return fmt.Errorf("redisleader: proclaim %q: %w", l.keys.name, err)
	case err != nil:
		return fmt.Errorf("redisleader: proclaim %q (the stored value may be the former one or the new one): %w", l.keys.name, err)
	case !stored:
		l.lose(ErrNotOwner)
		return fmt.Errorf("redisleader: proclaim %q: %w: %w", l.keys.name, ErrNotLeader, ErrNotOwner)
	}
	l.mu.Lock()
	l.value = value
	l.mu.Unlock()
	return nil
}

// errSuperseded: Redis holds a later Proclaim of the leadership than this
// one, which wrote nothing. Calls run one at a time, so only a request that
// reached Redis after its caller gave up finds that, and its reply goes
// nowhere; a live caller gets it only if something else wrote the term's
// sequence.
var errSuperseded = errors.New("redisleader: a later Proclaim of this leadership is stored already; this one wrote nothing")

// leading returns the session's leadership of name (its delivered, held
// lock of the name), or nil.
func (s *Session) leading(name string) *Lock {
	s.mu.Lock()
	l := s.names[name]
	s.mu.Unlock()
	if l == nil {
		return nil
	}
	l.mu.Lock()
	delivered := l.delivered
	l.mu.Unlock()
	if !delivered || !l.Held() {
		return nil
	}
	return l
}

// Leader returns the current leader with one Redis call, or ErrNoLeader.
// The answer may be stale by the time it is used: leadership can change at
// any moment. Only the leader's own Lock (Held, Done) says for sure that it
// still leads.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	l, ok, err := e.s.place.inspect(ctx, e.keys)
	switch {
	case err != nil:
		return Leader{}, err
	case !ok:
		return Leader{}, ErrNoLeader
	}
	return l, nil
}
