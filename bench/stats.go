package main

import (
	"math"
	"slices"
	"time"
)

// A series holds one value per row (a contender, a mechanism, a size) per
// round. A missing value (the run failed, or the row did not run) is NaN and
// is left out of every summary.
type series struct {
	rows map[string][]float64
	n    int // rounds
}

func newSeries(rounds int) *series { return &series{rows: map[string][]float64{}, n: rounds} }

// set records row's value in round.
func (s *series) set(row string, round int, v float64) {
	vals, ok := s.rows[row]
	if !ok {
		vals = make([]float64, s.n)
		for i := range vals {
			vals[i] = math.NaN()
		}
		s.rows[row] = vals
	}
	vals[round] = v
}

// of summarises row over the rounds.
func (s *series) of(row string) summary { return summarize(s.rows[row]) }

// ratio summarises row/base taken within each round, so that drift between
// rounds hits both sides of every ratio alike.
func (s *series) ratio(row, base string) summary {
	r, b := s.rows[row], s.rows[base]
	if r == nil || b == nil {
		return summary{}
	}
	ratios := make([]float64, s.n)
	for i := range ratios {
		ratios[i] = r[i] / b[i] // NaN if either is missing
	}
	return summarize(ratios)
}

// plus returns the per-round sums of s and o, row by row (rows of s only).
func (s *series) plus(o *series) *series {
	sum := newSeries(s.n)
	for row, vals := range s.rows {
		for i, v := range vals {
			w := math.NaN()
			if other := o.rows[row]; other != nil {
				w = other[i]
			}
			sum.set(row, i, v+w)
		}
	}
	return sum
}

// A summary is the median, minimum and maximum of the values that exist.
type summary struct {
	med, min, max float64
	n             int // values summarised; 0 means none
}

func summarize(vals []float64) summary {
	var ok []float64
	for _, v := range vals {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			ok = append(ok, v)
		}
	}
	if len(ok) == 0 {
		return summary{}
	}
	slices.Sort(ok)
	return summary{med: median(ok), min: ok[0], max: ok[len(ok)-1], n: len(ok)}
}

// median of sorted values (the mean of the middle two for an even count).
func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// percentile returns the nearest-rank p-quantile (0 < p ≤ 1) of sorted.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// latencies describes a pool of latency samples.
type latencies struct {
	n                        int
	p50, p99, mean, min, max time.Duration
}

func describe(d []time.Duration) latencies {
	if len(d) == 0 {
		return latencies{}
	}
	s := slices.Clone(d)
	slices.Sort(s)
	var sum time.Duration
	for _, x := range s {
		sum += x
	}
	return latencies{
		n: len(s), p50: percentile(s, 0.50), p99: percentile(s, 0.99),
		mean: sum / time.Duration(len(s)), min: s[0], max: s[len(s)-1],
	}
}

// ms and us convert a duration for the report.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// pooled holds latency samples per row per round: pooled over all rounds
// for percentiles, per round for round-by-round medians.
type pooled struct {
	rows map[string][][]time.Duration
	n    int // rounds
}

func newPooled(rounds int) *pooled { return &pooled{rows: map[string][][]time.Duration{}, n: rounds} }

// add records row's samples of round.
func (p *pooled) add(row string, round int, d []time.Duration) {
	if p.rows[row] == nil {
		p.rows[row] = make([][]time.Duration, p.n)
	}
	p.rows[row][round] = d
}

// all returns row's samples from every round.
func (p *pooled) all(row string) []time.Duration {
	var out []time.Duration
	for _, d := range p.rows[row] {
		out = append(out, d...)
	}
	return out
}

// p50s returns each round's median per row, in ms, as a series, so that
// medians can be compared within rounds.
func (p *pooled) p50s() *series {
	s := newSeries(p.n)
	for row, rounds := range p.rows {
		for i, d := range rounds {
			if len(d) > 0 {
				s.set(row, i, ms(describe(d).p50))
			}
		}
	}
	return s
}
