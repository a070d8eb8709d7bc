package redisleader

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisleader/redisleader/internal/faultproxy"
	"github.com/redisleader/redisleader/internal/redisserver"

	"github.com/redisleader/redisleader/internal/lease"
)

// gatedSession returns a session on c, with a wireGate on c whose wire is
// full (see fillWire).
func gatedSession(t *testing.T, c redis.UniversalClient, opts ...Option) (*wireGate, *Session, <-chan error) {
	t.Helper()
	g := newWireGate()
	c.AddHook(g.hook())
	s := newSession(t, c, opts...)
	return g, s, fillWire(t, s, g)
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
			h, ok := lease.ParseHolder(b.get(res.l.Key()))
			require.True(t, ok, names[i])
			assert.Equal(t, res.l.lease.Token, h.Token, "%s holds its own acquisition's token", names[i])
			assert.Equal(t, res.l.Fence(), h.Fence, names[i])
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
		keys[i] = lease.NewKeys(n).Lock
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
			assert.NotContains(t, batch, lease.NewKeys("never-sent").Lock, "a call cancelled in the queue was sent")
		}
		assert.Empty(t, b.get(lease.NewKeys("never-sent").Lock))
		// The cancelled acquire ran in Redis; its token is given back (by
		// the give-back or, if that overtook the acquire, the stale-token
		// cleanup, which repeats until the token must have expired).
		deadline := time.Now().Add(5 * time.Second)
		for b.get(lease.NewKeys("mid-cancelled").Lock) != "" {
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
		assert.Empty(t, b.get(lease.NewKeys("release-now").Lock), "the released name is still taken")
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
		pipe := h.rule(locks[0].lease.Keys.Lock, true)
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
		assert.Contains(t, b.get(locks[0].lease.Keys.Lock), locks[0].lease.Token, "the cancelled release reached Redis")
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
		slots, wired := holdWire(t, s, h, "slot")
		freeing(t, slots[1])
		reads := leaderAll(t, s, "slot")
		waitQueued(t, s, 1)
		pipe := h.rule(l.lease.Keys.Lock, true)
		freePipe := freeing(t, pipe)
		released := make(chan error, 1)
		go func() { released <- l.Release(ctx) }()
		waitClosed(t, pipe.reached, 5*time.Second, "the release's pipeline on the wire")

		tctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		late := tryAll([]context.Context{tctx}, s, []string{"slot-late"})
		waitQueued(t, s, 1)
		close(slots[0].release)
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
		pipe := h.rule(locks[0].lease.Keys.Lock, true)
		freePipe := freeing(t, pipe)
		released := make(chan error, 1)
		go func() { released <- locks[0].Release(ctx) }()
		waitClosed(t, pipe.reached, 5*time.Second, "the release's pipeline on the wire")
		freeWire()
		closed := closeStillWaiting(t, s, "with the release's pipeline on the wire")
		freePipe()
		require.NoError(t, recvWithin(t, closed, 5*time.Second, "Close"))
		_, carried := s.wire.Combiner().OnWire()
		assert.Zero(t, carried, "release pipelines on the wire after Close")
		require.NoError(t, recvWithin(t, released, 5*time.Second, "Release"))
		require.ErrorIs(t, recvWithin(t, read, 5*time.Second, "the read taken along"), ErrNoLeader)
		checkNoLeaks(t)
	})
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
		h, ok := lease.ParseHolder(c.Get(context.Background(), r.l.Key()).Val())
		require.True(t, ok)
		assert.Equal(t, r.l.lease.Token, h.Token)
		assert.Equal(t, r.l.Fence(), h.Fence, "one fence for one acquisition")
		require.NoError(t, r.l.Release(context.Background()))
	}
	assert.Zero(t, drop.Load(), "the batch's replies were dropped")
	require.NoError(t, s.Close(context.Background()))
	deadline := time.Now().Add(5 * time.Second)
	for c.Exists(context.Background(), lease.NewKeys("lost-try").Lock).Val() != 0 {
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
// each command goes to its slot's owner, in one pipeline per master
// (wire.RunCalls), which holds all the batch's names that master serves.
func TestBatchAcrossClusterSlots(t *testing.T) {
	cl := redisserver.StartCluster(t, 3)
	c := cl.Client(t)
	g, s, first := gatedSession(t, c)
	var names []string
	owners := map[*redisserver.Server][]string{}
	for i := 0; len(owners) < 3 || len(names) < 6; i++ {
		name := fmt.Sprintf("slots-%d", i)
		owner := cl.Owner(redisserver.Slot(lease.NewKeys(name).Lock))
		owners[owner] = append(owners[owner], name)
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
		h, ok := lease.ParseHolder(direct.Get(context.Background(), res.l.Key()).Val())
		_ = direct.Close()
		require.True(t, ok, "%s is on its slot's owner", names[i])
		assert.Equal(t, res.l.lease.Token, h.Token)
		require.NoError(t, res.l.Release(context.Background()))
	}
	ownerOf := map[string]*redisserver.Server{}
	for owner, on := range owners {
		sentTogether(t, g, on...)
		for _, k := range prefixed(on...) {
			ownerOf[k] = owner
		}
	}
	for _, batch := range g.recorded() {
		for _, k := range batch {
			assert.Same(t, ownerOf[batch[0]], ownerOf[k], "a pipeline holds names of two masters: %v", batch)
		}
	}
	require.NoError(t, s.Close(context.Background()))
	checkNoLeaks(t)
}

// Close waits for a batch on the wire: its acquisitions end as Close says
// (their keys given back), and no goroutine is left.
func TestCloseWithABatchInFlight(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		g := newWireGate()
		b.client.AddHook(g.hook())
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
			assert.Empty(t, b.get(lease.NewKeys(names[i]).Lock), "%s was given back before Close returned", names[i])
		}
		checkNoLeaks(t)
	})
}

// flushInto lets the first held call return, so that a flusher takes the
// queue into the batch that batch holds, then lets the other held call
// return and waits for both.
func flushInto(t *testing.T, slots [maxOnWire]*holdRule, wired <-chan error, batch *holdRule) {
	t.Helper()
	close(slots[0].release)
	waitClosed(t, batch.reached, 5*time.Second, "the batch left the flusher")
	close(slots[1].release)
	for range maxOnWire {
		require.NoError(t, recvWithin(t, wired, 5*time.Second, "a call held on the wire"))
	}
}

// waitOnWire polls until the session has n calls or batches on the wire.
func waitOnWire(t *testing.T, s *Session, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for s.onWireNow() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d on the wire, want %d", s.onWireNow(), n)
		}
		runtimeYield()
	}
}

// A Proclaim given up while its batch was on its way to Redis reaches Redis
// before the next Proclaim of the same name: the value stored (what Leader
// and Observe report) is the later one, as Lock.Value says.
func TestGivenUpProclaimLandsBeforeTheNext(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		h := &holdHook{}
		b.client.AddHook(h.hook())
		s := newSession(t, b.client)
		e, err := s.Election("review-proclaim")
		require.NoError(t, err)
		lead, err := e.Campaign(context.Background(), "v0")
		require.NoError(t, err)

		slots, wired := holdWire(t, s, h, "proclaim")
		stale := h.rule("v-stale", true)
		ctx, cancel := context.WithCancel(context.Background())
		failed := make(chan error, 1)
		go func() { failed <- e.Proclaim(ctx, "v-stale") }()
		waitQueued(t, s, 1)
		close(slots[0].release) // its return hands the slot to a flusher, which takes the Proclaim
		waitClosed(t, stale.reached, 5*time.Second, "the flusher took the Proclaim")
		cancel()
		require.ErrorIs(t, recvWithin(t, failed, 5*time.Second, "the cancelled Proclaim"), context.Canceled)
		close(slots[1].release)
		for range maxOnWire {
			require.NoError(t, recvWithin(t, wired, 5*time.Second, "a call held on the wire"))
		}

		// "Proclaim again": it waits until the given-up one has reached
		// Redis, then succeeds.
		again := make(chan error, 1)
		go func() { again <- e.Proclaim(context.Background(), "v-new") }()
		select {
		case err := <-again:
			t.Errorf("the second Proclaim returned (%v) while the first was still on its way to Redis", err)
		case <-time.After(100 * time.Millisecond): // a negative observation window, not a synchronisation
		}
		close(stale.release) // the flusher, on its way, reaches Redis now
		select {
		case <-again:
		default:
			require.NoError(t, recvWithin(t, again, 5*time.Second, "the second Proclaim"))
		}
		assert.Equal(t, "v-new", lead.Value())
		waitOnWire(t, s, 0)
		got, err := e.Leader(context.Background())
		require.NoError(t, err)
		assert.Equal(t, "v-new", got.Value,
			"the stored value reverted to the one whose Proclaim returned %v, after a later Proclaim succeeded", context.Canceled)
		assert.Equal(t, lead.Value(), got.Value, "Leader disagrees with the leadership's own Lock.Value")
		require.NoError(t, s.Close(context.Background()))
		checkNoLeaks(t)
	})
}

// A blocking Lock's next attempt waits until its batched first attempt,
// given up at its call deadline while its batch was on its way, has reached
// Redis: after Release no phantom of the released token is left holding
// the name.
func TestLockRetryWaitsForItsGivenUpAttempt(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		h := &holdHook{}
		b.client.AddHook(h.hook())
		const call = 500 * time.Millisecond
		s := newSession(t, b.client, WithTTL(4*time.Second), WithRenewInterval(time.Second),
			WithCallTimeout(call), WithRetryInterval(20*time.Millisecond))

		slots, wired := holdWire(t, s, h, "phantom")
		key := lease.NewKeys("review-phantom").Lock
		batch := h.rule(key, true) // the batch that carries the Lock's first attempt

		start := time.Now()
		locked := make(chan tryResult, 1)
		go func() {
			l, err := s.Lock(context.Background(), "review-phantom")
			locked <- tryResult{l, err}
		}()
		waitQueued(t, s, 1)
		// A later caller joins the queue: the batch is bounded by its deadline.
		for time.Since(start) < call*6/10 {
			runtimeYield()
		}
		other := tryAll(background(1), s, []string{"review-phantom-other"})[0]
		waitQueued(t, s, 2)
		flushInto(t, slots, wired, batch)

		// The first attempt times out; the second one waits until the
		// first has reached Redis, and then finds the name its own.
		var res tryResult
		select {
		case res = <-locked:
			t.Errorf("Lock's next attempt did not wait for its given-up first attempt (%v)", res.err)
		case <-time.After(time.Until(start.Add(call * 13 / 10))): // a negative observation window past the first attempt's deadline, not a synchronisation
		}
		close(batch.release) // the batch reaches Redis
		if res.l == nil && res.err == nil {
			res = recvWithin(t, locked, 5*time.Second, "Lock")
		}
		require.NoError(t, res.err)
		require.NoError(t, res.l.Release(context.Background()))
		o := recvWithin(t, other, 5*time.Second, "the later caller's TryLock")
		require.NoError(t, o.err)
		require.NoError(t, o.l.Release(context.Background()))
		waitOnWire(t, s, 0)

		// Whatever cleans up must do so within the TTL: give the heartbeat
		// two renewal rounds and more.
		deadline := time.Now().Add(2500 * time.Millisecond)
		for b.get(key) != "" && time.Now().Before(deadline) {
			runtimeYield()
		}
		if v := b.get(key); v != "" {
			hld, _ := lease.ParseHolder(v)
			t.Errorf("after Release, %s holds the released lock's token (%v) again: a phantom lock until its TTL ends", key, hld.Token == res.l.lease.Token)
			s2 := newSession(t, b.client)
			_, err := s2.TryLock(context.Background(), "review-phantom")
			assert.NoError(t, err, "another session cannot take the released name")
			require.NoError(t, s2.Close(context.Background()))
		}
		require.NoError(t, s.Close(context.Background()))
		checkNoLeaks(t)
	})
}

// Close deletes the token of a TryLock cancelled while its batch was on its
// way only after that batch has reached Redis: no token of the closed
// session is left holding the name.
func TestCloseWaitsForAGivenUpBatchedAcquire(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		h := &holdHook{}
		b.client.AddHook(h.hook())
		s, err := NewSession(b.client)
		require.NoError(t, err)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = s.Close(ctx)
		})

		slots, wired := holdWire(t, s, h, "closing")
		key := lease.NewKeys("review-abandoned").Lock
		batch := h.rule(key, true)
		ctx, cancel := context.WithCancel(context.Background())
		try := tryAll([]context.Context{ctx}, s, []string{"review-abandoned"})[0]
		waitQueued(t, s, 1)
		close(slots[0].release)
		waitClosed(t, batch.reached, 5*time.Second, "the flusher took the TryLock")
		cancel()
		res := recvWithin(t, try, 5*time.Second, "the cancelled TryLock")
		require.ErrorIs(t, res.err, context.Canceled)
		close(slots[1].release)
		for range maxOnWire {
			require.NoError(t, recvWithin(t, wired, 5*time.Second, "a call held on the wire"))
		}

		closed := make(chan error, 1)
		go func() { closed <- s.Close(context.Background()) }()
		waitClosed(t, s.Done(), 5*time.Second, "Close started")
		select {
		case err := <-closed:
			t.Errorf("Close returned (%v) while the abandoned acquire was still on its way to Redis", err)
		case <-time.After(100 * time.Millisecond): // a negative observation window, not a synchronisation
		}
		close(batch.release)
		require.NoError(t, recvWithin(t, closed, 5*time.Second, "Close"))
		assert.Empty(t, b.get(key), "after Close returned, the abandoned TryLock's token holds the name until its TTL ends")
		checkNoLeaks(t)
	})
}

// Every call given up while its batch is on the wire holds its key until
// that batch has ended, however many are given up on one key: here two
// acquires of one name, each in a batch of its own, given up in turn, the
// later one's batch ending first. No later call of the session on the key
// (a Leader read, the give-backs of the two attempts) reaches Redis until
// the earlier batch has ended too. (Noticed in review: the key kept only the
// last call given up on it, so the later batch's end freed it.)
func TestEveryGivenUpCallHoldsItsKey(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		s, h := holdSession(t, b)
		key := lease.NewKeys("settle").Lock
		firstBatch, secondBatch := h.rule(key, true), h.rule(key, true)
		freeFirst, freeSecond := freeing(t, firstBatch), freeing(t, secondBatch)
		slots, wired := holdWire(t, s, h, "settle")
		freeWire := []func(){freeing(t, slots[0]), freeing(t, slots[1])}
		tries := make([]chan tryResult, 2)
		cancels := make([]context.CancelFunc, 2)
		for i, batch := range []*holdRule{firstBatch, secondBatch} {
			var tctx context.Context
			tctx, cancels[i] = context.WithCancel(ctx)
			defer cancels[i]()
			tries[i] = tryAll([]context.Context{tctx}, s, []string{"settle"})[0]
			waitQueued(t, s, 1)
			freeWire[i]() // its slot goes to a flusher, which sends the try alone
			waitClosed(t, batch.reached, 5*time.Second, fmt.Sprintf("try %d's batch on the wire", i))
		}
		for i := range tries {
			cancels[i]()
			assert.ErrorIs(t, recvWithin(t, tries[i], 5*time.Second, fmt.Sprintf("try %d", i)).err, context.Canceled)
		}
		later := h.rule(key, true)
		freeLater := freeing(t, later)
		read := leaderAll(t, s, "settle")[0]
		freeSecond()
		select {
		case <-later.reached:
			t.Fatal("a later call on the key reached Redis while the first given-up try was still on the wire")
		case <-time.After(200 * time.Millisecond):
		}
		freeFirst()
		waitClosed(t, later.reached, 5*time.Second, "a later call on the key, once both batches ended")
		freeLater()
		_ = recvWithin(t, read, 5*time.Second, "the Leader read") // either try's token may hold the name by then
		for range maxOnWire {
			require.NoError(t, recvWithin(t, wired, 5*time.Second, "a call held on the wire"))
		}
		waitFreed(t, b.get, key, "a given-up try's token stayed in Redis")
		require.NoError(t, s.Close(ctx))
		checkNoLeaks(t)
	})
}

// WithReplicaAcks: the give-back of an attempt the replicas did not
// acknowledge (a compare-and-delete with the acquisition's token) is sent at
// once, never queued behind the session's other calls, even when the wire is
// full; so it reaches Redis before the acquisition's next attempt and never
// deletes the key of a lock that attempt took (two owners). (When give-backs
// were coalesced, a give-back given up in its batch could land after the
// next attempt; now one on the wire holds up that attempt on its own
// goroutine.)
func TestGiveBackLandsBeforeTheNextAttempt(t *testing.T) {
	primary, _, link := replicated(t)
	c := primary.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	h := &holdHook{}
	c.AddHook(h.hook())
	s := newSession(t, c, WithTTL(12*time.Second), WithRenewInterval(2*time.Second), WithCallTimeout(2*time.Second),
		WithRetryInterval(20*time.Millisecond), WithReplicaAcks(1, 200*time.Millisecond))

	// Fill the wire with two Leader reads (acquires with acks do not coalesce).
	var slots [maxOnWire]*holdRule
	wired := make(chan error, maxOnWire)
	for i := range maxOnWire {
		name := fmt.Sprintf("acks-wire-%d", i)
		r := h.rule(lease.NewKeys(name).Lock, true)
		slots[i] = r
		e, err := s.Election(name)
		require.NoError(t, err)
		go func() {
			_, err := e.Leader(context.Background())
			if errors.Is(err, ErrNoLeader) {
				err = nil
			}
			wired <- err
		}()
		waitClosed(t, r.reached, 5*time.Second, name+" on the wire")
	}
	free := freeing(t, slots[:]...)
	giveBack := h.rule(lease.ReleaseRun.SHA(), true)
	sendGiveBack := freeing(t, giveBack)

	link.Blackhole(faultproxy.Both) // the first attempt is not acknowledged
	locked := make(chan tryResult, 1)
	go func() {
		l, err := s.Lock(context.Background(), "acks-phantom")
		locked <- tryResult{l, err}
	}()
	waitClosed(t, giveBack.reached, 5*time.Second, "the give-back sent while the wire is full")
	assert.Zero(t, s.queued(), "a call queued")
	link.Heal()
	link.ResetConns() // the replica resynchronises: the next attempt is acknowledged
	sendGiveBack()

	res := recvWithin(t, locked, 10*time.Second, "Lock")
	free()
	for range maxOnWire {
		require.NoError(t, recvWithin(t, wired, 5*time.Second, "a Leader read held on the wire"))
	}
	require.NoError(t, res.err)
	assert.EqualValues(t, 1, c.Exists(context.Background(), res.l.Key()).Val(),
		"the held lock's key was deleted by its acquisition's earlier give-back")
	s2 := newSession(t, primary.Client(t))
	l2, err := s2.TryLock(context.Background(), "acks-phantom")
	if err == nil {
		assert.True(t, res.l.Held() && l2.Held(), "both sessions hold the name")
		t.Errorf("another session took the name while the first still holds it (Held=%v): two owners", res.l.Held())
	}
	require.NoError(t, s2.Close(context.Background()))
	require.NoError(t, s.Close(context.Background()))
	checkNoLeaks(t)
}
