package redisleader

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisleader/redisleader/internal/lease"
	"github.com/redisleader/redisleader/internal/redisserver"
)

// rwKey is the holders' set of the read-write lock name (internal/lease/rwlock.go).
func rwKey(name string) string { return "redisleader:{" + name + "}:rw" }

// mustRW makes s's handle on the read-write lock name, failing t on error.
func mustRW(t testing.TB, s *Session, name string, opts ...RWLockOption) *RWLock {
	t.Helper()
	rw, err := s.RWLock(name, opts...)
	if err != nil {
		t.Fatalf("RWLock(%q): %v", name, err)
	}
	return rw
}

// Readers share the name, each with its own increasing fence; a writer is
// refused while any reads, and excludes readers and other writers while it
// writes; Holders shows them (never a token).
func TestRWLockReadersShareWriterExcludes(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		a := mustRW(t, newSession(t, b.client, fastOpts()...), "doc", WithRWValue("a"))
		o := mustRW(t, newSession(t, b.client, fastOpts()...), "doc", WithRWValue("o"))
		r1, err := a.TryRLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := o.TryRLock(ctx)
		if err != nil || r2.Fence() <= r1.Fence() {
			t.Fatalf("second reader: %v (fence %d after %d), want shared, fence increasing", err, r2.Fence(), r1.Fence())
		}
		if _, err := o.TryLock(ctx); !errors.Is(err, ErrInvalid) {
			t.Fatalf("TryLock of a session that reads: %v, want the upgrade refused", err)
		}
		w := mustRW(t, newSession(t, b.client, fastOpts()...), "doc", WithRWValue("w"))
		if _, err := w.TryLock(ctx); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "no write lease") {
			t.Fatalf("TryLock while two read: %v, want ErrLocked", err)
		}
		hs, waiting, err := w.Holders(ctx)
		if err != nil || len(hs) != 2 || waiting != 0 || hs[0].Write || hs[0].Fence == 0 || hs[0].TTL <= 0 {
			t.Fatalf("Holders: %+v, %d waiting, %v; want 2 readers, no writer waiting (TryLock posts no intent)", hs, waiting, err)
		}
		for _, l := range []*Lock{r1, r2, r1} {
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		wl, err := w.TryLock(ctx)
		if err != nil || wl.Fence() <= r2.Fence() {
			t.Fatalf("TryLock once the readers left: %v", err)
		}
		if _, err := a.TryRLock(ctx); !errors.Is(err, ErrLocked) {
			t.Fatalf("TryRLock while a writer holds: %v, want ErrLocked", err)
		}
		if _, err := a.TryLock(ctx); !errors.Is(err, ErrLocked) {
			t.Fatalf("TryLock while a writer holds: %v, want ErrLocked", err)
		}
		if hs, _, _ := w.Holders(ctx); len(hs) != 1 || !hs[0].Write || hs[0].Value != "w" {
			t.Fatalf("Holders of a write: %+v", hs)
		}
		if err := wl.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := a.TryRLock(ctx); err != nil {
			t.Fatalf("TryRLock after the write: %v", err)
		}
	})
}

// A waiting writer's intent stops new readers: once a writer waits, a
// reader of another session waits too, and the writer gets the name when
// the old readers leave (woken by the release), then the reader when the
// writer leaves.
func TestRWLockWriterStopsNewReaders(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		old := mustRW(t, newSession(t, b.client, fastOpts()...), "pref")
		writer := mustRW(t, newSession(t, b.client, fastOpts()...), "pref")
		reader := mustRW(t, newSession(t, b.client, fastOpts()...), "pref")
		held, err := old.RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wrote := lockInBackground(t, ctx, writer)
		waitRWWaiting(t, reader, 1)
		if _, err := reader.TryRLock(ctx); !errors.Is(err, ErrLocked) {
			t.Fatalf("TryRLock while a writer waits: %v, want ErrLocked (writer preference)", err)
		}
		read := make(chan *Lock, 1)
		go func() {
			l, err := reader.RLock(ctx)
			if err != nil {
				t.Errorf("RLock: %v", err)
			}
			read <- l
		}()
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		w := recvWithin(t, wrote, time.Second, "the writer, woken by the last reader's release")
		select {
		case <-read:
			t.Fatal("a reader got in while the writer writes")
		default:
		}
		if _, waiting, _ := reader.Holders(ctx); waiting != 0 {
			t.Fatalf("%d intents after the writer was granted, want 0", waiting)
		}
		if err := w.Release(ctx); err != nil {
			t.Fatal(err)
		}
		recvWithin(t, read, time.Second, "the reader, woken by the writer's release")
	})
}

// lockInBackground calls rw.Lock(ctx) in a goroutine, which delivers the
// write lease (nil on error, reported to t) on the channel returned.
func lockInBackground(t testing.TB, ctx context.Context, rw *RWLock) <-chan *Lock {
	wrote := make(chan *Lock, 1)
	go func() {
		l, err := rw.Lock(ctx)
		if err != nil {
			t.Errorf("Lock: %v", err)
		}
		wrote <- l
	}()
	return wrote
}

// waitRWWaiting waits until n writers wait on rw's name.
func waitRWWaiting(t testing.TB, rw *RWLock, n int) {
	t.Helper()
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); runtimeYield() {
		if _, w, err := rw.Holders(context.Background()); err == nil && w == n {
			return
		}
	}
	t.Fatalf("not %d writers waiting on %s", n, rw.Name())
}

// A session never upgrades or downgrades: one that holds a read lease and
// asks to write (or the reverse) gets ErrInvalid naming the rule, at once,
// blocking or not; a second write lease is ErrLocked; a second read lease
// is fine. Once released, the other role is granted.
func TestRWLockUpgradeRefused(t *testing.T) {
	_, c := newMini(t)
	ctx := context.Background()
	s := newSession(t, c, fastOpts()...)
	rw, other := mustRW(t, s, "up"), mustRW(t, s, "up", WithRWValue("another handle"))
	r, err := rw.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.RLock(ctx); err != nil {
		t.Fatalf("second read lease of a session: %v", err)
	}
	for _, lock := range []func(context.Context) (*Lock, error){rw.Lock, rw.TryLock, other.Lock} {
		if _, err := lock(ctx); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "upgrade is refused") {
			t.Fatalf("write while reading: %v, want ErrInvalid naming the upgrade rule", err)
		}
	}
	if _, w, _ := rw.Holders(ctx); w != 0 {
		t.Fatal("a refused upgrade posted an intent")
	}
	for _, l := range s.heldRW("up") {
		_ = l.Release(ctx)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w, err := rw.Lock(ctx)
	if err != nil {
		t.Fatalf("Lock once the reads are released: %v", err)
	}
	for _, read := range []func(context.Context) (*Lock, error){rw.RLock, other.TryRLock} {
		if _, err := read(ctx); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "downgrade is refused") {
			t.Fatalf("read while writing: %v, want ErrInvalid naming the downgrade rule", err)
		}
	}
	if _, err := other.Lock(ctx); !errors.Is(err, ErrLocked) {
		t.Fatalf("second write lease of a session: %v, want ErrLocked", err)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := rw.RLock(ctx); err != nil {
		t.Fatalf("RLock once the write is released: %v", err)
	}
}

// heldRW is the session's held leases of the read-write lock name.
func (s *Session) heldRW(name string) []*Lock {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*Lock
	for l := range s.reg.locks {
		if _, ok := l.lease.Proto.(*lease.RWProtocol); ok && l.lease.Keys.Name == name {
			out = append(out, l)
		}
	}
	return out
}

// rwCounter counts the readers and writers that believe they hold, and
// fails t on an overlap: a reader with a writer, or two writers.
type rwCounter struct {
	t                      testing.TB
	mu                     sync.Mutex
	readers, writers, most int
	fences                 map[int64]bool
}

func (c *rwCounter) enter(l *Lock, write bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fences[l.Fence()] {
		c.t.Errorf("fence %d handed out twice", l.Fence())
	}
	c.fences[l.Fence()] = true
	if write {
		c.writers++
	} else {
		c.readers++
	}
	if c.writers > 1 || (c.writers > 0 && c.readers > 0) {
		c.t.Errorf("%d readers and %d writers at once", c.readers, c.writers)
	}
	c.most = max(c.most, c.readers)
}

func (c *rwCounter) leave(write bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if write {
		c.writers--
	} else {
		c.readers--
	}
}

// Many sessions reading and writing one name: no reader
// overlaps a writer, no two writers overlap, readers do share, and every
// grant has its own fence. Leases are long: waiters are woken by releases.
func TestRWLockContention(t *testing.T) {
	srv := redisserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const sessions, workers, rounds = 12, 1, 8
	c := &rwCounter{t: t, fences: map[int64]bool{}}
	var wg sync.WaitGroup
	for i := range sessions {
		// A session per worker: a session that reads may not ask to write.
		rw := mustRW(t, newSession(t, srv.Client(t), WithTTL(10*time.Second)), "shared-doc")
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range rounds {
					write := (i+j)%4 == 0
					acquire := rw.RLock
					if write {
						acquire = rw.Lock
					}
					l, err := acquire(ctx)
					if err != nil {
						t.Errorf("acquire (write %v): %v", write, err)
						return
					}
					c.enter(l, write)
					<-time.After(time.Duration(rand.N(3)) * time.Millisecond) // hold a moment
					c.leave(write)
					if err := l.Release(ctx); err != nil {
						t.Errorf("Release: %v", err)
					}
				}
			}()
		}
	}
	wg.Wait()
	if c.most < 2 || len(c.fences) != sessions*workers*rounds {
		t.Fatalf("at most %d readers at once, %d fences for %d grants", c.most, len(c.fences), sessions*workers*rounds)
	}
	t.Logf("at most %d readers at once", c.most)
}

// Writer preference, measured: 10 readers stream (each holds 10–30 ms and
// asks again at once, so the name is never free of readers), while 2
// writers take the write lease 5 times each. Leases are long (10 s): only
// the intent and the releases' wake-ups serve a writer. Each writer is
// served within rwWriterBound: the readers in place finish (≤ 30 ms), the
// other writer may write first (≤ 20 ms), plus round trips.
func TestRWLockWriterNotStarved(t *testing.T) {
	srv := redisserver.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const readers, writers, writes = 10, 2, 5
	const rwWriterBound = 500 * time.Millisecond
	c := &rwCounter{t: t, fences: map[int64]bool{}}
	var rg, wg sync.WaitGroup
	for range readers {
		rw := mustRW(t, newSession(t, srv.Client(t), WithTTL(10*time.Second)), "stream")
		rg.Add(1)
		go func() {
			defer rg.Done()
			for ctx.Err() == nil {
				l, err := rw.RLock(ctx)
				if err != nil {
					return
				}
				c.enter(l, false)
				<-time.After(10*time.Millisecond + rand.N(20*time.Millisecond))
				c.leave(false)
				_ = l.Release(context.Background())
			}
		}()
	}
	var mu sync.Mutex
	var worst time.Duration
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second) // a starved writer fails, not hangs
	defer wcancel()
	for range writers {
		rw := mustRW(t, newSession(t, srv.Client(t), WithTTL(10*time.Second)), "stream")
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-time.After(50 * time.Millisecond) // the readers stream first
			for range writes {
				start := time.Now()
				l, err := rw.Lock(wctx)
				if err != nil {
					t.Errorf("Lock: %v", err)
					return
				}
				took := time.Since(start)
				c.enter(l, true)
				<-time.After(10 * time.Millisecond)
				c.leave(true)
				_ = l.Release(ctx)
				mu.Lock()
				worst = max(worst, took)
				mu.Unlock()
				<-time.After(20 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	cancel()
	rg.Wait()
	t.Logf("each writer served within %v (bound %v); at most %d readers at once", worst, rwWriterBound, c.most)
	if worst > rwWriterBound || c.most < 2 {
		t.Fatalf("a writer waited %v (bound %v), at most %d readers at once", worst, rwWriterBound, c.most)
	}
}

// A dead holder's share is free within a TTL of its last renewal: a dead
// reader's for a writer, a dead writer's for a reader, and a dead waiting
// writer's intent stops readers no longer than that.
func TestRWLockDeadHoldersFreed(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		for _, tc := range []struct {
			name      string
			dead      func(context.Context, *RWLock) error
			waitWrite bool
		}{
			{"reader", func(ctx context.Context, rw *RWLock) error { _, err := rw.RLock(ctx); return err }, true},
			{"writer", func(ctx context.Context, rw *RWLock) error { _, err := rw.Lock(ctx); return err }, false},
			{"waiting-writer", nil, false},
		} {
			t.Run(tc.name, func(t *testing.T) { deadRWHolder(t, b, tc.name, tc.dead, tc.waitWrite) })
		}
	})
}

// deadRWHolder crashes a session of name that holds (dead) or, when dead
// is nil, waits to write behind a reader that then leaves; a waiter of the
// other role (a writer if waitWrite) is granted within a TTL.
func deadRWHolder(t *testing.T, b *backend, name string, dead func(context.Context, *RWLock) error, waitWrite bool) {
	ctx := context.Background()
	ds := newSession(t, b.client, fastOpts()...)
	d := mustRW(t, ds, name)
	var reader *Lock
	if dead != nil {
		if err := dead(ctx, d); err != nil {
			t.Fatal(err)
		}
	} else {
		var err error
		if reader, err = mustRW(t, newSession(t, b.client, fastOpts()...), name).RLock(ctx); err != nil {
			t.Fatal(err)
		}
		go func() { _, _ = d.Lock(ctx) }()
		waitRWWaiting(t, d, 1)
	}
	m := mustRW(t, newSession(t, b.client, fastOpts()...), name)
	got := make(chan error, 1)
	go func() {
		acquire := m.RLock
		if waitWrite {
			acquire = m.Lock
		}
		_, err := acquire(ctx)
		got <- err
	}()
	crash(ds)
	crashed := time.Now()
	if reader != nil {
		_ = reader.Release(ctx) // the readers are gone: only the dead intent stops the next
	}
	if b.name == "miniredis" {
		fastForwardRW(t, b, name)
	}
	if err := recvWithin(t, got, time.Second, "the dead "+name+"'s share"); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(crashed); took > 600*time.Millisecond+slack {
		t.Fatalf("the dead %s's share came back after %v, past a TTL", name, took)
	}
}

// fastForwardRW ends every lease in name's set on a backend whose clock
// does not run (miniredis), by setting the scores to the past.
func fastForwardRW(t testing.TB, b *backend, name string) {
	t.Helper()
	ctx := context.Background()
	for _, m := range b.client.ZRange(ctx, rwKey(name), 0, -1).Val() {
		b.client.ZAdd(ctx, rwKey(name), redis.Z{Score: 1, Member: m})
	}
}

// A writer that gives up (its context ends) withdraws its intent at once,
// and the readers it stopped are woken: they do not wait for the intent's
// lease to end.
func TestRWLockWaitingWriterGivesUp(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		held, err := mustRW(t, newSession(t, b.client, fastOpts()...), "quit").RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		w := mustRW(t, newSession(t, b.client, WithTTL(time.Minute)), "quit")
		wctx, cancel := context.WithCancel(ctx)
		gaveUp := make(chan error, 1)
		go func() { _, err := w.Lock(wctx); gaveUp <- err }()
		waitRWWaiting(t, w, 1)
		r := mustRW(t, newSession(t, b.client, fastOpts()...), "quit")
		read := make(chan error, 1)
		go func() { _, err := r.RLock(ctx); read <- err }()
		waitRWSubscribers(t, b, "quit", 2)
		cancel()
		if err := recvWithin(t, gaveUp, time.Second, "the writer giving up"); !errors.Is(err, context.Canceled) {
			t.Fatalf("Lock: %v, want its context's end", err)
		}
		if err := recvWithin(t, read, time.Second, "the reader, woken by the withdrawn intent"); err != nil {
			t.Fatal(err)
		}
		if _, waiting, _ := r.Holders(ctx); waiting != 0 {
			t.Fatalf("%d intents left after the writer gave up", waiting)
		}
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// waitRWSubscribers waits until n listen on name's channel.
func waitRWSubscribers(t testing.TB, b *backend, name string, n int64) {
	t.Helper()
	ch := rwKey(name) + ":ch"
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); runtimeYield() {
		if b.client.PubSubNumSub(context.Background(), ch).Val()[ch] >= n {
			return
		}
	}
	t.Fatalf("fewer than %d subscribed to %s", n, ch)
}

// An acquire whose reply was lost is sent again with the same token: it
// finds its own lease and refreshes it, same fence, never a second one;
// given back by its token (fence 0: never heard), it is gone.
func TestRWLockRetriedAcquireIdempotent(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		s := newSession(t, b.client, fastOpts()...)
		rw := mustRW(t, s, "retry")
		for _, args := range []*lease.RWArgs{rw.read, rw.write} {
			le := lease.New(rw.keys, s.ttlArg, "", &lease.RWProtocol{A: args, Wait: true})
			first := s.place.Acquire(ctx, &le, time.Now().Add(time.Second))
			again := s.place.Acquire(ctx, &le, time.Now().Add(time.Second))
			if first.Err != nil || again.Err != nil || first.Fence != again.Fence {
				t.Fatalf("acquire twice with one token: %+v then %+v, want one fence", first, again)
			}
			if n := b.client.ZCard(ctx, rwKey("retry")).Val(); n != 1 {
				t.Fatalf("%d members for one token, want 1", n)
			}
			if d := s.place.Release(ctx, lease.Ending{Lease: &le}); d.Err != nil || d.Missing {
				t.Fatalf("give-back by token: %+v", d)
			}
			if n := b.client.ZCard(ctx, rwKey("retry")).Val(); n != 0 {
				t.Fatalf("%d members after the give-back", n)
			}
		}
	})
}

// Data this package did not write in a read-write lock's set is refused
// with an error naming the key, and left as it was: a string where the
// set is, a member forged with a +inf score (or beyond the longest lease),
// one not in our form, with no role, or an intent with a fence.
func TestRWLockRefusesForeignData(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		s := newSession(t, b.client, fastOpts()...)
		c := b.client
		far := float64(time.Now().Add(48 * time.Hour).UnixMilli())
		cases := []struct {
			name  string
			plant func(set string)
			want  string
		}{
			{"string", func(set string) { c.Set(ctx, set, "x", 0) }, "not a sorted set"},
			{"inf", func(set string) { c.ZAdd(ctx, set, redis.Z{Score: math.Inf(1), Member: "tok\n1\nr"}) }, "member or score"},
			{"far", func(set string) { c.ZAdd(ctx, set, redis.Z{Score: far, Member: "tok\n1\nw"}) }, "member or score"},
			{"form", func(set string) { c.ZAdd(ctx, set, redis.Z{Score: 1, Member: "not ours"}) }, "member or score"},
			{"role", func(set string) { c.ZAdd(ctx, set, redis.Z{Score: 1, Member: "tok\n1\nx"}) }, "member or score"},
			{"intent", func(set string) { c.ZAdd(ctx, set, redis.Z{Score: 1, Member: "tok\n5\ni"}) }, "member or score"},
			{"leading zero", func(set string) { c.ZAdd(ctx, set, redis.Z{Score: 1, Member: "tok\n05\nr"}) }, "member or score"},
		}
		for _, tc := range cases {
			rw := mustRW(t, s, "foreign-"+tc.name)
			set := rwKey(rw.Name())
			tc.plant(set)
			before := dumpKeys(t, c, set, "redisleader:{"+rw.Name()+"}:fence")
			for _, try := range []func(context.Context) (*Lock, error){rw.TryRLock, rw.TryLock, rw.RLock, rw.Lock} {
				ctxB, cancel := context.WithTimeout(ctx, 2*time.Second)
				_, err := try(ctxB)
				cancel()
				if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "left unchanged") ||
					errors.Is(err, ErrLocked) || strings.Contains(err.Error(), "tok") {
					t.Fatalf("%s: %v, want at once an error naming %q, never the data", tc.name, err, tc.want)
				}
			}
			if after := dumpKeys(t, c, set, "redisleader:{"+rw.Name()+"}:fence"); after != before {
				t.Fatalf("%s: keys changed:\n%s\nto\n%s", tc.name, before, after)
			}
			if _, _, err := rw.Holders(ctx); err == nil {
				t.Fatalf("%s: Holders read foreign data without an error", tc.name)
			}
		}
	})
}

// Bad input is refused with ErrInvalid naming the rule, and writes
// nothing; so is a read-write lock on a Redlock session.
func TestRWLockBadInput(t *testing.T) {
	mr, c := newMini(t)
	s := newSession(t, c, fastOpts()...)
	for _, tc := range []struct {
		name string
		opts []RWLockOption
		want string
	}{
		{"", nil, "must not be empty"},
		{"a{b}", nil, "hash tag"},
		{strings.Repeat("n", 513), nil, "at most 512"},
		{"a", []RWLockOption{WithRWValue(strings.Repeat("v", 65<<10))}, "WithRWValue"},
		{"a", []RWLockOption{nil}, "RWLockOption must not be nil"},
	} {
		if _, err := s.RWLock(tc.name, tc.opts...); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("RWLock(%.10q): %v, want ErrInvalid naming %q", tc.name, err, tc.want)
		}
	}
	if keys := mr.Keys(); len(keys) != 0 {
		t.Fatalf("bad input wrote %v", keys)
	}
	_, cs := redlockNodes(t, 3)
	rs := newRedlock(t, cs)
	if _, err := rs.RWLock("a"); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "Redlock") {
		t.Fatalf("RWLock on a Redlock session: %v, want ErrInvalid naming Redlock", err)
	}
}

// Leases are renewed by the heartbeat, and lost with ErrNotOwner when the
// set no longer holds them; Close releases every lease, ends a blocked
// Lock with ErrSessionClosed, and leaves no goroutine.
func TestRWLockRenewedLostAndClosed(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		roundOpt, rounds := rounds()
		s, err := NewSession(b.client, fastOpts(roundOpt)...)
		if err != nil {
			t.Fatal(err)
		}
		rw := mustRW(t, s, "closing")
		r, err := rw.RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for start := time.Now(); time.Since(start) < 800*time.Millisecond; { // past a TTL (600ms)
			waitRound(t, rounds, time.Second)
		}
		if !r.Held() {
			t.Fatalf("read lease not held after renewals: %v", r.Err())
		}
		lost, err := mustRW(t, s, "lost").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b.del(rwKey("lost"))
		waitClosed(t, lost.Done(), time.Second, "the lost write lease")
		if !errors.Is(lost.Err(), ErrNotOwner) {
			t.Fatalf("Err: %v, want ErrNotOwner", lost.Err())
		}
		other := mustRW(t, newSession(t, b.client, fastOpts()...), "gate")
		if _, err := other.RLock(ctx); err != nil {
			t.Fatal(err)
		}
		blocked, gate := make(chan error, 1), mustRW(t, s, "gate")
		go func() { _, err := gate.Lock(ctx); blocked <- err }()
		waitRWWaiting(t, other, 1)
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if err := recvWithin(t, blocked, time.Second, "the blocked Lock"); !errors.Is(err, ErrSessionClosed) {
			t.Fatalf("blocked Lock after Close: %v, want ErrSessionClosed", err)
		}
		if !errors.Is(r.Err(), ErrSessionClosed) {
			t.Fatalf("read lease after Close: %v", r.Err())
		}
		if hs, _, err := mustRW(t, other.s, "closing").Holders(ctx); err != nil || len(hs) != 0 {
			t.Fatalf("holders after Close: %+v, want none", hs)
		}
		if err := other.s.Close(ctx); err != nil {
			t.Fatal(err)
		}
		checkNoLeaks(t)
	})
}

// TestACLRWLock: read-write locks run as the documented user plus the
// semaphore's commands (aclSemaphore): leases taken, renewed, waited for
// (an intent posted and withdrawn) and released, holders read; nothing is
// denied.
func TestACLRWLock(t *testing.T) {
	srv := redisserver.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	setUser(t, admin, "redisleader", aclRule, aclOptional, aclSemaphore, identityRule(t, srv))
	c := userClient(t, srv, "redisleader")
	roundOpt, rounds := rounds()
	rw := mustRW(t, newSession(t, c, fastOpts(roundOpt)...), "acl-rw")
	w := mustRW(t, newSession(t, c, fastOpts()...), "acl-rw")
	r, err := rw.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if waitRound(t, rounds, time.Second) {
		t.Fatal("a renewal round failed")
	}
	wctx, cancel := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() { _, err := w.Lock(wctx); gaveUp <- err }()
	waitRWWaiting(t, rw, 1)
	cancel()
	<-gaveUp
	waited := make(chan error, 1)
	go func() {
		l, err := w.Lock(ctx)
		if err == nil {
			err = l.Release(ctx)
		}
		waited <- err
	}()
	waitRWWaiting(t, rw, 1)
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := recvWithin(t, waited, time.Second, "the writer"); err != nil {
		t.Fatal(err)
	}
	if log := aclLog(t, admin); len(log) != 0 {
		t.Fatalf("denied: %v", log)
	}
}

// TestDocsDocumentRWLockACL: the operations guide names the read-write
// lock's keys and the commands TestACLRWLock runs with.
func TestDocsDocumentRWLockACL(t *testing.T) {
	guide, err := os.ReadFile("docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(guide), "Read-write locks need the semaphore's commands") || !strings.Contains(string(guide), aclSemaphore) {
		t.Fatalf("docs/operations.md does not name the read-write lock's commands %q", aclSemaphore)
	}
}

// On Redis Cluster every key of a read-write lock is in its name's slot:
// leases of names in different slots are taken, renewed, read, waited for
// and released.
func TestClusterRWLock(t *testing.T) {
	cluster := redisserver.StartCluster(t, 3)
	c := clusterClient(t, cluster)
	ctx := context.Background()
	roundOpt, rounds := rounds()
	s := newSession(t, c, fastOpts(roundOpt)...)
	o := newSession(t, c, fastOpts()...)
	var held []*Lock
	for i, name := range []string{"a", "b", "c", "d", "e"} {
		rw := mustRW(t, s, name)
		acquire := rw.RLock
		if i%2 == 0 {
			acquire = rw.Lock
		}
		l, err := acquire(ctx)
		if err != nil {
			t.Fatalf("acquire %s: %v", name, err)
		}
		if hs, _, err := rw.Holders(ctx); err != nil || len(hs) != 1 {
			t.Fatalf("Holders %s: %v %v", name, hs, err)
		}
		held = append(held, l)
	}
	if waitRound(t, rounds, time.Second) {
		t.Fatal("a renewal round failed")
	}
	w := mustRW(t, o, "b")
	got := lockRW(ctx, w)
	waitRWWaiting(t, w, 1)
	for _, l := range held {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := recvWithin(t, got, time.Second, "the writer of b"); err != nil {
		t.Fatal(err)
	}
}

// lockRW runs rw.Lock on its own goroutine and releases at once; the
// channel delivers the first error, or nil.
func lockRW(ctx context.Context, rw *RWLock) <-chan error {
	done := make(chan error, 1)
	go func() {
		l, err := rw.Lock(ctx)
		if err == nil {
			err = l.Release(ctx)
		}
		done <- err
	}()
	return done
}

// BenchmarkRWPair measures a read lease's and the write lease's
// acquire+release pair (TryRLock or TryLock, then Release) on a real
// redis-server, next to a lock's (BenchmarkLockPair), for allocations.
func BenchmarkRWPair(b *testing.B) {
	_, s := benchServer(b)
	ctx := context.Background()
	rw, err := s.RWLock("lib-rw")
	if err != nil {
		b.Fatal(err)
	}
	loopAllocs(b, "lock", func(b *testing.B) { libPair(ctx, b, s) })
	for _, p := range []struct {
		name string
		try  func(context.Context) (*Lock, error)
	}{{"read", rw.TryRLock}, {"write", rw.TryLock}} {
		loopAllocs(b, p.name, func(b *testing.B) {
			l, err := p.try(ctx)
			if err == nil {
				err = l.Release(ctx)
			}
			if err != nil {
				b.Fatal(err)
			}
		})
	}
}

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

// A refused TryRLock or TryLock says who refused it: a writer that holds,
// a reader that holds, or a writer that waits (its intent, which holds
// nothing: never "held by another owner (fence 0)").
func TestRWLockRefusalSaysWhy(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		old := mustRW(t, newSession(t, b.client, fastOpts()...), "why")
		writer := mustRW(t, newSession(t, b.client, fastOpts()...), "why")
		other := mustRW(t, newSession(t, b.client, fastOpts()...), "why")
		refused := func(try func(context.Context) (*Lock, error), want string) {
			t.Helper()
			_, err := try(ctx)
			if !errors.Is(err, ErrLocked) || !strings.HasSuffix(err.Error(), want) || strings.Contains(err.Error(), "fence 0") {
				t.Fatalf("refused: %v, want ErrLocked ending %q", err, want)
			}
		}
		held, err := old.RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		refused(writer.TryLock, fmt.Sprintf(`rwlock "why": no write lease now: a reader holds it (fence %d)`, held.Fence()))
		wrote := lockInBackground(t, ctx, writer)
		waitRWWaiting(t, other, 1)
		refused(other.TryRLock, `rwlock "why": no read lease now: a writer is waiting`)
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		w := recvWithin(t, wrote, time.Second, "the writer, woken by the reader's release")
		refused(other.TryRLock, fmt.Sprintf(`rwlock "why": no read lease now: the writer holds it (fence %d)`, w.Fence()))
		if err := w.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
