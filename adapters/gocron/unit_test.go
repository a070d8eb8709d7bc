package redisgocron

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader"
)

// offline is a session on a client that is never dialled: NewSession and
// Election do no I/O, and Election applies redisleader's naming rules.
func offline(t *testing.T) *redisleader.Session {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return newSession(t, c, time.Second)
}

func TestLockName(t *testing.T) {
	s := offline(t)
	long := strings.Repeat("é", 400) // 800 bytes
	cases := []struct{ prefix, key, want string }{
		{"gocron:", "main.report", "gocron:main.report"},
		{"gocron:", "a{b}c", "gocron:a%7Bb%7Dc"},
		{"gocron:", "50%", "gocron:50%25"},
		{"gocron:", "tab\there\nnl", "gocron:tab%09here%0Anl"},
		{"gocron:", "bad\xffutf8", "gocron:bad%FFutf8"},
		{"gocron:", "zero\u200bwidth", "gocron:zero%E2%80%8Bwidth"},
		{"gocron:", "über job", "gocron:über job"},
		{"gocron:", "", "gocron:"},
	}
	for _, c := range cases {
		if got := LockName(c.prefix, c.key); got != c.want {
			t.Errorf("LockName(%q, %q) = %q, want %q", c.prefix, c.key, got, c.want)
		}
	}

	keys := []string{"", "x", long, long + "x", strings.Repeat("{", 300), strings.Repeat("\x00", 200),
		strings.Repeat("a", 505), strings.Repeat("a", 506), "%~" + strings.Repeat("0", 64)}
	seen := make(map[string]string)
	for _, prefix := range []string{"gocron:", ""} {
		clear(seen)
		for _, k := range keys {
			name := LockName(prefix, k)
			if _, err := s.Election(name); err != nil {
				t.Errorf("LockName(%q, %.20q...) = %.40q...: not a valid name: %v", prefix, k, name, err)
			}
			if strings.IndexFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
				t.Errorf("LockName(%q, %.20q...) has a control character", prefix, k)
			}
			if other, dup := seen[name]; dup {
				t.Errorf("keys %.20q... and %.20q... share the name %.40q...", other, k, name)
			}
			seen[name] = k
			if LockName(prefix, k) != name {
				t.Errorf("LockName(%q, %.20q...) is not deterministic", prefix, k)
			}
		}
	}
	if name := LockName("gocron:", long); len(name) > maxNameLen || !strings.HasPrefix(name, "gocron:éé") || !strings.Contains(name, hashMark) {
		t.Errorf("long key: got %d bytes %q", len(name), name)
	}
}

func TestNewInvalid(t *testing.T) {
	s := offline(t)
	for _, err := range []error{
		func() error { _, err := NewLocker(nil, 0); return err }(),
		func() error { _, err := NewLocker(s, -1); return err }(),
		func() error { _, err := NewLocker(s, 0, WithPrefix("a{b")); return err }(),
		func() error { _, err := NewLocker(s, 0, WithPrefix("a\nb")); return err }(),
		func() error { _, err := NewLocker(s, 0, WithPrefix(strings.Repeat("a", 447))); return err }(),
		func() error { _, err := NewElector(nil, "e", "v"); return err }(),
		func() error { _, err := NewElector(s, "", "v"); return err }(),
		func() error { _, err := NewElector(s, "e", "v", WithSettle(-1)); return err }(),
		func() error { _, err := NewElector(s, "e", "v", WithRetryDelay(0)); return err }(),
		func() error { _, err := NewElector(s, "e", "v", WithLogger(nil)); return err }(),
	} {
		if !errors.Is(err, redisleader.ErrInvalid) {
			t.Errorf("got %v, want an error matching ErrInvalid", err)
		}
	}
	if _, err := NewLocker(s, 0, WithPrefix(strings.Repeat("a", 446))); err != nil {
		t.Errorf("a 446-byte prefix: %v", err)
	}
}

// TestLockerMinHold: a job that returns at once keeps its lock until MinHold
// after the acquisition; one that runs past MinHold releases at Unlock.
func TestLockerMinHold(t *testing.T) {
	const minHold = 300 * time.Millisecond
	addr := startRedis(t)
	ctx := context.Background()
	s1 := newSession(t, newClient(t, addr, nil), 2*time.Second)
	s2 := newSession(t, newClient(t, addr, nil), 2*time.Second)
	l1, err := NewLocker(s1, minHold)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := NewLocker(s2, minHold)
	if err != nil {
		t.Fatal(err)
	}

	acquired := time.Now()
	k, err := l1.Lock(ctx, "job{1}")
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := k.Unlock(ctx); err != nil { // a second Unlock does nothing
		t.Fatal(err)
	}
	if _, err := l2.Lock(ctx, "job{1}"); !errors.Is(err, redisleader.ErrLocked) {
		t.Fatalf("another scheduler during MinHold: got %v, want ErrLocked", err)
	}
	if _, err := l1.Lock(ctx, "job{1}"); !errors.Is(err, redisleader.ErrLocked) {
		t.Fatalf("the same scheduler during MinHold: got %v, want ErrLocked", err)
	}
	// Wait for the release with a blocking Lock on the same name.
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	got, err := s2.Lock(wctx, LockName(DefaultPrefix, "job{1}"))
	if err != nil {
		t.Fatal(err)
	}
	if held := time.Since(acquired); held < minHold {
		t.Errorf("released %v after the acquisition, before MinHold %v", held, minHold)
	}
	if err := got.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// A job that runs past MinHold: Unlock releases at once.
	k, err = l1.Lock(ctx, "long job")
	if err != nil {
		t.Fatal(err)
	}
	<-time.After(minHold) // the job runs longer than MinHold
	if err := k.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	k2, err := l2.Lock(ctx, "long job")
	if err != nil {
		t.Fatalf("after a job longer than MinHold: %v", err)
	}
	if err := k2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l1.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestLockerClose: Close waits for the pending holds, or releases them when
// its context ends; Lock after Close fails.
func TestLockerClose(t *testing.T) {
	const minHold = 300 * time.Millisecond
	addr := startRedis(t)
	ctx := context.Background()
	s := newSession(t, newClient(t, addr, nil), 2*time.Second)
	probe := newSession(t, newClient(t, addr, nil), 2*time.Second)

	l, err := NewLocker(s, minHold)
	if err != nil {
		t.Fatal(err)
	}
	acquired := time.Now()
	k, err := l.Lock(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(acquired); waited < minHold {
		t.Errorf("Close returned %v after the acquisition, before MinHold", waited)
	}
	if _, err := l.Lock(ctx, "a"); !errors.Is(err, ErrClosed) {
		t.Errorf("Lock after Close: got %v, want ErrClosed", err)
	}
	if p, err := probe.TryLock(ctx, LockName(DefaultPrefix, "a")); err != nil {
		t.Errorf("after Close the lock is still held: %v", err)
	} else {
		_ = p.Release(ctx)
	}

	l, err = NewLocker(s, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	k, err = l.Lock(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := l.Close(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Close with an ended context: got %v, want context.Canceled", err)
	}
	if p, err := probe.TryLock(ctx, LockName(DefaultPrefix, "b")); err != nil {
		t.Errorf("Close with an ended context left the lock held: %v", err)
	} else {
		_ = p.Release(ctx)
	}
}

// TestElectorLifecycle: an Elector leads, Close resigns at once (another
// candidate takes over without waiting for the TTL) and stops; an Elector
// whose session closes stops with ErrSessionClosed.
func TestElectorLifecycle(t *testing.T) {
	addr := startRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s1 := newSession(t, newClient(t, addr, nil), 5*time.Second)
	s2 := newSession(t, newClient(t, addr, nil), 5*time.Second)

	e1, err := NewElector(s1, "lifecycle", "one")
	if err != nil {
		t.Fatal(err)
	}
	if err := e1.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e1.IsLeader(ctx); err != nil {
		t.Fatalf("IsLeader after WaitLeader: %v", err)
	}
	if e1.Leadership().Fence() == 0 {
		t.Error("Leadership has no fence")
	}
	e2, err := NewElector(s2, "lifecycle", "two")
	if err != nil {
		t.Fatal(err)
	}
	if err := e2.IsLeader(ctx); !errors.Is(err, ErrNotLeader) {
		t.Errorf("the second Elector: got %v, want ErrNotLeader", err)
	}

	closed := time.Now()
	if err := e1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e1.IsLeader(ctx); !errors.Is(err, ErrClosed) || !errors.Is(e1.Err(), ErrClosed) {
		t.Errorf("after Close: IsLeader %v, Err %v; want ErrClosed", err, e1.Err())
	}
	if err := e2.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(closed); took > 2*time.Second {
		t.Errorf("takeover after a resignation took %v; it should not wait for the 5s TTL", took)
	}

	if err := s2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e2.WaitLeader(ctx); !errors.Is(err, redisleader.ErrSessionClosed) {
		t.Errorf("WaitLeader after the session closed: got %v, want ErrSessionClosed", err)
	}
	if err := e2.IsLeader(ctx); !errors.Is(err, redisleader.ErrSessionClosed) {
		t.Errorf("IsLeader after the session closed: got %v, want ErrSessionClosed", err)
	}
	if err := e2.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
