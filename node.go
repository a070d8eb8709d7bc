package redisleader

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisleader/redisleader/internal/lease"
	"github.com/redisleader/redisleader/internal/wire"
)

// node.go: the place of a session on one server beyond its acquire
// (lease.Node), and the decoding of one server's renew, release and
// inspect replies (which a quorum uses per node too).

// node is the place of a session on one Redis server: lease.Node, whose
// Acquire an attempt calls, and the rest of place here; c is the session's
// client, through whose combiner the scripts run.
type node struct {
	lease.Node // Acquire
	s          *Session
	c          Client
}

func (n *node) renew(ctx context.Context, locks []*Lock, deadline time.Time) []renewal {
	calls := make([]wire.Call, 0, len(locks))
	for _, l := range locks {
		calls = append(calls, l.lease.Proto.RenewCall(&l.lease))
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
		if n.s.wire.Combiner().Await(callCtx, l.lease.Args.Lock) != nil {
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
		return Leader{}, false, fmt.Errorf("redisleader: leader of %q: %w", k.Name, lease.ForeignValue(k))
	}
	return Leader{Value: r.Holder.Value, Fence: r.Holder.Fence, TTL: lease.Millis(r.PTTL)}, true, nil
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
	return r.Holder, lease.Millis(r.PTTL), r.Present, r.Known, err
}

// releaseCall is l's release on one server: its protocol's, with the heir
// that ended it (Transfer), if any, as its succession.
func releaseCall(l *Lock) wire.Call { return l.lease.Proto.ReleaseCall(&l.lease, l.heir()) }
