// Package metrictest holds what the metrics adapters' tests (the modules
// under adapters/) share: sessions on a miniredis, and the scenario whose
// metrics each adapter checks.
package metrictest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader"
)

// Open starts a miniredis and returns it and a function that opens sessions
// on it with a 300ms TTL and opts; they are closed when the test ends.
func Open(t *testing.T, opts ...redisleader.Option) (*miniredis.Miniredis, func() *redisleader.Session) {
	t.Helper()
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return m, func() *redisleader.Session {
		s, err := redisleader.NewSession(c, append([]redisleader.Option{redisleader.WithTTL(300 * time.Millisecond)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close(context.Background()) })
		return s
	}
}

// WaitEnd waits for l to end and fails t unless it ended with want.
func WaitEnd(t *testing.T, l *redisleader.Lock, want error) {
	t.Helper()
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the lock did not end within 5s")
	}
	if !errors.Is(l.Err(), want) {
		t.Fatalf("Err() = %v, want %v", l.Err(), want)
	}
}

// Steps of the scenario, as passed to its check function.
const (
	Elected    = "elected"     // a leads
	Lost       = "lost"        // a lost its leadership with ErrNotOwner
	Reelected  = "reelected"   // a leads again
	HandedOver = "handed over" // a resigned and b leads
)

// Scenario runs the election the adapters' tests measure, between a and b,
// two sessions' elections of one name on m, and calls check after each
// step with the step and the term that leads then (the lost one after
// Lost):
//   - Elected: a campaigns and leads;
//   - Lost: a's key is deleted behind its back, and a's next renewal ends
//     its term with ErrNotOwner;
//   - Reelected: a campaigns and leads again, while b campaigns too;
//   - HandedOver: a resigns and b leads.
//
// So in the end there were 3 acquisitions, 1 loss (not owner) and 1
// release, 2 terms ended, and b leads.
func Scenario(t *testing.T, m *miniredis.Miniredis, a, b *redisleader.Election, check func(step string, term *redisleader.Lock)) {
	t.Helper()
	ctx := context.Background()
	lead, err := a.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	check(Elected, lead)
	m.Del(lead.Key())
	WaitEnd(t, lead, redisleader.ErrNotOwner)
	check(Lost, lead)
	if lead, err = a.Campaign(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	won := make(chan *redisleader.Lock, 1)
	go func() {
		l, err := b.Campaign(ctx, "b")
		if err != nil {
			t.Error(err)
		}
		won <- l
	}()
	check(Reelected, lead)
	if err := lead.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lead = <-won
	if lead == nil {
		t.FailNow()
	}
	check(HandedOver, lead)
}

// BenchHooks measures what h adds to one acquisition's life: Acquired, one
// renewal round, Released.
func BenchHooks(b *testing.B, h redisleader.Hooks) {
	acq := redisleader.AcquireEvent{Name: "job", Fence: 1, Wait: time.Millisecond}
	end := redisleader.EndEvent{Name: "job", Fence: 1, Held: time.Second, Cause: redisleader.ErrReleased}
	round := redisleader.RenewalEvent{Duration: time.Millisecond, Locks: 1}
	b.ReportAllocs()
	for b.Loop() {
		h.Acquired(acq)
		h.RenewalRound(round)
		h.Released(end)
	}
}
