package history

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
)

// maxProblems caps Report.Problems (the last line then says how many were
// left out).
const maxProblems = 50

// Interval is the belief interval [Start, End) of one acquisition.
type Interval struct {
	Who    string
	Token  string
	Fence  int64
	Start  int64  // acquired.Mono
	End    int64  // min(latest D, ended.Mono); never before Start
	Reason string // the ended event's Reason; "" if Open
	LateNs int64  // Reason "expired" only: ended.Mono - latest D, >= 0
	Open   bool   // no ended event; End is the latest D
}

// Report is the result of [Check]. Millisecond figures are float64; the
// ones that may be undefined are NaN then (omitted from JSON, "-" in Line).
type Report struct {
	Intervals          int      `json:"intervals"`            // acquisitions seen (= leaderships)
	Overlaps           int      `json:"overlaps"`             // intervals that start while an earlier one (of another token) is still believed
	MaxOverlapMs       float64  `json:"max_overlap_ms"`       // longest such overlap; 0 if none
	FenceViolations    int      `json:"fence_violations"`     // by Start order, intervals whose Fence is not above every earlier Fence (regression or reuse)
	RenewAfterDeadline int      `json:"renew_after_deadline"` // renewed at/after the current D (resurrection), or renewed/acquired again after ended
	AcquiredLate       int      `json:"acquired_late"`        // acquired with Mono >= its own Deadline
	StaleAccepted      int      `json:"stale_accepted"`       // write_ok whose Fence < the highest Fence of an earlier write_ok
	WritesOK           int      `json:"writes_ok"`
	WritesRejected     int      `json:"writes_rejected"`
	MaxGapMs           float64  `json:"max_gap_ms"`         // leaderless gaps between consecutive merged intervals; 0 if none
	P50GapMs           float64  `json:"p50_gap_ms"`         // nearest-rank median of the gaps; 0 if none
	P99GapMs           float64  `json:"p99_gap_ms"`         // nearest-rank 99th percentile; 0 if none
	MinMarginMs        float64  `json:"min_margin_ms"`      // smallest gap (closest non-overlapping approach); NaN if no gap
	MaxSignalLateMs    float64  `json:"max_signal_late_ms"` // max LateNs over expired intervals; 0 if none
	Problems           []string `json:"problems,omitempty"` // one line per violation, times in ms from the first event
}

// Safe reports whether no safety violation was found.
func (r Report) Safe() bool {
	return r.Overlaps == 0 && r.FenceViolations == 0 && r.RenewAfterDeadline == 0 &&
		r.AcquiredLate == 0 && r.StaleAccepted == 0
}

// Line formats the one-line scenario summary.
func (r Report) Line(id string, pass bool) string {
	verdict := "FAIL"
	if pass {
		verdict = "pass"
	}
	return fmt.Sprintf("SCENARIO %s %s overlaps=%d fence_violations=%d stale_accepted=%d max_gap_ms=%s max_signal_late_ms=%s intervals=%d renew_after_deadline=%d acquired_late=%d min_margin_ms=%s",
		id, verdict, r.Overlaps, r.FenceViolations, r.StaleAccepted, fmtMs(r.MaxGapMs), fmtMs(r.MaxSignalLateMs),
		r.Intervals, r.RenewAfterDeadline, r.AcquiredLate, fmtMs(r.MinMarginMs))
}

// MarshalJSON encodes r, omitting undefined (NaN) figures.
func (r Report) MarshalJSON() ([]byte, error) {
	type plain Report
	def := func(x float64) *float64 {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil
		}
		return &x
	}
	return json.Marshal(struct {
		plain
		MaxOverlapMs    *float64 `json:"max_overlap_ms,omitempty"`
		MaxGapMs        *float64 `json:"max_gap_ms,omitempty"`
		P50GapMs        *float64 `json:"p50_gap_ms,omitempty"`
		P99GapMs        *float64 `json:"p99_gap_ms,omitempty"`
		MinMarginMs     *float64 `json:"min_margin_ms,omitempty"`
		MaxSignalLateMs *float64 `json:"max_signal_late_ms,omitempty"`
	}{plain(r), def(r.MaxOverlapMs), def(r.MaxGapMs), def(r.P50GapMs), def(r.P99GapMs), def(r.MinMarginMs), def(r.MaxSignalLateMs)})
}

func fmtMs(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "-"
	}
	return fmt.Sprintf("%.1f", x)
}

func ms(ns int64) float64 { return float64(ns) / 1e6 }

// kindRank orders events with equal Mono: for one token, acquired before
// renewed before ended.
func kindRank(kind string) int {
	switch kind {
	case Acquired:
		return 0
	case Ended:
		return 2
	default:
		return 1
	}
}

// sortEvents returns a copy of events sorted by Mono, ties by kindRank,
// otherwise stable.
func sortEvents(events []Event) []Event {
	out := append([]Event(nil), events...)
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Mono != out[j].Mono {
			return out[i].Mono < out[j].Mono
		}
		return kindRank(out[i].Kind) < kindRank(out[j].Kind)
	})
	return out
}

// built is what build finds; Build and Check share it.
type built struct {
	sorted             []Event
	t0                 int64 // Mono of the first event; problem times are relative to it
	intervals          []Interval
	problems           []string
	renewAfterDeadline int
	acquiredLate       int
}

func (b *built) at(mono int64) float64 { return ms(mono - b.t0) }

func (b *built) problem(format string, args ...any) {
	b.problems = append(b.problems, fmt.Sprintf(format, args...))
}

type acquisition struct {
	iv      Interval
	d       int64 // latest local deadline
	ended   bool
	endMono int64
}

func build(events []Event) *built {
	b := &built{sorted: sortEvents(events)}
	if len(b.sorted) > 0 {
		b.t0 = b.sorted[0].Mono
	}
	byToken := map[string]*acquisition{}
	var order []*acquisition
	for _, e := range b.sorted {
		switch e.Kind {
		case Acquired:
			if a := byToken[e.Token]; a != nil {
				switch {
				case a.ended:
					b.renewAfterDeadline++
					b.problem("acquired again after ended: %s token %s fence %d at %.3fms, ended at %.3fms", e.Who, e.Token, e.Fence, b.at(e.Mono), b.at(a.endMono))
				case e.Mono >= a.d:
					b.renewAfterDeadline++
					b.problem("acquired again after deadline (resurrection): %s token %s fence %d at %.3fms, deadline %.3fms", e.Who, e.Token, e.Fence, b.at(e.Mono), b.at(a.d))
				default:
					b.problem("duplicate acquire: %s token %s fence %d at %.3fms", e.Who, e.Token, e.Fence, b.at(e.Mono))
					a.d = max(a.d, e.Deadline)
				}
				continue
			}
			a := &acquisition{iv: Interval{Who: e.Who, Token: e.Token, Fence: e.Fence, Start: e.Mono}, d: e.Deadline}
			byToken[e.Token] = a
			order = append(order, a)
			if e.Mono >= e.Deadline {
				b.acquiredLate++
				b.problem("acquired late: %s token %s fence %d reply at %.3fms, own deadline %.3fms (%.3fms late)", e.Who, e.Token, e.Fence, b.at(e.Mono), b.at(e.Deadline), ms(e.Mono-e.Deadline))
			}
		case Renewed:
			a := byToken[e.Token]
			switch {
			case a == nil:
				b.problem("renew without acquire: %s token %s at %.3fms", e.Who, e.Token, b.at(e.Mono))
			case a.ended:
				b.renewAfterDeadline++
				b.problem("renewed after ended: %s token %s fence %d at %.3fms, ended (%s) at %.3fms", e.Who, e.Token, a.iv.Fence, b.at(e.Mono), a.iv.Reason, b.at(a.endMono))
			case e.Mono >= a.d:
				b.renewAfterDeadline++
				b.problem("renewed after deadline (resurrection): %s token %s fence %d at %.3fms, deadline %.3fms (%.3fms after)", e.Who, e.Token, a.iv.Fence, b.at(e.Mono), b.at(a.d), ms(e.Mono-a.d))
			default:
				a.d = max(a.d, e.Deadline) // a deadline never moves back
			}
		case Ended:
			if a := byToken[e.Token]; a != nil && !a.ended {
				a.ended, a.endMono, a.iv.Reason = true, e.Mono, e.Reason
			}
		}
	}
	for _, a := range order {
		iv := a.iv
		iv.End = a.d
		if a.ended {
			iv.End = min(a.d, a.endMono)
			if iv.Reason == "expired" {
				iv.LateNs = max(0, a.endMono-a.d)
			}
		} else {
			iv.Open = true
		}
		iv.End = max(iv.End, iv.Start)
		b.intervals = append(b.intervals, iv)
	}
	sort.SliceStable(b.intervals, func(i, j int) bool {
		x, y := b.intervals[i], b.intervals[j]
		if x.Start != y.Start {
			return x.Start < y.Start
		}
		if x.Fence != y.Fence {
			return x.Fence < y.Fence
		}
		return x.Token < y.Token
	})
	return b
}

// Build rebuilds the belief intervals from events (in any order), sorted by
// Start, and returns the problems found on the way: renewals without an
// acquire, renewals or acquires after the deadline or after ended,
// duplicate acquires, and acquires that arrive after their own deadline.
func Build(events []Event) ([]Interval, []string) {
	b := build(events)
	return b.intervals, b.problems
}

// Check builds the intervals from events (in any order) and checks them.
func Check(events []Event) Report {
	b := build(events)
	ivs := b.intervals
	r := Report{
		Intervals:          len(ivs),
		RenewAfterDeadline: b.renewAfterDeadline,
		AcquiredLate:       b.acquiredLate,
		MinMarginMs:        math.NaN(),
	}

	// Fences strictly increase in Start order.
	top := 0 // index of the greatest Fence so far
	for i := 1; i < len(ivs); i++ {
		if iv, p := ivs[i], ivs[top]; iv.Fence <= p.Fence {
			r.FenceViolations++
			b.problem("fence regression: %s token %s fence %d started at %.3fms, after %s token %s fence %d started at %.3fms", iv.Who, iv.Token, iv.Fence, b.at(iv.Start), p.Who, p.Token, p.Fence, b.at(p.Start))
		} else {
			top = i
		}
	}

	// Overlaps and gaps against the running maximum End.
	var gaps []int64
	var cur *Interval // the interval with the greatest End so far
	for i := range ivs {
		iv := &ivs[i]
		if iv.End <= iv.Start {
			continue
		}
		switch {
		case cur == nil:
		case iv.Start < cur.End:
			over := min(iv.End, cur.End) - iv.Start
			r.Overlaps++
			r.MaxOverlapMs = max(r.MaxOverlapMs, ms(over))
			b.problem("overlap %.3fms: %s token %s fence %d believed [%.3f, %.3f)ms, %s token %s fence %d believed [%.3f, %.3f)ms", ms(over), cur.Who, cur.Token, cur.Fence, b.at(cur.Start), b.at(cur.End), iv.Who, iv.Token, iv.Fence, b.at(iv.Start), b.at(iv.End))
		default:
			gaps = append(gaps, iv.Start-cur.End)
		}
		if cur == nil || iv.End > cur.End {
			cur = iv
		}
	}
	if len(gaps) > 0 {
		sort.Slice(gaps, func(i, j int) bool { return gaps[i] < gaps[j] })
		r.MinMarginMs = ms(gaps[0])
		r.MaxGapMs = ms(gaps[len(gaps)-1])
		r.P50GapMs = ms(percentile(gaps, 0.50))
		r.P99GapMs = ms(percentile(gaps, 0.99))
	}

	for _, iv := range ivs {
		if iv.Reason == "expired" {
			r.MaxSignalLateMs = max(r.MaxSignalLateMs, ms(iv.LateNs))
		}
	}

	// The resource must never accept a write older than one it accepted.
	var highest int64
	var highestAt int64
	seen := false
	for _, e := range b.sorted {
		switch e.Kind {
		case WriteOK:
			r.WritesOK++
			if seen && e.Fence < highest {
				r.StaleAccepted++
				b.problem("stale write accepted: %s fence %d at %.3fms, after fence %d accepted at %.3fms", e.Who, e.Fence, b.at(e.Mono), highest, b.at(highestAt))
			}
			if !seen || e.Fence > highest {
				seen, highest, highestAt = true, e.Fence, e.Mono
			}
		case WriteRej:
			r.WritesRejected++
		}
	}

	r.Problems = b.problems
	if len(r.Problems) > maxProblems {
		n := len(r.Problems) - (maxProblems - 1)
		r.Problems = append(r.Problems[:maxProblems-1:maxProblems-1], fmt.Sprintf("... and %d more problems", n))
	}
	return r
}

// percentile returns the nearest-rank p-quantile of sorted, non-empty xs.
func percentile(xs []int64, p float64) int64 {
	i := int(math.Ceil(p*float64(len(xs)))) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}
