package redisleader

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader/internal/leak"
	"github.com/redisleader/redisleader/internal/redisserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// boundSession is a session that only serves bound: no heartbeat, no I/O.
func boundSession(callTimeout time.Duration) *Session {
	s := &Session{}
	s.cfg.callTimeout = callTimeout
	return s
}

// isClosed reports whether ch is closed, without waiting.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// waitDone waits up to within for ch to close and returns when it did.
func waitDone(t *testing.T, ch <-chan struct{}, within time.Duration, what string) time.Time {
	t.Helper()
	select {
	case <-ch:
		return time.Now()
	case <-time.After(within):
		t.Fatalf("%s: Done not closed within %v", what, within)
		return time.Time{}
	}
}

// noDoneStateGoroutines fails t if a callback of a doneState still runs.
func noDoneStateGoroutines(t *testing.T) {
	t.Helper()
	if g := leak.Wait(2*time.Second, "redisleader.(*doneState)"); g != "" {
		t.Fatalf("doneState callbacks still running:\n%s", g)
	}
}

func TestBoundDoneClosesAtDeadline(t *testing.T) {
	s := boundSession(30 * time.Millisecond)
	ctx := s.bound(context.Background(), time.Time{})
	d, ok := ctx.Deadline()
	require.True(t, ok)
	ch := ctx.Done()
	assert.Equal(t, ch, ctx.Done(), "Done returns one channel")
	assert.False(t, isClosed(ch))
	assert.NoError(t, ctx.Err())

	closed := waitDone(t, ch, 2*time.Second, "deadline")
	assert.False(t, closed.Before(d), "Done closed %v before the deadline", d.Sub(closed))
	assert.Less(t, closed.Sub(d), 20*time.Millisecond, "Done closed late")
	assert.Equal(t, context.DeadlineExceeded, ctx.Err())
	assert.Equal(t, ch, ctx.Done())
	got, _ := ctx.Deadline()
	assert.Equal(t, d, got, "Deadline does not move")

	// A context derived from it (as a go-redis hook might make) ends too.
	derived, cancel := context.WithCancel(s.bound(context.Background(), time.Time{}))
	defer cancel()
	waitDone(t, derived.Done(), 2*time.Second, "derived context")
	assert.Equal(t, context.DeadlineExceeded, derived.Err())
	noDoneStateGoroutines(t)
}

func TestBoundDoneClosesWithParent(t *testing.T) {
	s := boundSession(time.Hour)
	parent, cancel := context.WithCancel(context.Background())
	ctx := s.bound(parent, time.Time{})
	ch := ctx.Done()
	assert.False(t, isClosed(ch))
	cancel()
	waitDone(t, ch, 2*time.Second, "parent cancelled")
	assert.Equal(t, context.Canceled, ctx.Err())
	assert.Equal(t, ch, ctx.Done())
	unbind(ctx)
	assert.Equal(t, context.Canceled, ctx.Err(), "Err does not change once set")
	assert.Empty(t, s.dones.idle, "a state whose callback ran is not reused")

	// A parent that is done already: Done is closed from the start.
	ctx = s.bound(parent, time.Time{})
	assert.True(t, isClosed(ctx.Done()))
	assert.Equal(t, context.Canceled, ctx.Err())
	noDoneStateGoroutines(t)
}

// Err is exact: non-nil from the deadline on, even before the timer has run,
// and Done is closed by the time Err has said so; the first reason stays.
func TestBoundErrExact(t *testing.T) {
	s := boundSession(20 * time.Millisecond)
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	ctx := s.bound(parent, time.Time{})
	ch := ctx.Done()
	d, _ := ctx.Deadline()
	for {
		closed := isClosed(ch)
		err := ctx.Err()
		if closed {
			require.Error(t, err, "Done closed while Err is nil")
		}
		if err != nil {
			require.True(t, isClosed(ch), "Err set while Done is open")
			break
		}
		<-time.After(time.Until(d) / 2) // polling the clock, not synchronising
	}
	assert.False(t, time.Now().Before(d), "Err set before the deadline")
	cancel()
	assert.Equal(t, context.DeadlineExceeded, ctx.Err(), "the first reason stays")

	// Deadline is exactly the lease's when it comes first.
	lease := time.Now().Add(5 * time.Millisecond)
	d, _ = s.bound(context.Background(), lease).Deadline()
	assert.Equal(t, lease, d)
	noDoneStateGoroutines(t)
}

// unbind closes Done, and the session reuses the state: running bound, Done
// and unbind many times keeps one idle state, the same one.
func TestBoundUnbindReusesState(t *testing.T) {
	s := boundSession(time.Hour)
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	var first *doneState
	for i := range 100 {
		p := context.Background()
		if i%2 == 1 {
			p = parent // also with a parent that can be cancelled
		}
		ctx := s.bound(p, time.Time{})
		ch := ctx.Done()
		st := ctx.(*boundCtx).st
		if first == nil {
			first = st
		}
		require.Same(t, first, st, "call %d got a new state", i)
		unbind(ctx)
		require.True(t, isClosed(ch), "unbind closes Done")
		require.Equal(t, ch, ctx.Done())
		require.Equal(t, context.Canceled, ctx.Err())
		require.Len(t, s.dones.idle, 1)
	}
	// A context unbound before anyone asked for Done never takes a state.
	ctx := s.bound(context.Background(), time.Time{})
	unbind(ctx)
	assert.True(t, isClosed(ctx.Done()))
	assert.Len(t, s.dones.idle, 1)
	unbind(context.Background()) // not from bound: left alone

	// Many calls at once take as many states; afterwards the list keeps at
	// most maxIdleDoneStates of them.
	var ctxs []context.Context
	for range maxIdleDoneStates + 10 {
		ctx := s.bound(context.Background(), time.Time{})
		ctx.Done()
		ctxs = append(ctxs, ctx)
	}
	for _, ctx := range ctxs {
		unbind(ctx)
	}
	assert.Len(t, s.dones.idle, maxIdleDoneStates)
	noDoneStateGoroutines(t)
}

// go-redis may call Done from several goroutines on one context (cluster
// pipelines); run with -race.
func TestBoundConcurrentDone(t *testing.T) {
	s := boundSession(time.Hour)
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range 50 {
		ctx := s.bound(parent, time.Time{})
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			chans = map[<-chan struct{}]bool{}
		)
		for range 4 {
			wgGo(&wg, func() {
				for range 10 {
					ch := ctx.Done()
					_ = ctx.Err()
					mu.Lock()
					chans[ch] = true
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		require.Len(t, chans, 1, "Done returned different channels")
		var ch <-chan struct{}
		for c := range chans {
			ch = c
		}
		wgGo(&wg, func() { unbind(ctx) })
		wgGo(&wg, func() { <-ctx.Done() })
		wg.Wait()
		require.True(t, isClosed(ch))
	}
	noDoneStateGoroutines(t)
}

// countingParent is a long-lived parent context that counts the callbacks
// registered on it through context.AfterFunc (which uses its AfterFunc
// method) and not yet unregistered.
type countingParent struct {
	context.Context // Background: values and no deadline
	done            chan struct{}

	mu        sync.Mutex
	callbacks map[*func()]bool
	changed   chan struct{} // receives after each unregistration
}

func newCountingParent() *countingParent {
	return &countingParent{Context: context.Background(), done: make(chan struct{}),
		callbacks: map[*func()]bool{}, changed: make(chan struct{}, 100)}
}

func (p *countingParent) Done() <-chan struct{} { return p.done }

func (p *countingParent) AfterFunc(f func()) func() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	key := &f
	p.callbacks[key] = true
	return func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		registered := p.callbacks[key]
		delete(p.callbacks, key)
		p.changed <- struct{}{}
		return registered
	}
}

func (p *countingParent) registered() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.callbacks)
}

// Nothing stays registered on a long-lived parent: unbind unregisters at
// once, and a context that is never unbound unregisters at its deadline.
func TestBoundLeavesNothingOnParent(t *testing.T) {
	s := boundSession(20 * time.Millisecond)
	p := newCountingParent()

	ctx := s.bound(p, time.Time{})
	ctx.Done()
	assert.Equal(t, 1, p.registered())
	unbind(ctx)
	assert.Equal(t, 0, p.registered(), "unbind unregisters")
	assert.Len(t, s.dones.idle, 1)
	<-p.changed

	ctx = s.bound(p, time.Time{}) // never unbound, like the pub/sub calls
	ch := ctx.Done()
	assert.Equal(t, 1, p.registered())
	waitDone(t, ch, 2*time.Second, "deadline without unbind")
	select {
	case <-p.changed:
	case <-time.After(2 * time.Second):
		t.Fatal("the callback was not unregistered at the deadline")
	}
	assert.Equal(t, 0, p.registered())
	assert.Equal(t, context.DeadlineExceeded, ctx.Err())
	noDoneStateGoroutines(t)
}

// poolClient is a client with a pool of one connection, as an application
// may configure it, and a PoolTimeout far above the call timeouts below.
func poolClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 1, PoolTimeout: 2 * time.Second})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// holdConn takes the pool's only connection, as an application's blocking
// BLPOP on the same client would, and returns the function that gives it
// back.
func holdConn(t *testing.T, c *redis.Client) (release func()) {
	t.Helper()
	conn := c.Conn()
	require.NoError(t, conn.Ping(context.Background()).Err())
	return func() { _ = conn.Close() }
}

// A call waiting for a connection of a full pool ends at its bound, not at
// the client's PoolTimeout (2s here).
func TestPoolExhaustedCallsBounded(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		const callTimeout = 100 * time.Millisecond
		c := poolClient(t, b.addr)
		s := newSession(t, c, WithTTL(time.Second), WithCallTimeout(callTimeout))
		release := holdConn(t, c)
		defer release()

		// An acquire, then the release of its token (its outcome is unknown).
		start := time.Now()
		_, err := s.TryLock(context.Background(), "pool-trylock")
		took := time.Since(start)
		t.Logf("TryLock returned after %v: %v", took, err)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Less(t, took, 400*time.Millisecond, "TryLock waited for the pool")

		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		start = time.Now()
		_, err = s.Lock(ctx, "pool-lock")
		took = time.Since(start)
		t.Logf("Lock(200ms) returned after %v: %v", took, err)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Less(t, took, 500*time.Millisecond, "Lock waited for the pool")

		el, err := s.Election("pool-election")
		require.NoError(t, err)
		start = time.Now()
		_, err = el.Leader(context.Background())
		took = time.Since(start)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Less(t, took, 300*time.Millisecond, "Leader waited for the pool")

		release()
		l, err := s.TryLock(context.Background(), "pool-trylock")
		require.NoError(t, err, "the session works once the connection is back")
		require.NoError(t, l.Release(context.Background()))
	})
}

// A renewal round stuck on a full pool ends at the lease's local deadline,
// not at PoolTimeout, and the lease ends there by its timer. The timings make
// the third failed round start within a call timeout of the deadline: rounds
// start 333ms after the acquire and fail after 250ms, retried after 1ms.
func TestPoolExhaustedRenewalBounded(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		type round struct {
			at     time.Time
			held   int
			failed bool
		}
		rounds := make(chan round, 100)
		c := poolClient(t, b.addr)
		s := newSession(t, c, WithTTL(time.Second), WithCallTimeout(250*time.Millisecond),
			WithRetryInterval(time.Millisecond), WithRetryJitter(0),
			withRoundHook(func(held int, failed bool) {
				select {
				case rounds <- round{time.Now(), held, failed}:
				default:
				}
			}))
		l, err := s.TryLock(context.Background(), "pool-renew")
		require.NoError(t, err)
		release := holdConn(t, c)
		defer release()

		d := l.Deadline()
		waitClosed(t, l.Done(), 3*time.Second, "lock Done while the pool is exhausted")
		assert.ErrorIs(t, l.Err(), ErrExpired)
		// The first round to end near the deadline is the one in flight there.
		for {
			var r round
			select {
			case r = <-rounds:
			case <-time.After(3 * time.Second):
				t.Fatal("no renewal round ended after the deadline")
			}
			if r.at.Before(d.Add(-50 * time.Millisecond)) {
				assert.True(t, r.failed, "a round before the deadline cannot renew")
				continue
			}
			t.Logf("the round in flight at the deadline ended %v after it (held %d, failed %v)", r.at.Sub(d), r.held, r.failed)
			assert.Less(t, r.at.Sub(d), 100*time.Millisecond, "the round waited for the pool past the lease deadline")
			assert.True(t, r.failed && r.held == 1)
			break
		}
		release()
		l, err = s.TryLock(context.Background(), "pool-renew-after") // the expired key may still be in Redis
		require.NoError(t, err, "the session works once the connection is back")
		require.NoError(t, l.Release(context.Background()))
	})
}

func TestBoundCtx(t *testing.T) {
	_, c := newMini(t)
	s := newSession(t, c, WithCallTimeout(50*time.Millisecond))
	parent, cancel := context.WithCancel(context.Background())
	ctx := s.bound(parent, time.Time{})
	d, ok := ctx.Deadline()
	require.True(t, ok)
	assert.WithinDuration(t, time.Now().Add(50*time.Millisecond), d, 10*time.Millisecond)
	assert.NoError(t, ctx.Err())
	select {
	case <-ctx.Done():
		t.Fatal("Done closed before the deadline")
	default:
	}
	<-time.After(time.Until(d))
	assert.ErrorIs(t, ctx.Err(), context.DeadlineExceeded)
	select {
	case <-ctx.Done():
	default:
		t.Fatal("Done must be closed after the deadline")
	}

	// A lease deadline earlier than the call timeout wins; an earlier parent
	// deadline is kept as it is; cancelling the parent shows through.
	lease := time.Now().Add(10 * time.Millisecond)
	d, _ = s.bound(parent, lease).Deadline()
	assert.Equal(t, lease, d)
	short, cancelShort := context.WithTimeout(parent, time.Millisecond)
	defer cancelShort()
	assert.Equal(t, short, s.bound(short, time.Time{}))
	ctx = s.bound(parent, time.Time{})
	cancel()
	assert.ErrorIs(t, ctx.Err(), context.Canceled)
	<-ctx.Done()
}

// Every call is bounded by the call timeout, whatever Redis does: with the
// server stopped, TryLock and Close return within their bounds.
func TestCallsBoundedWhileRedisPaused(t *testing.T) {
	t.Run("default retries", func(t *testing.T) { testCallsBounded(t, 3) })
	t.Run("many slow retries", func(t *testing.T) { testCallsBounded(t, 10) })
}

func testCallsBounded(t *testing.T, retries int) {
	srv := redisserver.Start(t)
	c := srv.Client(t, func(o *redis.Options) {
		o.ContextTimeoutEnabled = true
		o.MaxRetries = retries
		o.MinRetryBackoff, o.MaxRetryBackoff = 200*time.Millisecond, time.Second
	})
	const callTimeout = 100 * time.Millisecond
	s, err := NewSession(c, WithTTL(time.Second), WithCallTimeout(callTimeout))
	require.NoError(t, err)
	ctx := context.Background()
	held, err := s.TryLock(ctx, "bounded-held")
	require.NoError(t, err)

	srv.Pause(t)
	defer srv.Resume(t)

	start := time.Now()
	_, err = s.TryLock(ctx, "bounded-new")
	took := time.Since(start)
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrLocked, "a timeout is not 'held by another'")
	// One acquire attempt plus the best-effort release of its token.
	assert.Less(t, took, 2*callTimeout+50*time.Millisecond, "TryLock took %v", took)

	start = time.Now()
	err = s.Close(ctx)
	took = time.Since(start)
	assert.Error(t, err, "the release on Close cannot reach Redis")
	// A renewal in flight plus the release, each bounded by the call timeout.
	assert.Less(t, took, 2*callTimeout+50*time.Millisecond, "Close took %v", took)
	assert.ErrorIs(t, held.Err(), ErrSessionClosed)
	checkNoLeaks(t)
}
