package redisleader

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader/internal/redisserver"
)

// The baseline ("raw") is the floor any Redis lock pays: SET key token NX PX
// with a fresh 16-byte random token, then EVALSHA compare-and-delete, through
// go-redis with the same client. It has no fence, no deadline, no renewal.
var rawRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

func rawPair(ctx context.Context, b *testing.B, c *redis.Client) {
	var tok [16]byte
	_, _ = rand.Read(tok[:])
	token := hex.EncodeToString(tok[:])
	ok, err := c.SetNX(ctx, "raw-key", token, 10*time.Second).Result()
	if err != nil || !ok {
		b.Fatalf("SET NX: %v %v", ok, err)
	}
	if err := rawRelease.Run(ctx, c, []string{"raw-key"}, token).Err(); err != nil {
		b.Fatal(err)
	}
}

func libPair(ctx context.Context, b *testing.B, s *Session) {
	if err := pairOn(ctx, s, "lib-key"); err != nil {
		b.Fatal(err)
	}
}

// pairOn is one TryLock + Release of name.
func pairOn(ctx context.Context, s *Session, name string) error {
	l, err := s.TryLock(ctx, name)
	if err != nil {
		return err
	}
	return l.Release(ctx)
}

func benchServer(b *testing.B, opts ...Option) (*redis.Client, *Session) {
	srv := redisserver.Start(b)
	c := srv.Client(b, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	if err := c.Ping(context.Background()).Err(); err != nil {
		b.Fatal(err)
	}
	s, err := NewSession(c, append([]Option{WithTTL(10 * time.Second)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close(context.Background()) })
	return c, s
}

// BenchmarkLockPair measures one acquire+release pair (TryLock + Release) on
// a real redis-server next to the raw floor, for allocations (exact) and
// ns/op (noisy on a shared machine: use BenchmarkLockPairRatio for time).
//
//	go test -run '^$' -bench LockPair -benchmem .
func BenchmarkLockPair(b *testing.B) {
	c, s := benchServer(b)
	ctx := context.Background()
	b.Run("raw", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			rawPair(ctx, b, c)
		}
	})
	b.Run("redisleader", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			libPair(ctx, b, s)
		}
	})
}

// BenchmarkLockPairRatio alternates raw and library pairs in one loop, so
// drift on a noisy machine hits both alike, and reports each one's median
// latency and their ratio. Run it pinned to one CPU to see the client- and
// server-side cost rather than cross-CPU wake-ups:
//
//	go test -c -o /tmp/rl.test . && taskset -c 0 /tmp/rl.test -test.run '^$' -test.bench LockPairRatio -test.benchtime 20000x -test.count 5
func BenchmarkLockPairRatio(b *testing.B) {
	c, s := benchServer(b)
	ctx := context.Background()
	var raw, lib []time.Duration
	for b.Loop() {
		t := time.Now()
		rawPair(ctx, b, c)
		raw = append(raw, time.Since(t))
		t = time.Now()
		libPair(ctx, b, s)
		lib = append(lib, time.Since(t))
	}
	slices.Sort(raw)
	slices.Sort(lib)
	r, l := raw[len(raw)/2], lib[len(lib)/2]
	b.ReportMetric(float64(r.Nanoseconds())/1e3, "raw-p50-µs")
	b.ReportMetric(float64(l.Nanoseconds())/1e3, "lib-p50-µs")
	b.ReportMetric(float64(l)/float64(r), "lib/raw-p50")
	b.ReportMetric(float64(lib[len(lib)*99/100])/float64(raw[len(raw)*99/100]), "lib/raw-p99")
}

// BenchmarkLockParallel runs 16 goroutines, each on its own key, doing
// acquire+release pairs for a window, raw and library windows alternating
// (b.N windows of each), and reports each one's pairs/s and their ratio:
//
//	go test -run '^$' -bench LockParallel -benchtime 5x .
func BenchmarkLockParallel(b *testing.B) {
	const goroutines, window = 16, 300 * time.Millisecond
	c, s := benchServer(b)
	ctx := context.Background()
	run := func(pair func(i int) error) float64 {
		var (
			wg    sync.WaitGroup
			total atomic.Int64
			stop  = time.Now().Add(window)
		)
		start := time.Now()
		for i := range goroutines {
			wgGo(&wg, func() {
				n := int64(0)
				for time.Now().Before(stop) {
					if err := pair(i); err != nil {
						b.Error(err)
						return
					}
					n++
				}
				total.Add(n)
			})
		}
		wg.Wait()
		return float64(total.Load()) / time.Since(start).Seconds()
	}
	rawKeys, libKeys := make([]string, goroutines), make([]string, goroutines)
	for i := range goroutines {
		rawKeys[i], libKeys[i] = fmt.Sprintf("raw-par-%d", i), fmt.Sprintf("lib-par-%d", i)
	}
	var raw, lib []float64
	for b.Loop() {
		raw = append(raw, run(func(i int) error {
			var tok [16]byte
			_, _ = rand.Read(tok[:])
			token := hex.EncodeToString(tok[:])
			if err := c.SetNX(ctx, rawKeys[i], token, 10*time.Second).Err(); err != nil {
				return err
			}
			return rawRelease.Run(ctx, c, []string{rawKeys[i]}, token).Err()
		}))
		lib = append(lib, run(func(i int) error {
			l, err := s.TryLock(ctx, libKeys[i])
			if err != nil {
				return err
			}
			return l.Release(ctx)
		}))
	}
	ratios := make([]float64, len(raw))
	for i := range raw {
		ratios[i] = lib[i] / raw[i]
	}
	slices.Sort(raw)
	slices.Sort(lib)
	slices.Sort(ratios)
	b.ReportMetric(raw[len(raw)/2], "raw-pairs/s")
	b.ReportMetric(lib[len(lib)/2], "lib-pairs/s")
	b.ReportMetric(ratios[len(ratios)/2], "lib/raw")
}

// BenchmarkRedlockPair measures one TryLock + Release pair on a Redlock
// session over three local redis-servers: allocations (exact) and ns/op.
//
//	go test -run '^$' -bench RedlockPair -benchmem .
func BenchmarkRedlockPair(b *testing.B) {
	var cs []Client
	for range 3 {
		srv := redisserver.Start(b)
		c := srv.Client(b, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
		if err := c.Ping(context.Background()).Err(); err != nil {
			b.Fatal(err)
		}
		cs = append(cs, c)
	}
	s, err := NewRedlockSession(cs, WithTTL(10*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close(context.Background()) })
	ctx := context.Background()
	b.Run("sequential", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			libPair(ctx, b, s)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(16 / max(1, runtime.GOMAXPROCS(0)))
		var n atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			name := fmt.Sprint("redlock-", n.Add(1))
			for pb.Next() {
				if err := pairOn(ctx, s, name); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
