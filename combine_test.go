package redisleader

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisleader/redisleader/internal/redisserver"
)

// queued reports how many calls of the session's own client wait for a
// batch.
func (s *Session) queued() int { return s.combine.queued() }

// queued reports how many calls wait for a batch.
func (c *combiner) queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}

// wireGate holds script calls sent on their own (every one while armed) on
// the wire until released, so that calls arriving meanwhile queue up, and
// records the keys of every pipeline's acquires; holdBatch, when set, also
// holds the next pipeline of scripts after recording it.
type wireGate struct {
	mu        sync.Mutex
	armed     bool
	onWire    int           // single calls held
	release   chan struct{} // closed: let the single calls through
	holdBatch chan struct{} // non-nil: the next pipeline waits for it to close
	batchSent chan struct{} // closed when a held pipeline was recorded
	batches   [][]string    // each pipeline's first keys
}

func newWireGate() *wireGate {
	return &wireGate{armed: true, release: make(chan struct{}), batchSent: make(chan struct{})}
}

func (g *wireGate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *wireGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isScript(cmd) {
			g.mu.Lock()
			armed := g.armed
			if armed {
				g.onWire++
			}
			g.mu.Unlock()
			if armed {
				<-g.release
			}
		}
		return next(ctx, cmd)
	}
}

func (g *wireGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var keys []string
		for _, cmd := range cmds {
			if isScript(cmd) && cmd.Args()[2] == 2 { // acquires only
				keys = append(keys, fmt.Sprint(cmd.Args()[3]))
			}
		}
		g.mu.Lock()
		if len(keys) > 0 {
			g.batches = append(g.batches, keys)
		}
		hold := g.holdBatch
		if len(keys) > 0 {
			g.holdBatch = nil
		}
		g.mu.Unlock()
		if hold != nil && len(keys) > 0 {
			close(g.batchSent)
			<-hold
		}
		return next(ctx, cmds)
	}
}

func isScript(cmd redis.Cmder) bool {
	name := cmd.Name()
	return (name == "evalsha" || name == "eval") && len(cmd.Args()) > 3
}

// heldOnWire waits until n single calls are held.
func (g *wireGate) heldOnWire(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		g.mu.Lock()
		got := g.onWire
		g.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls on the wire, want %d", got, n)
		}
		runtimeYield()
	}
}

// sendHeld opens the gate and holds the next batch once it was sent; the
// batch goes on when the returned channel is closed.
func (g *wireGate) sendHeld(t *testing.T) chan struct{} {
	t.Helper()
	hold := g.holdNext()
	g.open()
	waitClosed(t, g.batchSent, 5*time.Second, "the batch was sent")
	return hold
}

// holdNext makes the next batch wait, once sent, until the returned channel
// is closed.
func (g *wireGate) holdNext() chan struct{} {
	hold := make(chan struct{})
	g.mu.Lock()
	g.holdBatch = hold
	g.mu.Unlock()
	return hold
}

// open disarms the gate and lets the held calls through.
func (g *wireGate) open() {
	g.mu.Lock()
	g.armed = false
	g.mu.Unlock()
	close(g.release)
}

func (g *wireGate) recorded() [][]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.batches)
}

// waitQueued waits until n calls of s wait for a batch.
func waitQueued(t *testing.T, s *Session, n int) {
	t.Helper()
	waitQueuedOn(t, &s.combine, n)
}

// waitQueuedOn waits until n calls wait for a batch in c.
func waitQueuedOn(t *testing.T, c *combiner, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for c.queued() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued, want %d", c.queued(), n)
		}
		runtimeYield()
	}
}

// gatedSession returns a session on c, with a wireGate on c whose wire is
// full (see fillWire).
func gatedSession(t *testing.T, c redis.UniversalClient, opts ...Option) (*wireGate, *Session, <-chan error) {
	t.Helper()
	g := newWireGate()
	c.AddHook(g)
	s := newSession(t, c, opts...)
	return g, s, fillWire(t, s, g)
}

// fillWire starts maxOnWire TryLocks that the gate holds on the wire, so
// that the session's next calls queue; their results arrive on the
// returned channel.
func fillWire(t *testing.T, s *Session, g *wireGate) <-chan error {
	t.Helper()
	errc := make(chan error, maxOnWire)
	for i := range maxOnWire {
		go func() {
			l, err := s.TryLock(context.Background(), fmt.Sprintf("on-wire-%d", i))
			if err == nil {
				err = l.Release(context.Background())
			}
			errc <- err
		}()
	}
	g.heldOnWire(t, maxOnWire)
	return errc
}

type tryResult struct {
	l   *Lock
	err error
}

// tryAll starts a TryLock for each name, each with its own context.
func tryAll(ctxs []context.Context, s *Session, names []string) []chan tryResult {
	out := make([]chan tryResult, len(names))
	for i, name := range names {
		out[i] = make(chan tryResult, 1)
		go func() {
			l, err := s.TryLock(ctxs[i], name)
			out[i] <- tryResult{l, err}
		}()
	}
	return out
}

func background(n int) []context.Context {
	ctxs := make([]context.Context, n)
	for i := range ctxs {
		ctxs[i] = context.Background()
	}
	return ctxs
}

// Calls that arrive while the session's wire is full ride in one pipeline,
// each with its own reply.
func TestConcurrentCallsShareOnePipeline(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		g, s, first := gatedSession(t, b.client)
		names := []string{"batch-a", "batch-b", "batch-c", "batch-d"}
		results := tryAll(background(len(names)), s, names)
		waitQueued(t, s, len(names))
		g.open()
		for range maxOnWire {
			require.NoError(t, recvWithin(t, first, 5*time.Second, "a call held on the wire"))
		}
		fences := map[int64]bool{}
		for i, r := range results {
			res := recvWithin(t, r, 5*time.Second, names[i])
			require.NoError(t, res.err, names[i])
			h, ok := parseHolder(b.get(res.l.Key()))
			require.True(t, ok, names[i])
			assert.Equal(t, res.l.token, h.token, "%s holds its own acquisition's token", names[i])
			assert.Equal(t, res.l.Fence(), h.fence, names[i])
			fences[res.l.Fence()] = true
			require.NoError(t, res.l.Release(context.Background()))
		}
		assert.Len(t, fences, len(names), "every acquisition has its own fence")
		sentTogether(t, g, names...)
		require.NoError(t, s.Close(context.Background()))
		checkNoLeaks(t)
	})
}

// prefixed returns the lock keys of names.
func prefixed(names ...string) []string {
	keys := make([]string, len(names))
	for i, n := range names {
		keys[i] = newKeys(n).lock
	}
	return keys
}

// A caller whose context ends while its command waits for a batch returns
// at once, and its command never reaches Redis; one whose context ends while
// its batch is on the wire returns at once with its context's error (never
// "held by another"), its token is given back, and the other commands of
// the batch are not failed by it.
func TestCancelledCallerInABatch(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		g, s, first := gatedSession(t, b.client, fastOpts()...)

		// Queued, then cancelled before any batch left.
		early, cancelEarly := context.WithCancel(context.Background())
		never := tryAll([]context.Context{early}, s, []string{"never-sent"})[0]
		waitQueued(t, s, 1)
		cancelEarly()
		res := recvWithin(t, never, 5*time.Second, "the cancelled queued TryLock")
		assert.ErrorIs(t, res.err, context.Canceled)
		// Its token is given back in the background (its outcome is unknown
		// to it): on its own, held on the wire with the other two, before
		// the next calls queue, which it would otherwise take along.
		g.heldOnWire(t, maxOnWire+1)

		// Queued, sent, cancelled while the batch is on the wire.
		hold := g.holdNext()
		mid, cancelMid := context.WithCancel(context.Background())
		names := []string{"mid-a", "mid-cancelled", "mid-c"}
		results := tryAll([]context.Context{context.Background(), mid, context.Background()}, s, names)
		waitQueued(t, s, len(names))
		g.open()
		waitClosed(t, g.batchSent, 5*time.Second, "the batch was sent")
		cancelMid()
		res = recvWithin(t, results[1], 5*time.Second, "the TryLock cancelled mid-batch (while the batch is held)")
		require.Error(t, res.err)
		assert.ErrorIs(t, res.err, context.Canceled)
		assert.NotErrorIs(t, res.err, ErrLocked, "an unknown outcome is never 'held by another'")
		close(hold)
		for _, i := range []int{0, 2} {
			r := recvWithin(t, results[i], 5*time.Second, names[i])
			require.NoError(t, r.err, "%s is not failed by another caller's cancellation", names[i])
			require.NoError(t, r.l.Release(context.Background()))
		}
		for range maxOnWire {
			require.NoError(t, recvWithin(t, first, 5*time.Second, "a call held on the wire"))
		}
		for _, batch := range g.recorded() {
			assert.NotContains(t, batch, newKeys("never-sent").lock, "a call cancelled in the queue was sent")
		}
		assert.Empty(t, b.get(newKeys("never-sent").lock))
		// The cancelled acquire ran in Redis; its token is given back (by
		// the give-back or, if that overtook the acquire, the stale-token
		// cleanup, which repeats until the token must have expired).
		deadline := time.Now().Add(5 * time.Second)
		for b.get(newKeys("mid-cancelled").lock) != "" {
			require.False(t, time.Now().After(deadline), "the cancelled acquisition's token stayed in Redis")
			runtimeYield()
		}
		require.NoError(t, s.Close(context.Background()))
		checkNoLeaks(t)
	})
}

// A Release is sent at once, never queued behind the session's other calls
// (here tries by the session's own contenders, waiting for a batch while the
// wire is full): a holder frees its name within one round trip, so those
// who wait for the name do not wait for the queue as well. The session's
// queued calls go along, right behind the release in one pipeline, while
// the wire is still full: here a Leader read of the released name (a try by
// one of the session's goroutines does the same, when it queues between the
// release's start and its send), which finds the name free, and tries of
// other names.
func TestReleaseIsNotQueued(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		s, _, locks, read, freeWire := fullWire(t, b, "release-now")
		names := []string{"release-now-a", "release-now-b", "release-now-c"}
		tries := tryAll(background(len(names)), s, names)
		waitQueued(t, s, len(names)+1)

		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		require.NoError(t, locks[0].Release(ctx), "Release while the wire is full")
		assert.Empty(t, b.get(newKeys("release-now").lock), "the released name is still taken")
		err := recvWithin(t, read, 5*time.Second, "the queued Leader read of the released name, with the wire full")
		require.ErrorIs(t, err, ErrNoLeader, "read right behind the release")
		for i, ch := range tries {
			r := recvWithin(t, ch, 5*time.Second, names[i]+", taken along by the release with the wire full")
			require.NoError(t, r.err, names[i])
		}
		assert.Zero(t, s.queued(), "calls left queued")

		freeWire()
		require.NoError(t, s.Close(context.Background()))
		checkNoLeaks(t)
	})
}

// A Release whose pipeline (TestReleaseIsNotQueued) is still on the wire
// when its context ends returns that error, as any call given up on the
// wire does; the call taken along still gets its own reply, and a later call on the
// name waits for the pipeline to end, so it never overtakes the release.
func TestReleasePipelineGivenUp(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		s, h, locks, read, freeWire := fullWire(t, b, "given-up")
		pipe := h.rule(locks[0].keys.lock, true)
		freePipe := freeing(t, pipe)

		rctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		assert.ErrorIs(t, locks[0].Release(rctx), context.DeadlineExceeded, "the pipeline is held on the wire")
		waitClosed(t, pipe.reached, 5*time.Second, "the release's pipeline on the wire")
		next := tryAll(background(1), s, []string{"given-up"})
		freeWire()
		freePipe()
		require.ErrorIs(t, recvWithin(t, read, 5*time.Second, "the read taken along"), ErrNoLeader)
		r := recvWithin(t, next[0], 5*time.Second, "the try after the release")
		require.NoError(t, r.err, "the try landed before the release it was made after")
		require.NoError(t, s.Close(ctx))
		checkNoLeaks(t)
	})
}

// A Release whose context has already ended takes no queued call along and
// sends nothing, as any call cancelled before it was sent. (Found by review:
// the pipeline, on a context of its own, was sent anyway.)
func TestCancelledReleaseTakesNothingAlong(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		s, _, locks, read, freeWire := fullWire(t, b, "cancelled-release")
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		assert.ErrorIs(t, locks[0].Release(ctx), context.Canceled)
		assert.Equal(t, 1, s.queued(), "the read was taken along")
		assert.Contains(t, b.get(locks[0].keys.lock), locks[0].token, "the cancelled release reached Redis")
		freeWire()
		require.NoError(t, recvWithin(t, read, 5*time.Second, "the queued read"), "the name is still held")
	})
}

// A release's pipeline (TestReleaseIsNotQueued) takes no slot on
// the wire: when one of the two calls there returns, the call queued behind
// them is sent, though the pipeline and the other call are still on the
// wire (as on a slow Cluster node), not left until its deadline. (Found by
// review: the pipeline had taken a third slot, and the returning call freed
// its own instead of flushing.)
func TestQueuedCallSentWhenASlotFrees(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		s, h := holdSession(t, b)
		l, err := s.TryLock(ctx, "slot")
		require.NoError(t, err)
		wire, wired := holdWire(t, s, h, "slot")
		freeing(t, wire[1])
		reads := leaderAll(t, s, "slot")
		waitQueued(t, s, 1)
		pipe := h.rule(l.keys.lock, true)
		freePipe := freeing(t, pipe)
		released := make(chan error, 1)
		go func() { released <- l.Release(ctx) }()
		waitClosed(t, pipe.reached, 5*time.Second, "the release's pipeline on the wire")

		tctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		late := tryAll([]context.Context{tctx}, s, []string{"slot-late"})
		waitQueued(t, s, 1)
		close(wire[0].release)
		require.NoError(t, recvWithin(t, wired, 5*time.Second, "the call let through"))
		r := recvWithin(t, late[0], 5*time.Second, "the call queued behind the wire")
		require.NoError(t, r.err, "a slot came free; %d on the wire", s.onWireNow())

		freePipe()
		require.NoError(t, recvWithin(t, released, 5*time.Second, "the Release"))
		require.ErrorIs(t, recvWithin(t, reads[0], 5*time.Second, "the read taken along"), ErrNoLeader)
	})
}

// Close waits for a release's pipeline still on the wire, though it
// takes no slot: the releasing caller and the call taken along both get
// their replies, and no goroutine outlives Close.
func TestCloseWaitsForAReleasePipeline(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		s, h, locks, read, freeWire := fullWire(t, b, "close-pipe")
		pipe := h.rule(locks[0].keys.lock, true)
		freePipe := freeing(t, pipe)
		released := make(chan error, 1)
		go func() { released <- locks[0].Release(ctx) }()
		waitClosed(t, pipe.reached, 5*time.Second, "the release's pipeline on the wire")
		freeWire()
		closed := closeStillWaiting(t, s, "with the release's pipeline on the wire")
		freePipe()
		require.NoError(t, recvWithin(t, closed, 5*time.Second, "Close"))
		s.combine.mu.Lock()
		carried := s.combine.carried
		s.combine.mu.Unlock()
		assert.Zero(t, carried, "release pipelines on the wire after Close")
		require.NoError(t, recvWithin(t, released, 5*time.Second, "Release"))
		require.ErrorIs(t, recvWithin(t, read, 5*time.Second, "the read taken along"), ErrNoLeader)
		checkNoLeaks(t)
	})
}

// closeStillWaiting starts s.Close and checks that it has not returned
// 200ms later (what names what it must wait for); Close's result arrives on
// the returned channel.
func closeStillWaiting(t *testing.T, s *Session, what string) <-chan error {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- s.Close(context.Background()) }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) %s", err, what)
	case <-time.After(200 * time.Millisecond): // a negative check: Close must still be waiting
	}
	return closed
}

// fullWire returns a session on b (call timeout 2s) with a holdHook, the
// locks of names, held by it, its wire filled by two calls held there, and
// the result of a Leader read of names[0] queued behind them; freeWire lets
// the two through and waits for them to return.
func fullWire(t *testing.T, b *backend, names ...string) (s *Session, h *holdHook, locks []*Lock, read <-chan error, freeWire func()) {
	t.Helper()
	s, h = holdSession(t, b)
	for _, name := range names {
		l, err := s.TryLock(context.Background(), name)
		require.NoError(t, err)
		locks = append(locks, l)
	}
	wire, wired := holdWire(t, s, h, names[0])
	free := freeing(t, wire[:]...)
	read = leaderAll(t, s, names[0])[0]
	waitQueued(t, s, 1)
	return s, h, locks, read, func() {
		free()
		for range maxOnWire {
			require.NoError(t, recvWithin(t, wired, 5*time.Second, "a call held on the wire"))
		}
	}
}

// holdSession returns a session on b (call timeout 2s) whose client has a
// holdHook.
func holdSession(t *testing.T, b *backend) (*Session, *holdHook) {
	h := &holdHook{}
	b.client.AddHook(h)
	return newSession(t, b.client, WithCallTimeout(2*time.Second)), h
}

// leaderAll starts a Leader read of each name's election on s.
func leaderAll(t *testing.T, s *Session, names ...string) []chan error {
	t.Helper()
	out := make([]chan error, len(names))
	for i, name := range names {
		e, err := s.Election(name)
		require.NoError(t, err)
		out[i] = make(chan error, 1)
		go func() {
			_, err := e.Leader(context.Background())
			out[i] <- err
		}()
	}
	return out
}

// A batch whose replies are lost: every batched acquire ends with an
// unknown outcome, never "held by another"; the blocking ones retry with
// their tokens and find the keys theirs.
func TestLostRepliesOfABatch(t *testing.T) {
	srv := redisserver.Start(t)
	var drop atomic.Int32
	c := dropClient(t, srv.Addr(), &drop, func(o *redis.Options) { o.MaxRetries = -1 })
	g, s, first := gatedSession(t, c, fastOpts()...)
	names := []string{"lost-a", "lost-b", "lost-c"}
	locks := make([]chan tryResult, len(names))
	for i, name := range names {
		locks[i] = make(chan tryResult, 1)
		go func() {
			l, err := s.Lock(context.Background(), name)
			locks[i] <- tryResult{l, err}
		}()
	}
	tries := tryAll(background(1), s, []string{"lost-try"})
	waitQueued(t, s, len(names)+1)
	hold := g.sendHeld(t)
	drop.Store(1) // the batch's replies are lost
	close(hold)
	for range maxOnWire {
		<-first // whatever their outcome: they were on the wire before the loss
	}
	try := recvWithin(t, tries[0], 5*time.Second, "the batched TryLock")
	if try.err != nil {
		assert.NotErrorIs(t, try.err, ErrLocked, "an unknown outcome is never 'held by another'")
	} else {
		require.NoError(t, try.l.Release(context.Background()))
	}
	for i, ch := range locks {
		r := recvWithin(t, ch, 5*time.Second, names[i])
		require.NoError(t, r.err, "%s: Lock retries with its token and finds the key its own", names[i])
		h, ok := parseHolder(c.Get(context.Background(), r.l.Key()).Val())
		require.True(t, ok)
		assert.Equal(t, r.l.token, h.token)
		assert.Equal(t, r.l.Fence(), h.fence, "one fence for one acquisition")
		require.NoError(t, r.l.Release(context.Background()))
	}
	assert.Zero(t, drop.Load(), "the batch's replies were dropped")
	require.NoError(t, s.Close(context.Background()))
	deadline := time.Now().Add(5 * time.Second)
	for c.Exists(context.Background(), newKeys("lost-try").lock).Val() != 0 {
		require.False(t, time.Now().After(deadline), "the TryLock's token stayed in Redis")
		runtimeYield()
	}
	checkNoLeaks(t)
}

// A script the server lost (SCRIPT FLUSH) is re-sent as EVAL for every
// command of a batch that met NOSCRIPT.
func TestNoScriptInABatch(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		g, s, first := gatedSession(t, b.client)
		names := []string{"noscript-a", "noscript-b", "noscript-c"}
		results := tryAll(background(len(names)), s, names)
		waitQueued(t, s, len(names))
		require.NoError(t, b.client.ScriptFlush(context.Background()).Err())
		g.open()
		for range maxOnWire {
			require.NoError(t, recvWithin(t, first, 5*time.Second, "a call held on the wire"))
		}
		for i, r := range results {
			res := recvWithin(t, r, 5*time.Second, names[i])
			require.NoError(t, res.err, "%s after SCRIPT FLUSH", names[i])
			require.NoError(t, res.l.Release(context.Background()))
		}
		sentTogether(t, g, names...)
	})
}

// On a Cluster a batch holds names of several slots, on several nodes:
// each command goes to its slot's owner.
func TestBatchAcrossClusterSlots(t *testing.T) {
	cl := redisserver.StartCluster(t, 3)
	c := cl.Client(t)
	g, s, first := gatedSession(t, c)
	var names []string
	owners := map[*redisserver.Server]bool{}
	for i := 0; len(owners) < 3 || len(names) < 6; i++ {
		name := fmt.Sprintf("slots-%d", i)
		owners[cl.Owner(redisserver.Slot(newKeys(name).lock))] = true
		names = append(names, name)
	}
	results := tryAll(background(len(names)), s, names)
	waitQueued(t, s, len(names))
	g.open()
	for range maxOnWire {
		require.NoError(t, recvWithin(t, first, 5*time.Second, "a call held on the wire"))
	}
	for i, r := range results {
		res := recvWithin(t, r, 10*time.Second, names[i])
		require.NoError(t, res.err, names[i])
		owner := cl.Owner(redisserver.Slot(res.l.Key()))
		direct := redis.NewClient(&redis.Options{Addr: owner.Addr()})
		h, ok := parseHolder(direct.Get(context.Background(), res.l.Key()).Val())
		_ = direct.Close()
		require.True(t, ok, "%s is on its slot's owner", names[i])
		assert.Equal(t, res.l.token, h.token)
		require.NoError(t, res.l.Release(context.Background()))
	}
	sentTogether(t, g, names...)
	require.NoError(t, s.Close(context.Background()))
	checkNoLeaks(t)
}

// Close waits for a batch on the wire: its acquisitions end as Close says
// (their keys given back), and no goroutine is left.
func TestCloseWithABatchInFlight(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		g := newWireGate()
		b.client.AddHook(g)
		s, err := NewSession(b.client)
		require.NoError(t, err)
		first := fillWire(t, s, g)
		names := []string{"closing-a", "closing-b", "closing-c"}
		results := tryAll(background(len(names)), s, names)
		waitQueued(t, s, len(names))
		hold := g.sendHeld(t)
		closed := make(chan error, 1)
		go func() { closed <- s.Close(context.Background()) }()
		waitClosed(t, s.Done(), 5*time.Second, "Close started")
		close(hold)
		require.NoError(t, recvWithin(t, closed, 5*time.Second, "Close"))
		for range maxOnWire {
			<-first
		}
		for i, r := range results {
			res := recvWithin(t, r, 5*time.Second, names[i])
			assert.ErrorIs(t, res.err, ErrSessionClosed, names[i])
			assert.Empty(t, b.get(newKeys(names[i]).lock), "%s was given back before Close returned", names[i])
		}
		checkNoLeaks(t)
	})
}

// sentTogether asserts that one pipeline held the names' acquires.
func sentTogether(t *testing.T, g *wireGate, names ...string) {
	t.Helper()
	want := prefixed(names...)
	for _, batch := range g.recorded() {
		if !slices.ContainsFunc(want, func(k string) bool { return !slices.Contains(batch, k) }) {
			return
		}
	}
	t.Errorf("no pipeline held all of %v; pipelines: %v", want, g.recorded())
}
