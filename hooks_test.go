package redisleader

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redisleader/redisleader/internal/probe"

	"github.com/redisleader/redisleader/internal/lease"
)

// recordHooks returns hooks that send every event, as a string, to the
// returned channel, and the channel. Renewal rounds are sent only when
// rounds is true.
func recordHooks(rounds bool) (Hooks, <-chan string) {
	ch := make(chan string, 256)
	h := Hooks{
		Acquired: func(e AcquireEvent) {
			if e.Wait < 0 {
				ch <- "negative wait"
			}
			ch <- fmt.Sprintf("acquired %s %d", e.Name, e.Fence)
		},
		Lost: func(e EndEvent) { ch <- fmt.Sprintf("lost %s %d %v", e.Name, e.Fence, e.Cause) },
		Released: func(e EndEvent) {
			if e.Held <= 0 {
				ch <- "held not positive"
			}
			ch <- fmt.Sprintf("released %s %d %v", e.Name, e.Fence, e.Cause)
		},
		LeaderChanged: func(e LeaderEvent) {
			ch <- fmt.Sprintf("leader %s %q %d %v", e.Name, e.Leader.Value, e.Leader.Fence, e.Initial)
		},
	}
	if rounds {
		h.RenewalRound = func(e RenewalEvent) {
			ch <- fmt.Sprintf("round %d %d", e.Locks, e.Failures)
		}
	}
	return h, ch
}

// expectEvent waits for the next event and fails t unless it is want.
func expectEvent(t *testing.T, ch <-chan string, want string) {
	t.Helper()
	select {
	case got := <-ch:
		if got != want {
			t.Fatalf("event %q, want %q", got, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no event within 5s, want %q", want)
	}
}

// tryLockReported takes name with TryLock and expects its Acquired event.
func tryLockReported(t *testing.T, s *Session, events <-chan string, name string) *Lock {
	t.Helper()
	l, err := s.TryLock(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	expectEvent(t, events, fmt.Sprintf("acquired %s %d", name, l.Fence()))
	return l
}

func TestHooksLockLifecycle(t *testing.T) {
	m, c := newMini(t)
	h, events := recordHooks(false)
	s := newSession(t, c, WithTTL(time.Second), WithHooks(h))
	ctx := context.Background()

	l := tryLockReported(t, s, events, "job")
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, events, fmt.Sprintf("released job %d %v", l.Fence(), ErrReleased))

	// The key deleted behind the owner's back: the next renewal finds it gone.
	l = tryLockReported(t, s, events, "job")
	m.Del(l.Key())
	expectEvent(t, events, fmt.Sprintf("lost job %d %v", l.Fence(), ErrNotOwner))

	l = tryLockReported(t, s, events, "job")
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, events, fmt.Sprintf("released job %d %v", l.Fence(), ErrSessionClosed))
	if err := l.Release(ctx); !errors.Is(err, ErrSessionClosed) {
		t.Fatalf("Release after Close: %v", err)
	}
	select {
	case e := <-events:
		t.Fatalf("unexpected event %q", e)
	default:
	}
}

func TestHooksRenewalFailureAndExpiry(t *testing.T) {
	m, c := newMini(t)
	h, events := recordHooks(true)
	s := newSession(t, c, WithTTL(300*time.Millisecond), WithHooks(h))
	l := tryLockReported(t, s, events, "job")
	expectEvent(t, events, "round 1 0")
	m.SetError("LOADING (test)")
	expectEvent(t, events, "round 1 1")
	// Retried until the local deadline, where the lock is lost.
	for {
		select {
		case e := <-events:
			if e == "round 1 1" {
				continue
			}
			if want := fmt.Sprintf("lost job %d %v", l.Fence(), ErrExpired); e != want {
				t.Fatalf("event %q, want %q", e, want)
			}
			m.SetError("")
			return
		case <-time.After(5 * time.Second):
			t.Fatal("the lock was not lost within 5s")
		}
	}
}

func TestHooksObserve(t *testing.T) {
	_, c := newMini(t)
	h, events := recordHooks(false)
	s := newSession(t, c, WithTTL(time.Second), WithHooks(h))
	e, err := s.Election("svc")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := e.Observe(ctx)
	<-ch
	expectEvent(t, events, `leader svc "" 0 true`)

	lead, err := e.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	// The acquisition and the observer's read race; both arrive.
	got := map[string]bool{<-events: true, <-events: true}
	for _, want := range []string{fmt.Sprintf("acquired svc %d", lead.Fence()), fmt.Sprintf(`leader svc "a" %d false`, lead.Fence())} {
		if !got[want] {
			t.Fatalf("events %v, want %q among them", got, want)
		}
	}
}

func TestWithHooksChains(t *testing.T) {
	_, c := newMini(t)
	var order []string
	first := Hooks{Acquired: func(AcquireEvent) { order = append(order, "first") }}
	second := Hooks{
		Acquired: func(AcquireEvent) { order = append(order, "second") },
		Released: func(EndEvent) { order = append(order, "released") },
	}
	s := newSession(t, c, WithHooks(first), WithHooks(Hooks{}), WithHooks(second))
	l, err := s.TryLock(context.Background(), "job")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(order); got != "[first second released]" {
		t.Fatalf("hooks ran as %s", got)
	}
}

// TestHooksAllocs: reporting an event costs no allocation, with hooks set or
// not.
func TestHooksAllocs(t *testing.T) {
	var n atomic.Int64
	set := Hooks{
		Acquired:      func(AcquireEvent) { n.Add(1) },
		Lost:          func(EndEvent) { n.Add(1) },
		Released:      func(EndEvent) { n.Add(1) },
		RenewalRound:  func(RenewalEvent) { n.Add(1) },
		LeaderChanged: func(LeaderEvent) { n.Add(1) },
	}
	for _, h := range []Hooks{{}, set} {
		l := &Lock{s: &Session{cfg: config{hooks: h}}, lease: lease.Lease{Keys: lease.NewKeys("job")}, value: "v", fence: 7, delivered: true, deliveredAt: time.Since(hookEpoch)}
		allocs := testing.AllocsPerRun(100, func() {
			now := time.Now()
			l.emitLocked(probe.Acquired, now, 0)
			l.err = ErrReleased
			l.emitLocked(probe.Ended, now, 0)
			l.err = ErrNotOwner
			l.emitLocked(probe.Ended, now, 0)
			h.round(now, 1, 0)
			h.observed("job", Leader{Value: "v", Fence: 7}, false)
		})
		if allocs != 0 {
			t.Errorf("%d allocations per set of events", int(allocs))
		}
	}
	if n.Load() == 0 {
		t.Fatal("the hooks were not called")
	}
}

// BenchmarkLockPairHooks is BenchmarkLockPair's library pair with every hook
// set, to compare with it (allocations exact, time noisy).
//
//	go test -run '^$' -bench 'LockPair(Hooks)?$' -benchmem .
func BenchmarkLockPairHooks(b *testing.B) {
	var n atomic.Int64
	_, s := benchServer(b, WithHooks(Hooks{
		Acquired:     func(AcquireEvent) { n.Add(1) },
		Released:     func(EndEvent) { n.Add(1) },
		Lost:         func(EndEvent) { n.Add(1) },
		RenewalRound: func(RenewalEvent) { n.Add(1) },
	}))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		libPair(ctx, b, s)
	}
	if n.Load() == 0 {
		b.Fatal("the hooks were not called")
	}
}
