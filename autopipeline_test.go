//go:build autopipeline

// Tests of go-redis's AutoPipeline clients, which go-redis has from v9.22
// on: above the floor go.mod pins, so this file builds only with
// -tags autopipeline, and .ci/run runs it in its job against the newest
// go-redis (section "floors").

package redisleader

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader/internal/faultproxy"
	"github.com/redisleader/redisleader/internal/redisserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// autoPipeline returns c's AutoPipeline client, closed when the test ends
// (before c, whose Cleanup was registered first).
func autoPipeline(t testing.TB, c interface {
	AutoPipeline() (*redis.AutoPipeliner, error)
}) *redis.AutoPipeliner {
	t.Helper()
	ap, err := c.AutoPipeline()
	require.NoError(t, err)
	t.Cleanup(func() { _ = ap.Close() })
	return ap
}

// TestAutoPipelineKinds: an AutoPipeline client has the kind of the client
// under it. Over a *redis.ClusterClient it is a cluster client (no
// WithReplicaAcks, not a Redlock node), also when wrapped; over a
// *redis.Client it is a client of one server.
// Either way the session's combiner leaves the batching to it (combine.go,
// Auto-pipelining).
func TestAutoPipelineKinds(t *testing.T) {
	cluster, _, cs := unreachableNodes(t)
	ap := autoPipeline(t, cluster)
	for _, cc := range []Client{ap, wrappedIface{ap}} {
		t.Run(fmt.Sprintf("%T", cc), func(t *testing.T) {
			assertClusterKind(t, cc, cs)
			assertDirect(t, cc, true)
		})
	}
	plain := autoPipeline(t, unreachableClient(t))
	assertPlainKind(t, plain, cs)
	full, err := unreachableClient(t).AutoPipelineWithOptions(&redis.AutoPipelineOptions{FullDuplex: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = full.Close() })
	for _, c := range []Client{plain, full, &wrappedIface{full}} {
		assertDirect(t, c, true)
	}
}

// TestAutoPipelineOverClusterClient: on a 3-master Redis Cluster, sessions
// on AutoPipeline clients of *redis.ClusterClients get the Cluster's
// handling: WithReplicaAcks is refused (WAIT would go to any master, not
// to the connection that wrote), a release takes along only a call on its
// own name, not calls that another master could hold up, and locks and an
// election work across the masters.
func TestAutoPipelineOverClusterClient(t *testing.T) {
	cluster := redisserver.StartCluster(t, 3)
	newClient := func(t *testing.T) Client { return autoPipeline(t, clusterClient(t, cluster)) }
	t.Run("no WithReplicaAcks", func(t *testing.T) {
		ap := newClient(t)
		s, err := NewSession(ap, WithReplicaAcks(1, 10*time.Millisecond))
		assertRejected(t, s, err, "WithReplicaAcks(1, 10ms) needs WAIT on the connection that wrote, which a cluster client (*redis.AutoPipeliner is or wraps a *redis.ClusterClient) does not give; use it with a *redis.Client (also from redis.NewFailoverClient)")
	})
	t.Run("a release takes only its name along", func(t *testing.T) {
		// Seen on the combiner: TestClusterReleaseTakesOnlyItsNameAlong's
		// calls held on the wire do not work here, as the AutoPipeliner
		// batches the session's calls with one another in its own way.
		s := newSession(t, newClient(t))
		assert.True(t, s.combine.cluster, "the session's combiner takes the client for a Cluster's")
	})
	t.Run("locks across slots", func(t *testing.T) { locksAcrossSlots(t, cluster, newClient) })
}

// TestAutoPipelineOverClient: sessions on an AutoPipeline client of a
// *redis.Client lock, release, read the leader and hand an election over
// as on the client itself.
func TestAutoPipelineOverClient(t *testing.T) {
	srv := redisserver.Start(t)
	ap := autoPipeline(t, srv.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true }))
	ctx := context.Background()
	b := &backend{name: "autopipeline", addr: srv.Addr(), client: ap,
		get: func(k string) string { v, _ := ap.Get(ctx, k).Result(); return v },
		set: func(k, v string) { ap.Set(ctx, k, v, 0) },
	}
	t.Run("lock and release", func(t *testing.T) {
		a, c := newSession(t, ap, fastOpts()...), newSession(t, ap, fastOpts()...)
		l, err := a.Lock(ctx, "ap-lock")
		require.NoError(t, err)
		_, err = c.TryLock(ctx, "ap-lock")
		require.ErrorIs(t, err, ErrLocked)
		assert.Contains(t, b.get(l.Key()), "\n", "the key holds the lock's token")
		require.NoError(t, l.Release(ctx))
		assert.Empty(t, b.get(l.Key()), "Release deleted the key")
		l2, err := c.TryLock(ctx, "ap-lock")
		require.NoError(t, err)
		assert.Greater(t, l2.Fence(), l.Fence())
		require.NoError(t, l2.Release(ctx))
	})
	t.Run("leader and handover", func(t *testing.T) { campaignHandover(t, b) })
}

// TestAutoPipelineReplicaAcks: WithReplicaAcks works on an AutoPipeline
// client of a *redis.Client: WAIT runs on the connection that wrote, so an
// acquire that the replica, cut off, did not acknowledge is not taken.
func TestAutoPipelineReplicaAcks(t *testing.T) {
	primary, replica, link := replicated(t)
	ctx := context.Background()
	ap := autoPipeline(t, primary.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true }))
	s := newSession(t, ap, WithTTL(3*time.Second), WithReplicaAcks(1, 200*time.Millisecond))
	l, err := s.TryLock(ctx, "ap-acked")
	require.NoError(t, err)
	_, err = replica.Client(t).Get(ctx, l.Key()).Result()
	require.NoError(t, err, "the replica has the key once TryLock returned")
	link.Blackhole(faultproxy.Both)
	_, err = s.TryLock(ctx, "ap-unacked")
	assert.ErrorIs(t, err, ErrReplication)
	require.NoError(t, l.Release(ctx))
}

// heldAutoPipeline returns an AutoPipeliner on a redis-server of its own
// (closed when the test ends), with a holdHook on it, that runs batches in
// parallel: one the hook holds does not hold the others up.
func heldAutoPipeline(t *testing.T) (*redis.AutoPipeliner, *holdHook) {
	t.Helper()
	c := redisserver.Start(t).Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	ap, err := c.AutoPipelineWithOptions(&redis.AutoPipelineOptions{MaxConcurrentBatches: 4, Unordered: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ap.Close() })
	h := &holdHook{}
	ap.AddHook(h.hook())
	return ap, h
}

// TestAutoPipelineCallEndsWithItsContext: an AutoPipeline client runs each
// command on a context of its own and returns only when the command's batch
// has ended, yet a session's call on it ends with its caller's context, and
// at its call deadline. One given up while its batch is on the wire holds
// its key until that batch has ended: the session's next call on the key
// (the acquisition's give-back, the stale-token cleanup or a Leader read)
// reaches Redis only after it, while calls on other names go on. (Before,
// the session's first two calls went to the client on their callers'
// goroutines, which stayed with the batch.)
func TestAutoPipelineCallEndsWithItsContext(t *testing.T) {
	ap, h := heldAutoPipeline(t)
	const callTimeout = 300 * time.Millisecond
	s := newSession(t, ap, WithTTL(3*time.Second), WithCallTimeout(callTimeout)) // renewal rounds (stale-token cleanup) every second
	ctx := context.Background()
	key := newKeys("ap-held").lock
	held := h.rule(key, true)
	freeHeld := freeing(t, held)

	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	try := tryAll([]context.Context{cctx}, s, []string{"ap-held"})[0]
	waitClosed(t, held.reached, 5*time.Second, "the TryLock's batch on the wire")
	cancel()
	res := recvWithin(t, try, 2*time.Second, "the TryLock cancelled while its batch was held")
	require.ErrorIs(t, res.err, context.Canceled)
	assert.NotErrorIs(t, res.err, ErrLocked, "an unknown outcome is never 'held by another'")

	other := h.rule(newKeys("ap-deadline").lock, true)
	freeOther := freeing(t, other)
	start := time.Now()
	_, err := s.TryLock(ctx, "ap-deadline")
	took := time.Since(start)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, took, callTimeout+time.Second, "the TryLock ended long after its call deadline")
	freeOther()

	l, err := s.TryLock(ctx, "ap-free")
	require.NoError(t, err, "a name whose calls nothing holds")
	require.NoError(t, l.Release(ctx))

	later := h.rule(key, true)
	freeLater := freeing(t, later)
	read := leaderAll(t, s, "ap-held")[0]
	select {
	case <-later.reached:
		t.Fatal("a later call on the key reached Redis while the given-up TryLock's batch was held")
	case <-time.After(200 * time.Millisecond): // a negative observation window, not a synchronisation
	}
	freeHeld()
	waitClosed(t, later.reached, 5*time.Second, "a later call on the key, once the held batch ended")
	freeLater()
	_ = recvWithin(t, read, 5*time.Second, "the Leader read") // the given-up try's token may hold the name by then
	waitFreed(t, func(k string) string { return ap.Get(ctx, k).Val() }, key, "the given-up TryLock's token stayed in Redis")
	require.NoError(t, s.Close(ctx))
	checkNoLeaks(t)
}

// TestAutoPipelineOneCallPerName: on an AutoPipeline client, a session's
// call on a name waits while another of its calls on the name is on the
// wire (here a Leader read, held by a hook), and is not sent until then;
// calls on other names are not held up. A release is not queued: it goes
// at once and takes the queued call on its name along, which so returns
// while the first read is still held.
func TestAutoPipelineOneCallPerName(t *testing.T) {
	ap, h := heldAutoPipeline(t)
	s := newSession(t, ap)
	ctx := context.Background()
	l, err := s.TryLock(ctx, "ap-one")
	require.NoError(t, err)

	first := h.rule(l.Key(), true)
	freeFirst := freeing(t, first)
	reads := leaderAll(t, s, "ap-one")
	waitClosed(t, first.reached, 5*time.Second, "the first Leader read on the wire")
	second := leaderAll(t, s, "ap-one")[0]
	waitQueued(t, s, 1)
	other, err := s.TryLock(ctx, "ap-other")
	require.NoError(t, err, "a call on another name, while the first read is held")
	require.NoError(t, other.Release(ctx))
	assert.Equal(t, 1, s.queued(), "the second read left the queue while the first was on the wire")

	require.NoError(t, l.Release(ctx))
	err = recvWithin(t, second, 5*time.Second, "the second read, taken along by the release")
	assert.ErrorIs(t, err, ErrNoLeader, "the second read ran after the release, in its pipeline")
	select {
	case err := <-reads[0]:
		t.Fatalf("the held read returned (%v)", err)
	default:
	}
	freeFirst()
	assert.ErrorIs(t, recvWithin(t, reads[0], 5*time.Second, "the first read"), ErrNoLeader, "the held read reached Redis after the release")
	require.NoError(t, s.Close(ctx))
	checkNoLeaks(t)
}

// apOnly runs BenchmarkAutoPipelineParallel's window of that name alone
// (for a CPU profile of it): go test -tags autopipeline -bench
// AutoPipelineParallel -ap.only lib-ap -cpuprofile cpu.out.
var apOnly = flag.String("ap.only", "", "BenchmarkAutoPipelineParallel: run only the window of this name")

// apBench is a redis-server with the scripts loaded, a plain client for it
// (ContextTimeoutEnabled), and AutoPipeliners, half and full duplex, each of
// a client of its own: a client has one AutoPipeliner, made by the first
// call, whose options later calls do not change.
type apBench struct {
	c          *redis.Client
	half, full *redis.AutoPipeliner
}

func newAPBench(b *testing.B) apBench {
	srv := redisserver.Start(b)
	client := func() *redis.Client {
		return srv.Client(b, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	}
	c := client()
	ctx := context.Background()
	loadScripts(ctx, b, c)
	if err := rawRelease.Load(ctx, c).Err(); err != nil {
		b.Fatal(err)
	}
	full, err := client().AutoPipelineWithOptions(&redis.AutoPipelineOptions{FullDuplex: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = full.Close() })
	e := apBench{c: c, half: autoPipeline(b, client()), full: full}
	if e.half.Config().FullDuplex || !e.full.Config().FullDuplex {
		b.Fatal("the AutoPipeliners are not half and full duplex")
	}
	return e
}

// coalescing returns a session on c whose combiner coalesces its calls as it
// does on a plain client, as it did on every client before it left the
// batching to auto-pipelining clients: the "before" of the same run.
func coalescing(b *testing.B, c Client) *Session {
	s := newSession(b, c, WithTTL(10*time.Second))
	s.combine.direct = false // before any call
	return s
}

// BenchmarkAutoPipelineParallel compares, on the work of 16 goroutines each
// on its own name doing acquire+release pairs, windows that alternate (as
// BenchmarkLockParallel does) on one redis-server, for each client: the
// plain one (no suffix), its AutoPipeline() (-ap, half duplex) and a
// full-duplex AutoPipeliner (-ap-fd):
//
//   - raw: the floor, SET NX PX + the rawRelease EVALSHA;
//   - scripts: our acquire and release scripts by EVALSHA with no library,
//     which no client that keeps their contract can beat;
//   - lib: TryLock + Release on one Session;
//   - lib-coalescing (auto-pipelining clients only): the same on a Session
//     that coalesces its calls on them as on a plain client (before).
//
// It reports what BenchmarkLockParallel does, and the ratios of each
// library window to the floor and the scripts on the same client:
//
//	go test -tags autopipeline -run '^$' -bench AutoPipelineParallel -benchtime 5x .
func BenchmarkAutoPipelineParallel(b *testing.B) {
	const goroutines, window = 16, 300 * time.Millisecond
	e := newAPBench(b)
	ctx := context.Background()
	var windows []parWindow
	add := func(name string, try func(i int) (int, error)) {
		if *apOnly == "" || *apOnly == name {
			windows = append(windows, parWindow{name, func() int64 {
				done, _, _ := hammer(b, goroutines, window, try)
				return done
			}})
		}
	}
	var over [][2]string
	for _, cl := range []struct {
		suffix string
		c      interface {
			Client
			redis.Cmdable
		}
	}{{"", e.c}, {"-ap", e.half}, {"-ap-fd", e.full}} {
		sfx := cl.suffix
		scriptKeys, fences := make([]keys, goroutines), make([]int64, goroutines)
		for i := range scriptKeys {
			scriptKeys[i] = newKeys(fmt.Sprintf("scripts%s-par-%d", sfx, i))
		}
		add("raw"+sfx, func(i int) (int, error) { return 1, rawPairOn(ctx, cl.c, fmt.Sprintf("raw%s-par-%d", sfx, i)) })
		add("scripts"+sfx, func(i int) (f int, err error) {
			fences[i], err = scriptsPairOn(ctx, cl.c, scriptKeys[i], fences[i])
			return 1, err
		})
		libs := []string{"lib" + sfx}
		s := newSession(b, cl.c, WithTTL(10*time.Second))
		add(libs[0], func(i int) (int, error) { return 1, pairOn(ctx, s, fmt.Sprintf("lib%s-par-%d", sfx, i)) })
		if sfx != "" {
			libs = append(libs, "lib-coalescing"+sfx)
			before := coalescing(b, cl.c)
			add(libs[1], func(i int) (int, error) { return 1, pairOn(ctx, before, fmt.Sprintf("lib-co%s-par-%d", sfx, i)) })
		}
		for _, l := range libs {
			over = append(over, [2]string{l, "raw" + sfx}, [2]string{l, "scripts" + sfx})
		}
		over = append(over, [2]string{"scripts" + sfx, "raw" + sfx})
	}
	if len(windows) == 0 {
		b.Fatalf("-ap.only %q: no such window", *apOnly)
	}
	if *apOnly != "" {
		over = nil
	}
	compareWindows(ctx, b, []*redis.Client{e.c}, windows, over...)
}

// BenchmarkAutoPipelinePairRatio alternates, on a half-duplex AutoPipeliner,
// one sequential pair of each of raw (the floor), lib (TryLock + Release)
// and lib-coalescing (the same on a session that coalesces, see
// coalescing), and reports each one's median latency and the library's
// ratios to raw: what a lone caller pays on an auto-pipelining client.
//
//	go test -tags autopipeline -run '^$' -bench AutoPipelinePairRatio -benchtime 5000x .
func BenchmarkAutoPipelinePairRatio(b *testing.B) {
	e := newAPBench(b)
	ctx := context.Background()
	s, before := newSession(b, e.half, WithTTL(10*time.Second)), coalescing(b, e.half)
	raw, lib, co := alternate(b,
		func() {
			if err := rawPairOn(ctx, e.half, "raw-key"); err != nil {
				b.Fatal(err)
			}
		},
		func() { libPair(ctx, b, s) },
		func() { libPair(ctx, b, before) })
	b.ReportMetric(float64(raw.p50().Nanoseconds())/1e3, "raw-p50-µs")
	b.ReportMetric(float64(lib.p50().Nanoseconds())/1e3, "lib-p50-µs")
	b.ReportMetric(float64(lib.p50())/float64(raw.p50()), "lib/raw-p50")
	b.ReportMetric(float64(co.p50())/float64(raw.p50()), "lib-coalescing/raw-p50")
}

// BenchmarkAutoPipelinePair measures one acquire+release pair on a
// half-duplex AutoPipeliner next to the raw floor on it, for allocations
// (as BenchmarkLockPair does on a plain client).
//
//	go test -tags autopipeline -run '^$' -bench 'AutoPipelinePair$' -benchmem .
func BenchmarkAutoPipelinePair(b *testing.B) {
	e := newAPBench(b)
	s := newSession(b, e.half, WithTTL(10*time.Second))
	ctx := context.Background()
	loopAllocs(b, "raw", func(b *testing.B) {
		if err := rawPairOn(ctx, e.half, "raw-key"); err != nil {
			b.Fatal(err)
		}
	})
	loopAllocs(b, "redisleader", func(b *testing.B) { libPair(ctx, b, s) })
}

// BenchmarkAutoPipelineContended compares, on one name tried by 16
// goroutines at once (a try that succeeds releases at once), windows that
// alternate, 300 ms each, on each AutoPipeliner (-ap half duplex, -ap-fd
// full): raw (SET NX PX, then rawRelease), lib (TryLock, then Release) and
// lib-coalescing (the same on a session that coalesces, see coalescing).
// It reports the median acquisitions/s and failed tries/s of each, and of
// the library windows over raw on the same client in the same iteration:
//
//	go test -tags autopipeline -run '^$' -bench AutoPipelineContended -benchtime 5x .
func BenchmarkAutoPipelineContended(b *testing.B) {
	const goroutines, window = 16, 300 * time.Millisecond
	e := newAPBench(b)
	ctx := context.Background()
	type win struct {
		name, floor string
		try         func() (bool, error)
	}
	var wins []win
	for _, cl := range []struct {
		suffix string
		c      *redis.AutoPipeliner
	}{{"-ap", e.half}, {"-ap-fd", e.full}} {
		raw := "raw" + cl.suffix
		wins = append(wins, win{raw, raw, func() (bool, error) {
			token := benchToken()
			ok, err := cl.c.SetNX(ctx, "contended-"+raw, token, 10*time.Second).Result()
			if err != nil || !ok {
				return false, err
			}
			return true, rawRelease.Run(ctx, cl.c, []string{"contended-" + raw}, token).Err()
		}})
		for _, s := range []struct {
			name string
			s    *Session
		}{{"lib" + cl.suffix, newSession(b, cl.c, WithTTL(10*time.Second))}, {"lib-coalescing" + cl.suffix, coalescing(b, cl.c)}} {
			wins = append(wins, win{s.name, raw, func() (bool, error) { return tryPair(ctx, s.s, "contended-"+s.name) }})
		}
	}
	acq, failed := make(map[string][]float64), make(map[string][]float64)
	for b.Loop() {
		for _, w := range wins {
			a, f := contendedRates(b, goroutines, window, w.try)
			acq[w.name], failed[w.name] = append(acq[w.name], a), append(failed[w.name], f)
		}
	}
	median := func(xs []float64) float64 {
		xs = slices.Clone(xs)
		slices.Sort(xs)
		return xs[len(xs)/2]
	}
	for _, w := range wins {
		b.ReportMetric(median(acq[w.name]), w.name+"-acq/s")
		b.ReportMetric(median(failed[w.name]), w.name+"-failed/s")
		if w.name != w.floor {
			rs := make([]float64, len(acq[w.name]))
			for i, a := range acq[w.name] {
				rs[i] = a / acq[w.floor][i]
			}
			b.ReportMetric(median(rs), w.name+"/"+w.floor+"-acq")
		}
	}
}
