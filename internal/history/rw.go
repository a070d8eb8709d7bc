package history

import (
	"fmt"
	"sort"
)

// rw.go: the checker of a read-write lock: any number of readers, or one
// writer, believed at any moment; fences strictly increasing in grant
// order, as CheckShared wants them.

// RWReport is the result of [CheckRW].
type RWReport struct {
	Intervals          int      `json:"intervals"`            // acquisitions seen
	Writes             int      `json:"writes"`               // of which write leases
	MaxReaders         int      `json:"max_readers"`          // most read intervals believed at one moment
	ReadWrite          int      `json:"read_write"`           // intervals that start while one of the other role is believed
	WriteWrite         int      `json:"write_write"`          // write intervals that start while another writer is believed
	FenceViolations    int      `json:"fence_violations"`     // as in SharedReport
	RenewAfterDeadline int      `json:"renew_after_deadline"` // as in Report
	AcquiredLate       int      `json:"acquired_late"`        // as in Report
	Problems           []string `json:"problems,omitempty"`
}

// Safe reports whether no safety violation was found.
func (r RWReport) Safe() bool {
	return r.ReadWrite == 0 && r.WriteWrite == 0 && r.FenceViolations == 0 && r.RenewAfterDeadline == 0 && r.AcquiredLate == 0
}

// Line formats the one-line scenario summary.
func (r RWReport) Line(id string, pass bool) string {
	verdict := "FAIL"
	if pass {
		verdict = "pass"
	}
	return fmt.Sprintf("SCENARIO %s %s max_readers=%d read_write=%d write_write=%d fence_violations=%d intervals=%d writes=%d renew_after_deadline=%d acquired_late=%d",
		id, verdict, r.MaxReaders, r.ReadWrite, r.WriteWrite, r.FenceViolations, r.Intervals, r.Writes, r.RenewAfterDeadline, r.AcquiredLate)
}

// CheckRW builds the intervals from events (in any order) and checks them
// as a read-write lock's: write(who) tells a writer's interval (its
// Event.Who) from a reader's. No reader may be believed while a writer
// is, nor two writers at once; fences are judged as CheckShared judges
// them (a token's Tried events, too, bound its grant from below). Intervals are believed over [Start, End), as in Check.
func CheckRW(events []Event, write func(who string) bool) RWReport {
	b := build(events)
	ivs := b.intervals
	r := RWReport{Intervals: len(ivs), RenewAfterDeadline: b.renewAfterDeadline, AcquiredLate: b.acquiredLate}
	r.FenceViolations = sharedFences(b, ivs, grantSends(b))
	r.Writes, r.MaxReaders, r.ReadWrite, r.WriteWrite = rwHolders(b, ivs, write)
	r.Problems = b.problems
	if len(r.Problems) > maxProblems {
		k := len(r.Problems) - (maxProblems - 1)
		r.Problems = append(r.Problems[:maxProblems-1:maxProblems-1], fmt.Sprintf("... and %d more problems", k))
	}
	return r
}

// rwHolders sweeps ivs: how many are writes, the most readers believed at
// one moment, and the intervals that began while the other role (rw) or
// another writer (ww) was believed.
func rwHolders(b *built, ivs []Interval, write func(string) bool) (writes, most, rw, ww int) {
	type edge struct {
		at    int64
		delta int
		iv    *Interval
		w     bool
	}
	var edges []edge
	for i := range ivs {
		iv := &ivs[i]
		w := write(iv.Who)
		if w {
			writes++
		}
		if iv.End > iv.Start {
			edges = append(edges, edge{iv.Start, 1, iv, w}, edge{iv.End, -1, iv, w})
		}
	}
	sort.SliceStable(edges, func(x, y int) bool {
		if edges[x].at != edges[y].at {
			return edges[x].at < edges[y].at
		}
		return edges[x].delta < edges[y].delta // an end at t frees its place before a start at t
	})
	readers, writers := 0, 0
	for _, e := range edges {
		switch {
		case e.w && e.delta > 0 && writers > 0:
			ww++
			b.problem("two writers: %s fence %d began at %.3fms while %d other writer(s) were believed", e.iv.Who, e.iv.Fence, b.at(e.at), writers)
		case e.w && e.delta > 0 && readers > 0, !e.w && e.delta > 0 && writers > 0:
			rw++
			b.problem("reader and writer: %s fence %d began at %.3fms while %d reader(s) and %d writer(s) were believed", e.iv.Who, e.iv.Fence, b.at(e.at), readers, writers)
		}
		if e.w {
			writers += e.delta
		} else {
			readers += e.delta
		}
		most = max(most, readers)
	}
	return writes, most, rw, ww
}
