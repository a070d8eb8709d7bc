//go:build chaos && linux

package scenario

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redisleader/redisleader/internal/faultproxy"
	"github.com/redisleader/redisleader/internal/history"
)

var (
	chaosDuration = flag.Duration("duration", time.Minute, "chaos: how long the randomized fault schedule runs")
	chaosSeed     = flag.Uint64("seed", 0, "chaos: seed of the fault schedule (0: from the clock; printed)")
)

// TestChaos runs candidates through a seeded random schedule of the faults
// the library promises to survive (RELIABILITY.md's safe set: leader
// pause, frozen or delayed requests, Redis stalls, in-band stalls,
// partitions, lost replies, latency, script flushes, process crashes)
// and requires a safe history: no overlap, no fence regression, no
// resurrection, no stale write accepted.
//
//	go test -tags chaos -run TestChaos -timeout 0 -v ./internal/scenario -args -duration 30m -seed 1
func TestChaos(t *testing.T) {
	seed := *chaosSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	fmt.Printf("chaos: seed=%d duration=%v\n", seed, *chaosDuration)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))

	h := newHarness(t, "CHAOS")
	var cs []*candidate
	for i := range 6 {
		cs = append(cs, h.candidate(fmt.Sprintf("g%d", i), nil))
	}
	var childMu sync.Mutex
	children := []*child{h.child("p0", "20,150"), h.child("p1", "20,150")}
	respawned := 0

	ctx, cancel := context.WithTimeout(context.Background(), *chaosDuration)
	defer cancel()
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(func() { c.contend(ctx, 20*time.Millisecond, 150*time.Millisecond, 0.02) })
	}

	counts := map[string]int{}
	admin := h.srv.Client(t)
	heal := func(d time.Duration) bool {
		select {
		case <-time.After(d): // the fault's length
			return true
		case <-ctx.Done():
			return false
		}
	}
	faultLen := func() time.Duration { return time.Duration((0.2 + 2.8*rng.Float64()) * float64(ttl)) }
	type fault struct {
		name string
		run  func()
	}
	faults := []fault{
		{"pause-child", func() { // S3
			childMu.Lock()
			c := children[rng.IntN(len(children))]
			childMu.Unlock()
			_ = c.cmd.Process.Signal(syscall.SIGSTOP)
			heal(faultLen())
			_ = c.cmd.Process.Signal(syscall.SIGCONT)
		}},
		{"kill-child", func() { // S2
			childMu.Lock()
			i := rng.IntN(len(children))
			old := children[i]
			childMu.Unlock()
			old.kill()
			respawned++
			nc := h.child(fmt.Sprintf("p%d", 2+respawned), "20,150")
			childMu.Lock()
			children[i] = nc
			childMu.Unlock()
		}},
		{"hold-requests", func() { // S4, S11: held, then delivered late
			c := cs[rng.IntN(len(cs))]
			c.proxy.Pause(faultproxy.ClientToServer)
			heal(faultLen())
			c.proxy.Unpause(faultproxy.ClientToServer)
		}},
		{"stop-redis", func() { // S5
			h.srv.Pause(t)
			heal(faultLen())
			h.srv.Resume(t)
		}},
		{"client-pause", func() { // S6
			d := faultLen()
			_ = admin.Do(context.Background(), "CLIENT", "PAUSE", d.Milliseconds(), "WRITE").Err()
			heal(d)
		}},
		{"blackhole", func() { // S7
			c := cs[rng.IntN(len(cs))]
			c.proxy.Blackhole(faultproxy.Both)
			heal(faultLen())
			c.proxy.Heal()
		}},
		{"drop-replies", func() { // S8, S9
			cs[rng.IntN(len(cs))].proxy.DropReplies(1 + rng.IntN(3))
		}},
		{"latency", func() { // S10
			c := cs[rng.IntN(len(cs))]
			d := time.Duration(5+rng.IntN(120)) * time.Millisecond
			c.proxy.Delay(faultproxy.Both, d, d/4)
			heal(faultLen())
			c.proxy.Delay(faultproxy.Both, 0, 0)
		}},
		{"script-flush", func() { // S16
			_ = admin.ScriptFlush(context.Background()).Err()
		}},
		{"reset-conns", func() {
			cs[rng.IntN(len(cs))].proxy.ResetConns()
		}},
	}

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
			continue
		case <-time.After(time.Duration((0.5 + 2.5*rng.Float64()) * float64(time.Second))): // the gap between faults
		}
		f := faults[rng.IntN(len(faults))]
		counts[f.name]++
		h.fault(f.name, true)
		f.run()
		h.fault(f.name, false)
	}
	wg.Wait()
	for _, c := range cs {
		c.proxy.Heal()
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
