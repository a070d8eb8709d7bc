package redisleader

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redisleader/redisleader/internal/lease"
	"github.com/redisleader/redisleader/internal/wire"
)

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
