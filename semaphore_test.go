package redisleader

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// semKey is the permits' set of the semaphore name (internal/lease/semaphore.go).
func semKey(name string) string { return "redisleader:{" + name + "}:sem" }

// mustSemaphore makes s's handle on name with limit n, failing t on error.
func mustSemaphore(t testing.TB, s *Session, name string, n int, opts ...SemaphoreOption) *Semaphore {
	t.Helper()
	m, err := s.Semaphore(name, n, opts...)
	if err != nil {
		t.Fatalf("Semaphore(%q, %d): %v", name, n, err)
	}
	return m
}

// A semaphore gives N permits and no more, each with its own, increasing,
// fence; a release frees one for the next, and a double release is a no-op.
func TestSemaphoreLimit(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		s := newSession(t, b.client, fastOpts()...)
		m := mustSemaphore(t, s, "sem", 3, WithPermitValue("worker"))
		var permits []*Lock
		var last int64
		for i := range 3 {
			l, err := m.TryAcquire(ctx)
			if err != nil {
				t.Fatalf("TryAcquire %d: %v", i, err)
			}
			if l.Fence() <= last {
				t.Fatalf("fence %d after %d: not increasing", l.Fence(), last)
			}
			last = l.Fence()
			permits = append(permits, l)
		}
		_, err := m.TryAcquire(ctx)
		if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "all 3 permits are held") {
			t.Fatalf("4th TryAcquire: %v, want ErrLocked, all 3 permits held", err)
		}
		hs, n, err := m.Holders(ctx)
		if err != nil || n != 3 || len(hs) != 3 {
			t.Fatalf("Holders: %v, %d, %v; want 3 holders, limit 3", hs, n, err)
		}
		for _, h := range hs {
			if h.Value != "worker" || h.Fence == 0 || h.TTL <= 0 {
				t.Fatalf("holder %+v", h)
			}
		}
		if err := permits[1].Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := permits[1].Release(ctx); err != nil {
			t.Fatalf("second Release: %v", err)
		}
		l, err := m.TryAcquire(ctx)
		if err != nil {
			t.Fatalf("TryAcquire after a release: %v", err)
		}
		if l.Fence() <= last {
			t.Fatalf("fence %d after %d: not increasing", l.Fence(), last)
		}
		if _, err := m.TryAcquire(ctx); !errors.Is(err, ErrLocked) {
			t.Fatalf("TryAcquire after a double release: %v, want ErrLocked (a double release frees nothing)", err)
		}
	})
}
