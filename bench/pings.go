package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader"
)

// The renewal load: what one Session renewing many leases costs the other
// clients of its server. A pinger in a child process (another client, on
// its own CPU time) sends PING every millisecond and records each reply's
// latency: with the server idle, while a Session holding cfg.pingLeases
// locks renews them every cfg.pingEvery, and while raw go-redis renews as
// many keys in one pipeline per interval (the shape the library's rounds
// had before they were sliced).

// pingResults holds the renewal load's numbers: one row per load.
type pingResults struct {
	lat             *pooled // PING latencies
	p50, p99, max   *series // per round, ms
	trips, perLease *series // renewal round trips per round; renewals per lease per round
}

func newPingResults(rounds int) *pingResults {
	return &pingResults{lat: newPooled(rounds), p50: newSeries(rounds), p99: newSeries(rounds), max: newSeries(rounds),
		trips: newSeries(rounds), perLease: newSeries(rounds)}
}

// The renewal load's rows.
const (
	rowIdle        = "idle"
	rowOnePerRound = "raw, one pipeline per round"
)

// pingLoad is one renewal load: it holds n leases and renews them until
// stop, reporting round trips and renewals; idle holds nothing.
type pingLoad struct {
	name string
	run  func(ctx context.Context, e *env, cfg config, prefix string, measure func() error) (trips, renewals int64, err error)
}

var pingLoads = []pingLoad{
	{"redisleader", sessionRenewals},
	{rowOnePerRound, rawRenewals},
}

// runPings measures the PING latency idle, then under each load, in an
// order rotated by round.
func runPings(ctx context.Context, e *env, cfg config, round int, res *pingResults, errs *errorLog) {
	record := func(row string, lat []time.Duration) {
		d := describe(lat)
		res.lat.add(row, round, lat)
		res.p50.set(row, round, ms(d.p50))
		res.p99.set(row, round, ms(d.p99))
		res.max.set(row, round, ms(d.max))
	}
	window := time.Duration(cfg.pingRounds) * cfg.pingEvery
	lat, err := pings(ctx, e.mainAddr(), window)
	if !errs.add("renewal load", rowIdle, err) {
		record(rowIdle, lat)
	}
	for _, l := range rotate(pingLoads, round) {
		var lat []time.Duration
		trips, renewals, err := l.run(ctx, e, cfg, fmt.Sprintf("bench:pings:r%d:%s", round, strings.ReplaceAll(l.name, " ", "-")),
			func() (err error) { lat, err = pings(ctx, e.mainAddr(), window); return err })
		if errs.add("renewal load", l.name, err) {
			continue
		}
		record(l.name, lat)
		rounds := float64(window) / float64(cfg.pingEvery)
		res.trips.set(l.name, round, float64(trips)/rounds)
		res.perLease.set(l.name, round, float64(renewals)/float64(cfg.pingLeases)/rounds)
	}
}

// sessionRenewals holds cfg.pingLeases locks in one Session renewing every
// cfg.pingEvery while measure runs, and counts its renewal round trips
// (Hooks.RenewalRound) and the renewals the server ran meanwhile.
func sessionRenewals(ctx context.Context, e *env, cfg config, prefix string, measure func() error) (trips, renewals int64, err error) {
	c := e.client()
	defer c.Close()
	var n counter
	s, err := redisleader.NewSession(c, redisleader.WithTTL(cfg.pingTTL), redisleader.WithRenewInterval(cfg.pingEvery),
		redisleader.WithHooks(redisleader.Hooks{RenewalRound: func(redisleader.RenewalEvent) { n.add(1) }}))
	if err != nil {
		return 0, 0, err
	}
	defer s.Close(context.Background())
	if _, err := acquireMany(ctx, s, prefix, cfg.pingLeases, cfg.goroutines); err != nil {
		return 0, 0, err
	}
	<-time.After(cfg.pingEvery) // a whole round before the window: every lease has its slice
	return measured(ctx, e, &n, measure)
}

// rawRenewals sets cfg.pingLeases keys with go-redis and renews them every
// cfg.pingEvery in one pipeline of compare-and-PEXPIRE scripts, as one
// round of the library did before its rounds were sliced, while measure
// runs.
func rawRenewals(ctx context.Context, e *env, cfg config, prefix string, measure func() error) (trips, renewals int64, err error) {
	c := e.client()
	defer c.Close()
	keys := make([]string, cfg.pingLeases)
	for i := range keys {
		keys[i] = prefix + ":" + strconv.Itoa(i)
	}
	if err := pipelined(ctx, c, keys, func(p redis.Pipeliner, k string) { p.Set(ctx, k, "token", cfg.pingTTL) }); err != nil {
		return 0, 0, err
	}
	defer pipelined(context.Background(), c, keys, func(p redis.Pipeliner, k string) { p.Del(ctx, k) })
	renew := redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0`)
	if err := renew.Load(ctx, c).Err(); err != nil {
		return 0, 0, err
	}
	rctx, stop := context.WithCancel(ctx)
	var n counter
	var wg sync.WaitGroup
	first := make(chan struct{})
	wg.Go(func() {
		t := time.NewTicker(cfg.pingEvery)
		defer t.Stop()
		for i := 0; ; i++ {
			p := c.Pipeline()
			for _, k := range keys {
				renew.EvalSha(rctx, p, []string{k}, "token", cfg.pingTTL.Milliseconds())
			}
			_, _ = p.Exec(rctx)
			n.add(1)
			if i == 0 {
				close(first) // the window starts after a round, as the Session's
			}
			select {
			case <-t.C:
			case <-rctx.Done():
				return
			}
		}
	})
	defer wg.Wait()
	defer stop()
	<-first
	return measured(ctx, e, &n, measure)
}

// measured runs measure and returns the round trips counted by n and the
// renewals (PEXPIRE) the server ran meanwhile.
func measured(ctx context.Context, e *env, n *counter, measure func() error) (trips, renewals int64, err error) {
	before, err := commandCalls(ctx, e.admin)
	if err != nil {
		return 0, 0, err
	}
	t0 := n.get()
	if err := measure(); err != nil {
		return 0, 0, err
	}
	after, err := commandCalls(ctx, e.admin)
	if err != nil {
		return 0, 0, err
	}
	return n.get() - t0, after.since(before)["pexpire"], nil
}

// pipelined runs f for every key, 1000 to a pipeline.
func pipelined(ctx context.Context, c *redis.Client, keys []string, f func(redis.Pipeliner, string)) error {
	for i := 0; i < len(keys); i += 1000 {
		p := c.Pipeline()
		for _, k := range keys[i:min(i+1000, len(keys))] {
			f(p, k)
		}
		if _, err := p.Exec(ctx); err != nil {
			return err
		}
	}
	return nil
}

// counter counts from several goroutines.
type counter struct {
	mu sync.Mutex
	n  int64
}

func (c *counter) add(d int64) {
	c.mu.Lock()
	c.n += d
	c.mu.Unlock()
}

func (c *counter) get() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// pings runs the pinger (this program, -pinger) for d against addr and
// returns its latencies.
func pings(ctx context.Context, addr string, d time.Duration) ([]time.Duration, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var out, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, self, "-pinger", addr, "-ping-for", d.String())
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("pinger: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	var lat []time.Duration
	for _, f := range strings.Fields(out.String()) {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("pinger: %q: %w", f, err)
		}
		lat = append(lat, time.Duration(v))
	}
	if len(lat) == 0 {
		return nil, fmt.Errorf("pinger: no samples")
	}
	return lat, nil
}

// pinger is the child process of pings: one connection, a PING every
// millisecond for d, each reply's latency in ns on stdout.
func pinger(addr string, d time.Duration) int {
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	var out strings.Builder
	for end := time.Now().Add(d); time.Now().Before(end); {
		<-t.C
		start := time.Now()
		if err := c.Ping(ctx).Err(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Fprintf(&out, "%d ", time.Since(start))
	}
	fmt.Print(out.String())
	return 0
}
