//go:build chaos && linux

package scenario

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redisleader/redisleader"
	"github.com/redisleader/redisleader/internal/faultproxy"
	"github.com/redisleader/redisleader/internal/history"
	"github.com/redisleader/redisleader/internal/redisserver"
	"github.com/redisleader/redisleader/internal/syncbuf"
)

var (
	chaosDuration = flag.Duration("duration", time.Minute, "chaos: how long the randomized fault schedule runs")
	chaosSeed     = flag.Uint64("seed", 0, "chaos: seed of the fault schedule (0: from the clock; printed)")
	chaosFair     = flag.Bool("fair", false, "chaos: TestChaos's g0–g2 and child processes wait in fair mode (WithFairness)")
)

// TestChaos runs candidates through a seeded random schedule of the faults
// the library promises to survive (RELIABILITY.md's safe set: leader
// pause, frozen or delayed requests, Redis stalls, in-band stalls,
// partitions, lost replies, latency, script flushes, process crashes)
// and requires a safe history: no overlap, no fence regression, no
// resurrection, no stale write accepted. Semaphore holders on the same
// name (CHAOS-SEM) and read-write lock holders on a name of their own
// (CHAOS-RW) share the faults and are judged by their own checkers.
//
//	go test -tags chaos -run 'TestChaos$' -timeout 0 -v ./internal/scenario -args -duration 30m -seed 1
//
// With -fair, half the in-process candidates and every child process wait
// in fair mode, mixed with the others on the same name.
func TestChaos(t *testing.T) {
	seed, rng := chaosRNG()
	id := "CHAOS"
	var childEnv []string
	if *chaosFair {
		id, childEnv = "CHAOS-FAIR", []string{envFair + "=1"}
	}
	h := newHarness(t, id)
	var cs []*candidate
	for i := range 6 {
		var extra []redisleader.Option
		if *chaosFair && i < 3 {
			extra = append(extra, redisleader.WithFairness())
		}
		cs = append(cs, h.candidate(fmt.Sprintf("g%d", i), nil, extra...))
	}
	var childMu sync.Mutex
	children := []*child{h.child("p0", "20,150", childEnv...), h.child("p1", "20,150", childEnv...)}
	respawned := 0
	admin := h.admin
	sem := startSemActors(h) // chaos_semaphore_test.go
	rw := startRWActors(h)   // chaos_rw_test.go
	targets := append(append(slices.Clip(cs), sem.cs...), rw.cs...)
	faults := []chaosFault{
		{"pause-child", func(d time.Duration, heal func(time.Duration) bool) { // S3
			childMu.Lock()
			c := children[rng.IntN(len(children))]
			childMu.Unlock()
			_ = c.cmd.Process.Signal(syscall.SIGSTOP)
			heal(d)
			_ = c.cmd.Process.Signal(syscall.SIGCONT)
		}},
		{"kill-child", func(time.Duration, func(time.Duration) bool) { // S2
			childMu.Lock()
			i := rng.IntN(len(children))
			old := children[i]
			childMu.Unlock()
			old.kill()
			respawned++
			nc := h.child(fmt.Sprintf("p%d", 2+respawned), "20,150", childEnv...)
			childMu.Lock()
			children[i] = nc
			childMu.Unlock()
		}},
		{"hold-requests", func(d time.Duration, heal func(time.Duration) bool) { // S4, S11: held, then delivered late
			c := targets[rng.IntN(len(targets))]
			c.proxy.Pause(faultproxy.ClientToServer)
			heal(d)
			c.proxy.Unpause(faultproxy.ClientToServer)
		}},
		{"stop-redis", func(d time.Duration, heal func(time.Duration) bool) { // S5
			h.srv.Pause(t)
			heal(d)
			h.srv.Resume(t)
		}},
		{"client-pause", func(d time.Duration, heal func(time.Duration) bool) { // S6
			_ = admin.Do(context.Background(), "CLIENT", "PAUSE", d.Milliseconds(), "WRITE").Err()
			heal(d)
		}},
		{"blackhole", func(d time.Duration, heal func(time.Duration) bool) { // S7
			c := targets[rng.IntN(len(targets))]
			c.proxy.Blackhole(faultproxy.Both)
			heal(d)
			c.proxy.Heal()
		}},
		{"drop-replies", func(time.Duration, func(time.Duration) bool) { // S8, S9
			targets[rng.IntN(len(targets))].proxy.DropReplies(1 + rng.IntN(3))
		}},
		{"latency", func(d time.Duration, heal func(time.Duration) bool) { // S10
			c := targets[rng.IntN(len(targets))]
			lat := time.Duration(5+rng.IntN(120)) * time.Millisecond
			c.proxy.Delay(faultproxy.Both, lat, lat/4)
			heal(d)
			c.proxy.Delay(faultproxy.Both, 0, 0)
		}},
		{"script-flush", func(time.Duration, func(time.Duration) bool) { // S16
			_ = admin.ScriptFlush(context.Background()).Err()
		}},
		{"reset-conns", func(time.Duration, func(time.Duration) bool) {
			targets[rng.IntN(len(targets))].proxy.ResetConns()
		}},
	}
	faults = append(append(faults, sem.faults(rng)...), rw.faults(rng)...)
	chaosRun(t, h, seed, rng, cs, faults)
	finishSem(sem)
	finishRWActors(rw)
}

// TestChaosRedlock is TestChaos for Redlock: five candidates on three
// independent nodes, each reaching each node through its own proxy, and a
// random schedule of the faults Redlock is meant to survive: a node
// stopped (SIGSTOP) or killed and restarted only after a TTL (Redis's
// advice; an immediate restart is the documented S23 limit), one
// candidate's path to one node blackholed, held or slowed, lost replies,
// a node's script cache flushed, connection resets, candidates abandoning
// their sessions.
//
//	go test -tags chaos -run TestChaosRedlock -timeout 0 -v ./internal/scenario -args -duration 10m -seed 1
func TestChaosRedlock(t *testing.T) {
	seed, rng := chaosRNG()
	h := newHarness(t, "CHAOS-REDLOCK")
	srvs := h.nodes(3)
	var cs []*candidate
	for i := range 5 {
		cs = append(cs, h.candidateOn(srvs, fmt.Sprintf("r%d", i), nil))
	}
	path := func() *faultproxy.Proxy { return cs[rng.IntN(len(cs))].proxies[rng.IntN(len(srvs))] }
	faults := []chaosFault{
		{"stop-node", func(d time.Duration, heal func(time.Duration) bool) {
			n := srvs[rng.IntN(len(srvs))]
			n.Pause(t)
			heal(d)
			n.Resume(t)
		}},
		{"kill-node-restart-after-ttl", func(d time.Duration, heal func(time.Duration) bool) {
			n := srvs[rng.IntN(len(srvs))]
			n.Kill(t)
			heal(max(d, ttl+ttl/10))
			n.Restart(t)
		}},
		{"blackhole-path", func(d time.Duration, heal func(time.Duration) bool) {
			p := path()
			p.Blackhole(faultproxy.Both)
			heal(d)
			p.Heal()
		}},
		{"hold-path", func(d time.Duration, heal func(time.Duration) bool) {
			p := path()
			p.Pause(faultproxy.ClientToServer)
			heal(d)
			p.Unpause(faultproxy.ClientToServer)
		}},
		{"latency-path", func(d time.Duration, heal func(time.Duration) bool) {
			p := path()
			lat := time.Duration(5+rng.IntN(120)) * time.Millisecond
			p.Delay(faultproxy.Both, lat, lat/4)
			heal(d)
			p.Delay(faultproxy.Both, 0, 0)
		}},
		{"drop-replies", func(time.Duration, func(time.Duration) bool) { path().DropReplies(1 + rng.IntN(3)) }},
		{"script-flush", func(time.Duration, func(time.Duration) bool) {
			_ = srvs[rng.IntN(len(srvs))].Client(t).ScriptFlush(context.Background()).Err()
		}},
		{"reset-conns", func(time.Duration, func(time.Duration) bool) { path().ResetConns() }},
	}
	chaosRun(t, h, seed, rng, cs, faults)
}

// chaosRNG returns the run's seed (from -seed, or the clock) and its
// generator, and prints the seed.
func chaosRNG() (uint64, *rand.Rand) {
	seed := *chaosSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	fmt.Printf("chaos: seed=%d duration=%v\n", seed, *chaosDuration)
	return seed, rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// A chaosFault injects one fault for about d (heal waits, and reports
// false once the run is over).
type chaosFault struct {
	name string
	run  func(d time.Duration, heal func(time.Duration) bool)
}

// chaosRun makes the candidates contend (hold 20–150ms, resign; 2% abandon
// their session) for -duration while a fault from faults, picked at random,
// starts every 0.5–3s and lasts 0.2–3 T; then it checks the history, prints
// the line (and writes $CHAOS_REPORT as JSON) and fails on any violation.
func chaosRun(t *testing.T, h *harness, seed uint64, rng *rand.Rand, cs []*candidate, faults []chaosFault) {
	ctx, cancel := context.WithTimeout(context.Background(), *chaosDuration)
	defer cancel()
	var wg sync.WaitGroup
	crash := newCrashes(0.02, math.MaxInt64)
	for _, c := range cs {
		wgGo(&wg, func() { c.contend(ctx, 20*time.Millisecond, 150*time.Millisecond, crash) })
	}
	heal := func(d time.Duration) bool {
		select {
		case <-time.After(d): // the fault's length
			return true
		case <-ctx.Done():
			return false
		}
	}
	counts := map[string]int{}
	progress := time.NewTicker(time.Minute)
	defer progress.Stop()
	start := time.Now()
nemesis:
	for {
		select {
		case <-ctx.Done():
			break nemesis
		case <-progress.C:
			rep := history.Check(h.rec.Events())
			fmt.Printf("chaos: %v handovers=%d faults=%d safe=%t\n", time.Since(start).Round(time.Second), rep.Intervals, h.faults.Load(), rep.Safe())
			if !rep.Safe() {
				fmt.Printf("chaos: %s\n", strings.Join(rep.Problems, "\nchaos: "))
			}
			continue
		case <-time.After(time.Duration((0.5 + 2.5*rng.Float64()) * float64(time.Second))): // the gap between faults
		}
		f := faults[rng.IntN(len(faults))]
		counts[f.name]++
		h.fault(f.name, true)
		f.run(time.Duration((0.2+2.8*rng.Float64())*float64(ttl)), heal)
		h.fault(f.name, false)
	}
	wg.Wait()
	for _, c := range cs {
		for _, p := range c.proxies {
			p.Heal()
		}
	}

	rep := history.Check(h.rec.Events())
	names := make([]string, 0, len(counts))
	for n := range counts {
		names = append(names, n)
	}
	sort.Strings(names)
	var per []string
	for _, n := range names {
		per = append(per, fmt.Sprintf("%s:%d", n, counts[n]))
	}
	h.note("seed", "%d", seed)
	h.note("duration_s", "%.0f", time.Since(start).Seconds())
	h.note("handovers", "%d", rep.Intervals)
	h.note("writes_ok", "%d", rep.WritesOK)
	h.note("writes_rejected", "%d", rep.WritesRejected)
	h.note("gap_p50_ms", "%.1f", rep.P50GapMs)
	h.note("gap_p99_ms", "%.1f", rep.P99GapMs)
	h.note("by_fault", "%s", strings.Join(per, ","))
	if out := os.Getenv("CHAOS_REPORT"); out != "" {
		b, _ := json.MarshalIndent(struct {
			Seed   uint64         `json:"seed"`
			Faults map[string]int `json:"faults"`
			Report history.Report `json:"report"`
		}{seed, counts, rep}, "", "  ")
		_ = os.WriteFile(out, b, 0o644)
	}
	h.finish(false)
}

// TestChaosDocumented runs the documented-limit scenarios that take longer
// or need special servers: S14 swept over step sizes with and without the
// takeover delay, S17a (an eviction policy evicts the lock key) and S13
// (restart from a stale snapshot). Each prints its SCENARIO line.
//
//	go test -tags chaos -run TestChaosDocumented -v ./internal/scenario
func TestChaosDocumented(t *testing.T) {
	for _, j := range []time.Duration{ttl / 4, ttl / 2, ttl, 2 * ttl} {
		t.Run(fmt.Sprintf("S14-%v", j), func(t *testing.T) { clockStepSweep(t, j, 0) })
		t.Run(fmt.Sprintf("S14-%v-takeover-delay", j), func(t *testing.T) { clockStepSweep(t, j, j) })
	}
	t.Run("S17a", s17aEviction)
	t.Run("S13", s13StaleSnapshot)
}

// clockStepSweep: 5 trials of a forward step J of the Redis clock while a
// leader holds, each followed at once by a newcomer's campaign.
func clockStepSweep(t *testing.T, jump, takeoverDelay time.Duration) {
	id := fmt.Sprintf("S14-sweep-J=%v", jump)
	if takeoverDelay > 0 {
		id += "-takeover-delay"
	}
	h := newHarness(t, id)
	var extra []redisleader.Option
	if takeoverDelay > 0 {
		extra = append(extra, redisleader.WithTakeoverDelay(takeoverDelay))
	}
	const trials = 5
	early := 0 // trials in which the newcomer led while the old key should have lived
	for trial := range trials {
		c0 := h.candidate(fmt.Sprintf("old%d", trial), nil, extra...)
		l := c0.mustLead(5*time.Second + takeoverDelay)
		// Land the step at a random point of the renewal cycle.
		<-time.After(rand.N(ttl / 3))
		c1 := h.candidate(fmt.Sprintf("new%d", trial), nil, extra...)
		h.fault("clock-step", true)
		if err := h.admin.Eval(context.Background(), ttlShift, []string{h.key}, jump.Milliseconds()).Err(); err != nil {
			t.Fatal(err)
		}
		h.fault("clock-step", false)
		// If the step did not outlast the key, the leader keeps it and the
		// newcomer's campaign runs out: no early takeover in this trial.
		ctx, cancel := context.WithTimeout(context.Background(), ttl+takeoverDelay)
		nl, err := c1.campaign(ctx)
		cancel()
		if err == nil {
			early++
			select {
			case <-l.Done():
			case <-time.After(3 * ttl):
			}
			_ = nl.Release(context.Background())
		}
		_ = l.Release(context.Background())
	}
	rep := history.Check(h.rec.Events())
	h.note("trials", "%d", trials)
	h.note("step_ms", "%d", jump.Milliseconds())
	h.note("takeover_delay_ms", "%d", takeoverDelay.Milliseconds())
	h.note("newcomer_led", "%d", early)
	// Overlap is possible without the delay (how often depends on where in
	// the renewal cycle the step lands); with a delay ≥ J it must be 0.
	if takeoverDelay >= jump {
		h.finish(false)
		return
	}
	h.note("violating_trials", "%d", rep.Overlaps)
	if rep.Overlaps > 0 {
		h.finish(true)
		return
	}
	h.finish(false)
}

// s17aEviction: with maxmemory-policy volatile-ttl and memory full of
// longer-lived keys, Redis evicts the lock key (it expires soonest); a
// newcomer acquires while the leader still believes, until its next
// renewal. The session warned about the policy when it started to hold.
func s17aEviction(t *testing.T) {
	h := newHarness(t, "S17a", redisserver.Options{Args: []string{"--maxmemory-policy", "volatile-ttl"}})
	ctx := context.Background()
	var logs syncbuf.Buffer
	c0 := h.candidate("old", nil, redisleader.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	l := c0.mustLead(5 * time.Second)
	c1 := h.candidate("new", nil)
	used := func() int64 {
		info, _ := h.admin.Info(ctx, "memory").Result()
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		return 0
	}
	h.fault("evict", true)
	_ = h.admin.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used()+256<<10, 10)).Err()
	// Filler with long TTLs until the lock key is evicted.
	value := strings.Repeat("x", 4096)
	for i := 0; i < 100000; i++ {
		if n, _ := h.admin.Exists(ctx, h.key).Result(); n == 0 {
			break
		}
		_ = h.admin.Set(ctx, fmt.Sprintf("filler:%d", i), value, time.Hour).Err()
	}
	h.fault("evict", false)
	nl := c1.mustLead(3 * g8(ttl))
	select {
	case <-l.Done():
	case <-time.After(3 * ttl):
	}
	_ = nl.Release(ctx)
	evicted, _ := h.admin.Info(ctx, "stats").Result()
	h.note("warned", "%t", strings.Contains(logs.String(), "maxmemory-policy=volatile-ttl"))
	h.check(strings.Contains(logs.String(), "maxmemory-policy=volatile-ttl"), "no warning about the eviction policy")
	for _, line := range strings.Split(evicted, "\r\n") {
		if v, ok := strings.CutPrefix(line, "evicted_keys:"); ok {
			h.note("evicted_keys", "%s", v)
		}
	}
	h.finish(true)
}

// s13StaleSnapshot: a snapshot taken while A leads is restored after A
// resigned and B took over with a higher fence. A's key comes back (it
// blocks everyone until it expires) and the fence key goes back to A's
// fence, so a plain INCR counter would hand out B's fence again; the
// server-time fence does not regress.
func s13StaleSnapshot(t *testing.T) {
	h := newHarness(t, "S13", redisserver.Options{Persistence: true, Args: []string{"--save", "", "--appendonly", "no"}})
	ctx := context.Background()
	a, b, c := h.candidate("A", nil), h.candidate("B", nil), h.candidate("C", nil)
	la := a.mustLead(5 * time.Second)
	dir, err := h.admin.ConfigGet(ctx, "dir").Result()
	if err != nil {
		t.Fatal(err)
	}
	rdb := filepath.Join(dir["dir"], "dump.rdb")
	if err := h.admin.Save(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	snapshot, err := os.ReadFile(rdb)
	if err != nil {
		t.Fatal(err)
	}
	_ = la.Release(ctx)
	lb := b.mustLead(5 * time.Second)
	h.fault("restore-stale-snapshot", true)
	h.srv.Kill(t)
	if err := os.WriteFile(rdb, snapshot, 0o644); err != nil {
		t.Fatal(err)
	}
	h.srv.Restart(t)
	h.fault("restore-stale-snapshot", false)
	restored, _ := h.admin.Get(ctx, h.key+":fence").Int64()
	lc := c.mustLead(3 * g8(ttl))
	select {
	case <-lb.Done():
	case <-time.After(3 * ttl):
	}
	_ = lc.Release(ctx)
	h.note("fence_a", "%d", la.Fence())
	h.note("fence_b", "%d", lb.Fence())
	h.note("fence_key_after_restore", "%d", restored)
	h.note("incr_counter_would_regress", "%t", restored < lb.Fence())
	h.note("fence_c", "%d", lc.Fence())
	h.check(lc.Fence() > lb.Fence(), "fence regressed after the restore: %d after %d", lc.Fence(), lb.Fence())
	rep := history.Check(h.rec.Events())
	h.finish(!rep.Safe())
}
