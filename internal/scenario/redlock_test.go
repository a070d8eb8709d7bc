//go:build linux

package scenario

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader"
	"github.com/redisleader/redisleader/internal/faultproxy"
	"github.com/redisleader/redisleader/internal/history"
	"github.com/redisleader/redisleader/internal/redisserver"
)

// TestScenarioRedlock runs the Redlock scenarios (S21–S24 of
// RELIABILITY.md) against three independent redis-servers.
func TestScenarioRedlock(t *testing.T) {
	t.Run("S21", s21NodeDown)
	t.Run("S21-hung", s21NodeHangs)
	t.Run("S22", func(t *testing.T) { redlockKleppmann(t, "S22", false, 0) })
	t.Run("S22-takeover-delay", func(t *testing.T) { redlockKleppmann(t, "S22-takeover-delay", false, ttl) })
	t.Run("S23", func(t *testing.T) { redlockKleppmann(t, "S23", true, 0) })
	t.Run("S23-delayed-restart", func(t *testing.T) { redlockRestartDelayed(t) })
	t.Run("S24", func(t *testing.T) { redlockFenceUnwritten(t, "S24", false) })
	t.Run("S24-fence-ahead", func(t *testing.T) { redlockFenceUnwritten(t, "S24-fence-ahead", true) })
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

// contenders starts n Redlock candidates, r0 to r(n-1), on srvs.
func contenders(h *harness, srvs []*redisserver.Server, n int) []*candidate {
	var cs []*candidate
	for i := range n {
		cs = append(cs, h.candidateOn(srvs, fmt.Sprintf("r%d", i), nil))
	}
	return cs
}

// S21: Redlock over 3 nodes while candidates contend: with one node down it
// keeps working; with two down nobody leads; back to three, it recovers.
func s21NodeDown(t *testing.T) {
	h := newHarness(t, "S21")
	srvs := h.nodes(3)
	cs := contenders(h, srvs, 3)
	phase := func(d time.Duration) int {
		start := history.Now()
		contendAll(d, 50*time.Millisecond, 200*time.Millisecond, nil, cs...)
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

// S21-hung: Redlock over 3 nodes, one of which takes every request and never
// answers (every candidate's link to it blackholed), while candidates
// contend. No operation waits for that node once a quorum has answered, so
// a handover takes milliseconds, not a call timeout (150ms) per call; and
// candidates that split the two live nodes back off until one of them
// leads (every attempt that cannot settle lasts the call timeout, and the
// retry delay alone let them split again for seconds).
func s21NodeHangs(t *testing.T) {
	h := newHarness(t, "S21-hung")
	srvs := h.nodes(3)
	cs := contenders(h, srvs, 3)
	h.fault("node-1-hangs", true)
	for _, c := range cs {
		c.proxies[1].Blackhole(faultproxy.Both)
	}
	const d = 3 * time.Second
	contendAll(d, 50*time.Millisecond, 200*time.Millisecond, nil, cs...)
	h.fault("node-1-hangs", false)
	rep := history.Check(h.rec.Events())
	h.note("handovers_per_s", "%.1f", float64(rep.Intervals)/d.Seconds())
	h.note("gap_p50_ms", "%.2f", rep.P50GapMs)
	h.note("gap_p99_ms", "%.1f", rep.P99GapMs)
	callTimeout := ms(ttl * 15 / 100)
	h.check(rep.Intervals >= 8, "only %d leaderships in %v", rep.Intervals, d)
	h.check(rep.P50GapMs < callTimeout/2, "median handover gap %.1fms with a hanging node (call timeout %.0fms)", rep.P50GapMs, callTimeout)
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

// S24: fences across Redlock owners when the acquisition's fence F reached
// Redis on one node only. c1 leads on three nodes and writes to the fenced
// resource; an acquisition whose fence is safe unwritten (every node's key
// outlives that node's clock passing F) sends nothing more, so each node's
// fence key still holds the fence it issued itself, and only the node that
// issued F holds F. Then c1 dies before its first renewal or release (all
// its connections blackholed: nothing of it reaches Redis again), the node
// holding F goes down, and c2 leads on the other two once c1's keys have
// expired there: its fence must be larger than F (the nodes' clocks have
// passed F), and its write must be accepted. f1_on_nodes says on how many
// nodes F was stored when c1 died (1 unless two nodes' clocks read the
// same µs).
//
// S24-fence-ahead: the same, with the fence key of one node pushed 3 TTLs
// ahead of the clocks before c1 leads: F comes from that node and is not
// below its TIME plus the TTL, so the acquisition writes F back to every
// node before it returns; with that node down, c2's fence is still larger.
func redlockFenceUnwritten(t *testing.T, id string, ahead bool) {
	h := newHarness(t, id)
	srvs := h.nodes(3)
	ctx := context.Background()
	fenceKey := h.key + ":fence"
	admins := make([]*redis.Client, len(srvs))
	for i, srv := range srvs {
		admins[i] = srv.Client(t)
	}
	fences := func() []int64 {
		out := make([]int64, len(admins))
		for i, a := range admins {
			v, err := a.Get(ctx, fenceKey).Result()
			if err != nil {
				t.Fatalf("node %d: %v", i, err)
			}
			if out[i], err = strconv.ParseInt(v, 10, 64); err != nil {
				t.Fatalf("node %d: %v", i, err)
			}
		}
		return out
	}
	pushed := 1 // the node whose fence key is pushed ahead
	if ahead {
		at := time.Now().Add(3 * ttl).UnixMicro()
		if err := admins[pushed].Set(ctx, fenceKey, at, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	c1 := h.candidateOn(srvs, "c1", nil)
	c2 := h.candidateOn(srvs, "c2", nil)
	l1 := c1.mustLead(5 * time.Second)
	h.fault("c1-dies", true)
	for _, p := range c1.proxies {
		p.Blackhole(faultproxy.Both)
	}
	f1 := l1.Fence()
	h.check(h.res.write("c1", f1), "c1's write with fence %d was rejected", f1)
	holdingF, down := 0, -1
	for i, f := range fences() {
		h.check(f <= f1, "node %d's fence key %d is above c1's fence %d", i, f, f1)
		if f == f1 {
			holdingF++
			down = i
		}
	}
	if ahead {
		h.check(holdingF == 3, "the write-back stored F on %d of 3 nodes", holdingF)
		down = pushed
	} else {
		// Nodes whose clocks read the same µs can issue the same fence; a
		// node with a smaller one shows that nothing wrote F back.
		h.check(holdingF < 3, "F reached every node: the acquisition (or a renewal) wrote it back")
	}
	h.fault(fmt.Sprintf("node-%d-down", down), true)
	srvs[down].Kill(t)
	l2 := c2.mustLead(3 * g8(ttl))
	f2 := l2.Fence()
	h.check(f2 > f1, "c2's fence %d is not above c1's %d", f2, f1)
	h.check(h.res.write("c2", f2), "c2's write with fence %d was rejected", f2)
	h.note("f1_on_nodes", "%d", holdingF)
	h.note("fence_gap_us", "%d", f2-f1)
	h.note("c1_end", "%s", reason(l1.Err()))
	_ = l2.Release(ctx)
	h.fault(fmt.Sprintf("node-%d-down", down), false)
	h.fault("c1-dies", false)
	h.finish(false)
}
