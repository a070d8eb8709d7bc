//go:build linux

package scenario

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redisleader/redisleader/internal/history"
)

// TestScenarioSuccession runs the scenarios of leadership that moves on
// purpose (issue 30: Transfer, priorities, minimum terms), each against its
// own redis-server with Run children (runchild_test.go) as candidates:
// P1 rolling deploys, P2 transfers, P3 no flapping, P4 faults in the middle
// of a hand-over, P5 a better candidate that left. Their candidates are all
// child processes, so P3's two variants (30s each) and P5 run beside the
// others.
func TestScenarioSuccession(t *testing.T) {
	t.Run("all", func(t *testing.T) {
		t.Run("P3", func(t *testing.T) {
			t.Parallel()
			t.Run("P3", func(t *testing.T) { t.Parallel(); noFlapping(t, "P3", 0) })
			t.Run("P3-minterm", func(t *testing.T) { t.Parallel(); noFlapping(t, "P3-minterm", 3*ttl) })
			t.Run("P5", func(t *testing.T) { t.Parallel(); leftCandidate(t) })
		})
		t.Run("P1-P2-P4", func(t *testing.T) {
			t.Parallel()
			p1RollingDeploys(t)
			t.Run("P2", func(t *testing.T) { transfers(t, "P2", 200, true) })
			t.Run("P2-fair", func(t *testing.T) { transfers(t, "P2-fair", 50, false, envFair+"=1") })
			for _, kill := range []bool{true, false} {
				id := map[bool]string{true: "kill", false: "pause"}[kill]
				t.Run("P4-transfer-"+id, func(t *testing.T) { transferFault(t, "P4-transfer-"+id, kill) })
				t.Run("P4-deploy-"+id, func(t *testing.T) { deployFault(t, "P4-deploy-"+id, kill) })
			}
		})
	})
}

// claim serialises childHarness.
var claim sync.Mutex

// childHarness is newHarness for a scenario whose candidates are all child
// processes: they report on their own pipes, so it gives this process's
// probe events up, and other such scenarios may run beside it.
func childHarness(t *testing.T, id string) *harness {
	claim.Lock()
	defer claim.Unlock()
	h := newHarness(t, id)
	current.CompareAndSwap(h, nil)
	return h
}

// runChild starts a Run child with the given environment ("KEY=value").
func (h *harness) runChild(who string, env ...string) *child {
	h.t.Helper()
	return h.child(who, "", append([]string{envRun + "=1"}, env...)...)
}

// eventBy is the predicate of an event of a kind by who.
func eventBy(kind, who string) func(history.Event) bool {
	return func(e history.Event) bool { return e.Kind == kind && e.Who == who }
}

// campaigning starts Run children with env and waits until each has made
// its first acquire attempt (its entry is then in the candidates, with a
// priority).
func (h *harness) campaigning(names []string, env ...string) map[string]*child {
	h.t.Helper()
	var ws []*waiter
	for _, n := range names {
		ws = append(ws, h.expect(eventBy(kindAttempt, n)))
	}
	cs := map[string]*child{}
	for _, n := range names {
		cs[n] = h.runChild(n, env...)
	}
	for i, w := range ws {
		h.wait(w, 20*time.Second, names[i]+" campaigns")
	}
	return cs
}

// elect is campaigning for the first candidates of a scenario: it also
// waits until one of them leads.
func (h *harness) elect(names []string, env ...string) map[string]*child {
	h.t.Helper()
	led := h.expect(kind(history.Acquired))
	cs := h.campaigning(names, env...)
	h.wait(led, 10*time.Second, "a candidate leads")
	return cs
}

// join makes an idle Run child campaign and waits for its first attempt.
func (c *child) join() {
	c.h.t.Helper()
	w := c.h.expect(eventBy(kindAttempt, c.who))
	c.send("join")
	c.h.wait(w, 10*time.Second, c.who+" campaigns")
}

// stop ends c as an orchestrator does: SIGTERM, then c must exit with
// status 0 within 5s, its Run having released or handed over the name
// (its Close's outcome is an event: closeErrors). Its stderr is checked as
// kill checks it, and for an error of Run ("run:").
func (c *child) stop() {
	c.h.t.Helper()
	c.signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		c.h.t.Fatalf("%s: still running 5s after SIGTERM", c.who)
	}
	c.kill() // it has exited: this reaps it
	code, stderr := c.cmd.ProcessState.ExitCode(), c.errs.String()
	c.h.check(code == 0 && !strings.Contains(stderr, "run:"), "%s: exit status %d after SIGTERM; stderr: %s", c.who, code, stderr)
}

// closeErrors counts the Run children whose Session.Close returned an
// error (a release that failed; its key expires within the TTL).
func (h *harness) closeErrors() int {
	n := 0
	for _, e := range h.rec.Events() {
		n += btoi(e.Kind == kindClosed && e.Reason != "ok")
	}
	return n
}

// lastAcquirer returns who acquired last in h's history ("" if nobody).
func (h *harness) lastAcquirer() string {
	ev := h.rec.Events()
	for i := len(ev) - 1; i >= 0; i-- {
		if ev[i].Kind == history.Acquired {
			return ev[i].Who
		}
	}
	return ""
}

// stored returns the value stored in the lock key now, and whether it is a
// transfer's reservation for that value rather than a leader's ("" if the
// key is missing).
func (h *harness) stored() (value string, reserved bool) {
	v, err := h.admin.Get(context.Background(), h.key).Result()
	parts := strings.SplitN(v, "\n", 3)
	if err != nil || len(parts) < 3 {
		return "", false
	}
	return parts[2], parts[0] == ""
}

// leads reports whether a candidate with the prefix leads now (Redis).
func (h *harness) leads(prefix string) func() bool {
	return func() bool {
		v, reserved := h.stored()
		return v != "" && !reserved && strings.HasPrefix(v, prefix)
	}
}

// A change is an acquisition that follows another: who took the name from
// whom, the leaderless time between (the successor's start minus the end
// of the term before it), and how long that term lasted.
type change struct {
	who, from string
	vacancy   time.Duration
	prevTerm  time.Duration
}

// changes lists the acquisitions that started at or after from, with the
// terms they followed (the history's belief intervals).
func (h *harness) changes(from int64) []change {
	ivs, _ := history.Build(h.rec.Events())
	var out []change
	for i := 1; i < len(ivs); i++ {
		iv, p := ivs[i], ivs[i-1]
		if iv.Start >= from {
			out = append(out, change{who: iv.Who, from: p.Who, vacancy: time.Duration(iv.Start - p.End),
				prevTerm: time.Duration(p.End - p.Start)})
		}
	}
	return out
}

// pct is the nearest-rank p-quantile of ds (0 if empty).
func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ds))
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// pick returns a random candidate of cs other than not.
func pick(cs map[string]*child, not string) string {
	var names []string
	for n := range cs {
		if n != not {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names[rand.N(len(names))]
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range n {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
