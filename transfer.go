package redisleader

import (
	"context"
	"errors"
	"fmt"
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
// once that candidate leads, as read from Redis. The leadership ends with
// ErrReleased first; for a term of Run, Transfer waits until onElected has
// returned and Run has handed the name over, and Run then campaigns again.
// Between the hand-over and the successor's acquisition nobody else can
// lead; if the successor has not taken the name within one TTL (WithTTL),
// the reservation expires and anyone may: Transfer then returns an error
// matching ErrNoSuccessor. Called from a Run term's onElected with its
// context, it returns nil once it has ended the term: the hand-over follows
// when onElected returns. Run then campaigns for its next term without
// its priority, so a transfer to a lower priority holds; a former leader
// that campaigns again itself (Campaign) with a higher priority than the
// successor's takes the name back after the successor's minimum term.
// It returns an error matching ErrInvalid, without
// I/O, for an empty value, one over 64 KiB or on a Redlock session;
// ErrNotLeader when this session does not lead (writing nothing); the
// release's error; or ctx's error, which leaves the hand-over as it is.
func (e *Election) Transfer(ctx context.Context, to string) error {
	switch err := checkValue(to); {
	case err != nil:
		return err
	case to == "":
		return invalidf("Transfer: the successor's value must not be empty")
	}
	if _, redlock := e.s.place.(*quorum); redlock {
		return errRedlockTransfer
	}
	if err := e.s.Err(); err != nil {
		return err
	}
	l := e.s.leading(e.keys.name)
	if l == nil {
		return fmt.Errorf("redisleader: transfer %q: %w", e.keys.name, ErrNotLeader)
	}
	if to == l.argv[argValue] {
		return invalidf("Transfer: %q is this leader's own value", to)
	}
	// Subscribed before the hand-over, so that the successor's "A" is heard.
	sub, err := e.s.watch.subscribe(ctx, e.keys.channel(), "")
	if err != nil {
		return err
	}
	defer sub.Close()
	l.setHeir(to)
	if err := l.release(ctx, true); err != nil {
		return err
	}
	from := time.Now() // the reservation is made: for a Run term, once onElected returned
	if termsOf(ctx).has(l) {
		return nil // from the term's own onElected: Run hands over once it returns
	}
	return e.awaitSuccessor(ctx, sub, to, from.Add(e.s.cfg.ttl+e.s.cfg.retryInterval))
}

// transferred reports whether l's release was a Transfer's.
func (l *Lock) transferred() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.succ != nil && l.succ.heir != ""
}

// setHeir names the successor that l's release hands the name to.
func (l *Lock) setHeir(to string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.succ == nil {
		l.succ = &succession{}
	}
	l.succ.heir = to
}

// awaitSuccessor reads who leads, after every message on sub, until to
// does (nil), another candidate does or the reservation can have expired
// unused at until (ErrNoSuccessor), or ctx ends.
func (e *Election) awaitSuccessor(ctx context.Context, sub *subscription, to string, until time.Time) error {
	for {
		who, err := e.Leader(ctx)
		switch {
		case err == nil && who.Value == to:
			return nil
		case err == nil:
			return fmt.Errorf("redisleader: transfer %q to %q: %w; %q leads instead", e.keys.name, to, ErrNoSuccessor, who.Value)
		case !errors.Is(err, ErrNoLeader) && ctx.Err() != nil:
			return fmt.Errorf("redisleader: transfer %q to %q: %w", e.keys.name, to, ctx.Err())
		case !time.Now().Before(until):
			return fmt.Errorf("redisleader: transfer %q to %q: %w within the TTL; the name is free to anyone", e.keys.name, to, ErrNoSuccessor)
		}
		d := time.Until(until)
		if err != nil && !errors.Is(err, ErrNoLeader) {
			d = min(d, e.s.retryDelay()) // a Redis error: read again soon
		}
		if err := e.s.wait(ctx, sub, d); err != nil {
			return fmt.Errorf("redisleader: transfer %q to %q: %w", e.keys.name, to, err)
		}
	}
}

// handOffCall is the release of a leadership with a succession: the name
// goes to the heir, or to the best candidate above the leader's priority,
// or is deleted as by the release scripts.
func (l *Lock) handOffCall(sc *succession) call {
	l.mu.Lock()
	heir := sc.heir
	l.mu.Unlock()
	var prio any = ""
	if c := sc.cand; c != nil {
		prio = c.prioArg
	}
	k := l.keys
	return call{handOffScript, []any{nil, nil, 5, l.lockArg, k.queue(), k.leases(), k.candidates(), k.candidateLeases(),
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
var handOffScript = newScript("caaf6fce5298629b875256adc6602dfa55791e60", guarded(luaQueue+luaCand+`
local cur = call('GET', KEYS[1])
if not ours(cur) then return 0 end
call('ZSCORE', KEYS[4], ARGV[4])
call('ZSCORE', KEYS[5], ARGV[4])
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
