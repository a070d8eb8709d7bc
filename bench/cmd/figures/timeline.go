package main

import "fmt"

// The timeline's story, in seconds: leader A acquires at 0 and renews every
// renew interval; follower B starts waiting at bWaits; A resigns (graceful)
// or crashes (crash) at aStops; the axis ends at axisEnd.
const (
	bWaits  = 2.0
	aStops  = 12.0
	axisEnd = 32.0
)

// Layout of the timeline, in pixels.
const (
	tlWidth, tlLeft, tlRight = 960.0, 120.0, 30.0
	panelHeight, rowGap      = 190.0, 42.0
)

const (
	colA, colB, colKey = "#1f77b4", "#d62728", "#7f7f7f"
	small              = `font-size="11" fill="#333333"`
)

// timeline draws one lease and the next leader's takeover, after a
// graceful handover and after a crash, with timing t.
func timeline(t timing) string {
	h := 60 + 2*panelHeight + 40
	s := newSVG(int(tlWidth), int(h), "The lease timeline: graceful handover and crash takeover")
	s.text(tlWidth/2, 24, "middle", `font-size="15" font-weight="bold"`,
		fmt.Sprintf("One lease with the default timing: TTL %gs, renewed every %gs, local deadline D = s + TTL·(1−ρ) − m = s + %gs", t.ttl, t.renew, t.validity))
	s.text(tlWidth/2, 42, "middle", small,
		fmt.Sprintf("ρ = %g, m = %.0fms: each owner stops believing TTL·ρ + m = %.0fms before Redis can expire its key (drawn from options.go by bench/cmd/figures)", t.drift, t.margin*1000, (t.ttl-t.validity)*1000))
	panel(s, t, 60, true)
	panel(s, t, 60+panelHeight, false)
	axis(s, 60+2*panelHeight)
	return s.String()
}

// x maps seconds to pixels.
func x(sec float64) float64 { return tlLeft + sec/axisEnd*(tlWidth-tlLeft-tlRight) }

func axis(s *svg, y float64) {
	s.line(x(0), y, x(axisEnd), y, "#000000", 1, "")
	for sec := 0.0; sec <= axisEnd; sec += 5 {
		s.line(x(sec), y, x(sec), y+5, "#000000", 1, "")
		s.text(x(sec), y+18, "middle", small, fmt.Sprintf("%gs", sec))
	}
}

// panel draws one case, graceful or crash, with its top at y.
func panel(s *svg, t timing, y float64, graceful bool) {
	title := "Graceful handover: A resigns (Resign, Release, Close, Run returning)"
	if !graceful {
		title = "Crash or pause: A stops renewing"
	}
	s.text(12, y+22, "start", `font-size="13" font-weight="bold"`, title)
	rowA, rowKey, rowB := y+48, y+48+rowGap, y+48+2*rowGap
	s.text(12, rowA+4, "start", "", "leader A")
	s.text(12, rowKey+4, "start", "", "key in Redis")
	s.text(12, rowB+4, "start", "", "follower B")
	for sec := 0.0; sec <= axisEnd; sec += 5 {
		s.line(x(sec), y+32, x(sec), rowB+16, "#eeeeee", 1, "")
	}
	var renewals []float64
	for at := 0.0; at < aStops; at += t.renew {
		renewals = append(renewals, at)
	}
	last := renewals[len(renewals)-1]
	leaseA(s, t, rowA, rowKey, renewals, graceful)
	if graceful {
		handover(s, t, rowA, rowKey, rowB)
		return
	}
	crash(s, t, rowA, rowKey, rowB, last)
}

// leaseA draws A's belief and its key, up to where they end.
func leaseA(s *svg, t timing, rowA, rowKey float64, renewals []float64, graceful bool) {
	last := renewals[len(renewals)-1]
	s.rect(x(0), rowA-7, x(aStops)-x(0), 14, colA, "none")
	if !graceful {
		s.rect(x(aStops), rowA-7, x(last+t.validity)-x(aStops), 14, "#c6dbef", colA)
		s.text((x(aStops)+x(last+t.validity))/2, rowA+4, "middle", small, "paused? believes at most until D")
		s.rect(x(0), rowKey-7, x(last+t.ttl)-x(0), 14, "#c6dbef", "none")
	} else {
		s.rect(x(0), rowKey-7, x(aStops)-x(0), 14, "#c6dbef", "none")
	}
	for i, at := range renewals {
		label := "renew"
		if i == 0 {
			label = "acquire"
		}
		s.line(x(at), rowA+7, x(at), rowKey-7, "#000000", 1.2, "")
		s.text(x(at)+3, rowA-11, "start", small, label)
	}
	if !graceful { // the local deadline of the last renewal; earlier ones were moved on
		s.line(x(last+t.validity), rowA-10, x(last+t.validity), rowA+10, colA, 2, "3,2")
		s.text(x(last+t.validity)-2, rowA-11, "end", small, "D")
	}
	s.text(x(0)+4, rowKey+4, "start", small, "holds A's token")
}

func handover(s *svg, t timing, rowA, rowKey, rowB float64) {
	s.line(x(aStops), rowA+7, x(aStops), rowKey-7, "#000000", 1.2, "")
	s.text(x(aStops)+3, rowA-11, "start", small, "resign: DEL + PUBLISH in one script")
	waiting(s, rowB, bWaits, aStops, []float64{bWaits})
	s.rect(x(aStops), rowB-7, x(axisEnd)-x(aStops), 14, colB, "none")
	s.rect(x(aStops), rowKey-7, x(axisEnd)-x(aStops), 14, "#fcbba1", "none")
	s.text(x(aStops)+4, rowKey+4, "start", small, "B's token")
	s.text(x(aStops)+4, rowB+22, "start", small, "woken by the message: B leads about two round trips later (no gap)")
}

func crash(s *svg, t timing, rowA, rowKey, rowB, last float64) {
	expiry := last + t.ttl
	s.text(x(aStops)+3, rowKey-11, "start", small, "no renewal: the key expires TTL after the last one")
	s.line(x(expiry), rowKey-10, x(expiry), rowKey+10, "#000000", 2, "")
	s.text(x(expiry)+3, rowKey+22, "start", small, fmt.Sprintf("expiry, %.0fms after D", (expiry-(last+t.validity))*1000))
	// B's first attempt read the key's remaining TTL (acquired at 0); at
	// its second, A has renewed, so B sleeps until that lease can have
	// expired, and the attempt after that takes the name.
	second := t.ttl
	waiting(s, rowB, bWaits, expiry, []float64{bWaits, second, expiry})
	s.rect(x(expiry), rowB-7, x(axisEnd)-x(expiry), 14, colB, "none")
	s.rect(x(expiry), rowKey-7, x(axisEnd)-x(expiry), 14, "#fcbba1", "none")
	s.text(x(expiry)+4, rowKey+4, "start", small, "B's token")
	s.text(x(expiry)+4, rowB+22, "start", small, "B takes over 1–2 ms after the expiry")
	s.text((x(aStops)+x(expiry))/2, rowB+22, "middle", small, fmt.Sprintf("nobody leads: %gs, at most one TTL", expiry-aStops))
}

// waiting draws a follower waiting from start to end, with its acquire
// attempts (about one per TTL: no polling).
func waiting(s *svg, row, start, end float64, attempts []float64) {
	s.line(x(start), row, x(end), row, colB, 2, "4,3")
	for _, at := range attempts {
		s.circle(x(at), row, 4, "#ffffff", colB)
	}
	s.text(x(start)+3, row-11, "start", small, "B campaigns: an attempt (○), then it sleeps until the lease it read can have expired")
}
