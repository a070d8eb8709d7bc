package redisleader

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// BenchmarkServerTime reports the server's own time per acquire+release pair
// (INFO commandstats: the µs Redis spent in the commands the library sent,
// everything a script runs included), which wall-clock benchmarks cannot
// separate from the network and the client. One sub-benchmark per mode: the
// default, fair mode, and a campaign with a priority (Campaign + Release).
//
//	go test -run '^$' -bench ServerTime -benchtime 20000x .
func BenchmarkServerTime(b *testing.B) {
	b.Run("default", func(b *testing.B) {
		c, s := benchServer(b)
		serverTime(b, c, func(ctx context.Context) error { return pairOn(ctx, s, "st-key") })
	})
	b.Run("fair", func(b *testing.B) {
		c, s := benchServer(b, WithFairness())
		serverTime(b, c, func(ctx context.Context) error { return pairOn(ctx, s, "st-key") })
	})
	b.Run("priority", func(b *testing.B) {
		c, s := benchServer(b)
		e, err := s.Election("st-name")
		if err != nil {
			b.Fatal(err)
		}
		serverTime(b, c, func(ctx context.Context) error {
			l, err := e.Campaign(ctx, "v", WithPriority(1))
			if err != nil {
				return err
			}
			return l.Release(ctx)
		})
	})
}

// serverTime runs pair b.N times between two readings of INFO commandstats
// and reports the µs per pair of the top-level commands a lock pair sends:
// scripts (whose own time includes the commands they call, which Redis also
// counts under their names: those are not added again) and the native
// commands that may replace them.
func serverTime(b *testing.B, c *redis.Client, pair func(context.Context) error) {
	ctx := context.Background()
	if err := pair(ctx); err != nil { // load the scripts, subscribe
		b.Fatal(err)
	}
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := pair(ctx); err != nil {
			b.Fatal(err)
		}
	}
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	top := map[string]bool{"evalsha": true, "eval": true, "exec": true, "delifeq": true, "delex": true}
	var usec float64
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name = strings.TrimPrefix(name, "cmdstat_")
		if !ok || !top[name] {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				n, err := strconv.ParseFloat(v, 64)
				if err != nil {
					b.Fatalf("INFO commandstats: %q: %v", line, err)
				}
				usec += n
			}
		}
	}
	b.ReportMetric(usec/float64(b.N), "server-µs/pair")
}
