package redisleader

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// review39: adversarial tests of the Semaphore and the RWLock.

// A writer that waits when its session closes leaves no intent behind:
// Close releases everything the session put in Redis, so a reader asking
// right after Close is not stopped by a writer that no longer exists (its
// intent would otherwise stop readers for up to a TTL: a minute here).
func TestRWLockCloseWithdrawsWaitingWritersIntent(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		held, err := mustRW(t, newSession(t, b.client, fastOpts()...), "closeintent").RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ws := newSession(t, b.client, WithTTL(time.Minute))
		w := mustRW(t, ws, "closeintent")
		gaveUp := make(chan error, 1)
		go func() { _, err := w.Lock(ctx); gaveUp <- err }()
		waitRWWaiting(t, w, 1)
		if err := ws.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if err := recvWithin(t, gaveUp, time.Second, "the writer's Lock after Close"); !errors.Is(err, ErrSessionClosed) {
			t.Fatalf("Lock: %v, want ErrSessionClosed", err)
		}
		r := mustRW(t, newSession(t, b.client, fastOpts()...), "closeintent")
		if _, err := r.TryRLock(ctx); err != nil {
			t.Fatalf("TryRLock after the waiting writer's session closed: %v (its intent was left behind)", err)
		}
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// A limit key of another type (a list someone else wrote) is refused with
// an error naming the key, as a string there is, and left as it was.
func TestSemaphoreLimitKeyOfAnotherType(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		s := newSession(t, b.client, fastOpts()...)
		m, err := s.Semaphore("limtype", 2)
		if err != nil {
			t.Fatal(err)
		}
		key := m.keys.Limit()
		b.client.RPush(ctx, key, "theirs")
		_, err = m.TryAcquire(ctx)
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Fatalf("TryAcquire on a list at the limit key: %v, want an error naming %s", err, key)
		}
		if _, err := s.SetSemaphoreLimit(ctx, "limtype", 3); err == nil || !strings.Contains(err.Error(), key) {
			t.Fatalf("SetSemaphoreLimit on a list at the limit key: %v, want an error naming %s", err, key)
		}
		if got := b.client.LRange(ctx, key, 0, -1).Val(); len(got) != 1 || got[0] != "theirs" {
			t.Fatalf("the foreign list became %q", got)
		}
		if n := b.client.Exists(ctx, m.keys.Lock).Val(); n != 0 {
			t.Fatalf("the permits' set was written beside a foreign limit key")
		}
	})
}
