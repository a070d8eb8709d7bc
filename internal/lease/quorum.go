package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisleader/redisleader/internal/wire"
)

// quorum.go: the place of a Redlock session's leases (the Redlock
// algorithm): acquire, renew, release and inspect over independent nodes,
// of which a majority must agree. The rounds that run one call on every
// node at once are in rounds.go.

// A Quorum is the place of a Redlock session's leases: independent nodes,
// of which a majority (Need) must agree. Every operation runs on all nodes
// at once; the quorum arithmetic is here and nowhere else. Its leases are
// Plain ones, run with the quorum's own renew and release scripts
// (redlock_renew, redlock_release), which carry the acquisition's fence.
// Of the session it knows only its settings and Detach.
type Quorum struct {
	T     *wire.Transport  // the session's (on Nodes[0]): per-call deadlines
	Nodes []wire.Client    // independent servers, an odd number
	Combs []*wire.Combiner // per node: its single script calls (Nodes[0]'s is T's)
	Need  int              // len(Nodes)/2 + 1

	TTL         time.Duration // the session's: how long a key lives after its acquire (fenceSafe)
	CallTimeout time.Duration // the session's: a round's grace period is at least a tenth of it
	// Detach registers n node calls that may outlive the operation that
	// starts them, so that the session's Close waits for them, and returns
	// the WaitGroup each such call is Done with; nil once the session is
	// closed: the operation then waits for its calls itself.
	Detach func(n int) *sync.WaitGroup
}

// NewQuorum makes the quorum of nodes, whose first node's calls go through
// t's combiner and every other's through a combiner of its own.
func NewQuorum(t *wire.Transport, nodes []wire.Client, ttl, callTimeout time.Duration, detach func(n int) *sync.WaitGroup) *Quorum {
	q := &Quorum{T: t, Nodes: nodes, Need: len(nodes)/2 + 1, TTL: ttl, CallTimeout: callTimeout, Detach: detach,
		Combs: []*wire.Combiner{t.Combiner()}}
	for _, c := range nodes[1:] {
		q.Combs = append(q.Combs, t.NewCombiner(new(wire.Combiner), c))
	}
	return q
}

// spare is how many nodes can fail (or refuse) with a quorum still possible.
func (q *Quorum) spare() int { return len(q.Nodes) - q.Need }

// ErrNoQuorum is a Redlock acquire that fell short of a quorum for reasons
// other than other owners (nodes down, slow, split votes). Blocking
// acquisitions retry it after a random delay.
var ErrNoQuorum = errors.New("no quorum")

// Acquire runs the acquire script on every node. With a quorum, the
// acquisition's fence F is the largest its nodes issued. It is written back
// (raiseFence, a second round before the acquire returns) only when a node
// of the quorum could let the key expire before its clock passes F (see
// fenceSafe); otherwise it travels with the renewals and the release
// (redlock_renew, redlock_release). Short of a quorum, what was taken is
// given back.
func (q *Quorum) Acquire(ctx context.Context, l *Lease, deadline time.Time) Attempt {
	var (
		won, locked int
		fence       int64
		left        = time.Duration(-1)
		lastErr     error
	)
	replies := q.acquireAll(ctx, l, deadline)
	for i := range replies {
		switch r := &replies[i].r; {
		case r.Err == nil:
			won++
			fence = max(fence, r.Fence)
		case errors.Is(r.Err, ErrLocked):
			locked++
			if r.Left >= 0 && (left < 0 || r.Left < left) {
				left = r.Left // the earliest a held node can free up
			}
		default:
			lastErr = r.Err
			if !wire.Replied(r.Err) {
				// Its request may still take the key, after our release.
				l.Leftover = true
			}
		}
	}
	if won >= q.Need {
		if q.fenceSafe(replies, fence) {
			return Attempt{Fence: fence}
		}
		raiseCtx, cancelRaise := q.deadlineCtx(ctx, deadline)
		raised := q.raiseFence(raiseCtx, cancelRaise, l, replies, fence)
		cancelRaise()
		if raised >= q.Need {
			return Attempt{Fence: fence}
		}
		lastErr = fmt.Errorf("the fence was stored on %d of %d nodes", raised, len(q.Nodes))
	}
	if locked > q.spare() {
		err := fmt.Errorf("%w on %d of %d nodes", ErrLocked, locked, len(q.Nodes))
		return Attempt{Left: left, Err: err, GiveBack: true, Split: won > 0}
	}
	err := fmt.Errorf("redisleader: acquire %q: %w: acquired on %d of %d nodes (need %d), held by others on %d",
		l.Keys.Name, ErrNoQuorum, won, len(q.Nodes), q.Need, locked)
	if lastErr != nil {
		err = fmt.Errorf("%w; last error: %w", err, lastErr)
	}
	return Attempt{Err: err, GiveBack: true, Split: won > 0 && locked > 0}
}

// fenceSafe reports whether fence can stay unwritten until the renewals
// and the release carry it: every node that took the key reported the
// TIME its key's TTL runs from, and fence is below that TIME plus the TTL.
// The key on such a node then outlives the moment the node's clock passes
// fence, so whoever takes the node next, after our key expired there, gets
// a larger fence from the node's clock; before that, only our release can
// free it, and it raises the node's fence key to fence first. Every later
// owner's quorum shares a node with ours. See docs/MECHANISMS.md, Fences.
func (q *Quorum) fenceSafe(replies []nodeAcquire, fence int64) bool {
	ttl := q.TTL.Microseconds()
	for i := range replies {
		if r := &replies[i].r; r.Err == nil && (r.At <= 0 || fence >= r.At+ttl) {
			return false
		}
	}
	return true
}

// nodeAcquire is one node's acquire call: its argument vector (the lease's,
// copied: a script call writes the first two slots) and its outcome.
type nodeAcquire struct {
	argv [8]any
	r    Attempt
}

// acquireAll runs the acquire script on every node and returns each one's
// answer; it stops waiting once a quorum took the key, or none can.
func (q *Quorum) acquireAll(ctx context.Context, l *Lease, deadline time.Time) []nodeAcquire {
	callCtx, cancel := q.deadlineCtx(ctx, deadline)
	defer cancel()
	replies := make([]nodeAcquire, len(q.Nodes))
	for i := range replies {
		replies[i].r.Err = errNoAnswer
	}
	var taken, refused int
	onNodesUntil(q, callCtx, cancel, func(ctx context.Context, i int, _ wire.Client) Attempt {
		return l.Outcome(q.Combs[i].Call(ctx, time.Time{}, AcquireRun, l.Args.Acquire(&replies[i].argv)).Result())
	}, func(i int, r Attempt) bool {
		replies[i].r = r
		if r.Err == nil {
			taken++
		} else {
			refused++
		}
		return taken >= q.Need || refused > q.spare()
	})
	return replies
}

// raiseFence writes fence back to the nodes that took the key (with
// redlock_renew, which also refreshes their TTL) and returns on how many
// it was stored (it stops waiting once a quorum has, or cannot).
func (q *Quorum) raiseFence(ctx context.Context, cancel context.CancelFunc, l *Lease, replies []nodeAcquire, fence int64) int {
	var stored, failed int
	for i := range replies {
		if replies[i].r.Err != nil {
			failed++ // a node we do not hold cannot store it
		}
	}
	onNodesUntil(q, ctx, cancel, func(ctx context.Context, i int, _ wire.Client) (r Renewal) {
		if replies[i].r.Err != nil {
			return r // counted above
		}
		return DecodeRenew(q.Combs[i].Call(ctx, time.Time{}, RedlockRenewRun, l.Args.RedlockRenew(fence)))
	}, func(i int, r Renewal) bool {
		switch {
		case replies[i].r.Err != nil:
		case r == (Renewal{}):
			stored++
		default:
			failed++
		}
		return stored >= q.Need || failed > q.spare()
	})
	return stored
}

// Renew renews every lease on every node (one pipelined round trip per
// node, all nodes at once), writing each lease's fence back as it goes
// (redlock_renew). A lease renewed by a quorum is renewed; one that so
// many nodes no longer hold that no quorum is possible is lost; otherwise
// its renewal failed.
func (q *Quorum) Renew(ctx context.Context, leases []*Lease, deadline time.Time) []Renewal {
	renewed, notOwner, errs, lastErr := make([]int, len(leases)), make([]int, len(leases)), make([]int, len(leases)), make([]error, len(leases))
	callCtx, cancel := q.deadlineCtx(ctx, deadline)
	defer cancel()
	onNodesUntil(q, callCtx, cancel, func(ctx context.Context, _ int, c wire.Client) []*redis.Cmd {
		argvs := make([][]any, len(leases))
		for j, l := range leases {
			argvs[j] = l.Args.RedlockRenew(l.Fence)
		}
		cmds, _ := RedlockRenewRun.RunAll(ctx, c, argvs, wire.Acks{})
		return cmds
	}, func(_ int, cmds []*redis.Cmd) bool {
		for j, cmd := range cmds {
			switch r := DecodeRenew(cmd); {
			case r.Err != nil:
				errs[j]++
				lastErr[j] = r.Err
			case r.Lost:
				notOwner[j]++
			default:
				renewed[j]++
			}
		}
		for j := range leases { // settled: every lease renewed by a quorum, or past hope of one
			if renewed[j] < q.Need && notOwner[j]+errs[j] <= q.spare() {
				return false
			}
		}
		return true
	})
	out := make([]Renewal, len(leases))
	for j := range leases {
		switch {
		case renewed[j] >= q.Need:
		case notOwner[j] > q.spare():
			out[j].Lost = true
		default:
			out[j].Err = fmt.Errorf("renewed on %d of %d nodes (need %d), not owner on %d: %w",
				renewed[j], len(q.Nodes), q.Need, notOwner[j], cmp.Or(lastErr[j], ErrNoQuorum))
		}
	}
	return out
}

// Release is ReleaseAll for one lease, without its slices of calls; a
// Redlock lease has no heir (transferring is not supported).
func (q *Quorum) Release(ctx context.Context, r Ending) Deleted {
	callCtx, cancel := q.deadlineCtx(ctx, time.Time{})
	defer cancel()
	argvs := make([][7]any, len(q.Nodes))
	var d quorumDeleted
	onNodesUntil(q, callCtx, cancel, func(ctx context.Context, i int, _ wire.Client) Deleted {
		return DecodeRelease(q.Combs[i].CallNow(ctx, time.Time{}, RedlockReleaseRun, r.Lease.Args.RedlockRelease(&argvs[i], r.Lease.Fence)))
	}, func(_ int, r Deleted) bool {
		return d.add(r) >= q.Need
	})
	return d.outcome(q)
}

// ReleaseAll deletes every lease's token on every node, raising each node's
// fence key to the lease's fence first (redlock_release), at once: unlike
// Node.ReleaseAll, it does not wait for acquires of these leases given up
// while their batch was on the wire to a node (that wait would end with the
// grace period, and the delete with it); such an acquire marked its lease
// Leftover, and its token is deleted again until it must have expired (the
// session's stale-token clean-up, or Close once every batch has ended). A
// delete fails if it failed on a quorum of nodes, and is retried if it
// failed or went unanswered on any: a delete cut short can leave the token
// on a healthy node, where it keeps the next owner from a quorum while
// another node is down.
func (q *Quorum) ReleaseAll(ctx context.Context, rs []Ending, deadline time.Time) []Deleted {
	ds := make([]quorumDeleted, len(rs))
	callCtx, cancel := q.deadlineCtx(ctx, deadline)
	defer cancel()
	onNodesUntil(q, callCtx, cancel, func(ctx context.Context, _ int, c wire.Client) []*redis.Cmd {
		argvs := make([][]any, len(rs))
		for i, r := range rs {
			argvs[i] = r.Lease.Args.RedlockRelease(new([7]any), r.Lease.Fence)
		}
		cmds, _ := RedlockReleaseRun.RunAll(ctx, c, argvs, wire.Acks{})
		return cmds
	}, func(_ int, cmds []*redis.Cmd) bool {
		for i, cmd := range cmds {
			ds[i].add(DecodeRelease(cmd))
		}
		return len(ds) == 0 || ds[0].answered >= q.Need // every lease has one answer per node
	})
	out := make([]Deleted, len(rs))
	for i := range ds {
		out[i] = ds[i].outcome(q)
	}
	return out
}

// quorumDeleted counts one lease's delete outcomes across the nodes.
type quorumDeleted struct {
	answered, failed, missing int
	firstErr                  error
}

// add counts one node's answer and returns how many nodes have answered.
func (d *quorumDeleted) add(r Deleted) int {
	d.answered++
	switch {
	case r.Err != nil:
		d.failed++
		if d.firstErr == nil {
			d.firstErr = r.Err
		}
	case r.Missing:
		d.missing++
	}
	return d.answered
}

// outcome is the lease's delete: retried if it failed anywhere (a node that
// did not answer counts as failed), missing if a quorum did not hold the
// token, failed if it failed on a quorum.
func (d *quorumDeleted) outcome(q *Quorum) Deleted {
	failed := d.failed + len(q.Nodes) - d.answered
	out := Deleted{Retry: failed > 0, Missing: d.missing >= q.Need}
	if failed >= q.Need {
		out.Err = fmt.Errorf("failed on %d of %d nodes: %w", failed, len(q.Nodes), cmp.Or(d.firstErr, errNoAnswer))
	}
	return out
}

// holderFence returns the fence the holder of token knows: the largest
// stored with its token. Until the holder's first renewal each node of its
// quorum may hold the fence it issued itself, of which the acquisition took
// the largest; a renewal (and a write-back at acquire) stores that one on
// every node that holds the token. See docs/MECHANISMS.md (Leader and
// Observe) for the one case where this is larger than the holder's fence.
func holderFence(held []Holder, token string) int64 {
	var fence int64
	for _, h := range held {
		if h.Token == token {
			fence = max(fence, h.Fence)
		}
	}
	return fence
}

// Inspect reads who holds k's name on a quorum of nodes: the holder found
// on a quorum (Present and Known), with the smallest remaining TTL among
// them and the fence it knows (holderFence); none (the zero Inspected)
// when no holder has a quorum; an error when so many nodes failed that one
// could.
func (q *Quorum) Inspect(ctx context.Context, k Keys) (Inspected, error) {
	replies := q.readHolders(ctx, k)
	var (
		held    []Holder
		failed  int
		lastErr error
	)
	for _, r := range replies {
		if r.err != nil {
			failed++
			lastErr = r.err
		} else if r.Known {
			held = append(held, r.Holder)
		}
	}
	for _, r := range replies {
		if !r.Known {
			continue
		}
		n, ttl := 0, r.TTL
		for _, o := range replies {
			if o.Known && o.Holder.Token == r.Holder.Token {
				n++
				ttl = min(ttl, o.TTL)
			}
		}
		if n >= q.Need {
			h := Holder{Token: r.Holder.Token, Fence: holderFence(held, r.Holder.Token), Value: r.Holder.Value}
			return Inspected{Present: true, Known: true, Holder: h, TTL: ttl}, nil
		}
	}
	if failed > q.spare() {
		return Inspected{}, fmt.Errorf("%d of %d nodes failed: %w", failed, len(q.Nodes), lastErr)
	}
	return Inspected{}, nil
}

// nodeHolder is what one node's lock key says.
type nodeHolder struct {
	Inspected
	err error
}

// readHolders reads k's lock key on every node and waits for every answer
// (up to the call timeout), not just a quorum's: until the holder's first
// renewal only the node that issued its fence may hold it. A node that never
// answers (its goroutine ended by a hook) counts as failed, never as free.
func (q *Quorum) readHolders(ctx context.Context, k Keys) []nodeHolder {
	replies := make([]nodeHolder, len(q.Nodes))
	for i := range replies {
		replies[i].err = errNoAnswer
	}
	callCtx, cancel := q.deadlineCtx(ctx, time.Time{})
	defer cancel()
	onNodesUntil(q, callCtx, cancel, func(ctx context.Context, i int, _ wire.Client) (r nodeHolder) {
		r.Inspected, r.err = DecodeInspect(q.Combs[i].Call(ctx, time.Time{}, InspectRun, InspectArgs(k.Lock)))
		return r
	}, func(i int, r nodeHolder) bool {
		replies[i] = r
		return false // never settled early: every node answers (see above)
	})
	return replies
}

// ErrQuorumProclaim refuses Election.Proclaim on a Redlock session.
var ErrQuorumProclaim = Invalidf("Proclaim is not available on a Redlock session")

// Proclaim is not available on a quorum (ErrQuorumProclaim).
func (q *Quorum) Proclaim(context.Context, *Lease, int64, string, time.Time) (bool, error) {
	return false, ErrQuorumProclaim
}

// CheckNodes is the rule of a quorum's nodes (NewRedlockSession's
// clients): an odd number, at least 3, of clients for distinct,
// independent servers (none nil, a Ring, a cluster client or twice).
func CheckNodes(clients []wire.Client) error {
	switch n := len(clients); {
	case n < 3:
		return Invalidf("NewRedlockSession: %d clients; Redlock needs at least 3 independent nodes", n)
	case n%2 == 0:
		return Invalidf("NewRedlockSession: %d clients; use an odd number of nodes (an even one adds a node without tolerating one more failure)", n)
	}
	for i, c := range clients {
		switch wire.KindOf(c) {
		case wire.KindNil:
			return Invalidf("NewRedlockSession: client %d is nil", i)
		case wire.KindRing:
			return Invalidf(wire.RingRejectf, fmt.Sprintf("NewRedlockSession: client %d", i), c)
		case wire.KindCluster:
			return Invalidf("NewRedlockSession: client %d is a ClusterClient or wraps one (%T); Redlock nodes must be independent servers", i, c)
		}
		if slices.Index(clients, c) != i {
			return Invalidf("NewRedlockSession: client %d is also client %d; every node needs its own client", i, slices.Index(clients, c))
		}
	}
	return nil
}
