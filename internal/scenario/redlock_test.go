//go:build linux

package scenario

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redisleader/redisleader"
	"github.com/redisleader/redisleader/internal/faultproxy"
	"github.com/redisleader/redisleader/internal/history"
	"github.com/redisleader/redisleader/internal/redisserver"
)

// TestScenarioRedlock runs the Redlock scenarios (S21–S23 of
// RELIABILITY.md) against three independent redis-servers.
func TestScenarioRedlock(t *testing.T) {
	t.Run("S21", s21NodeDown)
	t.Run("S22", func(t *testing.T) { redlockKleppmann(t, "S22", false, 0) })
	t.Run("S22-takeover-delay", func(t *testing.T) { redlockKleppmann(t, "S22-takeover-delay", false, ttl) })
	t.Run("S23", func(t *testing.T) { redlockKleppmann(t, "S23", true, 0) })
	t.Run("S23-delayed-restart", func(t *testing.T) { redlockRestartDelayed(t) })
}

// nodes starts n independent redis-servers; the first is the harness's.
func (h *harness) nodes(n int) []*redisserver.Server {
	srvs := []*redisserver.Server{h.srv}
	for range n - 1 {
		srvs = append(srvs, redisserver.Start(h.t))
	}
	return srvs
}

// acquisitions counts acquired events after mono.
func acquisitions(h *harness, after int64) int {
	n := 0
	for _, e := range h.rec.Events() {
		if e.Kind == history.Acquired && e.Mono > after {
			n++
		}
	}
	return n
}

// S21: Redlock over 3 nodes while candidates contend: with one node down it
// keeps working; with two down nobody leads; back to three, it recovers.
func s21NodeDown(t *testing.T) {
	h := newHarness(t, "S21")
	srvs := h.nodes(3)
	var cs []*candidate
	for i := range 3 {
		cs = append(cs, h.candidateOn(srvs, fmt.Sprintf("r%d", i), nil))
	}
	phase := func(d time.Duration) int {
		start := history.Now()
		contendAll(d, 50*time.Millisecond, 200*time.Millisecond, 0, cs...)
		return acquisitions(h, start)
	}
	healthy := phase(2 * time.Second)
	h.fault("node-1-down", true)
	srvs[1].Kill(t)
	oneDown := phase(2 * time.Second)
	h.fault("node-2-down", true)
	srvs[2].Kill(t)
	twoDownStart := history.Now()
	twoDown := phase(1500 * time.Millisecond)
	h.fault("node-2-down", false)
	h.fault("node-1-down", false)
	srvs[1].Restart(t)
	srvs[2].Restart(t)
	recovered := phase(2 * time.Second)
	h.note("acquisitions", "healthy:%d,one_down:%d,two_down:%d,recovered:%d", healthy, oneDown, twoDown, recovered)
	h.check(healthy > 0 && oneDown > 0 && recovered > 0, "no leadership in a phase where a quorum was up")
	h.check(twoDown == 0, "%d acquisitions with two of three nodes down", twoDown)
	for _, e := range h.rec.Events() {
		h.check(!(e.Kind == history.Acquired && e.Mono > twoDownStart && e.Mono < twoDownStart+int64(1500*time.Millisecond)),
			"%s acquired with two of three nodes down", e.Who)
	}
	h.finish(false)
}

// redlockKleppmann sets up Martin Kleppmann's scenario on three nodes A, B,
// C: the first candidate cannot reach C and holds a bare quorum {A, B};
// then node B loses its key — a forward clock step (restart false) or a
// restart without persistence (restart true) — and a second candidate that
// cannot reach A takes a quorum {B, C}: two owners, each believing. With a
// takeover delay of at least the old lease, the second starts only after
// the first has stepped down.
func redlockKleppmann(t *testing.T, id string, restart bool, takeoverDelay time.Duration) {
	h := newHarness(t, id)
	srvs := h.nodes(3)
	var extra []redisleader.Option
	if takeoverDelay > 0 {
		extra = append(extra, redisleader.WithTakeoverDelay(takeoverDelay))
	}
	c1 := h.candidateOn(srvs, "c1", nil, extra...)
	c2 := h.candidateOn(srvs, "c2", nil, extra...)
	c1.proxies[2].Blackhole(faultproxy.Both) // c1 cannot reach C
	c2.proxies[0].Blackhole(faultproxy.Both) // c2 cannot reach A
	l1 := c1.mustLead(5*time.Second + takeoverDelay)
	h.fault("node-B-loses-key", true)
	if restart {
		srvs[1].Restart(t)
	} else if err := srvs[1].Client(t).Eval(context.Background(), ttlShift, []string{h.key}, ttl.Milliseconds()).Err(); err != nil {
		t.Fatal(err)
	}
	h.fault("node-B-loses-key", false)
	l2 := c2.mustLead(3*g8(ttl) + takeoverDelay)
	select { // both lead until the first steps down
	case <-l1.Done():
	case <-time.After(3 * ttl):
	}
	h.note("c1_end", "%s", reason(l1.Err()))
	_ = l2.Release(context.Background())
	_ = l1.Release(context.Background())
	h.finish(takeoverDelay == 0)
}

// S23-delayed-restart: as S23, but node B comes back only after a TTL
// (Redis's advice for nodes without persistence): by then the first owner
// has stepped down, and the second takes over with no overlap.
func redlockRestartDelayed(t *testing.T) {
	h := newHarness(t, "S23-delayed-restart")
	srvs := h.nodes(3)
	c1 := h.candidateOn(srvs, "c1", nil)
	c2 := h.candidateOn(srvs, "c2", nil)
	c1.proxies[2].Blackhole(faultproxy.Both)
	c2.proxies[0].Blackhole(faultproxy.Both)
	l1 := c1.mustLead(5 * time.Second)
	h.fault("node-B-restart-after-ttl", true)
	srvs[1].Kill(t)
	<-time.After(ttl) // the mitigation: stay down for a TTL
	srvs[1].Restart(t)
	h.fault("node-B-restart-after-ttl", false)
	l2 := c2.mustLead(3 * g8(ttl))
	h.check(!l1.Held(), "the first owner still holds after B's delayed restart")
	h.note("c1_end", "%s", reason(l1.Err()))
	_ = l2.Release(context.Background())
	h.finish(false)
}
