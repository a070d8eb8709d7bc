package redisleader

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"
)

// A place is where a session's leases live: one Redis server (node, below)
// or a majority of independent ones (quorum, in redlock.go). It runs the
// scripts and turns what Redis answered into one outcome per lock; what the
// session does with an outcome (arm a deadline, extend it, lose the lock,
// retry, log) is the same for both, and is written once, in the callers.
type place interface {
	// acquire makes one acquire attempt for l, bounded by ctx, the call
	// timeout and deadline (the local deadline the lease would get).
	acquire(ctx context.Context, l *Lock, deadline time.Time) acquired
	// renew renews every lock and every waiter's place once, bounded by ctx,
	// the call timeout and deadline (the earliest of the locks' local
	// deadlines; zero: none). There are waiters only in fair mode, which a
	// quorum refuses.
	renew(ctx context.Context, locks []*Lock, waiters []*waiter, deadline time.Time) (locksOut, waitersOut []renewal)
	// release deletes l's token wherever the key still holds it.
	release(ctx context.Context, l *Lock) deleted
	// releaseAll is release for several locks at once, in one round trip,
	// bounded by ctx, the call timeout and deadline (zero: none).
	releaseAll(ctx context.Context, locks []*Lock, deadline time.Time) []deleted
	// inspect reads who holds k and the TTL left.
	inspect(ctx context.Context, k keys) (Leader, bool, error)
	// proclaim stores value as l's value, keeping token, fence and TTL,
	// as the seq'th Proclaim of l's term; it reports whether the key still
	// held l's token, and errSuperseded when a later one is stored already.
	proclaim(ctx context.Context, l *Lock, seq int64, value string, deadline time.Time) (bool, error)
	// each runs f for every server at once and waits for all of them.
	each(f func(c Client))
}

// acquired is the outcome of an acquire attempt.
type acquired struct {
	fence int64         // ours when err is nil, else the holder's (ErrLocked)
	left  time.Duration // ErrLocked: the holder's PTTL (-1: no TTL, or no holder)
	err   error         // nil: acquired; ErrLocked wrapped; or why not
	// giveBack: the attempt does not count, but may have left our token
	// in Redis; the caller deletes it.
	giveBack bool
	// split (Redlock): we took nodes, and other owners held nodes too, so
	// contenders split them; a blocking acquisition retries after its random
	// delay, or, short of ErrLocked, a growing one (acquisition.backoff).
	split bool
	// took, with split: from the attempt's first send to its give-back's
	// end (Lock.attempt), the unit of acquisition.backoff.
	took time.Duration
	// Fair mode, ErrLocked: at most how many live waiters are ahead of us
	// (0: we are the head; -1: not fair mode), and how long the head's
	// lease has left.
	ahead    int
	headLeft time.Duration
	// at is, on success, the server TIME in µs from which the key's TTL
	// runs (the acquire script's third element; 0 if the reply has none).
	at int64
}

// renewal is the outcome of one lock's renewal: renewed when both fields
// are zero.
type renewal struct {
	lost bool  // Redis says the key no longer holds the token (for a quorum: no quorum can)
	err  error // the renewal failed: retried until the local deadline
}

// deleted is the outcome of one lock's compare-and-delete.
type deleted struct {
	err     error // the delete failed (for a quorum: on a quorum of nodes)
	retry   bool  // it failed somewhere: the token may still be there
	missing bool  // the key did not hold the token (for a quorum: on a quorum)
}

// acquireReply decodes one server's reply to the acquire script.
func (l *Lock) acquireReply(res []any, err error) acquired {
	if err != nil {
		return acquired{err: fmt.Errorf("redisleader: acquire %q: %w", l.keys.name, err)}
	}
	if len(res) < 2 {
		// Never the reply itself: it could hold another owner's token.
		return acquired{err: fmt.Errorf("redisleader: acquire %q: unexpected reply of %d elements", l.keys.name, len(res))}
	}
	if ok, _ := res[0].(int64); ok == 1 {
		r := acquired{}
		r.fence, _ = res[1].(int64)
		if len(res) > 2 {
			r.at, _ = res[2].(int64)
		}
		return r
	}
	r := acquired{ahead: -1}
	if len(res) >= 5 {
		ahead, _ := res[3].(int64)
		ms, _ := res[4].(int64)
		r.ahead, r.headLeft = int(ahead), time.Duration(ms)*time.Millisecond
	}
	if stored, ok := res[1].(string); ok {
		h, ok := parseHolder(stored)
		if !ok {
			// Not another owner's lease: data someone else wrote, which no
			// wait or retry will free.
			return acquired{err: fmt.Errorf("redisleader: acquire %q: %w", l.keys.name, foreignValue(l.keys))}
		}
		r.fence = h.fence
	}
	if len(res) > 2 {
		if ms, ok := res[2].(int64); ok && ms >= 0 {
			r.left = millis(ms)
		} else {
			r.left = -1 // no TTL: nothing to align with
		}
	}
	switch {
	case res[1] == nil:
		r.err = fmt.Errorf("%w (free, but waiters came first)", ErrLocked)
	default:
		r.err = fmt.Errorf("%w (fence %d)", ErrLocked, r.fence)
	}
	return r
}

// millis converts a PTTL in milliseconds, saturating where a Duration ends
// (about 292 years) rather than wrapping to a negative or small wait.
func millis(ms int64) time.Duration {
	if ms > math.MaxInt64/int64(time.Millisecond) {
		return math.MaxInt64
	}
	return time.Duration(ms) * time.Millisecond
}

// renewReply decodes one server's reply to the renew script.
func renewReply(cmd *redis.Cmd) renewal {
	n, err := cmd.Int64()
	switch {
	case err != nil:
		return renewal{err: err}
	case n == 0:
		return renewal{lost: true}
	}
	return renewal{}
}

// deleteReply decodes one server's reply to the release script.
func deleteReply(cmd *redis.Cmd) deleted {
	n, err := cmd.Int64()
	switch {
	case err != nil:
		return deleted{err: err, retry: true}
	case n == 0:
		return deleted{missing: true}
	}
	return deleted{}
}

// holderReply decodes one server's reply to the inspect script: whether the
// key exists (present), and whether it holds a value this package wrote (ok).
func holderReply(cmd *redis.Cmd) (h holder, ttl time.Duration, present, ok bool, err error) {
	res, err := cmd.Slice()
	switch {
	case errors.Is(err, redis.Nil):
		return holder{}, 0, false, false, nil
	case err != nil:
		return holder{}, 0, false, false, err
	case len(res) != 2:
		return holder{}, 0, true, false, fmt.Errorf("unexpected reply of %d elements", len(res)) // not the content: it holds a token
	}
	stored, _ := res[0].(string)
	h, ok = parseHolder(stored)
	if ms, isInt := res[1].(int64); isInt && ms > 0 {
		ttl = millis(ms)
	}
	return h, ttl, true, ok, nil
}

// releaseArgs returns the release script's arguments for l, made fresh for
// each call (a script call fills in the first two slots).
func releaseArgs(l *Lock) []any { return []any{nil, nil, 1, l.lockArg, l.tokenArg} }

// releaseCall is the release script call for l on one server: in fair mode,
// the one that also wakes the head waiter.
func releaseCall(l *Lock) call {
	if l.s.cfg.fair {
		return call{fairReleaseScript, []any{nil, nil, 3, l.lockArg, l.keys.queue(), l.keys.leases(), l.tokenArg}}
	}
	return call{releaseScript, releaseArgs(l)}
}

// proclaimArgs returns the proclaim script's arguments for the seq'th
// Proclaim of l's term, of value.
func proclaimArgs(l *Lock, seq int64, value string) []any {
	return []any{nil, nil, 2, l.lockArg, l.keys.seq(), l.tokenArg, seq, value}
}

// renewArgs returns the renew script's arguments for every lock.
func (s *Session) renewArgs(locks []*Lock) [][]any {
	argvs := make([][]any, len(locks))
	for i, l := range locks {
		argvs[i] = []any{nil, nil, 1, l.lockArg, l.tokenArg, s.ttlArg}
	}
	return argvs
}

// node is the place of a session on one Redis server (also a primary found
// through Sentinel, or a Cluster, whose client routes each name to its
// slot's primary); c is the session's client, on which combiner.call runs
// single scripts. With WithReplicaAcks every write is followed by WAIT on
// the same connection, and a write too few replicas acknowledged does not
// count.
type node struct {
	s *Session
	c Client
}

func (n *node) acquire(ctx context.Context, l *Lock, deadline time.Time) acquired {
	var (
		cmd    *redis.Cmd
		ackErr error
	)
	sc, argv := acquireScript, l.argv[:]
	if l.w != nil {
		sc, argv = fairAcquireScript, l.w.argv[:]
	}
	if acks := n.s.cfg.acks; acks.n == 0 {
		cmd = n.s.combine.call(ctx, deadline, sc, argv) // the hot path: no slice of commands
	} else {
		callCtx := n.s.bound(ctx, deadline)
		if err := n.s.combine.await(callCtx, argv[3]); err != nil {
			// An earlier call on the key may still reach Redis (combine.go).
			cmd = errCmd(ctx, argv, err)
		} else {
			var cmds []*redis.Cmd
			cmds, ackErr = sc.runAll(callCtx, n.c, [][]any{argv}, acks)
			cmd = cmds[0]
		}
		unbind(callCtx)
	}
	r := l.acquireReply(cmd.Slice())
	if r.err == nil && ackErr != nil {
		// Taken on the primary but not seen by enough replicas: a failover
		// could lose it, so it does not count.
		return acquired{err: fmt.Errorf("redisleader: acquire %q: %w", l.keys.name, ackErr), giveBack: true}
	}
	return r
}

func (n *node) renew(ctx context.Context, locks []*Lock, waiters []*waiter, deadline time.Time) (locksOut, waitersOut []renewal) {
	calls := make([]call, 0, len(locks)+len(waiters))
	for _, argv := range n.s.renewArgs(locks) {
		calls = append(calls, call{renewScript, argv})
	}
	for _, w := range waiters {
		calls = append(calls, call{keepPlaceScript, w.keepArgv[:]})
	}
	callCtx := n.s.bound(ctx, deadline)
	cmds, ackErr := runCalls(callCtx, n.c, calls, n.s.cfg.acks)
	unbind(callCtx)
	out := make([]renewal, len(cmds))
	for i, cmd := range cmds {
		out[i] = renewReply(cmd)
		if out[i] == (renewal{}) && ackErr != nil && i < len(locks) {
			out[i].err = ackErr
		}
	}
	return out[:len(locks)], out[len(locks):]
}

func (n *node) release(ctx context.Context, l *Lock) deleted {
	c := releaseCall(l)
	return deleteReply(n.s.combine.callNow(ctx, time.Time{}, c.s, c.argv))
}

// releaseAll first waits until no acquire of these locks that a caller
// gave up on while its batch was on the wire can still reach Redis (see
// combine.go), so that the delete comes after it.
func (n *node) releaseAll(ctx context.Context, locks []*Lock, deadline time.Time) []deleted {
	calls := make([]call, len(locks))
	for i, l := range locks {
		calls[i] = releaseCall(l)
	}
	callCtx := n.s.bound(ctx, deadline)
	for _, l := range locks {
		if n.s.combine.await(callCtx, l.lockArg) != nil {
			break // the deletes fail with the context's error
		}
	}
	cmds, _ := runCalls(callCtx, n.c, calls, replicaAcks{})
	unbind(callCtx)
	out := make([]deleted, len(cmds))
	for i, cmd := range cmds {
		out[i] = deleteReply(cmd)
	}
	return out
}

func (n *node) inspect(ctx context.Context, k keys) (Leader, bool, error) {
	h, ttl, present, ok, err := holderReply(n.s.combine.call(ctx, time.Time{}, inspectScript, []any{nil, nil, 1, k.lock}))
	switch {
	case err != nil:
		return Leader{}, false, fmt.Errorf("redisleader: leader of %q: %w", k.name, err)
	case !present:
		return Leader{}, false, nil
	case !ok:
		return Leader{}, false, fmt.Errorf("redisleader: leader of %q: %w", k.name, foreignValue(k))
	}
	return Leader{Value: h.value, Fence: h.fence, TTL: ttl}, true, nil
}

func (n *node) proclaim(ctx context.Context, l *Lock, seq int64, value string, deadline time.Time) (bool, error) {
	res, err := n.s.combine.call(ctx, deadline, proclaimScript, proclaimArgs(l, seq, value)).Int()
	if res == 2 {
		return true, errSuperseded
	}
	return res == 1, err
}

func (n *node) each(f func(c Client)) { f(n.c) }
