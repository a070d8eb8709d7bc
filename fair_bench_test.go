package redisleader

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader/internal/redisserver"
)

// BenchmarkFairHandover measures handovers between 200 waiters, each in its
// own session, looping Lock → Release on one name, in default and in fair
// mode: the latency from a Release call to the next Lock's return (p50,
// p99), handovers per second, and per handover the commands the clients
// sent (scripts count one; renewals included) and the commands Redis
// executed (INFO total_commands_processed: each command inside a script
// counts too).
//
//	go test -run '^$' -bench FairHandover -benchtime 2000x .
func BenchmarkFairHandover(b *testing.B) {
	b.Run("default", func(b *testing.B) { benchHandover(b, 200) })
	b.Run("fair", func(b *testing.B) { benchHandover(b, 200, WithFairness()) })
}

func benchHandover(b *testing.B, n int, opts ...Option) {
	srv := redisserver.Start(b)
	c := srv.Client(b, func(o *redis.Options) { o.ContextTimeoutEnabled = true; o.PoolSize = 2 * n })
	sent := &countingHook{}
	c.AddHook(sent.hook())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const name = "bench-handover"
	opts = append([]Option{WithTTL(5 * time.Second)}, opts...)
	holder, err := NewSession(c, opts...)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = holder.Close(context.Background()) }()
	first, err := holder.Lock(ctx, name)
	if err != nil {
		b.Fatal(err)
	}

	var (
		mu       sync.Mutex
		released time.Time // when the last Release was called
		lat      []time.Duration
		wg       sync.WaitGroup
		ready    = make(chan struct{}, n)
	)
	for range n {
		hook, locked := attempts()
		s, err := NewSession(c, append(opts, hook)...)
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = s.Close(context.Background()) }()
		wg.Add(1)
		go func() {
			defer wg.Done()
			go func() {
				select {
				case <-locked:
					ready <- struct{}{}
				case <-ctx.Done():
				}
			}()
			for {
				l, err := s.Lock(ctx, name)
				if err != nil {
					return // ctx ended
				}
				now := time.Now()
				mu.Lock()
				lat = append(lat, now.Sub(released))
				enough := len(lat) >= b.N
				released = time.Now()
				mu.Unlock()
				if enough {
					cancel()
				}
				_ = l.Release(context.Background())
			}
		}()
	}
	for range n {
		<-ready // every waiter waits
	}
	before, sentBefore := commands(b, c), sent.n.Load()
	b.ResetTimer()
	start := time.Now()
	mu.Lock()
	released = time.Now()
	mu.Unlock()
	_ = first.Release(context.Background())
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	sentAfter := sent.n.Load()
	after := commands(b, c)
	mu.Lock()
	defer mu.Unlock()
	reportLatency(b, "handover-", lat)
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "handovers/s")
	b.ReportMetric(float64(sentAfter-sentBefore)/float64(len(lat)), "sent-cmds/handover")
	b.ReportMetric(float64(after-before)/float64(len(lat)), "server-cmds/handover")
}

// commands reads INFO total_commands_processed.
func commands(b *testing.B, c *redis.Client) int64 {
	info, err := c.Info(context.Background(), "stats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "total_commands_processed:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	b.Fatal("no total_commands_processed in INFO stats")
	return 0
}
