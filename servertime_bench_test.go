package redisleader

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisleader/redisleader/internal/lease"
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

// pairCommands are the top-level commands a lock pair sends: scripts (whose
// own time includes the commands they call, which Redis also counts under
// their names: those are not added again) and the native release's MULTI
// and EXEC (whose time includes the DELIFEQ or DELEX and PUBLISH it runs,
// counted under their names too: on Valkey 9.1.2, 3,000 transactions gave
// EXEC 2.17 µs a call, DELIFEQ 1.15, PUBLISH 0.23). renewCommands are a
// renewal's: the script, or SET … IFEQ (counted as SET).
var (
	pairCommands  = []string{"evalsha", "eval", "multi", "exec"}
	renewCommands = []string{"evalsha", "eval", "set"}
)

// serverTime runs pair b.N times between two readings of INFO commandstats
// and reports the µs per pair of the commands a lock pair sends
// (pairCommands).
func serverTime(b *testing.B, c *redis.Client, pair func(context.Context) error) {
	serverTimeOf(b, c, pairCommands, "server-µs/pair", pair)
}

// serverTimeOf runs op b.N times between two readings of INFO commandstats
// and reports the µs per op spent in the commands named top, as unit. A
// first op, before, loads the scripts and learns the server's commands.
func serverTimeOf(b *testing.B, c *redis.Client, top []string, unit string, op func(context.Context) error) {
	ctx := context.Background()
	if err := op(ctx); err != nil { // load the scripts, subscribe
		b.Fatal(err)
	}
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := op(ctx); err != nil {
			b.Fatal(err)
		}
	}
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var usec float64
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name = strings.TrimPrefix(name, "cmdstat_")
		if !ok || !slices.Contains(top, name) {
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
	b.ReportMetric(usec/float64(b.N), unit)
}

// BenchmarkServerTimeNative reports the server's own time per renewal and
// per release of a plain lock, by the scripts and natively (SET … IFEQ;
// MULTI, DELIFEQ or DELEX, PUBLISH, EXEC). On a server without the native
// commands the "native" runs take the scripts after one probe.
//
//	REDIS_SERVER=$(bash .ci/servers path valkey) go test -run '^$' -bench ServerTimeNative -benchtime 20000x .
func BenchmarkServerTimeNative(b *testing.B) {
	for _, path := range []string{"script", "native"} {
		b.Run("renew/"+path, func(b *testing.B) {
			c, s := nativeBench(b, path)
			l, err := s.TryLock(context.Background(), "st-renew")
			if err != nil {
				b.Fatal(err)
			}
			serverTimeOf(b, c, renewCommands, "server-µs/renewal", func(ctx context.Context) error {
				return renewedAll(s.place.Renew(ctx, []*lease.Lease{&l.lease}, time.Time{}))
			})
		})
		b.Run("release/"+path, func(b *testing.B) {
			c, s := nativeBench(b, path)
			le, stored := heldLeases(b, c, s, "st-release", 1)
			serverTimeOf(b, c, pairCommands, "server-µs/release", func(ctx context.Context) error {
				if err := c.Set(ctx, le[0].Keys.Lock, stored[0], time.Minute).Err(); err != nil { // not counted
					return err
				}
				if d := s.place.Release(ctx, lease.Ending{Lease: le[0]}); d != (lease.Deleted{}) {
					return fmt.Errorf("release: %+v", d)
				}
				return nil
			})
		})
	}
}

// BenchmarkServerTimeRound reports the server's own time of one renewal
// round of 50,000 plain leases (in slices of 1,000, as the heartbeat's
// ring sends them), by the scripts and natively.
//
//	REDIS_SERVER=$(bash .ci/servers path valkey) go test -run '^$' -bench ServerTimeRound -benchtime 3x .
func BenchmarkServerTimeRound(b *testing.B) {
	const n, slice = 50000, 1000
	for _, path := range []string{"script", "native"} {
		b.Run(path, func(b *testing.B) {
			c, s := nativeBench(b, path)
			leases, _ := heldLeases(b, c, s, "st-round", n)
			serverTimeOf(b, c, renewCommands, "server-µs/round", func(ctx context.Context) error {
				for chunk := range slices.Chunk(leases, slice) {
					if err := renewedAll(s.place.Renew(ctx, chunk, time.Time{})); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
}

// nativeBench is benchServer with the native commands off on path "script".
func nativeBench(b *testing.B, path string) (*redis.Client, *Session) {
	c, s := benchServer(b)
	if path == "script" {
		nativeOf(s).Off()
	}
	return c, s
}

// heldLeases makes n plain leases of s, on names prefix-i, each stored in
// Redis as its acquire would have (fence 1, value "v"), with their stored
// values.
func heldLeases(b *testing.B, c *redis.Client, s *Session, prefix string, n int) ([]*lease.Lease, []string) {
	leases, stored := make([]*lease.Lease, n), make([]string, n)
	pipe := c.Pipeline()
	for i := range leases {
		le := new(lease.Lease)
		*le = lease.New(lease.NewKeys(prefix+"-"+strconv.Itoa(i)), s.ttlArg, "v", lease.Plain{})
		le.Fence = 1
		leases[i], stored[i] = le, le.Token+"\n1\nv"
		pipe.Set(context.Background(), le.Keys.Lock, stored[i], time.Hour)
	}
	if _, err := pipe.Exec(context.Background()); err != nil {
		b.Fatal(err)
	}
	return leases, stored
}

// renewedAll is nil if every renewal renewed.
func renewedAll(rs []lease.Renewal) error {
	for _, r := range rs {
		if r != (lease.Renewal{}) {
			return fmt.Errorf("renewal: %+v", r)
		}
	}
	return nil
}
