package redisleader

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisleader/redisleader/internal/lease"
	"github.com/redisleader/redisleader/internal/wire"
)

// NewRedlockSession creates a session whose locks and elections live on a
// majority of independent Redis servers (the Redlock algorithm): an
// acquisition holds while a quorum of len(clients)/2+1 nodes hold its token.
// clients must be an odd number, at least 3, of clients for distinct,
// independent servers (not replicas of each other, not one Cluster). The
// session works as one from NewSession, except that WithReplicaAcks,
// WithFairness and Election.Proclaim are not available. docs/MECHANISMS.md
// says how each operation uses the quorum, and why these three are not.
//
// Bad input (too few or an even number of clients, a nil, repeated, Ring or
// cluster client, or an option refused or breaking a rule) returns an error
// matching ErrInvalid. It does no I/O; the caller must call Close.
func NewRedlockSession(clients []Client, opts ...Option) (*Session, error) {
	switch n := len(clients); {
	case n < 3:
		return nil, invalidf("NewRedlockSession: %d clients; Redlock needs at least 3 independent nodes", n)
	case n%2 == 0:
		return nil, invalidf("NewRedlockSession: %d clients; use an odd number of nodes (an even one adds a node without tolerating one more failure)", n)
	}
	for i, c := range clients {
		switch wire.KindOf(c) {
		case wire.KindNil:
			return nil, invalidf("NewRedlockSession: client %d is nil", i)
		case wire.KindRing:
			return nil, invalidf(wire.RingRejectf, fmt.Sprintf("NewRedlockSession: client %d", i), c)
		case wire.KindCluster:
			return nil, invalidf("NewRedlockSession: client %d is a ClusterClient or wraps one (%T); Redlock nodes must be independent servers", i, c)
		}
		if slices.Index(clients, c) != i {
			return nil, invalidf("NewRedlockSession: client %d is also client %d; every node needs its own client", i, slices.Index(clients, c))
		}
	}
	cfg, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	if cfg.acks.N > 0 {
		return nil, invalidf("NewRedlockSession: WithReplicaAcks is not available in Redlock mode")
	}
	if cfg.fair {
		return nil, invalidf("NewRedlockSession: WithFairness is not available in Redlock mode: each node would keep its own queue, and no arrival order across independent nodes is defined")
	}
	nodes := slices.Clone(clients)
	return startSession(nodes[0], cfg, func(s *Session) place {
		q := &quorum{s: s, nodes: nodes, need: len(nodes)/2 + 1, combs: []*wire.Combiner{s.wire.Combiner()}}
		for _, c := range nodes[1:] {
			q.combs = append(q.combs, s.wire.NewCombiner(new(wire.Combiner), c))
		}
		return q
	}), nil
}

// quorum is the place of a Redlock session: independent nodes, of which a
// majority (need) must agree. Every operation runs on all nodes at once;
// the quorum arithmetic is here and nowhere else.
type quorum struct {
	s     *Session
	nodes []Client
	combs []*wire.Combiner // per node: its single script calls (nodes[0]'s is the session's)
	need  int              // len(nodes)/2 + 1
}

// spare is how many nodes can fail (or refuse) with a quorum still possible.
func (q *quorum) spare() int { return len(q.nodes) - q.need }

// deadlineCtx bounds the calls of one Redlock operation like wire.Transport.Bound, but
// with a context that is cancelled at the deadline (context.WithDeadline),
// so waits that go-redis starts on a context derived from it (dial retries
// and their backoff, on a node that is down) end at the deadline too: a dead
// node must not hold up the quorum. Its cancel also ends the operation's
// grace period (onNodesUntil). It costs a timer and a few allocations,
// which the single-node hot path avoids.
func (q *quorum) deadlineCtx(ctx context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	return context.WithDeadline(ctx, q.s.wire.CallDeadline(deadline))
}

// onNodesUntil runs call for every node at once, each on its own goroutine,
// on ctx, and record(i, answer) for each node's answer, one at a time;
// record returns whether the outcome is known. Once it is, the nodes still
// working get a grace period as long as the operation has taken so far, and
// at least a tenth of the call timeout (healthy nodes answer within about
// the same time, give or take a pause of this process, and an acquisition
// held on every node tolerates more failures later). Then cancel (ctx's) is
// called, so that a call waiting on a node that is down (go-redis's dial
// retries and backoff) ends at once, and onNodesUntil returns without the
// answers still missing: go-redis does not interrupt a read when its
// context is cancelled, so a node that hangs would otherwise hold every
// operation to the call timeout. record is never called after
// onNodesUntil returned. The calls left behind end at ctx's deadline, and
// Close waits for them (Session.detach); once the session is closed,
// onNodesUntil waits for every call, as Close's own releases need.
func onNodesUntil[T any](q *quorum, ctx context.Context, cancel context.CancelFunc, call func(ctx context.Context, i int, c Client) T, record func(i int, answer T) (settled bool)) {
	r := &nodesRound{cancel: cancel, left: len(q.nodes), done: make(chan struct{}), start: time.Now()}
	wg := &q.s.left.wg
	if r.waitAll = !q.s.detach(len(q.nodes)); r.waitAll {
		wg = new(sync.WaitGroup)
		wg.Add(len(q.nodes))
	}
	for i, c := range q.nodes {
		go func() {
			defer wg.Done()
			var answer T
			wire.OnUnwind(func() { answer = call(ctx, i, c) }, r.unanswered)
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.finished {
				return // onNodesUntil no longer waits for this answer
			}
			r.left--
			switch settled := record(i, answer); {
			case r.left == 0:
				r.finishLocked()
			case settled && r.grace == nil:
				r.grace = time.AfterFunc(max(time.Since(r.start), q.s.cfg.callTimeout/10)+time.Millisecond, r.endGrace)
			}
		}()
	}
	<-r.done
	r.mu.Lock()
	if r.grace != nil {
		r.grace.Stop()
	}
	r.mu.Unlock()
	if r.waitAll {
		wg.Wait()
	}
}

// nodesRound is the state of one onNodesUntil.
type nodesRound struct {
	cancel  context.CancelFunc
	start   time.Time
	waitAll bool // the session is closed: wait for every node

	mu       sync.Mutex
	left     int           // nodes that have not answered
	done     chan struct{} // closed when onNodesUntil may stop waiting
	finished bool          // done is closed: record no more
	grace    *time.Timer   // started once the outcome is known
}

// unanswered counts a node whose call ended without an answer as done, like
// one left behind.
func (r *nodesRound) unanswered() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.finished {
		if r.left--; r.left == 0 {
			r.finishLocked()
		}
	}
}

// endGrace ends the grace period: it cancels the calls still waiting and,
// unless every call must be waited for, lets onNodesUntil return.
func (r *nodesRound) endGrace() {
	r.cancel()
	if !r.waitAll {
		r.mu.Lock()
		r.finishLocked()
		r.mu.Unlock()
	}
}

func (r *nodesRound) finishLocked() {
	if !r.finished {
		r.finished = true
		close(r.done)
	}
}

// errNoAnswer is a node's outcome when onNodesUntil stopped waiting for it.
var errNoAnswer = errors.New("no answer within the grace period once the outcome was known")

// each runs f for every node at once and waits for all of them.
func (q *quorum) each(f func(c Client)) {
	var wg sync.WaitGroup
	for _, c := range q.nodes[1:] {
		wire.Go(&wg, func() { f(c) })
	}
	f(q.nodes[0])
	wg.Wait()
}

// errNoQuorum is a Redlock acquire that fell short of a quorum for reasons
// other than other owners (nodes down, slow, split votes). Blocking
// acquisitions retry it after a random delay.
var errNoQuorum = errors.New("no quorum")

// Acquire runs the acquire script on every node. With a quorum, the
// acquisition's fence F is the largest its nodes issued. It is written back
// (raiseFence, a second round before the acquire returns) only when a node
// of the quorum could let the key expire before its clock passes F (see
// fenceSafe); otherwise it travels with the renewals and the release
// (lease.RedlockRenewRun, lease.RedlockReleaseRun). Short of a quorum, what was
// taken is given back.
func (q *quorum) Acquire(ctx context.Context, l *lease.Lease, deadline time.Time) lease.Attempt {
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
			if !replied(r.Err) {
				// Its request may still take the key, after our release.
				l.Leftover = true
			}
		}
	}
	if won >= q.need {
		if q.fenceSafe(replies, fence) {
			return lease.Attempt{Fence: fence}
		}
		raiseCtx, cancelRaise := q.deadlineCtx(ctx, deadline)
		raised := q.raiseFence(raiseCtx, cancelRaise, l, replies, fence)
		cancelRaise()
		if raised >= q.need {
			return lease.Attempt{Fence: fence}
		}
		lastErr = fmt.Errorf("the fence was stored on %d of %d nodes", raised, len(q.nodes))
	}
	if locked > q.spare() {
		err := fmt.Errorf("%w on %d of %d nodes", ErrLocked, locked, len(q.nodes))
		return lease.Attempt{Left: left, Err: err, GiveBack: true, Split: won > 0}
	}
	err := fmt.Errorf("redisleader: acquire %q: %w: acquired on %d of %d nodes (need %d), held by others on %d",
		l.Keys.Name, errNoQuorum, won, len(q.nodes), q.need, locked)
	if lastErr != nil {
		err = fmt.Errorf("%w; last error: %w", err, lastErr)
	}
	return lease.Attempt{Err: err, GiveBack: true, Split: won > 0 && locked > 0}
}

// fenceSafe reports whether fence can stay unwritten until the renewals
// and the release carry it: every node that took the key reported the
// TIME its key's TTL runs from, and fence is below that TIME plus the TTL.
// The key on such a node then outlives the moment the node's clock passes
// fence, so whoever takes the node next, after our key expired there, gets
// a larger fence from the node's clock; before that, only our release can
// free it, and it raises the node's fence key to fence first. Every later
// owner's quorum shares a node with ours. See docs/MECHANISMS.md, Fences.
func (q *quorum) fenceSafe(replies []nodeAcquire, fence int64) bool {
	ttl := q.s.cfg.ttl.Microseconds()
	for i := range replies {
		if r := &replies[i].r; r.Err == nil && (r.At <= 0 || fence >= r.At+ttl) {
			return false
		}
	}
	return true
}

// nodeAcquire is one node's acquire call: its argument vector (the lock's,
// copied: a script call writes the first two slots) and its outcome.
type nodeAcquire struct {
	argv [8]any
	r    lease.Attempt
}

// acquireAll runs the acquire script on every node and returns each one's
// answer; it stops waiting once a quorum took the key, or none can.
func (q *quorum) acquireAll(ctx context.Context, l *lease.Lease, deadline time.Time) []nodeAcquire {
	callCtx, cancel := q.deadlineCtx(ctx, deadline)
	defer cancel()
	replies := make([]nodeAcquire, len(q.nodes))
	for i := range replies {
		replies[i].r.Err = errNoAnswer
	}
	var taken, refused int
	onNodesUntil(q, callCtx, cancel, func(ctx context.Context, i int, _ Client) lease.Attempt {
		return l.Outcome(q.combs[i].Call(ctx, time.Time{}, lease.AcquireRun, l.Args.Acquire(&replies[i].argv)).Slice())
	}, func(i int, r lease.Attempt) bool {
		replies[i].r = r
		if r.Err == nil {
			taken++
		} else {
			refused++
		}
		return taken >= q.need || refused > q.spare()
	})
	return replies
}

// raiseFence writes fence back to the nodes that took the key (with
// lease.RedlockRenewRun, which also refreshes their TTL) and returns on how
// many it was stored (it stops waiting once a quorum has, or cannot).
func (q *quorum) raiseFence(ctx context.Context, cancel context.CancelFunc, l *lease.Lease, replies []nodeAcquire, fence int64) int {
	var stored, failed int
	for i := range replies {
		if replies[i].r.Err != nil {
			failed++ // a node we do not hold cannot store it
		}
	}
	onNodesUntil(q, ctx, cancel, func(ctx context.Context, i int, _ Client) (r lease.Renewal) {
		if replies[i].r.Err != nil {
			return r // counted above
		}
		return lease.DecodeRenew(q.combs[i].Call(ctx, time.Time{}, lease.RedlockRenewRun, l.Args.RedlockRenew(fence)))
	}, func(i int, r lease.Renewal) bool {
		switch {
		case replies[i].r.Err != nil:
		case r == (lease.Renewal{}):
			stored++
		default:
			failed++
		}
		return stored >= q.need || failed > q.spare()
	})
	return stored
}

// renew renews every lock on every node (one pipelined round trip per
// node, all nodes at once), writing each lock's fence back as it goes
// (lease.RedlockRenewRun). A lock renewed by a quorum is renewed; one that
// so many nodes no longer hold that no quorum is possible is lost;
// otherwise its renewal failed.
func (q *quorum) Renew(ctx context.Context, locks []*lease.Lease, deadline time.Time) []lease.Renewal {
	renewed, notOwner, errs, lastErr := make([]int, len(locks)), make([]int, len(locks)), make([]int, len(locks)), make([]error, len(locks))
	callCtx, cancel := q.deadlineCtx(ctx, deadline)
	defer cancel()
	onNodesUntil(q, callCtx, cancel, func(ctx context.Context, _ int, c Client) []*redis.Cmd {
		argvs := make([][]any, len(locks))
		for j, l := range locks {
			argvs[j] = l.Args.RedlockRenew(l.Fence)
		}
		cmds, _ := lease.RedlockRenewRun.RunAll(ctx, c, argvs, wire.Acks{})
		return cmds
	}, func(_ int, cmds []*redis.Cmd) bool {
		for j, cmd := range cmds {
			switch r := lease.DecodeRenew(cmd); {
			case r.Err != nil:
				errs[j]++
				lastErr[j] = r.Err
			case r.Lost:
				notOwner[j]++
			default:
				renewed[j]++
			}
		}
		for j := range locks { // settled: every lock renewed by a quorum, or past hope of one
			if renewed[j] < q.need && notOwner[j]+errs[j] <= q.spare() {
				return false
			}
		}
		return true
	})
	out := make([]lease.Renewal, len(locks))
	for j := range locks {
		switch {
		case renewed[j] >= q.need:
		case notOwner[j] > q.spare():
			out[j].Lost = true
		default:
			out[j].Err = fmt.Errorf("renewed on %d of %d nodes (need %d), not owner on %d: %w",
				renewed[j], len(q.nodes), q.need, notOwner[j], cmp.Or(lastErr[j], errNoQuorum))
		}
	}
	return out
}

// Release is ReleaseAll for one lease, without its slices of calls; a
// Redlock lease has no heir (transferring is not supported).
func (q *quorum) Release(ctx context.Context, r lease.Ending) lease.Deleted {
	callCtx, cancel := q.deadlineCtx(ctx, time.Time{})
	defer cancel()
	argvs := make([][7]any, len(q.nodes))
	var d quorumDeleted
	onNodesUntil(q, callCtx, cancel, func(ctx context.Context, i int, _ Client) lease.Deleted {
		return lease.DecodeRelease(q.combs[i].CallNow(ctx, time.Time{}, lease.RedlockReleaseRun, redlockReleaseArgs(r.Lease, &argvs[i])))
	}, func(_ int, r lease.Deleted) bool {
		return d.add(r) >= q.need
	})
	return d.outcome(q)
}

// redlockReleaseArgs fills argv with l's arguments for lease.RedlockReleaseRun
// and returns it as a slice.
func redlockReleaseArgs(l *lease.Lease, argv *[7]any) []any {
	return l.Args.RedlockRelease(argv, l.Fence)
}

// releaseAll deletes every lock's token on every node, raising each node's
// fence key to the lock's fence first (lease.RedlockReleaseRun), at once:
// unlike lease.Node.ReleaseAll, it does not wait for acquires of these locks given
// up while their batch was on the wire to a node (that wait would end with
// the grace period, and the delete with it); such an acquire marked its lock
// leftover, and its token is deleted again until it must have expired (the
// stale-token clean-up, or Close once every batch has ended). A delete fails
// if it failed on a quorum of nodes, and is retried if it failed or went
// unanswered on any: a delete cut short can leave the token on a healthy
// node, where it keeps the next owner from a quorum while another node is
// down.
func (q *quorum) ReleaseAll(ctx context.Context, locks []lease.Ending, deadline time.Time) []lease.Deleted {
	ds := make([]quorumDeleted, len(locks))
	callCtx, cancel := q.deadlineCtx(ctx, deadline)
	defer cancel()
	onNodesUntil(q, callCtx, cancel, func(ctx context.Context, _ int, c Client) []*redis.Cmd {
		argvs := make([][]any, len(locks))
		for i, l := range locks {
			argvs[i] = redlockReleaseArgs(l.Lease, new([7]any))
		}
		cmds, _ := lease.RedlockReleaseRun.RunAll(ctx, c, argvs, wire.Acks{})
		return cmds
	}, func(_ int, cmds []*redis.Cmd) bool {
		for i, cmd := range cmds {
			ds[i].add(lease.DecodeRelease(cmd))
		}
		return len(ds) == 0 || ds[0].answered >= q.need // every lock has one answer per node
	})
	out := make([]lease.Deleted, len(locks))
	for i := range ds {
		out[i] = ds[i].outcome(q)
	}
	return out
}

// quorumDeleted counts one lock's delete outcomes across the nodes.
type quorumDeleted struct {
	answered, failed, missing int
	firstErr                  error
}

// add counts one node's answer and returns how many nodes have answered.
func (d *quorumDeleted) add(r lease.Deleted) int {
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

// outcome is the lock's delete: retried if it failed anywhere (a node that
// did not answer counts as failed), missing if a quorum did not hold the
// token, failed if it failed on a quorum.
func (d *quorumDeleted) outcome(q *quorum) lease.Deleted {
	failed := d.failed + len(q.nodes) - d.answered
	out := lease.Deleted{Retry: failed > 0, Missing: d.missing >= q.need}
	if failed >= q.need {
		out.Err = fmt.Errorf("failed on %d of %d nodes: %w", failed, len(q.nodes), cmp.Or(d.firstErr, errNoAnswer))
	}
	return out
}

// holderFence returns the fence the holder of token knows: the largest
// stored with its token. Until the holder's first renewal each node of its
// quorum may hold the fence it issued itself, of which the acquisition took
// the largest; a renewal (and a write-back at acquire) stores that one on
// every node that holds the token. See docs/MECHANISMS.md (Leader and
// Observe) for the one case where this is larger than the holder's fence.
func holderFence(held []lease.Holder, token string) int64 {
	var fence int64
	for _, h := range held {
		if h.Token == token {
			fence = max(fence, h.Fence)
		}
	}
	return fence
}

// inspect reports the holder found on a quorum of nodes, with the smallest
// remaining TTL among them and the fence it knows (holderFence).
func (q *quorum) inspect(ctx context.Context, k lease.Keys) (Leader, bool, error) {
	replies := q.readHolders(ctx, k)
	var (
		held    []lease.Holder
		failed  int
		lastErr error
	)
	for _, r := range replies {
		if r.err != nil {
			failed++
			lastErr = r.err
		} else if r.ok {
			held = append(held, r.h)
		}
	}
	for _, r := range replies {
		if !r.ok {
			continue
		}
		n, ttl := 0, r.ttl
		for _, o := range replies {
			if o.ok && o.h.Token == r.h.Token {
				n++
				ttl = min(ttl, o.ttl)
			}
		}
		if n >= q.need {
			return Leader{Value: r.h.Value, Fence: holderFence(held, r.h.Token), TTL: ttl}, true, nil
		}
	}
	if failed > q.spare() {
		return Leader{}, false, fmt.Errorf("redisleader: leader of %q: %d of %d nodes failed: %w", k.Name, failed, len(q.nodes), lastErr)
	}
	return Leader{}, false, nil
}

// nodeHolder is what one node's lock key says.
type nodeHolder struct {
	h   lease.Holder
	ttl time.Duration
	ok  bool // the key holds a value this package wrote
	err error
}

// readHolders reads k's lock key on every node and waits for every answer
// (up to the call timeout), not just a quorum's: until the holder's first
// renewal only the node that issued its fence may hold it. A node that never
// answers (its goroutine ended by a hook) counts as failed, never as free.
func (q *quorum) readHolders(ctx context.Context, k lease.Keys) []nodeHolder {
	replies := make([]nodeHolder, len(q.nodes))
	for i := range replies {
		replies[i].err = errNoAnswer
	}
	callCtx, cancel := q.deadlineCtx(ctx, time.Time{})
	defer cancel()
	onNodesUntil(q, callCtx, cancel, func(ctx context.Context, i int, _ Client) (r nodeHolder) {
		r.h, r.ttl, _, r.ok, r.err = holderReply(q.combs[i].Call(ctx, time.Time{}, lease.InspectRun, lease.InspectArgs(k.Lock)))
		return r
	}, func(i int, r nodeHolder) bool {
		replies[i] = r
		return false // never settled early: every node answers (see above)
	})
	return replies
}

// errRedlockProclaim refuses Election.Proclaim on a Redlock session.
var errRedlockProclaim = invalidf("Proclaim is not available on a Redlock session")

// errRedlockPriority refuses WithPriority on a Redlock session.
var errRedlockPriority = invalidf("priorities are not supported with Redlock (a reservation or a candidate list on a majority of nodes is not one fact)")

func (q *quorum) supports(f feature) error {
	switch f {
	case proclaiming:
		return errRedlockProclaim
	case transferring:
		return errRedlockTransfer
	}
	return errRedlockPriority
}

func (q *quorum) proclaim(context.Context, *Lock, int64, string, time.Time) (bool, error) {
	return false, errRedlockProclaim
}

// leftCalls counts the node calls that their operation stopped waiting for
// (onNodesUntil); Close waits for them. ever: there ever were some (under
// Session.mu).
type leftCalls struct {
	wg   sync.WaitGroup
	ever bool
}

// detach registers n goroutines that may outlive the operation that starts
// them, so that Close waits for them, unless the session is closed: it
// then reports false, and the operation must wait for them itself.
func (s *Session) detach(n int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return false
	}
	s.left.wg.Add(n) // under mu, so never concurrently with Close's Wait
	s.left.ever = true
	return true
}

// againLocked returns the locks whose tokens a call left behind (detach)
// may set after Close's deletes: Close deletes them once more when every
// call has ended (stopped). Run's terms are not among them: Run deletes
// those after onElected returned. s.mu must be held.
func (s *Session) againLocked(held []*Lock) []*Lock {
	if !s.left.ever {
		return nil
	}
	var again []*Lock
	for _, l := range held {
		if _, term := s.reg.terms[l]; l.lease.Leftover && !term {
			again = append(again, l)
		}
	}
	for l, st := range s.hb.stale {
		if st.repeat {
			again = append(again, l)
		}
	}
	return again
}
