package main

import (
	"fmt"
	"math"

	"github.com/redisleader/redisleader/bench/internal/latency"
)

// A curve is one row of a plot: its name in latency.json, its label and
// colour, and whether it is a floor (drawn dashed).
type curve struct {
	row, label, color string
	floor             bool
}

var (
	pairCurves = []curve{
		{"raw", "raw floor: SET NX PX, EVALSHA delete", "#000000", true},
		{"redisleader", "redisleader", "#1f77b4", false},
		{"redislock", "bsm/redislock", "#2ca02c", false},
		{"redsync-1", "redsync, one server", "#ff7f0e", false},
		{"etcd", "etcd: Mutex Lock+Unlock", "#e377c2", false},
	}
	handoverCurves = []curve{
		{"raw-push", "raw push floor: DEL+PUBLISH → SET NX", "#000000", true},
		{"redisleader", "redisleader: Release → Campaign", "#1f77b4", false},
		{"transfer", "redisleader: Transfer", "#9467bd", false},
		{"poll-100ms", "polling every 100 ms", "#8c564b", false},
		{"etcd", "etcd: Resign → Campaign", "#e377c2", false},
		{"crash", "redisleader: crash, lag after expiry", "#d62728", false},
	}
)

// Layout of the latency plot, in pixels.
const (
	plotWidth, plotHeight = 1000.0, 520.0
	panelW, panelH        = 410.0, 270.0
	panelTop              = 70.0
)

// latencyPlot draws the distributions of f as two panels of cumulative
// distributions on a log scale: lock pairs and handovers.
func latencyPlot(f *latency.File) string {
	s := newSVG(int(plotWidth), int(plotHeight), "Latency distributions: acquire+release pairs and handovers")
	s.text(plotWidth/2, 24, "middle", `font-size="15" font-weight="bold"`,
		"Latency distributions (share of samples at or below each latency; left is faster)")
	s.text(plotWidth/2, 42, "middle", small, "from "+f.Run+"; a noisy shared VM: compare curves, not absolute times")
	ecdf(s, 60, "acquire + release, one goroutine, own key", f.Pairs, pairCurves)
	ecdf(s, 60+panelW+90, "graceful handover and crash takeover", f.Handovers, handoverCurves)
	return s.String()
}

// ecdf draws one panel with its left edge at left.
func ecdf(s *svg, left float64, title string, rows map[string]latency.Dist, curves []curve) {
	lo, hi := span(rows, curves)
	px := func(us float64) float64 {
		return left + (math.Log10(us)-lo)/(hi-lo)*panelW
	}
	py := func(share float64) float64 { return panelTop + (1-share)*panelH }
	s.text(left+panelW/2, panelTop-10, "middle", `font-size="13" font-weight="bold"`, title)
	s.rect(left, panelTop, panelW, panelH, "none", "#000000")
	for _, share := range []float64{0, 0.25, 0.5, 0.75, 0.9, 1} {
		s.line(left, py(share), left+panelW, py(share), "#e5e5e5", 1, "")
		s.text(left-5, py(share)+4, "end", small, fmt.Sprintf("%g%%", share*100))
	}
	for e := math.Floor(lo); e <= hi; e++ {
		for _, m := range []float64{1, 2, 5} {
			v := e + math.Log10(m)
			if v < lo || v > hi {
				continue
			}
			s.line(px(math.Pow(10, v)), panelTop, px(math.Pow(10, v)), panelTop+panelH, "#e5e5e5", 1, "")
			if m == 1 || hi-lo <= 3 {
				s.text(px(math.Pow(10, v)), panelTop+panelH+16, "middle", small, duration(math.Pow(10, v)))
			}
		}
	}
	s.text(left+panelW/2, panelTop+panelH+34, "middle", small, "latency (log scale)")
	y := panelTop + panelH + 56
	for _, c := range curves {
		d, ok := rows[c.row]
		if !ok || d.N == 0 {
			continue
		}
		var pts []float64
		for i, us := range d.Us {
			pts = append(pts, px(max(us, math.Pow(10, lo))), py(latency.Levels[i]))
		}
		width := 2.0
		if c.floor {
			width = 1.5
		}
		s.polyline(pts, c.color, width)
		s.line(left, y-4, left+22, y-4, c.color, 3, "")
		s.text(left+28, y, "start", small, fmt.Sprintf("%s: p50 %s, p99 %s, n=%d", c.label, duration(at(d, 0.5)), duration(at(d, 0.99)), d.N))
		y += 17
	}
}

// span returns the log10 range of the x axis: whole decades around the
// curves' values from the minimum to the maximum.
func span(rows map[string]latency.Dist, curves []curve) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, c := range curves {
		if d, ok := rows[c.row]; ok && d.N > 0 {
			lo = min(lo, math.Log10(max(d.Us[0], 1)))
			hi = max(hi, math.Log10(max(d.Us[len(d.Us)-1], 1)))
		}
	}
	if math.IsInf(lo, 0) {
		return 0, 1
	}
	return math.Floor(lo), math.Ceil(hi)
}

// at returns d's quantile p (one of latency.Levels).
func at(d latency.Dist, p float64) float64 {
	for i, l := range latency.Levels {
		if math.Abs(l-p) < 1e-9 {
			return d.Us[i]
		}
	}
	return math.NaN()
}

// duration formats microseconds.
func duration(us float64) string {
	switch {
	case us >= 1e6:
		return fmt.Sprintf("%gs", round3(us/1e6))
	case us >= 1e3:
		return fmt.Sprintf("%gms", round3(us/1e3))
	}
	return fmt.Sprintf("%gµs", round3(us))
}

func round3(v float64) float64 {
	if v == 0 {
		return 0
	}
	p := math.Pow(10, 2-math.Floor(math.Log10(math.Abs(v))))
	return math.Round(v*p) / p
}
