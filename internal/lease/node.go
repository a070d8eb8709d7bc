package lease

import (
	"context"
	"crypto/rand"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisleader/redisleader/internal/wire"
)

// node.go: one acquire attempt on one server, read in one place: the
// lease its first attempt makes (New), the place (Node), the default
// protocol (Plain), acquire's vector, its reply and the attempt's outcome; then renew's and release's vectors and
// replies (the fair and candidate variants are in fair.go, candidate.go
// and args.go).

// A Node is the place of a session's leases on one Redis server (also a
// primary found through Sentinel, or a Cluster, whose client routes each
// name to its slot's primary): the scripts run through T's combiner. With
// Acks (WithReplicaAcks) every write is followed by WAIT on the same
// connection, and a write too few replicas acknowledged does not count.
type Node struct {
	T    *wire.Transport
	C    wire.Client
	Acks wire.Acks
}

// New makes a lease of k for value with a fresh token, kept by proto; ttl
// is the session's TTL in ms, boxed once by the session. An acquisition
// makes it at its first attempt with a token, and keeps it for the next.
func New(k Keys, ttl any, value string, proto Protocol) Lease {
	token := rand.Text()
	args := Args{Lock: k.Lock, Fence: k.Fence, Token: token, TTL: ttl, Value: value}
	return Lease{Keys: k, Token: token, Args: args, Proto: proto}
}

// Acquire makes one acquire attempt for l, bounded by ctx, the call
// timeout and deadline (the local deadline the lease would get).
func (n *Node) Acquire(ctx context.Context, l *Lease, deadline time.Time) Attempt {
	var (
		cmd    *redis.Cmd
		ackErr error
	)
	cl := l.Proto.AcquireCall(l)
	if n.Acks.N == 0 {
		cmd = n.T.Combiner().Call(ctx, deadline, cl.Script, cl.Argv) // the hot path: no slice of commands
	} else {
		callCtx := n.T.Bound(ctx, deadline)
		if err := n.T.Combiner().Await(callCtx, wire.KeyOf(cl.Argv)); err != nil {
			// An earlier call on the key may still reach Redis (internal/wire/combine.go).
			cmd = wire.ErrCmd(ctx, cl.Argv, err)
		} else {
			var cmds []*redis.Cmd
			cmds, ackErr = cl.Script.RunAll(callCtx, n.C, [][]any{cl.Argv}, n.Acks)
			cmd = cmds[0]
		}
		wire.Unbind(callCtx)
	}
	r := l.Outcome(cmd.Slice())
	if r.Err == nil && ackErr != nil {
		// Taken on the primary but not seen by enough replicas: a failover
		// could lose it, so it does not count.
		return Attempt{Err: fmt.Errorf("redisleader: acquire %q: %w", l.Keys.Name, ackErr), GiveBack: true}
	}
	return r
}

// Plain is the default protocol.
type Plain struct{}

// AcquireCall is acquire with l's arguments.
func (Plain) AcquireCall(l *Lease) wire.Call {
	return wire.Call{Script: AcquireRun, Argv: l.Args.Acquire(&l.argv)}
}

// RenewCall is renew with l's arguments.
func (Plain) RenewCall(l *Lease) wire.Call { return wire.Call{Script: RenewRun, Argv: l.Args.Renew()} }

// ReleaseCall hands the name to heir, or deletes the key.
func (Plain) ReleaseCall(l *Lease, heir string) wire.Call {
	if heir != "" {
		return l.HandOffCall(heir, "")
	}
	return wire.Call{Script: ReleaseRun, Argv: l.Args.Release()}
}

// Acquire fills buf with acquire's vector and returns it.
func (a *Args) Acquire(buf *[8]any) []any {
	*buf = [8]any{nil, nil, 2, a.Lock, a.Fence, a.Token, a.TTL, a.Value}
	return buf[:]
}

// An Attempt is the outcome of an acquire attempt.
type Attempt struct {
	Fence int64         // ours when Err is nil, else the holder's (ErrLocked)
	Left  time.Duration // ErrLocked: the holder's PTTL (-1: no TTL, or no holder)
	Err   error         // nil: acquired; ErrLocked wrapped; or why not
	// GiveBack: the attempt does not count, but may have left our token
	// in Redis; the caller deletes it.
	GiveBack bool
	// Split (Redlock): we took nodes, and other owners held nodes too, so
	// contenders split them; a blocking acquisition retries after its random
	// delay, or, short of ErrLocked, a growing one.
	Split bool
	// Took, with Split: from the attempt's first send to its give-back's
	// end, the unit of the acquisition's backoff.
	Took time.Duration
	// Fair mode, ErrLocked: at most how many live waiters are ahead of us
	// (0: we are the head; -1: not fair mode), and how long the head's
	// lease has left.
	Ahead    int
	HeadLeft time.Duration
	// At is, on success, the server TIME in µs from which the key's TTL
	// runs (the acquire script's third element; 0 if the reply has none).
	At int64
}

// Outcome turns one server's reply to l's acquire script into an
// attempt's outcome.
func (l *Lease) Outcome(res []any, err error) Attempt {
	if err != nil {
		return Attempt{Err: fmt.Errorf("redisleader: acquire %q: %w", l.Keys.Name, err)}
	}
	rep, err := DecodeAcquire(res)
	switch {
	case err != nil:
		return Attempt{Err: fmt.Errorf("redisleader: acquire %q: %w", l.Keys.Name, err)}
	case rep.Taken:
		return Attempt{Fence: rep.Fence, At: rep.At}
	case rep.Foreign:
		// Not another owner's lease: data someone else wrote, which no
		// wait or retry will free.
		return Attempt{Err: fmt.Errorf("redisleader: acquire %q: %w", l.Keys.Name, ForeignValue(l.Keys))}
	}
	r := Attempt{Fence: rep.Fence, Ahead: rep.Ahead, HeadLeft: time.Duration(rep.HeadLeft) * time.Millisecond, Left: -1}
	if rep.PTTL >= 0 {
		r.Left = Millis(rep.PTTL) // no TTL (-1): nothing to align with
	}
	if rep.Free {
		r.Err = fmt.Errorf("%w (free, but waiters came first)", ErrLocked)
	} else {
		r.Err = fmt.Errorf("%w (fence %d)", ErrLocked, r.Fence)
	}
	return r
}

// Millis converts a PTTL in milliseconds, saturating where a Duration ends
// (about 292 years) rather than wrapping to a negative or small wait.
func Millis(ms int64) time.Duration {
	if ms > math.MaxInt64/int64(time.Millisecond) {
		return math.MaxInt64
	}
	return time.Duration(ms) * time.Millisecond
}

// An Acquired is one server's reply to an acquire script (acquire,
// acquire_candidate, fair_acquire).
type Acquired struct {
	Taken bool  // taken now, or already ours
	Fence int64 // taken: ours; not: the holder's (0 when free)
	At    int64 // taken: the server TIME in µs its TTL runs from (0: not told)
	// Not taken:
	Free     bool  // free, but waiters came first (fair)
	Foreign  bool  // the lock key holds a value this package did not write
	PTTL     int64 // the holder's PTTL in ms; -1: none or no TTL; 0: not told
	Ahead    int   // fair: live waiters ahead (0: the head; -2: gave up); -1: not told
	HeadLeft int64 // fair: ms left on the head waiter's lease
}

// DecodeAcquire decodes res, an acquire script's reply.
func DecodeAcquire(res []any) (Acquired, error) {
	if len(res) < 2 {
		return Acquired{}, fmt.Errorf("unexpected reply of %d elements", len(res))
	}
	if ok, _ := res[0].(int64); ok == 1 {
		r := Acquired{Taken: true}
		r.Fence, _ = res[1].(int64)
		if len(res) > 2 {
			r.At, _ = res[2].(int64)
		}
		return r, nil
	}
	r := Acquired{Ahead: -1, Free: res[1] == nil}
	if len(res) >= 5 {
		ahead, _ := res[3].(int64)
		r.Ahead = int(ahead)
		r.HeadLeft, _ = res[4].(int64)
	}
	if stored, ok := res[1].(string); ok {
		h, ok := ParseHolder(stored)
		r.Fence, r.Foreign = h.Fence, !ok
	}
	if len(res) > 2 {
		if ms, ok := res[2].(int64); ok && ms >= 0 {
			r.PTTL = ms
		} else {
			r.PTTL = -1
		}
	}
	return r, nil
}

// Renew is renew's vector.
func (a *Args) Renew() []any { return []any{nil, nil, 1, a.Lock, a.Token, a.TTL} }

// A Renewed is one server's reply to a renew script (renew, prefer_renew,
// redlock_renew).
type Renewed struct {
	Lost   bool   // the key is missing or holds another token
	Better string // prefer_renew: a live candidate with a higher priority
}

// DecodeRenew decodes cmd, a renew script's call.
func DecodeRenew(cmd *redis.Cmd) (Renewed, error) {
	if res, ok := cmd.Val().([]any); ok && len(res) == 2 && cmd.Err() == nil {
		better, _ := res[1].(string)
		return Renewed{Better: better}, nil
	}
	n, err := cmd.Int64()
	return Renewed{Lost: err == nil && n == 0}, err
}

// Release is release's vector.
func (a *Args) Release() []any { return []any{nil, nil, 1, a.Lock, a.Token} }

// DecodeRelease decodes cmd, a release script's call (release,
// fair_release, redlock_release, hand_off, whose {2, heir} is a
// reservation made): missing when the key is missing or held another
// token, so nothing was written.
func DecodeRelease(cmd *redis.Cmd) (missing bool, err error) {
	if _, reserved := cmd.Val().([]any); reserved && cmd.Err() == nil {
		return false, nil
	}
	n, err := cmd.Int64()
	return err == nil && n == 0, err
}
