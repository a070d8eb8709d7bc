package redisleader

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader/internal/wire"
)

// node.go: the place of a session on one server, and the decoding of one
// server's replies (which a quorum uses per node too).

// node is the place of a session on one Redis server (also a primary found
// through Sentinel, or a Cluster, whose client routes each name to its
// slot's primary); c is the session's client, through whose combiner the
// scripts run. With WithReplicaAcks every write is followed by WAIT on
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
	if c := l.candidate(); c != nil {
		argv = c.withCandidate(argv)
	}
	if acks := n.s.cfg.acks; acks.N == 0 {
		cmd = n.s.wire.Combiner().Call(ctx, deadline, sc, argv) // the hot path: no slice of commands
	} else {
		callCtx := n.s.wire.Bound(ctx, deadline)
		if err := n.s.wire.Combiner().Await(callCtx, wire.KeyOf(argv)); err != nil {
			// An earlier call on the key may still reach Redis (internal/wire/combine.go).
			cmd = wire.ErrCmd(ctx, argv, err)
		} else {
			var cmds []*redis.Cmd
			cmds, ackErr = sc.RunAll(callCtx, n.c, [][]any{argv}, acks)
			cmd = cmds[0]
		}
		wire.Unbind(callCtx)
	}
	r := l.acquireReply(cmd.Slice())
	if r.err == nil && ackErr != nil {
		// Taken on the primary but not seen by enough replicas: a failover
		// could lose it, so it does not count.
		return acquired{err: fmt.Errorf("redisleader: acquire %q: %w", l.keys.name, ackErr), giveBack: true}
	}
	return r
}

func (n *node) renew(ctx context.Context, locks []*Lock, deadline time.Time) []renewal {
	calls := make([]wire.Call, 0, len(locks))
	for _, l := range locks {
		calls = append(calls, n.s.renewCall(l))
	}
	callCtx := n.s.wire.Bound(ctx, deadline)
	cmds, ackErr := wire.RunCalls(callCtx, n.c, calls, n.s.cfg.acks, nil)
	n.s.renewLeasesAlone(callCtx, n.c, locks, calls, cmds)
	wire.Unbind(callCtx)
	out := make([]renewal, len(cmds))
	for i, cmd := range cmds {
		out[i] = renewReply(cmd)
		if !out[i].lost && out[i].err == nil && ackErr != nil {
			out[i].err = ackErr
		}
	}
	return out
}

func (n *node) release(ctx context.Context, l *Lock) deleted {
	c := releaseCall(l)
	return deleteReply(n.s.wire.Combiner().CallNow(ctx, time.Time{}, c.Script, c.Argv))
}

// releaseAll first waits until no acquire of these locks that a caller
// gave up on while its batch was on the wire can still reach Redis (see
// combine.go), so that the delete comes after it.
func (n *node) releaseAll(ctx context.Context, locks []*Lock, deadline time.Time) []deleted {
	calls := make([]wire.Call, len(locks))
	for i, l := range locks {
		calls[i] = releaseCall(l)
	}
	callCtx := n.s.wire.Bound(ctx, deadline)
	for _, l := range locks {
		if n.s.wire.Combiner().Await(callCtx, l.lockArg) != nil {
			break // the deletes fail with the context's error
		}
	}
	cmds, _ := wire.RunCalls(callCtx, n.c, calls, wire.Acks{}, nil)
	wire.Unbind(callCtx)
	out := make([]deleted, len(cmds))
	for i, cmd := range cmds {
		out[i] = deleteReply(cmd)
	}
	return out
}

func (n *node) inspect(ctx context.Context, k keys) (Leader, bool, error) {
	h, ttl, present, ok, err := holderReply(n.s.wire.Combiner().Call(ctx, time.Time{}, inspectScript, []any{nil, nil, 1, k.lock}))
	switch {
	case err != nil:
		return Leader{}, false, fmt.Errorf("redisleader: leader of %q: %w", k.name, err)
	case !present || (ok && h.token == ""): // a transfer's reservation: nobody leads
		return Leader{}, false, nil
	case !ok:
		return Leader{}, false, fmt.Errorf("redisleader: leader of %q: %w", k.name, foreignValue(k))
	}
	return Leader{Value: h.value, Fence: h.fence, TTL: ttl}, true, nil
}

func (n *node) proclaim(ctx context.Context, l *Lock, seq int64, value string, deadline time.Time) (bool, error) {
	res, err := n.s.wire.Combiner().Call(ctx, deadline, proclaimScript, proclaimArgs(l, seq, value)).Int()
	if res == 2 {
		return true, errSuperseded
	}
	return res == 1, err
}

func (n *node) each(f func(c Client)) { f(n.c) }

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

// renewReply decodes one server's reply to the renew script (or to
// preferRenewScript, whose {1, value} names a better candidate).
func renewReply(cmd *redis.Cmd) renewal {
	if res, ok := cmd.Val().([]any); ok && len(res) == 2 && cmd.Err() == nil {
		better, _ := res[1].(string)
		return renewal{better: better}
	}
	n, err := cmd.Int64()
	switch {
	case err != nil:
		return renewal{err: err}
	case n == 0:
		return renewal{lost: true}
	}
	return renewal{}
}

// deleteReply decodes one server's reply to the release script (or to
// handOffScript, whose {2, heir} is a reservation made).
func deleteReply(cmd *redis.Cmd) deleted {
	if _, reserved := cmd.Val().([]any); reserved && cmd.Err() == nil {
		return deleted{}
	}
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
