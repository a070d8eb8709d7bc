package redisleader

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisleader/redisleader/internal/lease"
	"github.com/redisleader/redisleader/internal/wire"
)

// node.go: the place of a session on one server, the protocols' seam with
// its default (plain), and the decoding of one server's replies (which a
// quorum uses per node too).

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
	cl := l.proto.acquire(l)
	sc, argv := cl.Script, cl.Argv
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
		return acquired{err: fmt.Errorf("redisleader: acquire %q: %w", l.keys.Name, ackErr), giveBack: true}
	}
	return r
}

func (n *node) renew(ctx context.Context, locks []*Lock, deadline time.Time) []renewal {
	calls := make([]wire.Call, 0, len(locks))
	for _, l := range locks {
		calls = append(calls, l.proto.renew(l))
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
		if n.s.wire.Combiner().Await(callCtx, l.args.Lock) != nil {
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

func (n *node) inspect(ctx context.Context, k lease.Keys) (Leader, bool, error) {
	r, err := lease.DecodeInspect(n.s.wire.Combiner().Call(ctx, time.Time{}, inspectScript, lease.InspectArgs(k.Lock)))
	_, reserved := r.Holder.Reserved()
	switch {
	case err != nil:
		return Leader{}, false, fmt.Errorf("redisleader: leader of %q: %w", k.Name, err)
	case !r.Present || (r.Known && reserved): // a transfer's reservation: nobody leads
		return Leader{}, false, nil
	case !r.Known:
		return Leader{}, false, fmt.Errorf("redisleader: leader of %q: %w", k.Name, foreignValue(k))
	}
	return Leader{Value: r.Holder.Value, Fence: r.Holder.Fence, TTL: millis(r.PTTL)}, true, nil
}

func (n *node) proclaim(ctx context.Context, l *Lock, seq int64, value string, deadline time.Time) (bool, error) {
	res, err := n.s.wire.Combiner().Call(ctx, deadline, proclaimScript, proclaimArgs(l, seq, value)).Int()
	if res == 2 {
		return true, errSuperseded
	}
	return res == 1, err
}

func (n *node) each(f func(c Client)) { f(n.c) }

func (n *node) supports(feature) error { return nil }

// acquireReply turns one server's reply to an acquire script into an
// outcome.
func (l *Lock) acquireReply(res []any, err error) acquired {
	if err != nil {
		return acquired{err: fmt.Errorf("redisleader: acquire %q: %w", l.keys.Name, err)}
	}
	rep, err := lease.DecodeAcquire(res)
	switch {
	case err != nil:
		return acquired{err: fmt.Errorf("redisleader: acquire %q: %w", l.keys.Name, err)}
	case rep.Taken:
		return acquired{fence: rep.Fence, at: rep.At}
	case rep.Foreign:
		// Not another owner's lease: data someone else wrote, which no
		// wait or retry will free.
		return acquired{err: fmt.Errorf("redisleader: acquire %q: %w", l.keys.Name, foreignValue(l.keys))}
	}
	r := acquired{fence: rep.Fence, ahead: rep.Ahead, headLeft: time.Duration(rep.HeadLeft) * time.Millisecond, left: -1}
	if rep.PTTL >= 0 {
		r.left = millis(rep.PTTL) // no TTL (-1): nothing to align with
	}
	if rep.Free {
		r.err = fmt.Errorf("%w (free, but waiters came first)", ErrLocked)
	} else {
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

// renewReply turns one server's reply to a renew script into an outcome.
func renewReply(cmd *redis.Cmd) renewal {
	r, err := lease.DecodeRenew(cmd)
	return renewal{lost: r.Lost, better: r.Better, err: err}
}

// deleteReply turns one server's reply to a release script into an
// outcome.
func deleteReply(cmd *redis.Cmd) deleted {
	missing, err := lease.DecodeRelease(cmd)
	return deleted{missing: missing, err: err, retry: err != nil}
}

// holderReply decodes one server's reply to the inspect script: whether the
// key exists (present), and whether it holds a value this package wrote (ok).
func holderReply(cmd *redis.Cmd) (h lease.Holder, ttl time.Duration, present, ok bool, err error) {
	r, err := lease.DecodeInspect(cmd)
	return r.Holder, millis(r.PTTL), r.Present, r.Known, err
}

// A protocol is how one acquisition keeps its lease in Redis on one server:
// plain (the default, here), fair (a place in the name's queue: *waiter,
// fair.go) or candidate (a priority: priority.go). It builds the
// acquisition's script calls; the place runs them and interprets nothing
// of the mode. Every Lock of an acquisition carries its protocol. A
// Redlock session's leases are plain ones, which the quorum runs with its
// own scripts (redlock.go).
type protocol interface {
	// acquire is l's acquire attempt.
	acquire(l *Lock) wire.Call
	// renew is l's renewal.
	renew(l *Lock) wire.Call
	// release is l's release, which hands the name to heir ("": to
	// nobody named).
	release(l *Lock, heir string) wire.Call
}

// plain is the default protocol.
type plain struct{}

func (plain) acquire(l *Lock) wire.Call {
	return wire.Call{Script: acquireScript, Argv: l.args.Acquire(&l.argv)}
}

func (plain) renew(l *Lock) wire.Call { return wire.Call{Script: renewScript, Argv: l.args.Renew()} }

func (plain) release(l *Lock, heir string) wire.Call {
	if heir != "" {
		return l.handOffCall(heir, "")
	}
	return wire.Call{Script: releaseScript, Argv: l.args.Release()}
}

// releaseCall is l's release on one server: its protocol's, with the heir
// that ended it (Transfer), if any, as its succession.
func releaseCall(l *Lock) wire.Call { return l.proto.release(l, l.heir()) }
