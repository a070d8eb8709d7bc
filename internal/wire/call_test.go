package wire

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redisleader/redisleader/internal/leak"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// boundTransport is a transport that only serves Bound: no client, no I/O.
func boundTransport(callTimeout time.Duration) *Transport {
	return &Transport{cfg: Config{CallTimeout: callTimeout}}
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
	if g := leak.Wait(2*time.Second, "wire.(*doneState)"); g != "" {
		t.Fatalf("doneState callbacks still running:\n%s", g)
	}
}

func TestBoundDoneClosesAtDeadline(t *testing.T) {
	s := boundTransport(30 * time.Millisecond)
	ctx := s.Bound(context.Background(), time.Time{})
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
	derived, cancel := context.WithCancel(s.Bound(context.Background(), time.Time{}))
	defer cancel()
	waitDone(t, derived.Done(), 2*time.Second, "derived context")
	assert.Equal(t, context.DeadlineExceeded, derived.Err())
	noDoneStateGoroutines(t)
}

func TestBoundDoneClosesWithParent(t *testing.T) {
	s := boundTransport(time.Hour)
	parent, cancel := context.WithCancel(context.Background())
	ctx := s.Bound(parent, time.Time{})
	ch := ctx.Done()
	assert.False(t, isClosed(ch))
	cancel()
	waitDone(t, ch, 2*time.Second, "parent cancelled")
	assert.Equal(t, context.Canceled, ctx.Err())
	assert.Equal(t, ch, ctx.Done())
	Unbind(ctx)
	assert.Equal(t, context.Canceled, ctx.Err(), "Err does not change once set")
	assert.Empty(t, s.dones.idle, "a state whose callback ran is not reused")

	// A parent that is done already: Done is closed from the start.
	ctx = s.Bound(parent, time.Time{})
	assert.True(t, isClosed(ctx.Done()))
	assert.Equal(t, context.Canceled, ctx.Err())
	noDoneStateGoroutines(t)
}

// Err is exact: non-nil from the deadline on, even before the timer has run,
// and Done is closed by the time Err has said so; the first reason stays.
func TestBoundErrExact(t *testing.T) {
	s := boundTransport(20 * time.Millisecond)
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	ctx := s.Bound(parent, time.Time{})
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
	d, _ = s.Bound(context.Background(), lease).Deadline()
	assert.Equal(t, lease, d)
	noDoneStateGoroutines(t)
}

// Unbind closes Done, and the transport reuses the state: running Bound, Done
// and Unbind many times keeps one idle state, the same one.
func TestBoundUnbindReusesState(t *testing.T) {
	s := boundTransport(time.Hour)
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	var first *doneState
	for i := range 100 {
		p := context.Background()
		if i%2 == 1 {
			p = parent // also with a parent that can be cancelled
		}
		ctx := s.Bound(p, time.Time{})
		ch := ctx.Done()
		st := ctx.(*boundCtx).st
		if first == nil {
			first = st
		}
		require.Same(t, first, st, "call %d got a new state", i)
		Unbind(ctx)
		require.True(t, isClosed(ch), "Unbind closes Done")
		require.Equal(t, ch, ctx.Done())
		require.Equal(t, context.Canceled, ctx.Err())
		require.Len(t, s.dones.idle, 1)
	}
	// A context unbound before anyone asked for Done never takes a state.
	ctx := s.Bound(context.Background(), time.Time{})
	Unbind(ctx)
	assert.True(t, isClosed(ctx.Done()))
	assert.Len(t, s.dones.idle, 1)
	Unbind(context.Background()) // not from bound: left alone

	// Many calls at once take as many states; afterwards the list keeps at
	// most maxIdleDoneStates of them.
	var ctxs []context.Context
	for range maxIdleDoneStates + 10 {
		ctx := s.Bound(context.Background(), time.Time{})
		ctx.Done()
		ctxs = append(ctxs, ctx)
	}
	for _, ctx := range ctxs {
		Unbind(ctx)
	}
	assert.Len(t, s.dones.idle, maxIdleDoneStates)
	noDoneStateGoroutines(t)
}

// go-redis may call Done from several goroutines on one context (cluster
// pipelines); run with -race.
func TestBoundConcurrentDone(t *testing.T) {
	s := boundTransport(time.Hour)
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range 50 {
		ctx := s.Bound(parent, time.Time{})
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			chans = map[<-chan struct{}]bool{}
		)
		for range 4 {
			Go(&wg, func() {
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
		Go(&wg, func() { Unbind(ctx) })
		Go(&wg, func() { <-ctx.Done() })
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

// Nothing stays registered on a long-lived parent: Unbind unregisters at
// once, and a context that is never unbound unregisters at its deadline.
func TestBoundLeavesNothingOnParent(t *testing.T) {
	s := boundTransport(20 * time.Millisecond)
	p := newCountingParent()

	ctx := s.Bound(p, time.Time{})
	ctx.Done()
	assert.Equal(t, 1, p.registered())
	Unbind(ctx)
	assert.Equal(t, 0, p.registered(), "Unbind unregisters")
	assert.Len(t, s.dones.idle, 1)
	<-p.changed

	ctx = s.Bound(p, time.Time{}) // never unbound, like the pub/sub calls
	ch := ctx.Done()
	assert.Equal(t, 1, p.registered())
	waitDone(t, ch, 2*time.Second, "deadline without Unbind")
	select {
	case <-p.changed:
	case <-time.After(2 * time.Second):
		t.Fatal("the callback was not unregistered at the deadline")
	}
	assert.Equal(t, 0, p.registered())
	assert.Equal(t, context.DeadlineExceeded, ctx.Err())
	noDoneStateGoroutines(t)
}

func TestBoundCtx(t *testing.T) {
	s := boundTransport(50 * time.Millisecond)
	parent, cancel := context.WithCancel(context.Background())
	ctx := s.Bound(parent, time.Time{})
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
	d, _ = s.Bound(parent, lease).Deadline()
	assert.Equal(t, lease, d)
	short, cancelShort := context.WithTimeout(parent, time.Millisecond)
	defer cancelShort()
	assert.Equal(t, short, s.Bound(short, time.Time{}))
	ctx = s.Bound(parent, time.Time{})
	cancel()
	assert.ErrorIs(t, ctx.Err(), context.Canceled)
	<-ctx.Done()
}
