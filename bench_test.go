package redisleader

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader/internal/redisserver"
	"github.com/redisleader/redisleader/internal/wire"

	"github.com/redisleader/redisleader/internal/lease"
)

// The baseline ("raw") is the floor any Redis lock pays: SET key token NX PX
// with a fresh 16-byte random token, then EVALSHA compare-and-delete, through
// go-redis with the same client. It has no fence, no deadline, no renewal.
var rawRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

func rawPair(ctx context.Context, b *testing.B, c *redis.Client) {
	if err := rawPairOn(ctx, c, "raw-key"); err != nil {
		b.Fatal(err)
	}
}

// rawPairOn is one raw acquire+release of key.
func rawPairOn(ctx context.Context, c *redis.Client, key string) error {
	token := benchToken()
	ok, err := c.SetNX(ctx, key, token, 10*time.Second).Result()
	if err != nil || !ok {
		return fmt.Errorf("SET NX %s: %v %v", key, ok, err)
	}
	return rawRelease.Run(ctx, c, []string{key}, token).Err()
}

// benchToken is a fresh 16-byte random token in hex, as raw clients make.
func benchToken() string {
	var tok [16]byte
	_, _ = rand.Read(tok[:])
	return hex.EncodeToString(tok[:])
}

// loadScripts loads the acquire and release scripts, and any more given, on
// c, so that EVALSHA finds them.
func loadScripts(ctx context.Context, b *testing.B, c *redis.Client, more ...*wire.Script) {
	for _, sc := range append([]*wire.Script{lease.AcquireRun, lease.ReleaseRun}, more...) {
		if sha, err := c.ScriptLoad(ctx, sc.Src()).Result(); err != nil || sha != sc.SHA() {
			b.Fatalf("SCRIPT LOAD: %q %v, want %q", sha, err, sc.SHA())
		}
	}
}

// acquiredFence checks a reply of the acquire script on key: acquired, with a
// fence above prev; it returns the fence.
func acquiredFence(cmd *redis.Cmd, key string, prev int64) (int64, error) {
	res, err := cmd.Result()
	if err != nil {
		return 0, err
	}
	// Never the reply itself: on a held key it carries the holder's token.
	r, err := lease.DecodeAcquire(res)
	if err != nil || !r.Taken {
		return 0, fmt.Errorf("acquire %s: not taken (%v)", key, err)
	}
	if r.Fence <= prev || r.At <= 0 {
		return 0, fmt.Errorf("acquire %s: fence %d, time %d after fence %d", key, r.Fence, r.At, prev)
	}
	return r.Fence, nil
}

// scriptsPair is the library's pair without the library: the acquire and
// release scripts run by EVALSHA on c, one after the other, with a fresh
// token; it returns the fence, which must be above prev.
func scriptsPair(ctx context.Context, b *testing.B, c *redis.Client, k lease.Keys, prev int64) int64 {
	token := benchToken()
	f, err := acquiredFence(c.EvalSha(ctx, lease.AcquireRun.SHA(), []string{k.Lock, k.Fence}, token, "10000", ""), k.Lock, prev)
	if err != nil {
		b.Fatal(err)
	}
	if r, err := c.EvalSha(ctx, lease.ReleaseRun.SHA(), []string{k.Lock}, token).Int64(); err != nil || r != 1 {
		b.Fatalf("release %s: %d %v, want 1", k.Lock, r, err)
	}
	return f
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
	loopAllocs(b, "raw", func(b *testing.B) { rawPair(ctx, b, c) })
	loopAllocs(b, "redisleader", func(b *testing.B) { libPair(ctx, b, s) })
}

// loopAllocs runs pair as sub-benchmark name, reporting allocations.
func loopAllocs(b *testing.B, name string, pair func(b *testing.B)) {
	b.Run(name, func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			pair(b)
		}
	})
}

// BenchmarkLockPairRatio alternates raw and library pairs in one loop, so
// drift on a noisy machine hits both alike, and reports each one's median
// latency and their ratio; and, as scripts/raw-p50, the ratio the library's
// two scripts reach run bare (scriptsPair): the floor of the library's
// latency, which its client-side work adds to. Run it pinned to one CPU to
// see the client- and server-side cost rather than cross-CPU wake-ups:
//
//	go test -c -o /tmp/rl.test . && taskset -c 0 /tmp/rl.test -test.run '^$' -test.bench LockPairRatio -test.benchtime 20000x -test.count 5
func BenchmarkLockPairRatio(b *testing.B) {
	c, s := benchServer(b)
	ctx := context.Background()
	loadScripts(ctx, b, c)
	k := lease.NewKeys("scripts-key")
	var fence int64
	raw, lib, scripts := alternate(b,
		func() { rawPair(ctx, b, c) },
		func() { libPair(ctx, b, s) },
		func() { fence = scriptsPair(ctx, b, c, k, fence) })
	b.ReportMetric(float64(raw.p50().Nanoseconds())/1e3, "raw-p50-µs")
	b.ReportMetric(float64(lib.p50().Nanoseconds())/1e3, "lib-p50-µs")
	b.ReportMetric(float64(lib.p50())/float64(raw.p50()), "lib/raw-p50")
	b.ReportMetric(float64(scripts.p50())/float64(raw.p50()), "scripts/raw-p50")
	b.ReportMetric(float64(lib.p99())/float64(raw.p99()), "lib/raw-p99")
}

// BenchmarkLockParallel compares, on the work of 16 goroutines each on its
// own name doing acquire+release pairs, four windows that alternate (b.N
// windows of each, same length, same redis-server and client):
//
//   - raw: 16 goroutines, one per key, doing SET NX PX + the rawRelease
//     EVALSHA unpipelined: the floor any Redis lock pays, one round trip per
//     command.
//   - lib: 16 goroutines, one per name, doing TryLock + Release on a Session,
//     whose coalescer turns concurrent commands into pipelines.
//   - ideal-scripts: our exact acquire and release scripts (EVALSHA, fresh
//     16-byte hex token per acquisition, every reply checked) sent with
//     perfect pipelining and no library: idealGoroutines goroutines (2),
//     each pipelining the acquires of its share of the 16 names (8), then
//     their releases. It is the ceiling of coalescing: what the library
//     could reach with these scripts if its own overhead were zero.
//   - ideal-raw: raw's commands (SET NX PX, then the rawRelease EVALSHA)
//     pipelined the same way: the best any pipelining could do with the
//     cheapest commands.
//   - ideal-handoff: our exact scripts, coalesced for 16 goroutines that
//     each wait for their own reply, as the library's callers do, with no
//     library around them (handoffWindow). It is the ceiling of coalescing
//     for blocking callers: the ideal windows above have no caller to hand
//     a reply to, and every reply handed over wakes a goroutine.
//
// It reports each window's pairs/s (median), each window's pairs/s over
// raw's in the same iteration (median of the ratios; for lib also over
// ideal-handoff's), and, per pair, the
// CPU time redis-server spent (INFO cpu: used_cpu_sys + used_cpu_user, read
// before and after the window) and the CPU time this process spent
// (getrusage RUSAGE_SELF, all goroutines, Go runtime included):
//
//	go test -run '^$' -bench LockParallel -benchtime 5x .
func BenchmarkLockParallel(b *testing.B) {
	const goroutines, window = 16, 300 * time.Millisecond
	// Pipelined shape of the ideal windows: idealGoroutines goroutines, each
	// with goroutines/idealGoroutines names, so at most 16 commands are in
	// flight, the most 16 goroutines with one command each can hand a
	// coalescer. Of 1, 2 and 4 on an otherwise idle 2-vCPU machine, 2 gave
	// the most pairs/s for both ideal windows (scripts: about 29k, 31k and
	// 27k): Redis runs one goroutine's pipeline while the other checks its
	// replies and builds its next one, and 4 shallower pipelines cost Redis
	// more per command. (When another process takes a CPU, 1 does best.)
	const idealGoroutines = 2
	c, s := benchServer(b)
	ctx := context.Background()
	run := func(n int, pair func(i int) (int, error)) int64 {
		done, _, _ := hammer(b, n, window, pair)
		return done
	}
	rawKeys, libKeys := make([]string, goroutines), make([]string, goroutines)
	idealKeys := make([]lease.Keys, goroutines)
	idealRawKeys := make([]string, goroutines)
	for i := range goroutines {
		rawKeys[i], libKeys[i] = fmt.Sprintf("raw-par-%d", i), fmt.Sprintf("lib-par-%d", i)
		idealKeys[i] = lease.NewKeys(fmt.Sprintf("ideal-par-%d", i))
		idealRawKeys[i] = fmt.Sprintf("ideal-raw-par-%d", i)
	}
	acquireSHA, releaseSHA := lease.AcquireRun.SHA(), lease.ReleaseRun.SHA()
	loadScripts(ctx, b, c)
	if err := rawRelease.Load(ctx, c).Err(); err != nil {
		b.Fatal(err)
	}
	per := goroutines / idealGoroutines
	idealScripts := func(g int) func() (int, error) {
		names := idealKeys[g*per : (g+1)*per]
		tokens := make([]string, per)
		fences := make([]int64, per)
		acq, rel := make([]*redis.Cmd, per), make([]*redis.Cmd, per)
		pipe := c.Pipeline()
		return func() (int, error) {
			for j, k := range names {
				tokens[j] = benchToken()
				acq[j] = pipe.EvalSha(ctx, acquireSHA, []string{k.Lock, k.Fence}, tokens[j], "10000", "")
			}
			if _, err := pipe.Exec(ctx); err != nil {
				return 0, err
			}
			for j, cmd := range acq {
				f, err := acquiredFence(cmd, names[j].Lock, fences[j])
				if err != nil {
					return 0, err
				}
				fences[j] = f
			}
			for j, k := range names {
				rel[j] = pipe.EvalSha(ctx, releaseSHA, []string{k.Lock}, tokens[j])
			}
			if _, err := pipe.Exec(ctx); err != nil {
				return 0, err
			}
			for j, cmd := range rel {
				if r, err := cmd.Int64(); err != nil || r != 1 {
					return 0, fmt.Errorf("release %s: %d %v, want 1", names[j].Lock, r, err)
				}
			}
			return per, nil
		}
	}
	idealRaw := func(g int) func() (int, error) {
		names := idealRawKeys[g*per : (g+1)*per]
		tokens := make([]string, per)
		set := make([]*redis.BoolCmd, per)
		rel := make([]*redis.Cmd, per)
		pipe := c.Pipeline()
		return func() (int, error) {
			for j, k := range names {
				tokens[j] = benchToken()
				set[j] = pipe.SetNX(ctx, k, tokens[j], 10*time.Second)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				return 0, err
			}
			for j, cmd := range set {
				if ok, err := cmd.Result(); err != nil || !ok {
					return 0, fmt.Errorf("SET NX %s: %v %v", names[j], ok, err)
				}
			}
			for j, k := range names {
				rel[j] = rawRelease.EvalSha(ctx, pipe, []string{k}, tokens[j])
			}
			if _, err := pipe.Exec(ctx); err != nil {
				return 0, err
			}
			for j, cmd := range rel {
				if r, err := cmd.Int64(); err != nil || r != 1 {
					return 0, fmt.Errorf("release %s: %d %v, want 1", names[j], r, err)
				}
			}
			return per, nil
		}
	}
	pipelined := func(round func(g int) func() (int, error)) func() int64 {
		return pipelinedWindow(b, window, idealGoroutines, round)
	}
	windows := []parWindow{
		{"raw", func() int64 {
			return run(goroutines, func(i int) (int, error) {
				return 1, rawPairOn(ctx, c, rawKeys[i])
			})
		}},
		{"lib", func() int64 {
			return run(goroutines, func(i int) (int, error) {
				l, err := s.TryLock(ctx, libKeys[i])
				if err != nil {
					return 0, err
				}
				return 1, l.Release(ctx)
			})
		}},
		{"ideal-scripts", pipelined(idealScripts)},
		{"ideal-raw", pipelined(idealRaw)},
		{"ideal-handoff", func() int64 { return handoffWindow(b, c, window, idealKeys, idealGoroutines) }},
	}
	compareWindows(ctx, b, []*redis.Client{c}, windows, [2]string{"lib", "ideal-handoff"})
}

// parWindow is one window of a throughput benchmark: run does pairs for the
// window's length and returns how many.
type parWindow struct {
	name string
	run  func() int64
}

// compareWindows runs the windows in turn once per b.Loop iteration and
// reports, as medians over iterations, each window's pairs/s, the CPU time
// per pair of the redis-servers behind cs (INFO cpu) and of this process
// (getrusage, Go runtime included), and each window's pairs/s over the
// first window's in the same iteration (named after it); and so for each
// pair of window names in over, the first's over the second's.
func compareWindows(ctx context.Context, b *testing.B, cs []*redis.Client, windows []parWindow, over ...[2]string) {
	type sample struct{ pairsPerSec, redisµs, clientµs float64 }
	servers := func() (d time.Duration) {
		for _, c := range cs {
			d += redisCPU(ctx, b, c)
		}
		return d
	}
	measure := func(window func() int64) sample {
		r0, c0 := servers(), clientCPU(b)
		start := time.Now()
		pairs := window()
		elapsed := time.Since(start)
		r1, c1 := servers(), clientCPU(b)
		if pairs == 0 {
			b.Fatal("no pair done in a window")
		}
		return sample{
			pairsPerSec: float64(pairs) / elapsed.Seconds(),
			redisµs:     float64((r1 - r0).Microseconds()) / float64(pairs),
			clientµs:    float64((c1 - c0).Microseconds()) / float64(pairs),
		}
	}
	samples := make([][]sample, len(windows))
	for b.Loop() {
		for w, win := range windows {
			samples[w] = append(samples[w], measure(win.run))
		}
	}
	median := func(xs []float64) float64 {
		slices.Sort(xs)
		return xs[len(xs)/2]
	}
	pick := func(ss []sample, f func(sample) float64) []float64 {
		xs := make([]float64, len(ss))
		for i, x := range ss {
			xs[i] = f(x)
		}
		return xs
	}
	for w, win := range windows {
		ss := samples[w]
		b.ReportMetric(median(pick(ss, func(x sample) float64 { return x.pairsPerSec })), win.name+"-pairs/s")
		b.ReportMetric(median(pick(ss, func(x sample) float64 { return x.redisµs })), win.name+"-redis-µs/pair")
		b.ReportMetric(median(pick(ss, func(x sample) float64 { return x.clientµs })), win.name+"-client-µs/pair")
		if w > 0 {
			over = append(over, [2]string{win.name, windows[0].name})
		}
	}
	index := func(name string) int {
		return slices.IndexFunc(windows, func(w parWindow) bool { return w.name == name })
	}
	for _, o := range over {
		a, z := samples[index(o[0])], samples[index(o[1])]
		ratios := make([]float64, len(a))
		for i := range a {
			ratios[i] = a[i].pairsPerSec / z[i].pairsPerSec
		}
		b.ReportMetric(median(ratios), o[0]+"/"+o[1])
	}
}

// handoffWindow runs, for d, one goroutine per name doing acquire+release
// pairs with our scripts (fresh token, every reply checked, as idealScripts
// does), each call handed over a channel to one of n pipeliners, which send
// whatever has arrived as one pipeline and hand each reply back on its
// caller's own channel: the least a coalescer serving blocking callers does,
// a goroutine hop each way and no more. It returns the pairs done.
func handoffWindow(b *testing.B, c *redis.Client, d time.Duration, names []lease.Keys, n int) int64 {
	ctx := context.Background()
	acquireSHA, releaseSHA := lease.AcquireRun.SHA(), lease.ReleaseRun.SHA()
	type call struct {
		sha  string
		keys []string
		args []any
		done chan *redis.Cmd
	}
	calls, stop := make(chan *call, len(names)), make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wire.Go(&wg, func() {
			pipe := c.Pipeline()
			var batch []*call
			var cmds []*redis.Cmd
			for {
				select {
				case r := <-calls:
					batch = append(batch, r)
				case <-stop:
					return
				}
			more:
				for {
					select {
					case r := <-calls:
						batch = append(batch, r)
					default:
						break more
					}
				}
				for _, r := range batch {
					cmds = append(cmds, pipe.EvalSha(ctx, r.sha, r.keys, r.args...))
				}
				_, _ = pipe.Exec(ctx) // each reply is checked by its caller
				for i, r := range batch {
					r.done <- cmds[i]
				}
				clear(batch)
				clear(cmds)
				batch, cmds = batch[:0], cmds[:0]
			}
		})
	}
	mine, fences := make([]call, len(names)), make([]int64, len(names))
	for i := range mine {
		mine[i].done = make(chan *redis.Cmd, 1)
	}
	done, _, _ := hammer(b, len(names), d, func(i int) (int, error) {
		r, k := &mine[i], names[i]
		token := benchToken()
		r.sha, r.keys, r.args = acquireSHA, []string{k.Lock, k.Fence}, []any{token, "10000", ""}
		calls <- r
		f, err := acquiredFence(<-r.done, k.Lock, fences[i])
		if err != nil {
			return 0, err
		}
		fences[i] = f
		r.sha, r.keys, r.args = releaseSHA, []string{k.Lock}, []any{token}
		calls <- r
		if v, err := (<-r.done).Int64(); err != nil || v != 1 {
			return 0, fmt.Errorf("release %s: %d %v, want 1", k.Lock, v, err)
		}
		return 1, nil
	})
	close(stop)
	wg.Wait()
	return done
}

// pipelinedWindow is an ideal window of length d: goroutine g of n repeats
// round(g)'s rounds (each a pipeline of acquires, then one of releases,
// returning the pairs done), built once per window.
func pipelinedWindow(b *testing.B, d time.Duration, n int, round func(g int) func() (int, error)) func() int64 {
	return func() int64 {
		rounds := make([]func() (int, error), n)
		for g := range rounds {
			rounds[g] = round(g)
		}
		done, _, _ := hammer(b, n, d, func(g int) (int, error) { return rounds[g]() })
		return done
	}
}

// redisCPU is the CPU time redis-server has used (INFO cpu: used_cpu_sys +
// used_cpu_user).
func redisCPU(ctx context.Context, b *testing.B, c *redis.Client) time.Duration {
	info, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	found := 0
	for line := range strings.Lines(info) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (k != "used_cpu_sys" && k != "used_cpu_user") {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			b.Fatalf("INFO cpu: %s: %v", line, err)
		}
		total += f
		found++
	}
	if found != 2 {
		b.Fatalf("INFO cpu: no used_cpu_sys and used_cpu_user in %q", info)
	}
	return time.Duration(total * float64(time.Second))
}

// clientCPU is the CPU time this process has used (user + system).
func clientCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRedlockPair measures one TryLock + Release pair on a Redlock
// session over three local redis-servers: allocations (exact) and ns/op.
//
//	go test -run '^$' -bench RedlockPair -benchmem .
func BenchmarkRedlockPair(b *testing.B) {
	s, _ := redlockServers(b)
	ctx := context.Background()
	loopAllocs(b, "sequential", func(b *testing.B) { libPair(ctx, b, s) })
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

// redlockServers starts three redis-servers, with a client for each that
// has the acquire and release scripts of both modes loaded, and a Redlock
// session over them (closed when b ends).
func redlockServers(b *testing.B) (*Session, []*redis.Client) {
	var (
		cs  []Client
		rcs []*redis.Client
	)
	for range 3 {
		srv := redisserver.Start(b)
		c := srv.Client(b, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
		loadScripts(context.Background(), b, c, lease.RedlockReleaseRun)
		cs, rcs = append(cs, c), append(rcs, c)
	}
	s, err := NewRedlockSession(cs, WithTTL(10*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close(context.Background()) })
	return s, rcs
}

// onAll runs f on every client at once and waits for all of them.
func onAll(cs []*redis.Client, f func(i int, c *redis.Client)) {
	var wg sync.WaitGroup
	for i, c := range cs {
		wire.Go(&wg, func() { f(i, c) })
	}
	wg.Wait()
}

// raw3Pair is redsync's protocol over three servers with no library: SET
// key token NX PX on every server at once, then rawRelease on every server
// at once, each round waiting for every server. Every reply is checked.
func raw3Pair(ctx context.Context, cs []*redis.Client, key string) error {
	token := benchToken()
	errs := make([]error, len(cs))
	onAll(cs, func(i int, c *redis.Client) {
		if ok, err := c.SetNX(ctx, key, token, 10*time.Second).Result(); err != nil || !ok {
			errs[i] = fmt.Errorf("SET NX on node %d: %v %v", i, ok, err)
		}
	})
	onAll(cs, func(i int, c *redis.Client) {
		if n, err := rawRelease.Run(ctx, c, []string{key}, token).Int(); err != nil || n != 1 {
			errs[i] = cmp.Or(errs[i], fmt.Errorf("release on node %d: %d %v", i, n, err))
		}
	})
	return errors.Join(errs...)
}

// scripts3Pair is the library's Redlock pair without the library: the
// acquire script on every server at once, then the Redlock release script
// (with the largest fence) on every server at once, each round waiting for
// every server, with a fresh token. Every reply is checked; each node's
// fence must rise.
func scripts3Pair(ctx context.Context, b *testing.B, cs []*redis.Client, k lease.Keys, prev []int64) {
	token := benchToken()
	errs := make([]error, len(cs))
	onAll(cs, func(i int, c *redis.Client) {
		prev[i], errs[i] = acquiredFence(c.EvalSha(ctx, lease.AcquireRun.SHA(), []string{k.Lock, k.Fence}, token, "10000", ""), k.Lock, prev[i])
	})
	fence := slices.Max(prev)
	onAll(cs, func(i int, c *redis.Client) {
		if n, err := c.EvalSha(ctx, lease.RedlockReleaseRun.SHA(), []string{k.Lock, k.Fence}, token, fence).Int64(); err != nil || n != 1 {
			errs[i] = cmp.Or(errs[i], fmt.Errorf("release on node %d: %d %v", i, n, err))
		}
	})
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkRedlockPairRatio times, alternating in one process over the same
// three redis-servers, one sequential pair of each: raw3 (redsync's protocol
// with no library, raw3Pair), the library's (TryLock + Release on a Redlock
// session) and scripts3 (the library's scripts with no library,
// scripts3Pair), and reports the medians' ratios: lib/raw3 is what the
// library costs over redsync's floor, scripts3/raw3 what its scripts alone
// cost, the ceiling no client code can go past.
//
//	go test -run '^$' -bench RedlockPairRatio -benchtime 3000x .
func BenchmarkRedlockPairRatio(b *testing.B) {
	s, rcs := redlockServers(b)
	ctx := context.Background()
	k := lease.NewKeys("scripts3-key")
	fences := make([]int64, len(rcs))
	r, l, sp := alternate(b,
		func() {
			if err := raw3Pair(ctx, rcs, "raw3-key"); err != nil {
				b.Fatal(err)
			}
		},
		func() { libPair(ctx, b, s) },
		func() { scripts3Pair(ctx, b, rcs, k, fences) })
	b.ReportMetric(float64(r.p50().Nanoseconds())/1e3, "raw3-p50-µs")
	b.ReportMetric(float64(l.p50().Nanoseconds())/1e3, "lib-p50-µs")
	b.ReportMetric(float64(l.p50())/float64(r.p50()), "lib/raw3-p50")
	b.ReportMetric(float64(sp.p50())/float64(r.p50()), "scripts3/raw3-p50")
}

// BenchmarkRedlockParallel compares, on the work of 16 goroutines each on
// its own name doing acquire+release pairs over three redis-servers, three
// windows that alternate (as BenchmarkLockParallel does on one server):
//
//   - raw3: redsync's protocol with no library (raw3Pair), 16 goroutines;
//   - lib: TryLock + Release on a Redlock session, 16 goroutines;
//   - ideal-scripts3: our acquire and Redlock release scripts with perfect
//     pipelining and no library: 2 goroutines, each sending the acquires of
//     its 8 names as one pipeline to every server at once, then their
//     releases (with each name's largest fence) the same way. It is the
//     ceiling of any client with these scripts.
//
// It reports what BenchmarkLockParallel does, ratios to raw3:
//
//	go test -run '^$' -bench RedlockParallel -benchtime 5x .
func BenchmarkRedlockParallel(b *testing.B) {
	const goroutines, window, idealGoroutines = 16, 300 * time.Millisecond, 2
	s, rcs := redlockServers(b)
	ctx := context.Background()
	per := goroutines / idealGoroutines
	ideal := func(g int) func() (int, error) {
		names := make([]lease.Keys, per)
		for j := range names {
			names[j] = lease.NewKeys(fmt.Sprintf("ideal3-par-%d-%d", g, j))
		}
		tokens := make([]string, per)
		fences := make([][]int64, len(rcs)) // per node, per name
		pipes := make([]redis.Pipeliner, len(rcs))
		for i, c := range rcs {
			fences[i], pipes[i] = make([]int64, per), c.Pipeline()
		}
		errs := make([]error, len(rcs))
		return func() (int, error) {
			for j := range names {
				tokens[j] = benchToken()
			}
			onAll(rcs, func(i int, _ *redis.Client) {
				acq := make([]*redis.Cmd, per)
				for j, k := range names {
					acq[j] = pipes[i].EvalSha(ctx, lease.AcquireRun.SHA(), []string{k.Lock, k.Fence}, tokens[j], "10000", "")
				}
				if _, errs[i] = pipes[i].Exec(ctx); errs[i] != nil {
					return
				}
				for j, cmd := range acq {
					if fences[i][j], errs[i] = acquiredFence(cmd, names[j].Lock, fences[i][j]); errs[i] != nil {
						return
					}
				}
			})
			if err := errors.Join(errs...); err != nil {
				return 0, err
			}
			onAll(rcs, func(i int, _ *redis.Client) {
				rel := make([]*redis.Cmd, per)
				for j, k := range names {
					fence := max(fences[0][j], fences[1][j], fences[2][j])
					rel[j] = pipes[i].EvalSha(ctx, lease.RedlockReleaseRun.SHA(), []string{k.Lock, k.Fence}, tokens[j], fence)
				}
				if _, errs[i] = pipes[i].Exec(ctx); errs[i] != nil {
					return
				}
				for j, cmd := range rel {
					if n, err := cmd.Int64(); err != nil || n != 1 {
						errs[i] = fmt.Errorf("release %s on node %d: %d %v, want 1", names[j].Lock, i, n, err)
						return
					}
				}
			})
			return per, errors.Join(errs...)
		}
	}
	each := func(pair func(i int) error) func() int64 {
		return func() int64 {
			done, _, _ := hammer(b, goroutines, window, func(i int) (int, error) { return 1, pair(i) })
			return done
		}
	}
	compareWindows(ctx, b, rcs, []parWindow{
		{"raw3", each(func(i int) error { return raw3Pair(ctx, rcs, fmt.Sprint("raw3-par-", i)) })},
		{"lib", each(func(i int) error { return pairOn(ctx, s, fmt.Sprint("lib3-par-", i)) })},
		{"ideal-scripts3", pipelinedWindow(b, window, idealGoroutines, ideal)},
	})
}

// timings are one window's times, sorted.
type timings []time.Duration

func (t timings) p50() time.Duration { return t[len(t)/2] }
func (t timings) p99() time.Duration { return t[len(t)*99/100] }

// alternate times raw, lib and scripts in turn once per b.Loop iteration
// and returns each one's times, sorted.
func alternate(b *testing.B, raw, lib, scripts func()) (_, _, _ timings) {
	var ts [3]timings
	for b.Loop() {
		for i, f := range []func(){raw, lib, scripts} {
			t := time.Now()
			f()
			ts[i] = append(ts[i], time.Since(t))
		}
	}
	for _, t := range ts {
		slices.Sort(t)
	}
	return ts[0], ts[1], ts[2]
}

// BenchmarkLockContended compares, on one key tried by 16 goroutines at
// once (a try acquires and, when it succeeds, releases at once), four
// windows that alternate, 300 ms each, on the same redis-server: raw (SET NX
// PX, then rawRelease), lib (TryLock, then Release), scripts (the library's
// acquire and release scripts by EVALSHA, with no library) and chain. It
// reports, for lib, scripts and chain, the median over iterations of
// acquisitions/s and (but chain) failed tries/s divided by raw's in the same
// iteration: scripts/raw is what these scripts allow with the floor's own
// concurrency.
//
// chain is the ceiling of any coalescing for acquisitions on one key: one
// goroutine sends the release of the last acquisition and the next acquire
// in one pipeline, round trip after round trip, so that every round trip
// acquires. No client can do better with these scripts: an acquisition
// needs the last one's release to have landed, which its holder sends only
// once it has learnt, a round trip after sending its acquire, that it holds.
//
//	go test -run '^$' -bench LockContended -benchtime 10x .
func BenchmarkLockContended(b *testing.B) {
	const goroutines, window = 16, 300 * time.Millisecond
	c, s := benchServer(b)
	ctx := context.Background()
	loadScripts(ctx, b, c)
	k := lease.NewKeys("contended-scripts")
	windows := []struct {
		name string
		try  func() (bool, error)
	}{
		{"raw", func() (bool, error) {
			token := benchToken()
			ok, err := c.SetNX(ctx, "contended-raw", token, 10*time.Second).Result()
			if err != nil || !ok {
				return false, err
			}
			return true, rawRelease.Run(ctx, c, []string{"contended-raw"}, token).Err()
		}},
		{"lib", func() (bool, error) {
			l, err := s.TryLock(ctx, "contended-lib")
			switch {
			case errors.Is(err, ErrLocked):
				return false, nil
			case err != nil:
				return false, err
			}
			return true, l.Release(ctx)
		}},
		{"scripts", func() (bool, error) {
			token := benchToken()
			r, err := c.EvalSha(ctx, lease.AcquireRun.SHA(), []string{k.Lock, k.Fence}, token, "10000", "").Slice()
			if err != nil || len(r) == 0 || r[0] != int64(1) {
				return false, err
			}
			n, err := c.EvalSha(ctx, lease.ReleaseRun.SHA(), []string{k.Lock}, token).Int()
			if err == nil && n != 1 {
				err = fmt.Errorf("release of %s: %d, want 1", k.Lock, n)
			}
			return true, err
		}},
	}
	ck, held := lease.NewKeys("contended-chain"), ""
	chainPipe := c.Pipeline()
	chain := func() error {
		var rel *redis.Cmd
		if held != "" {
			rel = chainPipe.EvalSha(ctx, lease.ReleaseRun.SHA(), []string{ck.Lock}, held)
		}
		token := benchToken()
		acq := chainPipe.EvalSha(ctx, lease.AcquireRun.SHA(), []string{ck.Lock, ck.Fence}, token, "10000", "")
		if _, err := chainPipe.Exec(ctx); err != nil {
			return err
		}
		if rel != nil {
			if n, err := rel.Int(); err != nil || n != 1 {
				return fmt.Errorf("release of %s: %d %v, want 1", ck.Lock, n, err)
			}
		}
		held = token
		_, err := acquiredFence(acq, ck.Lock, 0)
		return err
	}
	acq, failed := make([][]float64, len(windows)+1), make([][]float64, len(windows))
	for b.Loop() {
		for w, win := range windows {
			got, not, took := hammer(b, goroutines, window, func(int) (int, error) {
				ok, err := win.try()
				if ok {
					return 1, err
				}
				return 0, err
			})
			acq[w] = append(acq[w], float64(got)/took.Seconds())
			failed[w] = append(failed[w], float64(not)/took.Seconds())
		}
		got, _, took := hammer(b, 1, window, func(int) (int, error) { return 1, chain() })
		acq[len(windows)] = append(acq[len(windows)], float64(got)/took.Seconds())
	}
	ratio := func(xs, base []float64) float64 {
		rs := make([]float64, len(xs))
		for i := range xs {
			rs[i] = xs[i] / base[i]
		}
		slices.Sort(rs)
		return rs[len(rs)/2]
	}
	for w, win := range windows[1:] {
		b.ReportMetric(ratio(acq[w+1], acq[0]), win.name+"/raw-acq")
		b.ReportMetric(ratio(failed[w+1], failed[0]), win.name+"/raw-failed")
	}
	b.ReportMetric(ratio(acq[len(windows)], acq[0]), "chain/raw-acq")
}

// hammer runs try(i) in goroutine i of n, over and over, until d has
// passed, and returns the sum of what try returned (the work done), how many
// calls returned 0 (tries that did nothing) and the time it took. An error
// fails b and stops its goroutine.
func hammer(b *testing.B, n int, d time.Duration, try func(i int) (int, error)) (done, idle int64, took time.Duration) {
	var (
		wg         sync.WaitGroup
		work, none atomic.Int64
		start      = time.Now()
		stop       = start.Add(d)
	)
	for i := range n {
		wire.Go(&wg, func() {
			var w, z int64
			defer func() { work.Add(w); none.Add(z) }()
			for time.Now().Before(stop) {
				k, err := try(i)
				switch {
				case err != nil:
					b.Error(err)
					return
				case k == 0:
					z++
				}
				w += int64(k)
			}
		})
	}
	wg.Wait()
	return work.Load(), none.Load(), time.Since(start)
}

// BenchmarkSemaphorePair measures one permit's acquire+release pair
// (TryAcquire + Release, N=4) on a real redis-server, next to a lock's
// (BenchmarkLockPair), for allocations.
func BenchmarkSemaphorePair(b *testing.B) {
	_, s := benchServer(b)
	ctx := context.Background()
	m, err := s.Semaphore("lib-sem", 4)
	if err != nil {
		b.Fatal(err)
	}
	loopAllocs(b, "lock", func(b *testing.B) { libPair(ctx, b, s) })
	loopAllocs(b, "semaphore", func(b *testing.B) {
		l, err := m.TryAcquire(ctx)
		if err == nil {
			err = l.Release(ctx)
		}
		if err != nil {
			b.Fatal(err)
		}
	})
}
