//go:build linux

package scenario

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redisleader/redisleader"
	"github.com/redisleader/redisleader/internal/faultproxy"
	"github.com/redisleader/redisleader/internal/history"
)

// handOff is the outcome of one Transfer by a Run child.
type handOff struct {
	outcome string        // "ok" or Transfer's error
	next    string        // who acquired next
	vacancy time.Duration // the leader's release → the next acquisition
	call    time.Duration // Transfer's call, from its start until it returned
	took    time.Duration // Transfer's start → the next acquisition
}

// transfer has from, which leads, call Transfer(to), and waits until it
// returned and the first acquisition after it that satisfies next.
func (h *harness) transfer(from *child, to string, next func(history.Event) bool) handOff {
	h.t.Helper()
	started, done := h.expect(eventBy(kindTransferStart, from.who)), h.expect(eventBy(kindTransferDone, from.who))
	ended, acq := h.expect(endedBy(from.who)), h.expect(next)
	from.send("transfer " + to)
	s := h.wait(started, 5*time.Second, from.who+" calls Transfer")
	e := h.wait(ended, 5*time.Second, from.who+"'s leadership ends")
	a := h.wait(acq, 3*g8(ttl), "the next leader after a transfer to "+to)
	d := h.wait(done, 3*g8(ttl), from.who+"'s Transfer returns")
	return handOff{outcome: d.Reason, next: a.Who, vacancy: time.Duration(a.Mono - e.Mono),
		call: time.Duration(d.Mono - s.Mono), took: time.Duration(a.Mono - s.Mono)}
}

// transfers (P2): 10 Run children; n times the leader transfers to a
// random other live candidate, which must lead next, every time, and
// nobody else in between (every acquisition of the run, with its fence,
// is in the history). The line has p50/p99 of release → successor leads.
// With fallback, transfers to a SIGKILLed candidate and to a value nobody
// campaigns with then fall back (fallbacks).
func transfers(t *testing.T, id string, n int, fallback bool, env ...string) {
	h := childHarness(t, id)
	cs := h.elect(names("c", 10), env...)
	leader, start := h.lastAcquirer(), history.Now()
	var targets []string
	var vacancies, calls []time.Duration
	failed := 0
	for range n {
		to := pick(cs, leader)
		r := h.transfer(cs[leader], to, acquiredBy(to))
		if r.outcome != "ok" {
			failed++
			t.Logf("transfer %s → %s: %s", leader, to, r.outcome)
		}
		targets, vacancies, calls = append(targets, to), append(vacancies, r.vacancy), append(calls, r.call)
		leader = to
	}
	var led []string
	for _, c := range h.changes(start) {
		led = append(led, c.who)
	}
	h.check(failed == 0, "%d of %d transfers returned an error", failed, n)
	h.check(slices.Equal(led, targets), "acquisitions after the first transfer %v; transfers to %v", led, targets)
	h.note("transfers", "%d", n)
	h.note("named_led", "%d", n-mismatches(led, targets))
	h.note("release_to_successor_p50_ms", "%.2f", ms(pct(vacancies, 0.5)))
	h.note("release_to_successor_p99_ms", "%.2f", ms(pct(vacancies, 0.99)))
	h.note("transfer_call_p50_ms", "%.2f", ms(pct(calls, 0.5)))
	h.note("transfer_call_p99_ms", "%.2f", ms(pct(calls, 0.99)))
	if fallback {
		h.fallbacks(cs)
	}
	h.finish(false)
}

// mismatches counts the positions where got differs from want, and what
// one has beyond the other.
func mismatches(got, want []string) int {
	n := max(len(got), len(want)) - min(len(got), len(want))
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			n++
		}
	}
	return n
}

// fallbacks: the leader transfers to a candidate SIGKILLed while it
// campaigned, then to a value nobody campaigns with. Transfer must return
// ErrNoSuccessor, and someone lead, within the bound from Transfer's
// start: one TTL (the reservation's, documented) plus a margin of 300ms,
// a waiter's retry interval, jitter and call timeout (G8 − TTL).
func (h *harness) fallbacks(cs map[string]*child) {
	h.t.Helper()
	dead := pick(cs, h.lastAcquirer())
	h.fault("sigkill-successor", true)
	cs[dead].kill()
	delete(cs, dead)
	h.fault("sigkill-successor", false)
	for _, to := range []string{dead, "nobody"} {
		label := map[bool]string{true: "dead", false: "missing"}[to == dead]
		r := h.transfer(cs[h.lastAcquirer()], to, kind(history.Acquired))
		h.note(label+"_returned_ms", "%.0f", ms(r.call))
		h.note(label+"_next_leads_ms", "%.0f", ms(r.took))
		h.check(strings.Contains(r.outcome, redisleader.ErrNoSuccessor.Error()), "transfer to the %s %s: %s", label, to, r.outcome)
		h.check(r.next != to, "the %s successor %s led", label, to)
		h.check(r.call <= g8(ttl) && r.took <= g8(ttl), "transfer to the %s %s: returned after %v, next leader after %v; bound %v",
			label, to, r.call, r.took, g8(ttl))
	}
	h.note("fallback_bound_ms", "%.0f", ms(g8(ttl)))
}

// successorDelay delays the successor's replies in P4, so that its
// acquisition comes at least two delays after the hand-over: the fault
// lands in between. Below a third of the call timeout (150ms), so that a
// call on a new connection (dial, HELLO, CLIENT SETINFO, then the call:
// three round trips) still fits in it.
const successorDelay = 25 * time.Millisecond

// transferFault (P4): 4 Run children; twice the leader transfers to a
// random other, whose replies are delayed (successorDelay); in the middle,
// once as Transfer starts and once when the reservation is in Redis, the
// leader is SIGKILLed (kill) or Redis is stopped for 1.5 TTL. Someone must
// lead within the G8 bound of the fault's end, and nothing may overlap.
func transferFault(t *testing.T, id string, kill bool) {
	h := childHarness(t, id)
	cs := h.elect(names("t", 4))
	for _, at := range []string{"start", "reserved"} {
		leader := h.lastAcquirer()
		to := pick(cs, leader)
		cs[to].proxy.Delay(faultproxy.ServerToClient, successorDelay, 0)
		started, done := h.expect(eventBy(kindTransferStart, leader)), h.expect(eventBy(kindTransferDone, leader))
		next := h.expect(kind(history.Acquired))
		cs[leader].send("transfer " + to)
		h.wait(started, 5*time.Second, leader+" calls Transfer")
		if at == "reserved" {
			h.until(func() bool { v, r := h.stored(); return r && v == to }, 2*time.Second, "the reservation for "+to)
		}
		faultAt, end := h.midTransferFault(kill, cs[leader])
		e := h.wait(next, 3*g8(ttl), "a leader after the fault")
		cs[to].proxy.Heal()
		after := time.Duration(e.Mono - end)
		h.note(at+"_next", "%s", map[bool]string{true: "successor", false: "other"}[e.Who == to])
		h.note(at+"_fault_to_leader_ms", "%.0f", ms(after))
		h.check(faultAt < e.Mono, "%s: the fault came after %s acquired: not mid-transfer", at, e.Who)
		h.check(after <= g8(ttl), "%s: %s led %v after the fault ended; bound %v", at, e.Who, after, g8(ttl))
		if kill {
			delete(cs, leader)
			continue
		}
		h.note(at+"_transfer", "%s", outcomeWord(h.wait(done, 3*g8(ttl), leader+"'s Transfer returns").Reason))
	}
	h.finish(false)
}

// outcomeWord shortens a Transfer outcome for a scenario line.
func outcomeWord(o string) string {
	switch {
	case o == "ok":
		return "ok"
	case strings.Contains(o, redisleader.ErrNoSuccessor.Error()):
		return "no_successor"
	}
	return "error"
}

// midTransferFault SIGKILLs leader (kill) or stops Redis for 1.5 TTL, and
// returns when the fault began and ended (CLOCK_MONOTONIC ns).
func (h *harness) midTransferFault(kill bool, leader *child) (began, ended int64) {
	began = history.Now()
	if kill {
		h.fault("sigkill-leader-mid-transfer", true)
		leader.kill()
		h.fault("sigkill-leader-mid-transfer", false)
		return began, began
	}
	h.fault("sigstop-redis-mid-transfer", true)
	h.srv.Pause(h.t)
	<-time.After(3 * ttl / 2) // the fault's length, not synchronisation
	h.srv.Resume(h.t)
	h.fault("sigstop-redis-mid-transfer", false)
	return began, history.Now()
}
