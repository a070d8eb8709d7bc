package redisleader

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// NewRedlockSession creates a session whose locks and elections live on a
// majority of independent Redis nodes (the Redlock algorithm): clients must
// be an odd number, at least 3, of clients for distinct, independent Redis
// servers (not replicas of each other, not one Cluster), and an acquisition
// holds while a quorum of len(clients)/2+1 nodes hold its token.
//
// Everything else is as with NewSession: the same options, Lock, TryLock,
// Election, Campaign, Run, Observe. How the quorum changes each operation:
//
//   - Acquire runs the acquire script on every node in parallel. It succeeds
//     when a quorum took the key and the replies came before the local
//     deadline, which is measured from before the first send
//     (D = send + TTL·(1−drift) − margin, as always). Otherwise the key is
//     released on every node and the acquire fails: ErrLocked if enough
//     nodes are held by others that no quorum is possible, else an error
//     that blocking acquisitions retry after a random delay.
//   - Renewal rounds run on every node in parallel and extend the deadline
//     when a quorum renewed. When so many nodes answer "not owner" that no
//     quorum is possible, the lock ends at once with ErrNotOwner; errors
//     are retried until the deadline, where it ends with ErrExpired.
//   - Release deletes the token on every node and waits for each, up to the
//     call timeout (so a node that is down makes it take that long; acquire
//     and renewal rounds stop waiting for such a node once the outcome is
//     known). Errors on a minority of nodes are retried in the background
//     and do not fail Release.
//   - Fences: each node issues max(its last fence + 1, its clock in µs);
//     the acquisition takes the largest of its quorum and writes it back to
//     the fence key of every node that holds the lock, and succeeds only if
//     a quorum stored it. Any later acquisition's quorum shares a node with
//     this one, so its fence is larger: fences strictly increase across
//     owners as long as no node loses its data (the same condition as the
//     lock itself; see below).
//   - Election.Leader (and Observe) reads every node and reports the holder
//     found on a quorum, with the fence that holder knows. Pub/sub
//     notifications come from the first node only; while it is down,
//     waiters poll at the retry interval and Observe reads the quorum when
//     a lease can have expired.
//
// Redlock tolerates a minority of nodes being down or unreachable. It does
// not tolerate what breaks a single Redis on a node of a quorum: a forward
// step of a node's wall clock, or a node that restarts without persistence,
// can let two owners hold quorums that overlap only on that node (Martin
// Kleppmann's scenarios). Restart crashed nodes only after the TTL (Redis's
// own advice), keep their clocks slewed, or use WithTakeoverDelay; see
// docs/RELIABILITY.md for the measurements.
//
// Bad input (fewer than 3 clients, an even number, a nil or repeated
// client, an option that breaks a rule) returns an error matching
// ErrInvalid and does no I/O. WithReplicaAcks is not available in Redlock
// mode (each node is meant to stand alone).
func NewRedlockSession(clients []Client, opts ...Option) (*Session, error) {
	switch n := len(clients); {
	case n < 3:
		return nil, invalidf("NewRedlockSession: %d clients; Redlock needs at least 3 independent nodes", n)
	case n%2 == 0:
		return nil, invalidf("NewRedlockSession: %d clients; use an odd number of nodes (an even one adds a node without tolerating one more failure)", n)
	}
	for i, c := range clients {
		switch kindOf(c) {
		case kindNil:
			return nil, invalidf("NewRedlockSession: client %d is nil", i)
		case kindRing:
			return nil, invalidf(ringRejectf, fmt.Sprintf("NewRedlockSession: client %d", i), c)
		case kindCluster:
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
	if cfg.acks.n > 0 {
		return nil, invalidf("NewRedlockSession: WithReplicaAcks is not available in Redlock mode")
	}
	return startSession(slices.Clone(clients), cfg), nil
}

// boundNodes bounds the calls of one Redlock operation like bound, but with
// a context that is cancelled at the deadline (context.WithDeadline), so
// waits that go-redis starts on a context derived from it (dial retries and
// their backoff, on a node that is down) end at the deadline too: a dead
// node must not hold up the quorum. It costs a timer and a few allocations,
// which the single-node hot path avoids with bound.
func (s *Session) boundNodes(ctx context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	d := time.Now().Add(s.cfg.callTimeout)
	if !deadline.IsZero() && deadline.Before(d) {
		d = deadline
	}
	return context.WithDeadline(ctx, d)
}

// onNodesUntil runs f for every node at once, on a context derived from
// ctx, and waits for all of them. Each f records its result while holding
// mu; after each one, settled (also under mu) says whether the outcome is
// known. Once it is, the nodes still working get a grace period as long as
// the call has taken so far (healthy nodes answer within about the same
// time, and an acquisition held on every node tolerates more failures
// later), then the context is cancelled, so that a call waiting on a node
// that is down (go-redis's dial retries and backoff) ends at once instead of
// at the call timeout.
func (s *Session) onNodesUntil(ctx context.Context, mu *sync.Mutex, settled func() bool, f func(ctx context.Context, i int, c Client)) {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	var (
		wg    sync.WaitGroup
		grace *time.Timer // started once the outcome is known; under mu
	)
	for i, c := range s.nodes {
		wgGo(&wg, func() {
			f(cctx, i, c)
			mu.Lock()
			defer mu.Unlock()
			if grace == nil && settled() {
				grace = time.AfterFunc(time.Since(start)+time.Millisecond, cancel)
			}
		})
	}
	wg.Wait()
	mu.Lock()
	if grace != nil {
		grace.Stop()
	}
	mu.Unlock()
}

// onNodes runs f for every node at once and waits for all of them.
func (s *Session) onNodes(f func(i int, c Client)) {
	var wg sync.WaitGroup
	for i, c := range s.nodes[1:] {
		wgGo(&wg, func() { f(i+1, c) })
	}
	f(0, s.nodes[0])
	wg.Wait()
}

// errNoQuorum is a Redlock acquire that fell short of a quorum for reasons
// other than other owners (nodes down, slow, split votes). Blocking
// acquisitions retry it after a random delay.
var errNoQuorum = errors.New("no quorum")

// attemptQuorum is attempt for a Redlock session.
func (l *Lock) attemptQuorum(ctx context.Context) (time.Duration, error) {
	s := l.s
	sent := time.Now()
	deadline := sent.Add(s.cfg.validity())
	callCtx, cancel := s.boundNodes(ctx, deadline)
	defer cancel()
	replies := make([]acquired, len(s.nodes))
	var (
		mu             sync.Mutex
		taken, refused int
	)
	settled := func() bool { return taken >= s.quorum || refused > len(s.nodes)-s.quorum }
	s.onNodesUntil(callCtx, &mu, settled, func(ctx context.Context, i int, c Client) {
		argv := slices.Clone(l.argv[:])
		res, err := acquireScript.run(ctx, c, argv).Slice()
		r := l.acquireReply(res, err)
		mu.Lock()
		defer mu.Unlock()
		replies[i] = r
		if r.err == nil {
			taken++
		} else {
			refused++
		}
	})
	var (
		won, locked []int
		fence       int64
		left        = time.Duration(-1)
		lastErr     error
	)
	for i, r := range replies {
		switch {
		case r.err == nil:
			won = append(won, i)
			fence = max(fence, r.fence)
		case errors.Is(r.err, ErrLocked):
			locked = append(locked, i)
			if r.left >= 0 && (left < 0 || r.left < left) {
				left = r.left // the earliest a held node can free up
			}
		default:
			lastErr = r.err
		}
	}
	if len(won) >= s.quorum {
		raiseCtx, cancelRaise := s.boundNodes(ctx, deadline)
		raised := l.raiseFence(raiseCtx, won, fence)
		cancelRaise()
		lastErr = fmt.Errorf("the fence was stored on %d of %d nodes", raised, len(s.nodes))
		if raised >= s.quorum {
			lastErr = l.arm(sent, deadline, fence)
			if lastErr == nil || errors.Is(lastErr, ErrSessionClosed) {
				return 0, lastErr
			}
		}
	}
	// No quorum: give back what we took, on every node (compare-and-delete).
	l.giveBack(ctx) // within ctx: what fails is left to abandon
	if len(locked) > len(s.nodes)-s.quorum {
		return left, fmt.Errorf("%w on %d of %d nodes", ErrLocked, len(locked), len(s.nodes))
	}
	err := fmt.Errorf("redisleader: acquire %q: %w: acquired on %d of %d nodes (need %d), held by others on %d",
		l.keys.name, errNoQuorum, len(won), len(s.nodes), s.quorum, len(locked))
	if lastErr != nil {
		err = fmt.Errorf("%w; last error: %w", err, lastErr)
	}
	return 0, err
}

// raiseFence writes fence back to the given nodes and returns on how many
// it was stored (it stops waiting once a quorum has, or cannot).
func (l *Lock) raiseFence(ctx context.Context, nodes []int, fence int64) int {
	var (
		mu             sync.Mutex
		stored, failed int
	)
	fs := fmt.Sprint(fence)
	s := l.s
	failed = len(s.nodes) - len(nodes) // nodes we do not hold cannot store it
	settled := func() bool { return stored >= s.quorum || failed > len(s.nodes)-s.quorum }
	s.onNodesUntil(ctx, &mu, settled, func(ctx context.Context, i int, c Client) {
		if !slices.Contains(nodes, i) {
			return
		}
		argv := []any{nil, nil, 2, l.keys.lock, l.keys.fence, l.tokenArg, fs, l.value}
		n, err := raiseScript.run(ctx, c, argv).Int()
		mu.Lock()
		defer mu.Unlock()
		if err == nil && n == 1 {
			stored++
		} else {
			failed++
		}
	})
	return stored
}

// delQuorum is del for a Redlock session: compare-and-delete on every node,
// once the acquisition is over. It fails only if a quorum of nodes failed;
// failures on fewer are retried in the background by the heartbeat.
func (l *Lock) delQuorum(ctx context.Context) error {
	d := l.s.deleteTokens(ctx, []*Lock{l})[0]
	if d.failed == 0 {
		return nil
	}
	l.s.markStale(l, false)
	if d.failed >= l.s.quorum {
		return fmt.Errorf("redisleader: release %q failed on %d of %d nodes (retried in the background; the keys expire within the TTL at the latest): %w",
			l.keys.name, d.failed, len(l.s.nodes), d.err)
	}
	return nil
}

// renewRoundQuorum is renewRound's work for a Redlock session: every live
// lock is renewed on every node (one pipelined round trip per node, all
// nodes at once). A lock renewed by a quorum is extended; one that so many
// nodes no longer hold that no quorum is possible is lost; otherwise the
// round failed for it and is retried. It reports how many locks failed.
func (s *Session) renewRoundQuorum(ctx context.Context, sent, earliest time.Time, live []*Lock) (failed int) {
	renewed, notOwner, errs, lastErr := make([]int, len(live)), make([]int, len(live)), make([]int, len(live)), make([]error, len(live))
	var mu sync.Mutex
	callCtx, cancel := s.boundNodes(ctx, earliest)
	defer cancel()
	settled := func() bool { // every lock renewed by a quorum, or past hope of one
		for j := range live {
			if renewed[j] < s.quorum && notOwner[j]+errs[j] <= len(s.nodes)-s.quorum {
				return false
			}
		}
		return true
	}
	s.onNodesUntil(callCtx, &mu, settled, func(ctx context.Context, _ int, c Client) {
		cmds := renewScript.runAll(ctx, c, s.renewArgs(live))
		mu.Lock()
		defer mu.Unlock()
		for j, cmd := range cmds {
			n, err := cmd.Int64()
			switch {
			case err != nil:
				errs[j]++
				lastErr[j] = err
			case n == 0:
				notOwner[j]++
			default:
				renewed[j]++
			}
		}
	})
	if ctx.Err() != nil {
		return 0 // closing
	}
	for j, l := range live {
		switch {
		case renewed[j] >= s.quorum:
			l.extend(sent)
		case notOwner[j] > len(s.nodes)-s.quorum:
			l.lose(ErrNotOwner)
		default:
			failed++
			if left := time.Until(l.Deadline()); left > 0 {
				s.cfg.logger.Warn("redisleader: renewal reached no quorum; retrying until the local deadline",
					"name", l.keys.name, "fence", l.fence, "renewed", renewed[j], "not_owner", notOwner[j],
					"nodes", len(s.nodes), "deadline_in", left, "err", lastErr[j])
			}
		}
	}
	return failed
}

// holderFence returns the fence the holder of token knows: the one stored
// with its token on the most nodes (its acquisition wrote it back to a
// quorum; a node that took the token late, outside that quorum, has its own,
// later one and is outvoted), the smaller on a tie.
func holderFence(held []holder, token string) int64 {
	counts := map[int64]int{}
	var fence int64
	for _, h := range held {
		if h.token == token {
			counts[h.fence]++
			if c, best := counts[h.fence], counts[fence]; c > best || (c == best && h.fence < fence) {
				fence = h.fence
			}
		}
	}
	return fence
}

// inspectQuorum is Election.inspect for a Redlock session: the holder found
// on a quorum of nodes, with the smallest remaining TTL among them.
func (e *Election) inspectQuorum(ctx context.Context) (Leader, bool, error) {
	s := e.s
	type reply struct {
		h   holder
		ttl time.Duration
		ok  bool
		err error
	}
	replies := make([]reply, len(s.nodes))
	callCtx, cancel := s.boundNodes(ctx, time.Time{})
	defer cancel()
	var (
		mu       sync.Mutex
		votes    = map[string]int{}
		answered int
	)
	settled := func() bool { // a holder on a quorum, or nobody can reach one
		best := 0
		for _, v := range votes {
			best = max(best, v)
		}
		return best >= s.quorum || best+len(s.nodes)-answered < s.quorum
	}
	s.onNodesUntil(callCtx, &mu, settled, func(ctx context.Context, i int, c Client) {
		var r reply
		res, err := inspectScript.run(ctx, c, []any{nil, nil, 1, e.keys.lock}).Slice()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			r.err = err
		case len(res) == 2:
			stored, _ := res[0].(string)
			r.h, r.ok = parseHolder(stored)
			if ms, ok := res[1].(int64); ok && ms > 0 {
				r.ttl = time.Duration(ms) * time.Millisecond
			}
		}
		mu.Lock()
		defer mu.Unlock()
		replies[i] = r
		answered++
		if r.ok {
			votes[r.h.token]++
		}
	})
	failed := 0
	var lastErr error
	for _, r := range replies {
		if r.err != nil {
			failed++
			lastErr = r.err
			continue
		}
		if !r.ok {
			continue
		}
		votes, ttl := 0, r.ttl
		for _, o := range replies {
			if o.ok && o.h.token == r.h.token {
				votes++
				ttl = min(ttl, o.ttl)
			}
		}
		if votes >= s.quorum {
			var held []holder
			for _, o := range replies {
				if o.ok {
					held = append(held, o.h)
				}
			}
			return Leader{Value: r.h.value, Fence: holderFence(held, r.h.token), TTL: ttl}, true, nil
		}
	}
	if failed > len(s.nodes)-s.quorum {
		return Leader{}, false, fmt.Errorf("redisleader: leader of %q: %d of %d nodes failed: %w", e.keys.name, failed, len(s.nodes), lastErr)
	}
	return Leader{}, false, nil
}
