package redisleader

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redisleader/redisleader/internal/lease"
	"github.com/redisleader/redisleader/internal/wire"
)

// An Election is a named leadership contest: a lock whose holder publishes a
// value (its identity, such as host:port) that everyone can read. Create it
// with Session.Election. An Election holds no state of its own and is safe
// for concurrent use; every Campaign is a separate acquisition.
type Election struct {
	s    *Session
	keys lease.Keys
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
	k, err := lease.KeysOf(name)
	if err != nil {
		return nil, err
	}
	return &Election{s: s, keys: k}, nil
}

// Name returns the election's name.
func (e *Election) Name() string { return e.keys.Name }

// Campaign blocks until this candidate leads, and returns its leadership as a
// Lock: Done is closed when leadership ends and Err says why, Fence is the
// leader's fencing token, Value is value (until Proclaim changes it), and
// Release resigns, as Resign does. It waits as the package documentation
// describes (section Waiting) and retries transient Redis errors. It
// returns ctx's error (joined with the last Redis error, if any) or
// ErrSessionClosed promptly, leaving no key behind; errors matching
// ErrInvalid (a value over 64 KiB, an option that breaks its rule) or
// ErrLocked (this session already leads); or a Redis error that retrying
// cannot fix. A leader with a priority (opts, WithPriority) that Campaign
// won does not yield by itself (Run does), but its release hands the name
// to a better candidate.
func (e *Election) Campaign(ctx context.Context, value string, opts ...CampaignOption) (*Lock, error) {
	if err := checkValue(value); err != nil {
		return nil, err
	}
	c, err := e.s.candidacyOf(e.keys, value, opts)
	if err != nil {
		return nil, err
	}
	return e.s.acquire(ctx, e.keys, value, block, c)
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
	return e.s.acquire(ctx, e.keys, value, tryOnce, nil)
}

// Resign ends this session's leadership of the election, if it leads
// (whether Campaign or Run won it), and returns what the leadership Lock's
// Release returns. For a term of Run it waits for Run's delete of the key
// and returns that delete's error, or one wrapping ctx's when ctx ends
// first (package documentation, Elections). Run then campaigns again; to
// stop it, end Run's context. When this session does not lead, Resign
// writes nothing and returns nil, as etcd's does, once a resigned term's
// delete is done. It does not stop a Campaign or Run still campaigning.
func (e *Election) Resign(ctx context.Context) error {
	l := e.s.leading(e.keys.Name)
	if l == nil {
		l = e.s.resignedTerm(e.keys.Name)
	}
	if l == nil {
		return nil
	}
	return l.release(ctx, true)
}

// Proclaim publishes value as this leader's new value without resigning:
// the key keeps its token, fence and TTL. Leader, Observe and the
// leadership's Lock.Value then report the new value with the same Fence.
//
// It returns an error matching ErrInvalid, without I/O, for a value over
// 64 KiB or on a Redlock session; ErrSessionClosed; or one matching
// ErrNotLeader, writing nothing, when this session does not lead. If Redis
// no longer holds the token, the leadership ends and the error matches
// ErrNotOwner too. After another error the stored value may be either, even
// later, and Lock.Value keeps the former: Proclaim again. No earlier
// Proclaim overwrites one that returned nil (lease.ProclaimRun). Proclaim does
// not wait for replicas: after a failover the former value may come back.
func (e *Election) Proclaim(ctx context.Context, value string) error {
	l, err := e.leadership("proclaim", proclaiming, value)
	if err != nil {
		return err
	}
	return l.proclaim(ctx, value)
}

// leadership is the prologue of every leader-only operation op, which
// needs the feature f and writes value, read here in one piece: the checks
// (check), then this session must lead the election (ErrNotLeader
// otherwise). It returns the leadership.
func (e *Election) leadership(op string, f feature, value string) (*Lock, error) {
	if err := e.check(f, value); err != nil {
		return nil, err
	}
	if l := e.s.leading(e.keys.Name); l != nil {
		return l, nil
	}
	return nil, fmt.Errorf("redisleader: %s %q: %w", op, e.keys.Name, ErrNotLeader)
}

// A leadership is what a Lock that leads an election carries beyond a plain
// lock: its Proclaim turn and sequence, and its succession (what its
// release does besides the delete: hand the name to a named successor,
// Transfer, or to the best candidate above the leader, a priority). The
// value it campaigned with is the lease's (Lock.args.Value). A plain lock
// has none (Lock.lead nil) until a Proclaim or a Transfer makes one; the
// Lock's mu guards the pointer and every field but cand, turn and seq.
type leadership struct {
	cand    *candidacy // nil: no priority declared
	heir    string     // Transfer's successor, "" if none
	preempt func()     // Run's: ends onElected with ErrPreempted; nil once run
	// turn serialises Election.Proclaim calls, so that the value kept in
	// the Lock is the last one stored in Redis.
	turn chan struct{} // capacity 1, made by the first Proclaim under mu
	// seq is the sequence number of the term's last Proclaim sent
	// (lua/proclaim.lua); only the holder of the turn uses it.
	seq int64
}

// check is what an operation that needs the feature f and writes value
// checks before any I/O: the value's rule (checkValue), that the place
// supports f (ErrInvalid on Redlock; the session's answer, asked once when
// it started), and that the session is open (Session.Err).
func (e *Election) check(f feature, value string) error {
	if err := checkValue(value); err != nil {
		return err
	}
	if err := e.s.unsupported[f]; err != nil {
		return err
	}
	e.s.mu.Lock()
	defer e.s.mu.Unlock()
	return e.s.err
}

// maxValueLen bounds the value an election candidate publishes.
const maxValueLen = lease.MaxValue

// checkValue enforces the rule of a published value: at most maxValueLen
// bytes.
func checkValue(value string) error {
	if len(value) > maxValueLen {
		return invalidf("value is %d bytes long; it must be at most %d", len(value), maxValueLen)
	}
	return nil
}

// proclaim stores value as the leadership's value in Redis, then here.
func (l *Lock) proclaim(ctx context.Context, value string) error {
	l.mu.Lock()
	lead := l.leadLocked()
	if lead.turn == nil {
		lead.turn = make(chan struct{}, 1)
	}
	turn := lead.turn
	l.mu.Unlock()
	select {
	case turn <- struct{}{}:
		defer func() { <-turn }()
	case <-ctx.Done():
		return fmt.Errorf("redisleader: proclaim %q: %w", l.lease.Keys.Name, ctx.Err())
	}
	deadline, ok := l.liveDeadline(time.Now())
	if !ok {
		return fmt.Errorf("redisleader: proclaim %q: %w", l.lease.Keys.Name, ErrNotLeader)
	}
	lead.seq++
	stored, err := l.s.place.Proclaim(ctx, &l.lease, lead.seq, value, deadline)
	switch {
	case errors.Is(err, lease.ErrSuperseded), wire.Permanent(err): // nothing stored: the script refused before its writes
		return fmt.Errorf("redisleader: proclaim %q: %w", l.lease.Keys.Name, err)
	case err != nil:
		return fmt.Errorf("redisleader: proclaim %q (the stored value may be the former one or the new one): %w", l.lease.Keys.Name, err)
	case !stored:
		l.lose(ErrNotOwner)
		return fmt.Errorf("redisleader: proclaim %q: %w: %w", l.lease.Keys.Name, ErrNotLeader, ErrNotOwner)
	}
	l.mu.Lock()
	l.value = value
	l.mu.Unlock()
	return nil
}

// leading returns the session's leadership of name (its delivered, held
// lock of the name), or nil. One past its deadline is not held, and Held's
// verdict ends it (Lock.check).
func (s *Session) leading(name string) *Lock {
	s.mu.Lock()
	l := s.reg.names[name]
	s.mu.Unlock()
	if l == nil {
		return nil
	}
	l.mu.Lock()
	delivered, live := l.delivered, l.err == nil && time.Now().Before(l.deadline)
	l.mu.Unlock()
	switch {
	case !delivered:
		return nil
	case !live:
		l.check() // ends it with ErrExpired if its deadline has passed, as Held does
		return nil
	}
	return l
}

// Leader returns the current leader with one Redis call, or ErrNoLeader.
// The answer may be stale by the time it is used: leadership can change at
// any moment. Only the leader's own Lock (Held, Done) says for sure that it
// still leads.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	l, ok, err := e.read(ctx)
	switch {
	case err != nil:
		return Leader{}, err
	case !ok:
		return Leader{}, ErrNoLeader
	}
	return l, nil
}

// read reads who leads (place.Inspect), judged as a Transfer judges it
// (lease.Inspected.Leads): ok is false when nobody does.
func (e *Election) read(ctx context.Context) (l Leader, ok bool, err error) {
	r, err := e.s.place.Inspect(ctx, e.keys)
	if err == nil {
		ok, err = r.Leads(e.keys)
	}
	switch {
	case err != nil:
		return Leader{}, false, fmt.Errorf("redisleader: leader of %q: %w", e.keys.Name, err)
	case !ok:
		return Leader{}, false, nil
	}
	return Leader{Value: r.Holder.Value, Fence: r.Holder.Fence, TTL: r.TTL}, true, nil
}

// Transfer (the model is in doc.go, section Choosing the leader).
//
// A leader hands the name over by replacing its lease, in one script, with
// a reservation for the successor's value: "\n<fence>\n<value>", no token,
// for one TTL. Nobody's token matches it, so no other candidate can take
// the name while it stands and no stale delete of ours removes it; the
// acquire scripts let a candidate campaigning with that value take it (its
// fence comes after the former leader's, as after any release). The same
// script wakes the waiters (every message on the name's channel, and every
// live fair waiter, since any of them may be the successor). When the
// reservation expires unused, the name is free to anyone.
//
// One transition ends a leadership given up by its holder (Lock.resign):
// ending the Lock and naming the heir happen in one step under its mutex,
// and only then is the key deleted or handed over (for a Run term, by Run
// once onElected has returned). Of concurrent Transfers, Resigns and
// Releases of one leadership exactly one makes it; a Transfer that finds the
// leadership ended by another call writes nothing and says what happened
// (ErrNotLeader with the end's reason, and the other Transfer's successor),
// except that one to the same successor waits for that hand-over as if it
// were its own. While the other call's hand-over is on its way, Leader
// still reads the ended leadership: awaitSuccessor knows it by its fence
// and waits on, so no caller reports it as a rival.
//
// After a Transfer, Run campaigns without its priority, so that a transfer
// to a lower priority holds; a former leader that campaigns again itself
// (Campaign) with a higher priority than the successor's takes the name
// back after the successor's minimum term. A Transfer to the leader's own
// value (campaigned or proclaimed) asks for what already holds: it returns
// nil without I/O, as the CLI's transfer exits 0 when VALUE leads.

// ErrNoSuccessor is returned by Election.Transfer when the named successor
// did not take leadership within the bound (one TTL): it is not
// campaigning, or died. The name is then free to anyone, or another
// candidate already leads (the error says which).
var ErrNoSuccessor = lease.ErrNoSuccessor

// ErrPreempted is the cause of a Run term's onElected context when the
// leader yields to a candidate with a higher priority (WithPriority).
var ErrPreempted = errors.New("redisleader: preempted by a candidate with a higher priority")

// errRedlockTransfer: a reservation on a majority of nodes is no single fact
// a successor could take.
var errRedlockTransfer = invalidf("Transfer is not supported with Redlock")

// Transfer hands this session's leadership of the election to the
// candidate campaigning (Campaign or Run) with value to, and returns nil
// once it leads, as read from Redis; nobody else leads in between. The
// leadership ends with ErrReleased first; a Run term's onElected returns
// before the hand-over (a Transfer from onElected, with its context,
// returns once the term has ended), then Run campaigns without its priority.
// To this leader's own value (campaigned or proclaimed) it returns nil at
// once. Errors: ErrNoSuccessor if to has not led within one TTL (WithTTL;
// then anyone may); ErrInvalid, without I/O, for an empty value, one over
// 64 KiB or a Redlock session; ErrNotLeader, writing nothing, if this session
// does not lead or its leadership ended first (the error says how); the
// release's error; or ctx's, which leaves the hand-over as it is.
func (e *Election) Transfer(ctx context.Context, to string) error {
	l, err := e.leadership("transfer", transferring, to)
	switch {
	case to == "":
		return errNoSuccessorValue
	case err != nil:
		return err
	case l.isOwn(to):
		return nil // to leads already: the CLI's transfer exits 0 too
	}
	// Subscribed before the hand-over, so that the successor's "A" is heard.
	sub, err := e.s.wire.Subscribe(ctx, e.keys.Channel, nil)
	if err != nil {
		return err
	}
	defer sub.Close()
	ended, t, err := l.resign(ctx, to, true)
	switch {
	case !ended && l.heir() != to:
		return l.endedBefore(to)
	case err != nil:
		return err
	case t != nil && termsOf(ctx).has(l):
		return nil // from the term's own onElected: Run hands over once it returns
	}
	return e.awaitSuccessor(ctx, sub, l.lease.Fence, to, time.Now().Add(e.s.cfg.TTL+e.s.cfg.RetryInterval))
}

// checkTransfer checks a successor's value, and that the session can
// transfer.
func (e *Election) checkTransfer(to string) error {
	if to == "" {
		return errNoSuccessorValue
	}
	return e.check(transferring, to)
}

// errNoSuccessorValue: a Transfer names its successor by a value.
var errNoSuccessorValue = invalidf("Transfer: the successor's value must not be empty")

// redlock reports whether the session is a Redlock quorum, which cannot
// transfer (place.supports).
func (e *Election) redlock() bool { return e.s.unsupported[transferring] != nil }

// isOwn reports whether to is l's own value: the one it campaigned with,
// or the one it last proclaimed.
func (l *Lock) isOwn(to string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return to == l.lease.Args.Value || to == l.value
}

// endedBefore is what a Transfer to to returns when l ended before it could
// hand l over: how l ended, and where the name went if another Transfer
// took it there.
func (l *Lock) endedBefore(to string) error {
	why, how := l.Err(), "it ended first"
	switch heir := l.heir(); {
	case heir != "":
		how = fmt.Sprintf("another Transfer hands it to %q", heir)
	case why == ErrReleased:
		how = "it was released first (Resign, Release, or Run)"
	}
	return fmt.Errorf("redisleader: transfer %q to %q: %w: %s: %w", l.lease.Keys.Name, to, ErrNotLeader, how, why)
}

// awaitSuccessor reads who leads (lease.Leader: a Transfer runs on one
// server, the session's transport's), after every message on sub, until to
// does (nil), another candidate does or the reservation can have expired
// unused at until (ErrNoSuccessor), or ctx or the session ends. A leader
// with the fence of the leadership handed over (from) is that one's key,
// its hand-over still on the way (another Transfer's, to the same value):
// it waits on.
func (e *Election) awaitSuccessor(ctx context.Context, sub *wire.Subscription, from int64, to string, until time.Time) error {
	for {
		r, leads, err := lease.Leader(ctx, &e.s.wire, e.keys)
		who := r.Holder
		former := leads && who.Fence == from
		switch {
		case former:
		case leads && who.Value == to:
			return nil
		case leads:
			return fmt.Errorf("redisleader: transfer %q to %q: %w; %q leads instead", e.keys.Name, to, ErrNoSuccessor, who.Value)
		case err != nil && ctx.Err() != nil:
			return fmt.Errorf("redisleader: transfer %q to %q: %w", e.keys.Name, to, ctx.Err())
		}
		if !time.Now().Before(until) {
			return fmt.Errorf("redisleader: transfer %q to %q: %w within the TTL; the name is free to anyone", e.keys.Name, to, ErrNoSuccessor)
		}
		d := time.Until(until)
		if former || err != nil {
			d = min(d, e.s.cfg.RetryDelay()) // a Redis error, or the hand-over not made yet: read again soon
		}
		if err := e.s.wire.Wait(ctx, sub, d); err != nil { // until the next message, or d
			return fmt.Errorf("redisleader: transfer %q to %q: %w", e.keys.Name, to, err)
		}
	}
}
