package redisleader

// Hook faults (hookfaults.go): a hook on the user's client that panics,
// ends its goroutine with runtime.Goexit, or refuses a pipeline, on a call
// sent alone, in a shared pipeline, by the heartbeat, Observe, Close, Run's
// release or a Redlock node.

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader/internal/faultproxy"
	"github.com/redisleader/redisleader/internal/redisserver"
	"github.com/redisleader/redisleader/internal/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisleader/redisleader/internal/lease"
)

// A panic in a hook on the user's client, on a call sent alone, fails the
// call with an error naming it and frees the call's slot on the wire: the
// session stays usable and Close finishes.
func TestRecoveredHookPanicFreesTheSlot(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		h := &holdHook{panicOn: map[string]bool{}}
		b.client.AddHook(h.hook())
		s, err := NewSession(b.client, fastOpts()...)
		require.NoError(t, err)
		for i := range maxOnWire {
			key := lease.NewKeys(fmt.Sprintf("review-boom-%d", i)).Lock
			h.mu.Lock()
			h.panicOn[key] = true
			h.mu.Unlock()
			_, err := s.TryLock(context.Background(), fmt.Sprintf("review-boom-%d", i))
			assert.ErrorContains(t, err, "a hook on the client panicked")
		}
		assert.Zero(t, s.onWireNow(), "slots still counted after the calls returned")
		h.panicking() // the tokens' deletes (their outcome was unknown) go through now

		l, err := s.TryLock(context.Background(), "review-after-boom")
		if assert.NoError(t, err, "a TryLock after two recovered panics") {
			require.NoError(t, l.Release(context.Background()))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		err = s.Close(ctx)
		assert.NoError(t, err, "Close")
		if errors.Is(err, context.DeadlineExceeded) {
			t.Log("Close never finished: its stopped goroutine waits in closeCombiner forever")
		}
	})
}

// A hook's panic while a flusher sends a batch (here on the second of two
// queued calls) fails every call of the batch with an error naming it, and
// reaches no caller as a panic: the first caller of a batch can be a
// goroutine of the session (here an Observe reader), where a panic would end
// the process. The session still works and closes. (The panic, on the
// flusher's goroutine, ended the process; then, handed to the first caller,
// it ended it through the Observe reader: found by review.)
func TestRecoveredHookPanicInABatch(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		s, h := holdSession(t, b)
		slots, wired := holdWire(t, s, h, "batch-boom")
		free := freeing(t, slots[:]...)
		e, err := s.Election("batch-boom-head")
		require.NoError(t, err)
		obsCtx, stopObserving := context.WithCancel(ctx)
		defer stopObserving()
		changes := e.Observe(obsCtx) // its first read heads the queue
		waitQueued(t, s, 1)
		h.panicking(lease.NewKeys("batch-boom-other").Lock)
		head := leaderAll(t, s, "batch-boom-head")[0]
		other := leaderAll(t, s, "batch-boom-other")[0]
		waitQueued(t, s, 3)
		free()
		for _, ch := range []chan error{head, other} {
			err := recvWithin(t, ch, 5*time.Second, "a call of the batch")
			assert.ErrorContains(t, err, "a hook on the client panicked", "a call of the batch")
		}
		h.panicking()
		for range maxOnWire {
			require.NoError(t, recvWithin(t, wired, 5*time.Second, "a call held on the wire"))
		}
		l, err := s.TryLock(ctx, "batch-boom-head")
		require.NoError(t, err, "a TryLock after the panic")
		awaitObserved(t, changes, l.Fence()) // the reader lived on, and reads again
		require.NoError(t, l.Release(ctx))
		stopObserving()
		require.NoError(t, s.Close(ctx))
		checkNoLeaks(t)
	})
}

// A hook's panic during a Release that took a queued call along (a pipeline
// of two, sent on a goroutine of the session) fails both calls with an error
// naming it, and the session still works and closes. (Found by review: the
// panic ended the process.)
func TestRecoveredHookPanicInAReleasePipeline(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		s, h, locks, read, freeWire := fullWire(t, b, "pair-boom")
		h.panicking(locks[0].lease.Keys.Lock)
		assert.ErrorContains(t, locks[0].Release(context.Background()), "a hook on the client panicked")
		assert.ErrorContains(t, recvWithin(t, read, 5*time.Second, "the read taken along"), "a hook on the client panicked")
		h.panicking()
		freeWire()
		require.NoError(t, s.Close(context.Background()))
		checkNoLeaks(t)
	})
}

// failHook fails, without sending them, the pipelines that carry a script
// call once armed, as a circuit breaker or rate limiter on the user's client
// does; single commands it fails the same way.
type failHook struct {
	mu    sync.Mutex
	armed bool
}

var errBreaker = errors.New("circuit open (test hook)")

func (f *failHook) on() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.armed }

// hook returns the hook that applies f; it returns errBreaker without
// setting it on the commands, as a hook that refuses a call may.
func (f *failHook) hook() testHook {
	return eachCall(func(ctx context.Context, cmds []redis.Cmder, send sendFunc) error {
		for _, cmd := range cmds {
			if isScript(cmd) && f.on() {
				return errBreaker
			}
		}
		return send(ctx, cmds)
	})
}

// A pipeline hook that refuses a pipeline without running it (a circuit
// breaker, say): every batched call gets the hook's error, as a lone call
// does.
func TestBatchedCallsGetThePipelineHooksError(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		h := &holdHook{}
		f := &failHook{}
		b.client.AddHook(h.hook())
		b.client.AddHook(f.hook())
		s := newSession(t, b.client)
		f.mu.Lock()
		f.armed = true
		f.mu.Unlock()
		_, lone := s.TryLock(context.Background(), "review-lone")
		require.ErrorIs(t, lone, errBreaker, "a lone call reports the hook's error")

		slots, wired := holdWire(t, s, h, "breaker")
		names := []string{"review-breaker-a", "review-breaker-b"}
		results := tryAll(background(len(names)), s, names)
		waitQueued(t, s, len(names))
		for _, r := range slots {
			close(r.release)
		}
		for range maxOnWire {
			assert.ErrorIs(t, recvWithin(t, wired, 5*time.Second, "a call held on the wire"), errBreaker)
		}
		for i, r := range results {
			res := recvWithin(t, r, 5*time.Second, names[i])
			require.Error(t, res.err)
			assert.NotErrorIs(t, res.err, ErrLocked)
			assert.ErrorIs(t, res.err, errBreaker, "%s in a batch: the hook's error is lost", names[i])
		}
		f.mu.Lock()
		f.armed = false
		f.mu.Unlock()
		require.NoError(t, s.Close(context.Background()))
		checkNoLeaks(t)
	})
}

// A hook's panic in the pipeline a Release rode in (here on a queued Leader
// read of another name, which the release took along) fails the release, and
// the delete, which never reached Redis, is retried in the background: the
// name is freed by the heartbeat, not left taken until its TTL. (Found by
// review: the panic, then given to Release's caller, left Lock.del before it
// marked the token for the retry, as it still would for a release sent alone
// (TestReleaseRetriedAfterAHookPanicAlone).)
func TestReleaseRetriedAfterAHookPanic(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		s, h, locks, read, freeWire := fullWire(t, b, "carry-boom")
		other := leaderAll(t, s, "carry-boom-other")[0]
		waitQueued(t, s, 2)
		h.panicking(lease.NewKeys("carry-boom-other").Lock)
		require.ErrorContains(t, locks[0].Release(context.Background()), "a hook on the client panicked")
		h.panicking()
		freeWire()
		assert.Error(t, recvWithin(t, read, 5*time.Second, "the read taken along"), "it rode in the pipeline that panicked")
		assert.Error(t, recvWithin(t, other, 5*time.Second, "the other read"), "it rode in the pipeline that panicked")
		start := time.Now()
		waitFreed(t, b.get, locks[0].lease.Keys.Lock, "the released name is still taken")
		t.Logf("freed %v after the panic", time.Since(start))
		require.NoError(t, s.Close(context.Background()))
		checkNoLeaks(t)
	})
}

// A hook's panic on a release sent alone fails Release with an error naming
// it, and the delete, which never reached Redis, is retried in the
// background: the heartbeat frees the name.
func TestReleaseRetriedAfterAHookPanicAlone(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		h := &holdHook{}
		b.client.AddHook(h.hook())
		s := newSession(t, b.client, WithTTL(3*time.Second))
		l, err := s.TryLock(context.Background(), "alone-boom")
		require.NoError(t, err)
		h.panicking(l.lease.Keys.Lock)
		assert.ErrorContains(t, l.Release(context.Background()), "a hook on the client panicked")
		h.panicking()
		waitFreed(t, b.get, l.lease.Keys.Lock, "the released name is still taken")
		require.NoError(t, s.Close(context.Background()))
		checkNoLeaks(t)
	})
}

// WithReplicaAcks: a hook's panic on the give-back of an attempt the
// replicas did not acknowledge (sent alone, on the caller's goroutine) fails
// the give-back, and the token the attempt left on the primary is deleted,
// not left holding the name for a TTL. (Found by review: the panic unwound
// the acquisition past its clean-up.)
func TestGiveBackRetriedAfterAHookPanic(t *testing.T) {
	primary, _, link := replicated(t)
	c := primary.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	h := &holdHook{panicOn: map[string]bool{lease.ReleaseRun.SHA(): true}}
	c.AddHook(h.hook())
	s := newSession(t, c, WithTTL(30*time.Second), WithRenewInterval(300*time.Millisecond), WithCallTimeout(2*time.Second),
		WithRetryInterval(20*time.Millisecond), WithReplicaAcks(1, 200*time.Millisecond))
	link.Blackhole(faultproxy.Both) // the attempt is not acknowledged
	_, err := s.TryLock(context.Background(), "gb-boom")
	assert.Error(t, err, "TryLock of an unacknowledged attempt")
	link.Heal()
	h.panicking()
	waitFreed(t, func(k string) string { return c.Get(context.Background(), k).Val() }, lease.NewKeys("gb-boom").Lock,
		"the unacknowledged attempt's token still holds the name (TTL 30s)")
	require.NoError(t, s.Close(context.Background()))
	checkNoLeaks(t)
}

// faultHook, once set, panics, or with goexit ends its goroutine
// (runtime.Goexit, as t.FailNow does), on every script call or pipeline
// carrying match (anyScript: every script call), before it is sent or, with
// after, once it has run.
type faultHook struct {
	mu            sync.Mutex
	match         string
	goexit, after bool
	fired         chan struct{} // closed at the first fault after set
	said          string        // the arguments the first panic after set quoted
}

const anyScript = "*"

func (f *faultHook) set(match string, goexit, after bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.match, f.goexit, f.after, f.fired, f.said = match, goexit, after, make(chan struct{}), ""
}

// fire faults if a command of cmds carries the match and when (after or
// before sending) is when the hook faults.
func (f *faultHook) fire(after bool, cmds ...redis.Cmder) {
	f.mu.Lock()
	match, goexit, hit := f.match, f.goexit, false
	var args []any
	if f.after == after && match != "" {
		for _, cmd := range cmds {
			args = append(args, cmd.Args()...)
			hit = hit || (match == anyScript && isScript(cmd)) || carries(cmd, match)
		}
	}
	said := fmt.Sprint(args)
	if hit && !goexit && f.said == "" {
		f.said = said
	}
	if hit {
		select {
		case <-f.fired:
		default:
			close(f.fired)
		}
	}
	f.mu.Unlock()
	switch {
	case hit && goexit:
		runtime.Goexit()
	case hit:
		panic("user hook panics (test) on " + said) // as a logging hook might, quoting tokens
	}
}

// hook returns the hook that applies f.
func (f *faultHook) hook() testHook {
	return eachCall(func(ctx context.Context, cmds []redis.Cmder, send sendFunc) error {
		f.fire(false, cmds...)
		err := send(ctx, cmds)
		f.fire(true, cmds...)
		return err
	})
}

// A hook that ends the goroutine sending a shared pipeline (runtime.Goexit,
// which recover does not see) fails the pipeline's calls with an error
// saying so, and gives its place on the wire back: here a release's pipeline,
// then a flusher's batch. The session still works, and Close returns. (Found
// by review: the release's pipeline stayed counted on the wire, and Close
// waited for it forever.)
func TestHookGoexitInASharedPipeline(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		g := &faultHook{}
		b.client.AddHook(g.hook())
		s, h, locks, read, freeWire := fullWire(t, b, "goexit")
		g.set(locks[0].lease.Keys.Lock, true, false)
		assert.ErrorIs(t, locks[0].Release(ctx), wire.ErrHookGoexit, "the release, which heads its pipeline")
		assert.ErrorIs(t, recvWithin(t, read, 5*time.Second, "the read taken along"), wire.ErrHookGoexit)
		g.set("", false, false)
		freeWire()
		assert.Zero(t, s.onWireNow(), "calls counted on the wire")

		slots, wired := holdWire(t, s, h, "goexit-batch")
		free := freeing(t, slots[:]...)
		reads := leaderAll(t, s, "goexit-batch-a", "goexit-batch-b")
		waitQueued(t, s, 2)
		g.set(lease.NewKeys("goexit-batch-a").Lock, true, false)
		free()
		for _, ch := range reads {
			assert.ErrorIs(t, recvWithin(t, ch, 5*time.Second, "a read of the flusher's batch"), wire.ErrHookGoexit)
		}
		g.set("", false, false)
		for range maxOnWire {
			require.NoError(t, recvWithin(t, wired, 5*time.Second, "a call held on the wire"))
		}
		l, err := s.TryLock(ctx, "goexit-after")
		require.NoError(t, err, "a TryLock after the goroutines ended")
		require.NoError(t, l.Release(ctx))
		closed := make(chan error, 1)
		go func() { closed <- s.Close(ctx) }()
		require.NoError(t, recvWithin(t, closed, 5*time.Second, "Close"))
		checkNoLeaks(t)
	})
}

// A hook that panics after a lone acquire ran in Redis (a tracing hook
// failing on the reply, say) fails the attempt with an error naming the
// panic: its outcome is unknown to the caller, and the token it left is
// deleted, not left holding the name for a TTL. (Found by review: the
// panic unwound TryLock past its clean-up.)
func TestHookPanicAfterALoneAcquireRan(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		key := lease.NewKeys("after-boom").Lock
		f := &faultHook{}
		f.set(key, false, true)
		b.client.AddHook(f.hook())
		s := newSession(t, b.client, WithTTL(30*time.Second), WithRenewInterval(300*time.Millisecond))
		_, err := s.TryLock(context.Background(), "after-boom")
		assert.ErrorContains(t, err, "a hook on the client panicked")
		f.mu.Lock()
		said := f.said
		f.mu.Unlock()
		require.NotEmpty(t, said)
		assert.NotContains(t, err.Error(), said, "the error quotes what the panic said: the acquire's arguments, its token among them")
		f.set("", false, false)
		waitFreed(t, b.get, key, "the token of the attempt whose hook panicked still holds the name (TTL 30s)")
		require.NoError(t, s.Close(context.Background()))
		checkNoLeaks(t)
	})
}

// A hook that panics on one Redlock node's calls, sent on goroutines of the
// session, fails that node's answers; the quorum of the other two takes the
// lock. (Found by review: the panic ended the process.)
func TestRedlockNodeHookPanic(t *testing.T) {
	s, _ := faultyRedlock(t, 1, false)
	l, err := s.TryLock(context.Background(), "node-boom")
	require.NoError(t, err, "a quorum of two")
	require.NoError(t, l.Release(context.Background()))
	require.NoError(t, s.Close(context.Background()))
	checkNoLeaks(t)
}

// A hook that ends the goroutines of a Redlock acquire's node calls
// (runtime.Goexit) leaves the acquire without answers: TryLock ends with its
// context, and Close returns. (Found by review: TryLock waited for the
// answers forever.)
func TestRedlockNodeHookGoexit(t *testing.T) {
	s, f := faultyRedlock(t, 3, true)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		_, err := s.TryLock(ctx, "node-goexit")
		done <- err
	}()
	assert.Error(t, recvWithin(t, done, 5*time.Second, "TryLock, its node calls ended by a hook's Goexit"))
	f.set("", false, false)
	closed := make(chan error, 1)
	go func() { closed <- s.Close(context.Background()) }()
	require.NoError(t, recvWithin(t, closed, 5*time.Second, "Close"))
	checkNoLeaks(t)
}

// faultyRedlock returns a Redlock session on three nodes whose first faulty
// clients have a faultHook, set to fault (with goexit, by runtime.Goexit) on
// every script call.
func faultyRedlock(t *testing.T, faulty int, goexit bool) (*Session, *faultHook) {
	_, cs := redlockNodes(t, 3)
	f := &faultHook{}
	f.set(anyScript, goexit, false)
	for _, c := range cs[:faulty] {
		c.(*redis.Client).AddHook(f.hook())
	}
	s, err := NewRedlockSession(cs, fastOpts()...)
	require.NoError(t, err)
	return s, f
}

// A hook that ends the heartbeat's goroutine in a renewal round
// (runtime.Goexit) does not leave the session without renewals: a lock
// held then is renewed again once the hook stops. (Found by review: the
// heartbeat never came back, and every lock of the session expired on a
// healthy Redis.)
func TestHeartbeatSurvivesAHookGoexit(t *testing.T) {
	srv := redisserver.Start(t)
	c := srv.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	f := &faultHook{}
	c.AddHook(f.hook())
	s := newSession(t, c, fastOpts()...)
	ctx := context.Background()
	f.set(lease.RenewRun.SHA(), true, false)
	fired := f.fired
	l, err := s.TryLock(ctx, "hb-goexit")
	require.NoError(t, err)
	waitClosed(t, fired, 5*time.Second, "the hook ended the heartbeat in a renewal")
	f.set("", false, false)
	before := l.Deadline()
	start := time.Now()
	for !l.Deadline().After(before) {
		require.NoError(t, l.Err(), "the lock ended on a healthy Redis")
		require.Less(t, time.Since(start), 5*time.Second, "no renewal after the hook stopped (TTL 600ms)")
		runtimeYield()
	}
	require.NoError(t, l.Release(ctx))
	require.NoError(t, s.Close(ctx))
	checkNoLeaks(t)
}

// A hook that ends the heartbeat's goroutine (runtime.Goexit) in the
// once-per-session server check (CONFIG GET, INFO) does not make the new
// heartbeat check again before any renewal: the check is cut short once,
// and the lock is renewed on a healthy Redis. (A heartbeat that forgot it
// had checked restarted in a tight loop and never renewed.)
func TestHeartbeatGoexitInTheServerCheck(t *testing.T) {
	_, c := newMini(t)
	count := &countingHook{match: "maxmemory-policy"}
	f := &faultHook{}
	f.set("maxmemory-policy", true, false)
	c.AddHook(count.hook()) // outermost: sees every check
	c.AddHook(f.hook())
	s := newSession(t, c, fastOpts()...) // TTL 600ms, renewals every 100ms
	ctx := context.Background()
	l, err := s.TryLock(ctx, "hb-check-goexit")
	require.NoError(t, err)
	waitClosed(t, f.fired, 5*time.Second, "the server check")
	before := l.Deadline()
	start := time.Now()
	for !l.Deadline().After(before) {
		require.NoError(t, l.Err(), "the lock ended on a healthy Redis (server checks run: %d)", count.n.Load())
		require.Less(t, time.Since(start), 5*time.Second, "no renewal after the check was cut short (TTL 600ms)")
		runtimeYield()
	}
	assert.Equal(t, int64(1), count.n.Load(), "server checks run")
	require.NoError(t, l.Release(ctx))
	require.NoError(t, s.Close(ctx))
	checkNoLeaks(t)
}

// A hook that ends the heartbeat's goroutine (runtime.Goexit) after each
// renewal has run in Redis makes every round fail: the new heartbeat
// retries after the retry delay, as after any failed round, not at once
// (it armed at the earliest lease's last renewal plus the interval, long
// past, and sent renewals back to back until the lock's deadline).
func TestHeartbeatGoexitRetriesAfterTheRetryDelay(t *testing.T) {
	_, c := newMini(t)
	count := &countingHook{match: lease.RenewRun.SHA()}
	f := &faultHook{}
	c.AddHook(count.hook()) // outermost: counts what is sent
	c.AddHook(f.hook())
	s := newSession(t, c, fastOpts()...) // TTL 600ms, renew every 100ms, retry 20ms + jitter
	ctx := context.Background()
	l, err := s.TryLock(ctx, "hb-goexit-flood")
	require.NoError(t, err)
	f.set(lease.RenewRun.SHA(), true, true) // after the renewal ran
	waitClosed(t, l.Done(), 5*time.Second, "the lock's end (its renewals' replies never reach the heartbeat)")
	f.set("", false, false)
	// At most a TTL of retries every 20ms or more: 30, and a margin.
	assert.Less(t, count.n.Load(), int64(60), "renewals sent while the hook ended the heartbeat after each")
	require.NoError(t, s.Close(ctx))
	checkNoLeaks(t)
}

// A Redlock read whose goroutine a hook ends (runtime.Goexit) on two of
// three nodes is a failure there, not "nobody holds the key": Leader
// reports that no quorum answered, never ErrNoLeader while the leader holds
// every node.
func TestRedlockLeaderWithGoexitNodes(t *testing.T) {
	s, f := faultyRedlock(t, 2, true)
	f.set("", false, false)
	ctx := context.Background()
	l, err := s.TryLock(ctx, "rl-leader-goexit")
	require.NoError(t, err)
	e, err := s.Election("rl-leader-goexit")
	require.NoError(t, err)
	f.set(lease.InspectRun.SHA(), true, false)
	_, err = e.Leader(ctx)
	f.set("", false, false)
	require.Error(t, err, "two of three nodes did not answer")
	assert.NotErrorIs(t, err, ErrNoLeader)
	ldr, err := e.Leader(ctx)
	require.NoError(t, err, "once the hook is healthy")
	assert.Equal(t, l.Fence(), ldr.Fence)
	require.NoError(t, l.Release(ctx))
	require.NoError(t, s.Close(ctx))
	checkNoLeaks(t)
}

// goexits runs f on a goroutine and reports whether a hook ended that
// goroutine (runtime.Goexit) before f returned.
func goexits(t *testing.T, f func()) bool {
	t.Helper()
	exited := make(chan bool, 1)
	go func() {
		returned := false
		defer func() { exited <- returned }()
		f()
		returned = true
	}()
	return !recvWithin(t, exited, 5*time.Second, "the goroutine")
}

// A hook that ends Close's goroutine (runtime.Goexit) while Close deletes
// the session's keys does not leave the session half closed: its
// goroutines stop, and a later Close returns once they have.
func TestHookGoexitInClose(t *testing.T) {
	_, c := newMini(t)
	f := &faultHook{}
	c.AddHook(f.hook())
	s, err := NewSession(c, fastOpts()...)
	require.NoError(t, err)
	ctx := context.Background()
	_, err = s.TryLock(ctx, "close-goexit")
	require.NoError(t, err)
	f.set(lease.ReleaseRun.SHA(), true, false)
	require.True(t, goexits(t, func() { _ = s.Close(ctx) }), "Close returned: the hook did not end its goroutine")
	f.set("", false, false)
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	assert.NoError(t, s.Close(cctx), "a second Close")
	checkNoLeaks(t)
}

// A hook that ends Run's goroutine (runtime.Goexit) while Run deletes its
// term's key, once onElected has returned, still ends the term: the
// heartbeat deletes the key (TTL 30s), and Close does not wait for the term.
func TestHookGoexitInRunsRelease(t *testing.T) {
	m, c := newMini(t)
	f := &faultHook{}
	c.AddHook(f.hook())
	s, err := NewSession(c, WithTTL(30*time.Second), WithRenewInterval(200*time.Millisecond), WithRetryInterval(20*time.Millisecond))
	require.NoError(t, err)
	e, err := s.Election("run-goexit")
	require.NoError(t, err)
	ctx := context.Background()
	require.True(t, goexits(t, func() {
		_ = e.Run(ctx, "v", func(context.Context, *Lock) error {
			f.set(lease.ReleaseRun.SHA(), true, false) // Run's delete of the term, next
			return errors.New("done leading (test)")
		})
	}), "Run returned: the hook did not end its goroutine")
	f.set("", false, false)
	waitFreed(t, func(k string) string { v, _ := m.Get(k); return v }, lease.NewKeys("run-goexit").Lock,
		"the term's key stayed (TTL 30s)")
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	assert.NoError(t, s.Close(cctx))
	checkNoLeaks(t)
}

// A hook that ends the caller's goroutine (runtime.Goexit) after a lone
// acquire ran in Redis (a test's t.FailNow in a tracing hook, say) leaves
// the token to the heartbeat, which deletes it, as after a hook's panic
// (TestHookPanicAfterALoneAcquireRan): the name is not held for the TTL.
func TestHookGoexitAfterALoneAcquireRan(t *testing.T) {
	m, c := newMini(t)
	key := lease.NewKeys("after-goexit").Lock
	f := &faultHook{}
	c.AddHook(f.hook())
	s := newSession(t, c, WithTTL(30*time.Second), WithRenewInterval(300*time.Millisecond))
	warm, err := s.TryLock(context.Background(), "goexit-warm") // the script is cached: the next acquire is one EVALSHA
	require.NoError(t, err)
	require.NoError(t, warm.Release(context.Background()))
	f.set(key, true, true)
	require.True(t, goexits(t, func() { _, _ = s.TryLock(context.Background(), "after-goexit") }),
		"TryLock returned: the hook did not end its goroutine")
	f.set("", false, false)
	require.NotEmpty(t, func() string { v, _ := m.Get(key); return v }(), "the acquire did not run")
	waitFreed(t, func(k string) string { v, _ := m.Get(k); return v }, key,
		"the token of the attempt whose hook ended the goroutine still holds the name (TTL 30s)")
	require.NoError(t, s.Close(context.Background()))
	checkNoLeaks(t)
}

// A hook that ends an Observe reader's goroutine (runtime.Goexit) in a
// read does not close the channel, which closes only when its ctx ends or
// the session closes: the observer goes on and reports the next leader.
func TestObserveSurvivesAHookGoexit(t *testing.T) {
	_, c := newMini(t)
	f := &faultHook{}
	c.AddHook(f.hook())
	s := newSession(t, c, fastOpts()...)
	e, err := s.Election("observe-goexit")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.set(lease.InspectRun.SHA(), true, false)
	fired := f.fired
	changes := e.Observe(ctx)
	waitClosed(t, fired, 5*time.Second, "the Observe read")
	f.set("", false, false)
	l, err := s.TryLock(ctx, "observe-goexit")
	require.NoError(t, err)
	awaitObserved(t, changes, l.Fence())
	require.NoError(t, l.Release(ctx))
	cancel()
	for range changes { // closed once ctx has ended
	}
	require.NoError(t, s.Close(context.Background()))
	checkNoLeaks(t)
}

// replyLike is a panic value that looks like a reply from Redis.
type replyLike string

func (e replyLike) Error() string { return string(e) }
func (replyLike) RedisError()     {}

// panicOnce panics with v on the first script call once armed (fire, as a
// beforeHook).
type panicOnce struct {
	armed atomic.Bool
	v     any
}

func (h *panicOnce) fire(cmds ...redis.Cmder) {
	for _, cmd := range cmds {
		if isScript(cmd) && h.armed.CompareAndSwap(true, false) {
			panic(h.v)
		}
	}
}

// A hook's panic is never taken for Redis's reply, whatever its value
// says: a blocking Lock whose attempt a hook panicked in with a value that
// reads as WRONGTYPE retries, as after any failure to hear Redis, instead of
// giving up on an error Redis never sent.
func TestHookPanicIsNotARedisReply(t *testing.T) {
	_, c := newMini(t)
	h := &panicOnce{v: replyLike("WRONGTYPE Operation against a key holding the wrong kind of value")}
	c.AddHook(beforeHook(h.fire))
	s := newSession(t, c, fastOpts()...)
	h.armed.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err := s.Lock(ctx, "reply-like")
	require.NoError(t, err, "a blocking Lock after a hook's panic")
	require.False(t, h.armed.Load(), "the hook did not panic")
	require.NoError(t, l.Release(ctx))
	require.NoError(t, s.Close(ctx))
	checkNoLeaks(t)
}

// awaitObserved reads changes until a leader with fence arrives; the
// channel must stay open meanwhile.
func awaitObserved(t *testing.T, changes <-chan Leader, fence int64) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case ch, ok := <-changes:
			require.True(t, ok, "the Observe channel closed while its ctx and the session were open")
			if ch.Fence == fence {
				return
			}
		case <-deadline:
			t.Fatal("the Observe reader never reported the new leader")
		}
	}
}
