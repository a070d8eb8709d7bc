package history

import (
	"fmt"
	"sort"
)

// shared.go: the checker of a name that up to n holders share (a
// semaphore's permits): where Check wants no overlap at all, CheckShared
// wants at most n believed at any moment, and fences strictly increasing
// in the order the server must have granted them.

// Tried is an acquire attempt with Token whose reply was not a denial (it
// failed, timed out, or granted: the server may have granted Token then);
// Sent is its send time. The granting attempt need not be the one
// behind the Acquired event: an attempt whose reply was lost or came too
// late is confirmed by a later one with the same token, which gets the
// permit, and its fence, from the first. CheckShared takes the earliest
// of a token's Tried and Acquired sends as the lower bound of its grant.
const Tried = "tried"

// SharedReport is the result of [CheckShared].
type SharedReport struct {
	Intervals          int      `json:"intervals"`            // acquisitions seen
	Limit              int      `json:"limit"`                // n
	MaxHolders         int      `json:"max_holders"`          // most intervals believed at one moment
	Overcommits        int      `json:"overcommits"`          // intervals that start while n others are believed
	FenceViolations    int      `json:"fence_violations"`     // a fence handed out twice, or not above one granted before
	RenewAfterDeadline int      `json:"renew_after_deadline"` // as in Report
	AcquiredLate       int      `json:"acquired_late"`        // as in Report
	Problems           []string `json:"problems,omitempty"`
}

// Safe reports whether no safety violation was found.
func (r SharedReport) Safe() bool {
	return r.Overcommits == 0 && r.FenceViolations == 0 && r.RenewAfterDeadline == 0 && r.AcquiredLate == 0
}

// Line formats the one-line scenario summary.
func (r SharedReport) Line(id string, pass bool) string {
	verdict := "FAIL"
	if pass {
		verdict = "pass"
	}
	return fmt.Sprintf("SCENARIO %s %s max_holders=%d limit=%d overcommits=%d fence_violations=%d intervals=%d renew_after_deadline=%d acquired_late=%d",
		id, verdict, r.MaxHolders, r.Limit, r.Overcommits, r.FenceViolations, r.Intervals, r.RenewAfterDeadline, r.AcquiredLate)
}

// CheckShared builds the intervals from events (in any order) and checks
// them against a limit of n holders at once. An interval's fence must
// differ from every other's, and be above the fence of every interval
// that began before its acquire was sent (Event.Sent, or an earlier Tried
// of its token): the server granted that one first. Intervals are believed over [Start, End), as in Check.
func CheckShared(events []Event, n int) SharedReport {
	b := build(events)
	ivs := b.intervals
	r := SharedReport{Intervals: len(ivs), Limit: n, RenewAfterDeadline: b.renewAfterDeadline, AcquiredLate: b.acquiredLate}
	r.FenceViolations = sharedFences(b, ivs, grantSends(b))
	r.MaxHolders, r.Overcommits = sharedHolders(b, ivs, n)
	r.Problems = b.problems
	if len(r.Problems) > maxProblems {
		k := len(r.Problems) - (maxProblems - 1)
		r.Problems = append(r.Problems[:maxProblems-1:maxProblems-1], fmt.Sprintf("... and %d more problems", k))
	}
	return r
}

// grantSends is, by token, the earliest send of its Acquired and Tried
// events: the lower bound of its grant.
func grantSends(b *built) map[string]int64 {
	sent := map[string]int64{}
	for _, e := range b.sorted {
		if s, seen := sent[e.Token]; (e.Kind == Acquired || e.Kind == Tried) && e.Sent > 0 && (!seen || e.Sent < s) {
			sent[e.Token] = e.Sent
		}
	}
	return sent
}

// sharedFences counts the fence violations of ivs (sorted by Start),
// whose acquires were sent at sent (by token).
func sharedFences(b *built, ivs []Interval, sent map[string]int64) int {
	bad := 0
	owner := map[int64]string{}
	for _, iv := range ivs {
		if tok, dup := owner[iv.Fence]; dup && tok != iv.Token {
			bad++
			b.problem("fence %d handed out twice: tokens %s and %s", iv.Fence, tok, iv.Token)
		}
		owner[iv.Fence] = iv.Token
	}
	// Every interval that began at or before iv's send was granted before
	// iv: its fence must be below iv's. ivs is sorted by Start, so those
	// are a prefix; top is the greatest fence in it.
	var top int64
	var topWho string
	j := 0
	bySent := append([]Interval(nil), ivs...)
	sort.SliceStable(bySent, func(x, y int) bool { return sent[bySent[x].Token] < sent[bySent[y].Token] })
	for _, iv := range bySent {
		s := sent[iv.Token]
		for ; j < len(ivs) && ivs[j].Start <= s; j++ {
			if ivs[j].Fence > top {
				top, topWho = ivs[j].Fence, ivs[j].Who
			}
		}
		if s > 0 && top > 0 && iv.Fence <= top {
			bad++
			b.problem("fence regression: %s fence %d sent at %.3fms, after %s's fence %d began", iv.Who, iv.Fence, b.at(s), topWho, top)
		}
	}
	return bad
}

// sharedHolders returns the most intervals of ivs believed at one moment,
// and how many started while n others were.
func sharedHolders(b *built, ivs []Interval, n int) (most, over int) {
	type edge struct {
		at    int64
		delta int
		iv    *Interval
	}
	var edges []edge
	for i := range ivs {
		if iv := &ivs[i]; iv.End > iv.Start {
			edges = append(edges, edge{iv.Start, 1, iv}, edge{iv.End, -1, iv})
		}
	}
	sort.SliceStable(edges, func(x, y int) bool {
		if edges[x].at != edges[y].at {
			return edges[x].at < edges[y].at
		}
		return edges[x].delta < edges[y].delta // an end at t frees its place before a start at t
	})
	cur := 0
	for _, e := range edges {
		cur += e.delta
		if e.delta > 0 && cur > n {
			over++
			b.problem("overcommit: %s fence %d began at %.3fms while %d others were believed (limit %d)", e.iv.Who, e.iv.Fence, b.at(e.at), cur-1, n)
		}
		most = max(most, cur)
	}
	return most, over
}
