//go:build linux

package scenario

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redisleader/redisleader"
	"github.com/redisleader/redisleader/internal/history"
)

// TestScenarioSemaphore (M1): 8 sessions contend for a semaphore of N=3
// for 6 s, each holding a permit for 50–300 ms; up to 4 holders crash
// (their traffic blackholed, nothing released: the permit stays until its
// lease ends) and come back with a fresh session, and Redis is killed and
// restarted a TTL later without persistence (every permit vanishes; the
// holders' leases have run out meanwhile: the documented mitigation, as in
// S12-delayed-restart). The checker (history.CheckShared) wants at most 3 holders believed
// at any moment and fences strictly increasing in grant order.
func TestScenarioSemaphore(t *testing.T) {
	const n, workers = 3, 8
	h := newHarness(t, "M1-semaphore-8-on-3")
	ctx, cancel := context.WithCancel(context.Background())
	crash := newCrashes(0.15, 4)
	var wg sync.WaitGroup
	for i := range workers {
		c := h.candidate(fmt.Sprintf("w%d", i), nil)
		wgGo(&wg, func() { c.holdPermits(ctx, h.name, n, crash) })
	}
	<-time.After(3 * time.Second)
	h.fault("restart-redis", true)
	h.srv.Kill(t)
	<-time.After(ttl) // Redis down for a TTL: the fault itself
	h.srv.Restart(t)
	h.fault("restart-redis", false)
	<-time.After(3 * time.Second)
	cancel()
	wg.Wait()
	h.note("crashes", "%d", 4-max(crash.left.Load(), 0))
	h.finishShared(n)
}

// holdPermits takes a permit of name (limit n) in a loop until ctx ends,
// holds it for 50–300 ms and releases it (or, when crash says so,
// abandons its session).
func (c *candidate) holdPermits(ctx context.Context, name string, n int, crash *crashes) {
	for ctx.Err() == nil {
		m, err := c.session().Semaphore(name, n, redisleader.WithPermitValue(c.who))
		if err != nil {
			c.h.t.Error(err)
			return
		}
		l, err := m.Acquire(ctx)
		if err != nil {
			continue // ctx ended, or the session was abandoned meanwhile
		}
		hold := time.NewTimer(50*time.Millisecond + rand.N(250*time.Millisecond))
		select {
		case <-hold.C:
		case <-l.Done():
		case <-ctx.Done():
		}
		hold.Stop()
		if ctx.Err() == nil && crash.next() {
			c.abandon()
			continue
		}
		_ = l.Release(context.Background())
	}
}

// finishShared is finish for a name shared by up to n holders: the
// history is judged by history.CheckShared.
func (h *harness) finishShared(n int) history.SharedReport {
	h.t.Helper()
	rep := history.CheckShared(h.rec.Events(), n)
	h.check(rep.Safe(), "unsafe history:\n%s", strings.Join(rep.Problems, "\n"))
	h.check(rep.MaxHolders == n, "never %d holders at once (at most %d): the scenario did not contend", n, rep.MaxHolders)
	h.summarize(func(pass bool) string { return rep.Line(h.id, pass) })
	return rep
}
