package redisleader

import (
	"context"
	"errors"
	"fmt"
	"github.com/redisleader/redisleader/internal/wire"
	"time"
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
var ErrNoSuccessor = errors.New("redisleader: the successor did not take leadership")

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
	if err := e.checkTransfer(to); err != nil {
		return err
	}
	l := e.s.leading(e.keys.name)
	switch {
	case l == nil:
		return fmt.Errorf("redisleader: transfer %q: %w", e.keys.name, ErrNotLeader)
	case l.isOwn(to):
		return nil // to leads already: the CLI's transfer exits 0 too
	}
	// Subscribed before the hand-over, so that the successor's "A" is heard.
	sub, err := e.s.wire.Subscribe(ctx, e.keys.channel(), nil)
	if err != nil {
		return err
	}
	defer sub.Close()
	ended, err := l.resign(ctx, e.s.termOf(l), to, true)
	switch {
	case !ended && l.heir() != to:
		return l.endedBefore(to)
	case err != nil:
		return err
	case termsOf(ctx).has(l):
		return nil // from the term's own onElected: Run hands over once it returns
	}
	return e.awaitSuccessor(ctx, sub, l.fence, to, time.Now().Add(e.s.cfg.ttl+e.s.cfg.retryInterval))
}

// checkTransfer checks a successor's value, and that the session can
// transfer.
func (e *Election) checkTransfer(to string) error {
	switch err := checkValue(to); {
	case err != nil:
		return err
	case to == "":
		return invalidf("Transfer: the successor's value must not be empty")
	case e.redlock():
		return errRedlockTransfer
	}
	return e.s.Err()
}

// redlock reports whether the session is a Redlock quorum.
func (e *Election) redlock() bool {
	_, q := e.s.place.(*quorum)
	return q
}

// heir returns the successor that l's release hands the name to, if a
// Transfer ended l ("" otherwise).
func (l *Lock) heir() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.succ == nil {
		return ""
	}
	return l.succ.heir
}

// isOwn reports whether to is l's own value: the one it campaigned with,
// or the one it last proclaimed.
func (l *Lock) isOwn(to string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return to == l.argv[argValue] || to == l.value
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
	return fmt.Errorf("redisleader: transfer %q to %q: %w: %s: %w", l.keys.name, to, ErrNotLeader, how, why)
}

// awaitSuccessor reads who leads, after every message on sub, until to
// does (nil), another candidate does or the reservation can have expired
// unused at until (ErrNoSuccessor), or ctx ends. A leader with the fence of
// the leadership handed over (from) is that one's key, its hand-over still
// on the way (another Transfer's, to the same value): it waits on.
func (e *Election) awaitSuccessor(ctx context.Context, sub *wire.Subscription, from int64, to string, until time.Time) error {
	for {
		who, err := e.Leader(ctx)
		former := err == nil && who.Fence == from
		switch {
		case former:
		case err == nil && who.Value == to:
			return nil
		case err == nil:
			return fmt.Errorf("redisleader: transfer %q to %q: %w; %q leads instead", e.keys.name, to, ErrNoSuccessor, who.Value)
		case !errors.Is(err, ErrNoLeader) && ctx.Err() != nil:
			return fmt.Errorf("redisleader: transfer %q to %q: %w", e.keys.name, to, ctx.Err())
		}
		if !time.Now().Before(until) {
			return fmt.Errorf("redisleader: transfer %q to %q: %w within the TTL; the name is free to anyone", e.keys.name, to, ErrNoSuccessor)
		}
		d := time.Until(until)
		if former || err != nil && !errors.Is(err, ErrNoLeader) {
			d = min(d, e.s.cfg.retryDelay()) // a Redis error, or the hand-over not made yet: read again soon
		}
		if err := e.s.wait(ctx, sub, d); err != nil {
			return fmt.Errorf("redisleader: transfer %q to %q: %w", e.keys.name, to, err)
		}
	}
}

// handOffCall is the release of a leadership with a succession: the name
// goes to the heir, or to the best candidate above the leader's priority,
// or is deleted as by the release scripts.
func (l *Lock) handOffCall(sc *succession) wire.Call {
	l.mu.Lock()
	heir := sc.heir
	l.mu.Unlock()
	var prio any = ""
	if c := sc.cand; c != nil {
		prio = c.prioArg
	}
	k := l.keys
	return wire.Call{Script: handOffScript, Argv: []any{nil, nil, 5, l.lockArg, k.queue(), k.leases(), k.candidates(), k.candidateLeases(),
		l.tokenArg, heir, prio, l.argv[argValue], l.s.ttlArg}}
}

// handOffScript ends a leadership with a succession: it replaces the lock
// key, if it holds our token, with a reservation for the heir, or deletes
// it when there is no heir; and takes the leader and the heir out of the
// candidates (the heir enlists again as it takes the name, so a dead or
// forged one costs one reservation, once).
//
//	KEYS[1] lock key, KEYS[2] queue, KEYS[3] leases (fair mode's; may not
//	exist), KEYS[4] candidates, KEYS[5] their leases
//	ARGV[1] token, ARGV[2] heir's value ("": the best live candidate with a
//	priority above ARGV[3], if any), ARGV[3] our priority ("": none),
//	ARGV[4] our value, ARGV[5] TTL in ms (the reservation's)
//
// Replies 0 if the key is missing or holds another token (then it writes
// nothing); 1 if deleted (no heir); {2, heir} if reserved. Order: GET, the
// candidate reads, TIME, the queue reads, PUBLISH "R" on the name's channel
// and the wake-ups (to every live fair waiter with an heir, as any of them
// may be it; else to the head), ZREM us from the candidates, then SET the
// reservation PX or DEL.
var handOffScript = wire.NewScript("2e8c81bd128a746c6175cf1e7c9692a694724464", guarded(luaQueue+luaCand+`
local cur = call('GET', KEYS[1])
if not ours(cur) then return 0 end
candidateKeys(KEYS[4], KEYS[5])
local to = ARGV[2]
if to == '' and ARGV[3] ~= '' then to = best(KEYS[4], KEYS[5], now, ARGV[3], ARGV[4]) or '' end
local wake = {}
if to ~= '' then
  for _, m in ipairs(call('ZRANGE', KEYS[2], 0, 999)) do
    if lease(KEYS[3], m) then wake[#wake + 1] = m end
  end
else
  wake[1] = headOf(KEYS[2], KEYS[3], nil)
end
call('PUBLISH', KEYS[1] .. ':ch', 'R')
for _, m in ipairs(wake) do call('PUBLISH', wakeChannel(KEYS[1], m), m) end
call('ZREM', KEYS[4], ARGV[4], to)
call('ZREM', KEYS[5], ARGV[4], to)
if to == '' then
  call('DEL', KEYS[1])
  return 1
end
local rest = string.sub(cur, #ARGV[1] + 2)
local nl = string.find(rest, '\n', 1, true) or (#rest + 1)
call('SET', KEYS[1], '\n' .. string.sub(rest, 1, nl - 1) .. '\n' .. to, 'PX', ARGV[5])
return {2, to}
`))
