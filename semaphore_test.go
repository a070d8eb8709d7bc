package redisleader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisleader/redisleader/internal/lease"
	"github.com/redisleader/redisleader/internal/redisserver"
	"github.com/redisleader/redisleader/internal/syncbuf"
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

// Many sessions and goroutines contending for N=3 permits: at most 3 hold
// one at any moment, every permit's fence is its own, and blocked waiters
// are woken by releases (the leases are long: a waiter that waited for one
// to end would not finish in time).
func TestSemaphoreContention(t *testing.T) {
	srv := redisserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const sessions, workers, rounds, n = 4, 3, 5, 3
	var (
		mu      sync.Mutex
		holding int
		most    int
		fences  = map[int64]bool{}
		wg      sync.WaitGroup
	)
	for range sessions {
		s := newSession(t, srv.Client(t), WithTTL(10*time.Second))
		m := mustSemaphore(t, s, "pool", n)
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					l, err := m.Acquire(ctx)
					if err != nil {
						t.Errorf("Acquire: %v", err)
						return
					}
					mu.Lock()
					holding++
					most = max(most, holding)
					if fences[l.Fence()] {
						t.Errorf("fence %d handed out twice", l.Fence())
					}
					fences[l.Fence()] = true
					mu.Unlock()
					runtimeYield()
					mu.Lock()
					holding--
					mu.Unlock()
					if err := l.Release(ctx); err != nil {
						t.Errorf("Release: %v", err)
					}
				}
			}()
		}
	}
	wg.Wait()
	if most > n || len(fences) != sessions*workers*rounds {
		t.Fatalf("at most %d held at once (limit %d), %d fences for %d permits", most, n, len(fences), sessions*workers*rounds)
	}
	t.Logf("at most %d of %d held at once", most, n)
}

// A permit is renewed by the heartbeat for as long as it is held, and a
// dead holder's permit (its process gone, nothing released) is free again
// once its lease ends: a blocked waiter gets it within a TTL.
func TestSemaphoreRenewedAndDeadHolderFreed(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		roundOpt, rounds := rounds()
		dead := newSession(t, b.client, fastOpts(roundOpt)...)
		l, err := mustSemaphore(t, dead, "one", 1).TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for start := time.Now(); time.Since(start) < 800*time.Millisecond; { // past a TTL (600ms)
			waitRound(t, rounds, time.Second)
		}
		if !l.Held() {
			t.Fatalf("permit not held after renewals: %v", l.Err())
		}
		other := newSession(t, b.client, fastOpts()...)
		m := mustSemaphore(t, other, "one", 1)
		if _, err := m.TryAcquire(ctx); !errors.Is(err, ErrLocked) {
			t.Fatalf("TryAcquire of a renewed permit: %v, want ErrLocked", err)
		}
		crash(dead)
		got := make(chan *Lock, 1)
		go func() {
			l, err := m.Acquire(ctx)
			if err != nil {
				t.Errorf("Acquire: %v", err)
			}
			got <- l
		}()
		crashed := time.Now()
		if b.name == "miniredis" {
			// miniredis's clock runs only when told: the lease ends now.
			fastForwardSem(t, b, "one")
		}
		recvWithin(t, got, time.Second, "the dead holder's permit")
		if took := time.Since(crashed); took > 600*time.Millisecond+slack {
			t.Fatalf("the dead holder's permit came back after %v, past a TTL", took)
		}
	})
}

// fastForwardSem ends every lease in name's set on a backend whose clock
// does not run (miniredis), by setting the scores to the past.
func fastForwardSem(t testing.TB, b *backend, name string) {
	t.Helper()
	ctx := context.Background()
	ms, err := b.client.ZRange(ctx, semKey(name), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		b.client.ZAdd(ctx, semKey(name), redis.Z{Score: 1, Member: m})
	}
}

// An acquire whose reply was lost is sent again with the same token: it
// finds its own permit and refreshes it, same fence, never a second one.
func TestSemaphoreRetriedAcquireIdempotent(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		s := newSession(t, b.client, fastOpts()...)
		m := mustSemaphore(t, s, "retry", 2)
		le := lease.New(m.keys, s.ttlArg, "", &lease.PermitProtocol{P: m.args})
		first := s.place.Acquire(ctx, &le, time.Now().Add(time.Second))
		again := s.place.Acquire(ctx, &le, time.Now().Add(time.Second))
		if first.Err != nil || again.Err != nil || first.Fence != again.Fence {
			t.Fatalf("acquire twice with one token: %+v then %+v, want one fence", first, again)
		}
		if n := b.client.ZCard(ctx, semKey("retry")).Val(); n != 1 {
			t.Fatalf("%d permits for one token, want 1", n)
		}
	})
}

// Data this package did not write in a semaphore's keys is refused with an
// error naming the key, and left as it was: a string where the set is, a
// member forged with a +inf score (or one beyond the longest lease), a
// member not in our form, a limit key that holds no limit.
func TestSemaphoreRefusesForeignData(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		s := newSession(t, b.client, fastOpts()...)
		c := b.client
		far := float64(time.Now().Add(48 * time.Hour).UnixMilli())
		cases := []struct {
			name  string
			plant func(set, limit string)
			want  string
		}{
			{"string", func(set, _ string) { c.Set(ctx, set, "x", 0) }, "not a sorted set"},
			{"inf", func(set, _ string) { c.ZAdd(ctx, set, redis.Z{Score: math.Inf(1), Member: "tok\n1\n"}) }, "member or score"},
			{"far", func(set, _ string) { c.ZAdd(ctx, set, redis.Z{Score: far, Member: "tok\n1\n"}) }, "member or score"},
			{"form", func(set, _ string) { c.ZAdd(ctx, set, redis.Z{Score: 1, Member: "not ours"}) }, "member or score"},
			{"leading zero", func(set, _ string) { c.ZAdd(ctx, set, redis.Z{Score: 1, Member: "tok\n01\n"}) }, "member or score"},
			{"limit", func(_, limit string) { c.Set(ctx, limit, "many", 0) }, "limit key"},
		}
		for _, tc := range cases {
			m := mustSemaphore(t, s, "foreign-"+tc.name, 2)
			set, limit := semKey(m.Name()), semKey(m.Name())+":limit"
			tc.plant(set, limit)
			before := dumpKeys(t, c, set, limit, "redisleader:{"+m.Name()+"}:fence")
			_, err := m.TryAcquire(ctx)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "left unchanged") {
				t.Fatalf("%s: TryAcquire: %v, want an error naming %q", tc.name, err, tc.want)
			}
			t.Logf("%s: %v", tc.name, err)
			if errors.Is(err, ErrLocked) || strings.Contains(err.Error(), "tok") {
				t.Fatalf("%s: %v: not a held semaphore, and never the data", tc.name, err)
			}
			ctxB, cancel := context.WithTimeout(ctx, 2*time.Second)
			if _, err := m.Acquire(ctxB); err == nil || errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%s: Acquire: %v, want the error at once (it is permanent)", tc.name, err)
			}
			cancel()
			if after := dumpKeys(t, c, set, limit, "redisleader:{"+m.Name()+"}:fence"); after != before {
				t.Fatalf("%s: keys changed:\n%s\nto\n%s", tc.name, before, after)
			}
			if _, _, err := m.Holders(ctx); err == nil {
				t.Fatalf("%s: Holders read foreign data without an error", tc.name)
			}
		}
	})
}

// dumpKeys returns the keys' types, contents and TTLs.
func dumpKeys(t testing.TB, c redis.UniversalClient, keys ...string) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	for _, k := range keys {
		typ := c.Type(ctx, k).Val()
		fmt.Fprintf(&b, "%s %s ttl=%v ", k, typ, c.PTTL(ctx, k).Val() > 0)
		switch typ {
		case "string":
			fmt.Fprintf(&b, "%q\n", c.Get(ctx, k).Val())
		case "zset":
			fmt.Fprintf(&b, "%v\n", c.ZRangeWithScores(ctx, k, 0, -1).Val())
		default:
			b.WriteString("\n")
		}
	}
	return b.String()
}

// The limit is the name's contract: a handle with another N fails with an
// error naming both values, at once, even blocking; SetSemaphoreLimit
// changes it, wakes the waiters, and the old handles fail from then on.
func TestSemaphoreLimitContract(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		s := newSession(t, b.client, fastOpts()...)
		m1 := mustSemaphore(t, s, "contract", 1)
		held, err := m1.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m2 := mustSemaphore(t, s, "contract", 2)
		for _, try := range []func(context.Context) (*Lock, error){m2.TryAcquire, m2.Acquire} {
			_, err := try(ctx)
			t.Log(err)
			if err == nil || !strings.Contains(err.Error(), "N=1") || !strings.Contains(err.Error(), "N=2") {
				t.Fatalf("acquire with N=2 of a name with N=1: %v, want both values named", err)
			}
		}
		waiter := make(chan error, 1)
		go func() {
			l, err := m1.Acquire(ctx) // waits: the one permit is held
			if err == nil {
				err = errors.New("acquired")
				_ = l.Release(ctx)
			}
			waiter <- err
		}()
		waitSemWaiter(t, b, "contract")
		prev, err := s.SetSemaphoreLimit(ctx, "contract", 2)
		if err != nil || prev != 1 {
			t.Fatalf("SetSemaphoreLimit: %d, %v; want 1 replaced", prev, err)
		}
		if err := recvWithin(t, waiter, time.Second, "the woken waiter"); err == nil || !strings.Contains(err.Error(), "N=2") {
			t.Fatalf("old handle's waiter after the change: %v, want the mismatch", err)
		}
		if _, err := m2.TryAcquire(ctx); err != nil {
			t.Fatalf("TryAcquire with the new limit: %v", err)
		}
		if !held.Held() {
			t.Fatal("a holder lost its permit when the limit changed")
		}
	})
}

// waitSemWaiter waits until someone listens on name's channel.
func waitSemWaiter(t testing.TB, b *backend, name string) {
	t.Helper()
	ch := semKey(name) + ":ch"
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); runtimeYield() {
		if n := b.client.PubSubNumSub(context.Background(), ch).Val()[ch]; n > 0 {
			return
		}
	}
	t.Fatalf("nobody subscribed to %s", ch)
}

// Bad input is refused with ErrInvalid naming the rule, and writes nothing;
// so is a semaphore on a Redlock session.
func TestSemaphoreBadInput(t *testing.T) {
	ctx := context.Background()
	mr, c := newMini(t)
	s := newSession(t, c, fastOpts()...)
	for _, tc := range []struct {
		name  string
		limit int
		opts  []SemaphoreOption
		want  string
	}{
		{"a", 0, nil, "between 1 and 1000000"},
		{"a", -3, nil, "between 1 and 1000000"},
		{"a", 1_000_001, nil, "between 1 and 1000000"},
		{"", 1, nil, "must not be empty"},
		{"a{b}", 1, nil, "hash tag"},
		{"a", 1, []SemaphoreOption{WithPermitValue(strings.Repeat("v", 65<<10))}, "WithPermitValue"},
		{"a", 1, []SemaphoreOption{WithPermitValue("v"), nil}, "SemaphoreOption must not be nil"},
	} {
		_, err := s.Semaphore(tc.name, tc.limit, tc.opts...)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Semaphore(%q, %d): %v, want ErrInvalid naming %q", tc.name, tc.limit, err, tc.want)
		}
		if tc.opts != nil {
			continue // an option's fault: SetSemaphoreLimit takes none
		}
		if _, err := s.SetSemaphoreLimit(ctx, tc.name, tc.limit); !errors.Is(err, ErrInvalid) {
			t.Errorf("SetSemaphoreLimit(%q, %d): %v, want ErrInvalid", tc.name, tc.limit, err)
		}
	}
	if keys := mr.Keys(); len(keys) != 0 {
		t.Fatalf("bad input wrote %v", keys)
	}
	_, cs := redlockNodes(t, 3)
	rs := newRedlock(t, cs)
	if _, err := rs.Semaphore("a", 2); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "Redlock") {
		t.Fatalf("Semaphore on a Redlock session: %v, want ErrInvalid naming Redlock", err)
	}
	if _, err := rs.SetSemaphoreLimit(ctx, "a", 2); !errors.Is(err, ErrInvalid) {
		t.Fatalf("SetSemaphoreLimit on a Redlock session: %v, want ErrInvalid", err)
	}
}

// One session may hold several permits of a name, and the lock of the
// same name beside them (their keys differ); Close releases every permit,
// ends a blocked Acquire with ErrSessionClosed, and leaves no goroutine.
func TestSemaphoreSessionHoldsSeveralAndCloses(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		s, err := NewSession(b.client, fastOpts()...)
		if err != nil {
			t.Fatal(err)
		}
		m := mustSemaphore(t, s, "shared", 2)
		lock, err := s.TryLock(ctx, "shared")
		if err != nil {
			t.Fatalf("TryLock beside the semaphore: %v", err)
		}
		var permits []*Lock
		for range 2 {
			l, err := m.TryAcquire(ctx)
			if err != nil {
				t.Fatalf("TryAcquire: %v (a session may hold several permits)", err)
			}
			permits = append(permits, l)
		}
		blocked := make(chan error, 1)
		go func() {
			_, err := m.Acquire(ctx)
			blocked <- err
		}()
		waitSemWaiter(t, b, "shared")
		if !lock.Held() {
			t.Fatal("the lock of the same name ended")
		}
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if err := recvWithin(t, blocked, time.Second, "the blocked Acquire"); !errors.Is(err, ErrSessionClosed) {
			t.Fatalf("blocked Acquire after Close: %v, want ErrSessionClosed", err)
		}
		for _, l := range permits {
			if !errors.Is(l.Err(), ErrSessionClosed) {
				t.Fatalf("permit after Close: %v", l.Err())
			}
		}
		if n := b.client.ZCard(ctx, semKey("shared")).Val(); n != 0 {
			t.Fatalf("%d permits left in Redis after Close", n)
		}
		checkNoLeaks(t)
	})
}

// A permit whose member is gone (deleted behind the session's back) is
// lost at the next renewal, with ErrNotOwner: lost ownership is never
// silent, and the renewal writes nothing.
func TestSemaphorePermitLost(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		s := newSession(t, b.client, fastOpts()...)
		l, err := mustSemaphore(t, s, "lost", 2).TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b.del(semKey("lost"))
		waitClosed(t, l.Done(), time.Second, "the lost permit")
		if !errors.Is(l.Err(), ErrNotOwner) {
			t.Fatalf("Err: %v, want ErrNotOwner", l.Err())
		}
		if n := b.client.Exists(ctx, semKey("lost")).Val(); n != 0 {
			t.Fatal("the renewal of a lost permit wrote the set")
		}
	})
}

// A blocked Acquire ends with its context.
func TestSemaphoreAcquireEndsWithContext(t *testing.T) {
	_, c := newMini(t)
	s := newSession(t, c, fastOpts()...)
	m := mustSemaphore(t, s, "ctx", 1)
	if _, err := m.TryAcquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	took := timed(func() {
		if _, err := m.Acquire(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Acquire: %v, want its context's end", err)
		}
	})
	if took > 100*time.Millisecond+slack {
		t.Fatalf("Acquire returned %v after its context ended", took-100*time.Millisecond)
	}
}

// aclSemaphore is what docs/operations.md adds for semaphores.
const aclSemaphore = "+pexpireat +zadd +zrange +zrem +zscore"

// TestACLSemaphore: semaphores run as the documented user plus
// aclSemaphore: permits taken, renewed, waited for and released, holders
// read, the limit changed; nothing is denied.
func TestACLSemaphore(t *testing.T) {
	srv := redisserver.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	setUser(t, admin, "redisleader", aclRule, aclOptional, aclSemaphore, identityRule(t, srv))
	c := userClient(t, srv, "redisleader")
	roundOpt, rounds := rounds()
	s := newSession(t, c, fastOpts(roundOpt)...)
	m := mustSemaphore(t, s, "acl-sem", 1)
	l, err := m.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if waitRound(t, rounds, time.Second) {
		t.Fatal("a renewal round failed")
	}
	waited := make(chan error, 1)
	go func() {
		l, err := m.Acquire(ctx)
		if err == nil {
			err = l.Release(ctx)
		}
		waited <- err
	}()
	waitSemWaiter(t, &backend{client: admin}, "acl-sem")
	if _, _, err := m.Holders(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := recvWithin(t, waited, time.Second, "the waiter"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetSemaphoreLimit(ctx, "acl-sem", 2); err != nil {
		t.Fatal(err)
	}
	if log := aclLog(t, admin); len(log) != 0 {
		t.Fatalf("denied: %v", log)
	}
}

// TestDocsDocumentSemaphoreACL: the operations guide names the commands
// that TestACLSemaphore runs with.
func TestDocsDocumentSemaphoreACL(t *testing.T) {
	guide, err := os.ReadFile("docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(guide), aclSemaphore) {
		t.Fatalf("docs/operations.md does not name %q", aclSemaphore)
	}
}

// A fair session's semaphores work, first come first served or not: its
// permits never join a lock's queue, and a release wakes a waiter.
func TestSemaphoreOnFairSession(t *testing.T) {
	_, c := newMini(t)
	ctx := context.Background()
	s := newSession(t, c, fastOpts(WithFairness())...)
	m := mustSemaphore(t, s, "fair-sem", 1)
	l, err := m.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := m.Acquire(ctx)
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	waitSemWaiter(t, &backend{client: c}, "fair-sem")
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := recvWithin(t, got, time.Second, "the waiter"); err != nil {
		t.Fatal(err)
	}
	if keys, _ := c.Keys(ctx, "*queue*").Result(); len(keys) != 0 {
		t.Fatalf("a permit joined a queue: %v", keys)
	}
}

// On Redis Cluster every key of a semaphore is in its name's slot: permits
// of names in different slots are taken, renewed, read and released.
func TestClusterSemaphore(t *testing.T) {
	cluster := redisserver.StartCluster(t, 3)
	c := clusterClient(t, cluster)
	ctx := context.Background()
	roundOpt, rounds := rounds()
	s := newSession(t, c, fastOpts(roundOpt)...)
	var permits []*Lock
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		m := mustSemaphore(t, s, name, 2)
		l, err := m.TryAcquire(ctx)
		if err != nil {
			t.Fatalf("TryAcquire %s: %v", name, err)
		}
		if hs, n, err := m.Holders(ctx); err != nil || len(hs) != 1 || n != 2 {
			t.Fatalf("Holders %s: %v %d %v", name, hs, n, err)
		}
		if _, err := s.SetSemaphoreLimit(ctx, name, 3); err != nil {
			t.Fatalf("SetSemaphoreLimit %s: %v", name, err)
		}
		permits = append(permits, l)
	}
	if waitRound(t, rounds, time.Second) {
		t.Fatal("a renewal round failed")
	}
	for _, l := range permits {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// An acquire whose outcome is unknown (its reply lost, its fence never
// heard) is given back by its token: the permit it may have taken does not
// stay until its lease ends.
func TestSemaphoreUnsureAcquireGivenBack(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		s := newSession(t, b.client, fastOpts()...)
		m := mustSemaphore(t, s, "unsure", 1)
		le := lease.New(m.keys, s.ttlArg, "", &lease.PermitProtocol{P: m.args})
		if r := s.place.Acquire(ctx, &le, time.Now().Add(time.Second)); r.Err != nil {
			t.Fatal(r.Err)
		}
		// le.Fence is 0: the reply's fence was never recorded.
		if d := s.place.Release(ctx, lease.Ending{Lease: &le}); d.Err != nil || d.Missing {
			t.Fatalf("give-back by token: %+v", d)
		}
		if n := b.client.ZCard(ctx, semKey("unsure")).Val(); n != 0 {
			t.Fatalf("%d permits left after the give-back", n)
		}
		if d := s.place.Release(ctx, lease.Ending{Lease: &le}); !d.Missing {
			t.Fatalf("second give-back: %+v, want Missing", d)
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

// The limit key has no TTL, and a deleted one (by hand, or evicted under
// allkeys-*) is tampering the set cannot see: the next acquire with room
// stores its own handle's N, and holders under the old N keep their
// permits (docs/locks.md, Semaphores, Limits). A session whose first lease
// is a permit warns about an eviction policy as one holding a lock does.
func TestSemaphoreLimitKeyDeletedAndEvictionWarned(t *testing.T) {
	ctx := context.Background()
	srv := redisserver.Start(t)
	c := srv.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	require.NoError(t, c.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err())
	var buf syncbuf.Buffer
	round, roundDone := rounds()
	s := newSession(t, c, WithTTL(time.Second), round,
		WithLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	old, err := mustSemaphore(t, s, "limited", 1).TryAcquire(ctx)
	require.NoError(t, err)
	require.False(t, waitRound(t, roundDone, 5*time.Second)) // the check runs before the first round
	assert.Contains(t, buf.String(), "maxmemory-policy=allkeys-lru")
	ttl, err := c.PTTL(ctx, "redisleader:{limited}:sem:limit").Result()
	require.NoError(t, err)
	assert.Equal(t, time.Duration(-1), ttl, "the limit key has a TTL")

	other := newSession(t, c, fastOpts()...)
	_, err = mustSemaphore(t, other, "limited", 3).TryAcquire(ctx)
	require.ErrorContains(t, err, "holds N=1, this caller says N=3", "another N while the limit key holds 1")
	require.NoError(t, c.Del(ctx, "redisleader:{limited}:sem:limit").Err())
	more, err := mustSemaphore(t, other, "limited", 3).TryAcquire(ctx)
	require.NoError(t, err, "the next handle with room stores its own N")
	assert.Equal(t, "3", c.Get(ctx, "redisleader:{limited}:sem:limit").Val())
	assert.True(t, old.Held(), "the old holder keeps its permit")
	_, err = mustSemaphore(t, s, "limited", 1).TryAcquire(ctx)
	require.ErrorContains(t, err, "holds N=3, this caller says N=1", "the old N is refused now")
	require.NoError(t, more.Release(ctx))
	require.NoError(t, old.Release(ctx))
}
