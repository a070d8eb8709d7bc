//go:build linux

package scenario

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/redisleader/redisleader/internal/history"
)

// flapFor is how long P3's higher-priority candidate joins and leaves.
const flapFor = 30 * time.Second

// noFlapping (P3): three candidates of priority 1 and "hi", of priority 2,
// which joins and leaves (Run's context ends) for about a TTL each, for
// 30s. A change of leadership is counted at each acquisition: by hi, a
// join change; after hi's term (hi left, so its term ended), a leave
// change; any other, between candidates of priority 1, is flapping and
// fails the scenario. So leadership changes only when hi joins or leaves.
// With a minimum term, every change that hi's leaving did not force must
// also follow a term of at least minTerm: at most one per minimum term.
func noFlapping(t *testing.T, id string, minTerm time.Duration) {
	h := childHarness(t, id)
	env := []string{envPriority + "=1"}
	if minTerm > 0 {
		env = append(env, envMinTerm+"="+strconv.FormatInt(minTerm.Milliseconds(), 10))
	}
	h.elect(names("eq", 3), env...)
	hi := h.runChild("hi", envPriority+"=2", envIdle+"=1")
	stay := func() time.Duration { return ttl*7/10 + rand.N(ttl*6/10) } // ~TTL
	start, joins := history.Now(), 0
	for end := time.Now().Add(flapFor); time.Now().Before(end); joins++ {
		hi.join()
		<-time.After(stay()) // hi's stay: the scenario's schedule
		left := h.expect(eventBy(kindLeft, "hi"))
		hi.send("leave")
		h.wait(left, 5*time.Second, "hi leaves")
		<-time.After(stay())
	}
	h.until(h.leads("eq"), 3*g8(ttl), "a priority 1 candidate leads")
	h.flapCount(h.changes(start), joins, minTerm)
	h.finish(false)
}

// flapCount classifies and checks P3's changes (noFlapping).
func (h *harness) flapCount(cs []change, joins int, minTerm time.Duration) {
	var joined, left, other, yields, early int
	shortest, longestVacancy := time.Duration(-1), time.Duration(0)
	for _, c := range cs {
		switch {
		case c.who == "hi":
			joined++
		case c.from == "hi":
			left++
		default:
			other++
		}
		if c.from != "hi" { // the former leader yielded (or its hand-over went to nobody)
			yields++
			early += btoi(c.prevTerm < minTerm)
			if shortest < 0 || c.prevTerm < shortest {
				shortest = c.prevTerm
			}
		}
		longestVacancy = max(longestVacancy, c.vacancy)
	}
	h.note("joins", "%d", joins)
	h.note("changes", "%d", len(cs))
	h.note("join_changes", "%d", joined)
	h.note("leave_changes", "%d", left)
	h.note("other_changes", "%d", other)
	h.note("min_term_ms", "%d", minTerm.Milliseconds())
	h.note("shortest_yielding_term_ms", "%.0f", ms(shortest))
	h.note("max_vacancy_ms", "%.0f", ms(longestVacancy))
	h.check(joined >= 1, "hi never led")
	h.check(joined <= joins && left <= joins, "%d join and %d leave changes for %d joins", joined, left, joins)
	h.check(other == 0, "%d changes between candidates of equal priority", other)
	h.check(early == 0, "%d changes after a term shorter than the minimum term %v", early, minTerm)
	if minTerm > 0 {
		h.check(yields <= int(flapFor/minTerm)+1, "%d yields in %v with a minimum term of %v", yields, flapFor, minTerm)
	}
}

// leftCandidate (P5): three candidates of priority 1 lead in turn; "hi",
// of priority 2, joins and leaves (Run's context ends) at once, before
// the leader's next renewal, then stays away for two TTLs, twice. A
// candidate that stopped campaigning is no better candidate: no change of
// leadership may follow unless hi led (it may, if a renewal found it in
// the milliseconds it campaigned).
func leftCandidate(t *testing.T) {
	h := childHarness(t, "P5")
	h.elect(names("eq", 3), envPriority+"=1")
	hi := h.runChild("hi", envPriority+"=2", envIdle+"=1")
	start := history.Now()
	for range 2 {
		hi.join()
		left := h.expect(eventBy(kindLeft, "hi"))
		hi.send("leave")
		h.wait(left, 5*time.Second, "hi leaves")
		<-time.After(2*ttl + ttl/2) // the observation window: hi's entry lives two TTLs
	}
	cs := h.changes(start)
	other, longest := 0, time.Duration(0)
	for _, c := range cs {
		other += btoi(c.who != "hi" && c.from != "hi")
		longest = max(longest, c.vacancy)
	}
	h.note("changes", "%d", len(cs))
	h.note("other_changes", "%d", other)
	h.note("max_vacancy_ms", "%.0f", ms(longest))
	h.check(other == 0, "%d changes between candidates of priority 1 after hi left: %v", other, cs)
	h.finish(false)
}
