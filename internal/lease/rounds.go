package lease

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redisleader/redisleader/internal/wire"
)

// rounds.go: a Quorum's rounds, each one call on every node at once, and
// when a round stops waiting for the nodes that have not answered.

// deadlineCtx bounds the calls of one Redlock operation like wire.Transport.Bound, but
// with a context that is cancelled at the deadline (context.WithDeadline),
// so waits that go-redis starts on a context derived from it (dial retries
// and their backoff, on a node that is down) end at the deadline too: a dead
// node must not hold up the quorum. Its cancel also ends the operation's
// grace period (onNodesUntil). It costs a timer and a few allocations,
// which the single-node hot path avoids.
func (q *Quorum) deadlineCtx(ctx context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	return context.WithDeadline(ctx, q.T.CallDeadline(deadline))
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
// the session's Close waits for them (Quorum.Detach); once the session is
// closed, onNodesUntil waits for every call, as Close's own releases need.
func onNodesUntil[T any](q *Quorum, ctx context.Context, cancel context.CancelFunc, call func(ctx context.Context, i int, c wire.Client) T, record func(i int, answer T) (settled bool)) {
	r := &nodesRound{cancel: cancel, left: len(q.Nodes), done: make(chan struct{}), start: time.Now()}
	wg := q.Detach(len(q.Nodes))
	if r.waitAll = wg == nil; r.waitAll {
		wg = new(sync.WaitGroup)
		wg.Add(len(q.Nodes))
	}
	for i, c := range q.Nodes {
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
				r.grace = time.AfterFunc(max(time.Since(r.start), q.CallTimeout/10)+time.Millisecond, r.endGrace)
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

// Each runs f for every node at once and waits for all of them.
func (q *Quorum) Each(f func(c wire.Client)) {
	var wg sync.WaitGroup
	for _, c := range q.Nodes[1:] {
		wire.Go(&wg, func() { f(c) })
	}
	f(q.Nodes[0])
	wg.Wait()
}
