package history

import (
	"bytes"
	"encoding/json"
	"math"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// t0 is an arbitrary base so that times are not near zero.
const t0 = int64(1_000_000_000_000)

// at converts milliseconds after t0 to a Mono value.
func at(msec float64) int64 { return t0 + int64(msec*1e6) }

func acq(who, tok string, fence int64, mono, sent, deadline float64) Event {
	return Event{Mono: at(mono), Who: who, Kind: Acquired, Token: tok, Fence: fence, Sent: at(sent), Deadline: at(deadline)}
}

func renew(who, tok string, mono, sent, deadline float64) Event {
	return Event{Mono: at(mono), Who: who, Kind: Renewed, Token: tok, Sent: at(sent), Deadline: at(deadline)}
}

func end(who, tok, reason string, mono float64) Event {
	return Event{Mono: at(mono), Who: who, Kind: Ended, Token: tok, Reason: reason}
}

func write(kind, who string, fence int64, mono float64) Event {
	return Event{Mono: at(mono), Who: who, Kind: kind, Fence: fence}
}

// reversed returns events in reverse order, so Check must sort them.
func reversed(ev []Event) []Event {
	out := make([]Event, len(ev))
	for i, e := range ev {
		out[len(ev)-1-i] = e
	}
	return out
}

func TestCleanHistory(t *testing.T) {
	ev := []Event{
		{Mono: at(0), Who: "nemesis", Kind: FaultOn, Reason: "latency"},
		acq("A", "a", 1, 10, 9, 100),
		write(WriteOK, "A", 1, 20),
		renew("A", "a", 60, 58, 150),
		end("A", "a", "released", 120),
		acq("B", "b", 2, 130, 128, 230),
		write(WriteOK, "B", 2, 140),
		write(WriteRej, "A", 1, 141),
		renew("B", "b", 180, 178, 280),
		{Mono: at(200), Who: "nemesis", Kind: FaultOff, Reason: "latency"},
		end("B", "b", "expired", 283), // timer fired 3ms after D
		acq("C", "c", 3, 300, 299, 400),
		renew("C", "c", 350, 349, 450),
		renew("C", "c", 360, 340, 440), // smaller deadline: D must not shrink
		write(WriteOK, "C", 3, 370),
		end("C", "c", "released", 460), // after D: interval ends at D
	}
	ivs, probs := Build(reversed(ev))
	require.Empty(t, probs)
	require.Equal(t, []Interval{
		{Who: "A", Token: "a", Fence: 1, Start: at(10), End: at(120), Reason: "released"},
		{Who: "B", Token: "b", Fence: 2, Start: at(130), End: at(280), Reason: "expired", LateNs: 3_000_000},
		{Who: "C", Token: "c", Fence: 3, Start: at(300), End: at(450), Reason: "released"},
	}, ivs)

	r := Check(reversed(ev))
	assert.True(t, r.Safe())
	assert.Empty(t, r.Problems)
	assert.Equal(t, 3, r.Intervals)
	assert.Zero(t, r.Overlaps)
	assert.Zero(t, r.MaxOverlapMs)
	assert.Zero(t, r.FenceViolations)
	assert.Zero(t, r.RenewAfterDeadline)
	assert.Zero(t, r.AcquiredLate)
	assert.Zero(t, r.StaleAccepted)
	assert.Equal(t, 3, r.WritesOK)
	assert.Equal(t, 1, r.WritesRejected)
	assert.Equal(t, 20.0, r.MaxGapMs) // gaps: 130-120=10, 300-280=20
	assert.Equal(t, 10.0, r.P50GapMs)
	assert.Equal(t, 20.0, r.P99GapMs)
	assert.Equal(t, 10.0, r.MinMarginMs)
	assert.Equal(t, 3.0, r.MaxSignalLateMs)
}

func TestOpenInterval(t *testing.T) {
	ivs, probs := Build([]Event{acq("A", "a", 1, 0, 0, 100), renew("A", "a", 50, 50, 150)})
	require.Empty(t, probs)
	require.Equal(t, []Interval{{Who: "A", Token: "a", Fence: 1, Start: at(0), End: at(150), Open: true}}, ivs)
	r := Check(nil)
	assert.True(t, r.Safe())
	assert.True(t, math.IsNaN(r.MinMarginMs))
	assert.Zero(t, r.MaxGapMs)
}

func TestOverlap(t *testing.T) {
	ev := []Event{
		acq("A", "a", 1, 0, 0, 100),
		acq("B", "b", 2, 70, 69, 170), // before A's D and before A ended
		end("A", "a", "not_owner", 150),
		end("B", "b", "released", 160),
	}
	r := Check(ev)
	assert.False(t, r.Safe())
	assert.Equal(t, 2, r.Intervals)
	assert.Equal(t, 1, r.Overlaps)
	assert.Equal(t, 30.0, r.MaxOverlapMs) // [0,100) and [70,160)
	assert.Zero(t, r.FenceViolations)
	assert.True(t, math.IsNaN(r.MinMarginMs))
	require.Len(t, r.Problems, 1)
	assert.Contains(t, r.Problems[0], "overlap 30.000ms")
	assert.Contains(t, r.Problems[0], "token a fence 1")
	assert.Contains(t, r.Problems[0], "token b fence 2")

	// A contained interval: the overlap is capped by its own length.
	ev = []Event{
		acq("A", "a", 1, 0, 0, 100),
		acq("B", "b", 2, 20, 20, 120),
		end("B", "b", "released", 30),
		acq("C", "c", 3, 110, 110, 200),
	}
	r = Check(ev)
	assert.Equal(t, 1, r.Overlaps)
	assert.Equal(t, 10.0, r.MaxOverlapMs)
	assert.Equal(t, 10.0, r.MinMarginMs) // C starts 10ms after A's D
}

func TestFenceRegression(t *testing.T) {
	r := Check([]Event{
		acq("A", "a", 5, 0, 0, 100),
		end("A", "a", "released", 90),
		acq("B", "b", 3, 100, 100, 200),
		end("B", "b", "released", 150),
		acq("C", "c", 6, 160, 160, 260),
	})
	assert.Equal(t, 1, r.FenceViolations)
	assert.False(t, r.Safe())
	require.Len(t, r.Problems, 1)
	assert.Contains(t, r.Problems[0], "fence regression: B token b fence 3")

	// A fence reused by two tokens.
	r = Check([]Event{
		acq("A", "a", 5, 0, 0, 100),
		end("A", "a", "released", 90),
		acq("B", "b", 5, 100, 100, 200),
	})
	assert.Equal(t, 1, r.FenceViolations)
}

func TestResurrection(t *testing.T) {
	// Renewed at/after the deadline.
	ev := []Event{
		acq("A", "a", 1, 0, 0, 100),
		renew("A", "a", 100, 99, 200),
		end("A", "a", "not_owner", 210),
	}
	ivs, probs := Build(ev)
	require.Len(t, probs, 1)
	assert.Contains(t, probs[0], "resurrection")
	assert.Equal(t, at(100), ivs[0].End) // the late renewal does not extend the belief
	r := Check(ev)
	assert.Equal(t, 1, r.RenewAfterDeadline)
	assert.False(t, r.Safe())

	// Renewed after ended (before D).
	r = Check([]Event{
		acq("A", "a", 1, 0, 0, 100),
		end("A", "a", "released", 40),
		renew("A", "a", 50, 45, 150),
	})
	assert.Equal(t, 1, r.RenewAfterDeadline)
	assert.Contains(t, r.Problems[0], "renewed after ended")

	// Acquired again after ended.
	r = Check([]Event{
		acq("A", "a", 1, 0, 0, 100),
		end("A", "a", "released", 40),
		acq("A", "a", 1, 50, 45, 150),
	})
	assert.Equal(t, 1, r.RenewAfterDeadline)
	assert.Equal(t, 1, r.Intervals)
}

func TestRenewWithoutAcquireAndUnknownEnd(t *testing.T) {
	ivs, probs := Build([]Event{renew("A", "x", 10, 10, 110), end("A", "y", "released", 20)})
	assert.Empty(t, ivs)
	require.Len(t, probs, 1)
	assert.Contains(t, probs[0], "renew without acquire")
	r := Check([]Event{renew("A", "x", 10, 10, 110)})
	assert.True(t, r.Safe())
	assert.Len(t, r.Problems, 1)
}

func TestEqualMonoOrder(t *testing.T) {
	// Given in the wrong order at one instant: acquired, renewed, ended.
	ev := []Event{
		end("A", "a", "released", 50),
		renew("A", "a", 50, 49, 150),
		acq("A", "a", 1, 50, 49, 100),
	}
	ivs, probs := Build(ev)
	require.Empty(t, probs)
	require.Equal(t, []Interval{{Who: "A", Token: "a", Fence: 1, Start: at(50), End: at(50), Reason: "released"}}, ivs)
}

func TestAcquiredLate(t *testing.T) {
	r := Check([]Event{
		acq("A", "a", 1, 110, 0, 100),
		acq("B", "b", 2, 115, 114, 200),
	})
	assert.Equal(t, 1, r.AcquiredLate)
	assert.Equal(t, 2, r.Intervals)
	assert.Zero(t, r.Overlaps) // A's interval is empty
	assert.Zero(t, r.FenceViolations)
	assert.False(t, r.Safe())
	require.Len(t, r.Problems, 1)
	assert.Contains(t, r.Problems[0], "acquired late: A token a fence 1")
}

func TestStaleWrite(t *testing.T) {
	r := Check([]Event{
		write(WriteOK, "A", 7, 10),
		write(WriteOK, "B", 5, 20),  // stale
		write(WriteRej, "B", 3, 30), // rejected: never stale
		write(WriteOK, "A", 7, 40),  // equal: fine
		write(WriteOK, "C", 8, 50),
	})
	assert.Equal(t, 1, r.StaleAccepted)
	assert.Equal(t, 4, r.WritesOK)
	assert.Equal(t, 1, r.WritesRejected)
	assert.False(t, r.Safe())
	require.Len(t, r.Problems, 1)
	assert.Equal(t, "stale write accepted: B fence 5 at 10.000ms, after fence 7 accepted at 0.000ms", r.Problems[0])
}

func TestReleaseBeforeDeadline(t *testing.T) {
	r := Check([]Event{
		acq("A", "a", 1, 0, 0, 100),
		end("A", "a", "released", 50), // release start, before D
		acq("B", "b", 2, 60, 59, 160), // after the release, before A's D
		end("B", "b", "released", 100),
	})
	assert.True(t, r.Safe())
	assert.Zero(t, r.Overlaps)
	assert.Equal(t, 10.0, r.MaxGapMs)
	assert.Equal(t, 10.0, r.MinMarginMs)
	assert.Zero(t, r.MaxSignalLateMs)
}

func TestProblemsCapped(t *testing.T) {
	var ev []Event
	for i := range 80 {
		ev = append(ev, renew("A", "x", float64(i), 0, 0))
	}
	r := Check(ev)
	require.Len(t, r.Problems, maxProblems)
	assert.Equal(t, "... and 31 more problems", r.Problems[maxProblems-1])
}

func TestEncodeDecode(t *testing.T) {
	in := []Event{
		acq("A", "a", 1, 0, 0, 100),
		renew("A", "a", 50, 49, 150),
		end("A", "a", "expired", 151),
		write(WriteOK, "A", 1, 20),
		{Mono: at(5), Who: "nemesis", Kind: FaultOn, Reason: "partition"},
	}
	var buf bytes.Buffer
	w := NewWriter(&buf)
	var wg sync.WaitGroup
	for _, e := range in[:3] {
		w.Add(e)
	}
	buf.WriteString("=== RUN   TestChild\n")
	buf.WriteString("{not json\n")
	buf.WriteString("   \n")
	buf.WriteString(`{"Action":"output"}` + "\n")
	require.NoError(t, Encode(&buf, in[3]))
	buf.WriteString("--- PASS: TestChild (0.00s)\n")
	require.NoError(t, Encode(&buf, in[4]))
	buf.WriteString(`{"mono":12,"kind":"acq`) // cut short, no newline
	require.NoError(t, w.Err())

	var out []Event
	require.NoError(t, Decode(&buf, func(e Event) { out = append(out, e) }))
	assert.Equal(t, in, out)

	// Concurrent writers produce whole lines.
	buf.Reset()
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 100 {
				w.Add(Event{Mono: int64(i*1000 + j), Who: "w", Kind: WriteOK, Fence: int64(j)})
			}
		}()
	}
	wg.Wait()
	n := 0
	require.NoError(t, Decode(&buf, func(Event) { n++ }))
	assert.Equal(t, 800, n)
}

func TestClock(t *testing.T) {
	now := Now()
	m := Mono(time.Now())
	assert.Less(t, math.Abs(float64(m-now)), float64(time.Millisecond))
	assert.Greater(t, now, int64(0))
	later := time.Now().Add(time.Second)
	assert.InDelta(t, float64(Now()+int64(time.Second)), float64(Mono(later)), float64(time.Millisecond))

	// Conversions are exact and do not depend on when they run: the
	// difference of two converted times is the difference of the times,
	// and converting the same time twice, far apart, gives one value.
	t1 := time.Now()
	t2 := t1.Add(1234567 * time.Nanosecond)
	m1 := Mono(t1)
	assert.Equal(t, int64(1234567), Mono(t2)-m1)
	runtime.Gosched()
	assert.Equal(t, m1, Mono(t1))
	// And Mono(now) lies within two raw readings around it, give or take
	// the anchor's precision (a microsecond).
	before := Now()
	m = Mono(time.Now())
	after := Now()
	assert.GreaterOrEqual(t, m, before-int64(time.Microsecond))
	assert.LessOrEqual(t, m, after+int64(time.Microsecond))
}

func TestRecorder(t *testing.T) {
	var r Recorder
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 50 {
				r.Add(Event{Mono: int64(200 - j), Who: string(rune('A' + i)), Kind: WriteOK})
			}
		}()
	}
	wg.Wait()
	ev := r.Events()
	require.Len(t, ev, 200)
	for i := 1; i < len(ev); i++ {
		require.LessOrEqual(t, ev[i-1].Mono, ev[i].Mono)
	}
	ev[0].Who = "changed"
	assert.NotEqual(t, "changed", r.Events()[0].Who)
}

func TestLine(t *testing.T) {
	r := Report{
		Intervals: 3, Overlaps: 1, FenceViolations: 2, StaleAccepted: 4, RenewAfterDeadline: 5, AcquiredLate: 6,
		MaxGapMs: 12.34, MaxSignalLateMs: 0.26, MinMarginMs: math.NaN(),
	}
	assert.Equal(t, "SCENARIO S1 FAIL overlaps=1 fence_violations=2 stale_accepted=4 max_gap_ms=12.3 max_signal_late_ms=0.3 intervals=3 renew_after_deadline=5 acquired_late=6 min_margin_ms=-", r.Line("S1", false))
	r.MinMarginMs = 7
	assert.True(t, strings.HasPrefix(r.Line("x", true), "SCENARIO x pass overlaps=1 "))
	assert.True(t, strings.HasSuffix(r.Line("x", true), " min_margin_ms=7.0"))
}

func TestReportJSON(t *testing.T) {
	r := Check([]Event{acq("A", "a", 1, 0, 0, 100)})
	b, err := json.Marshal(r)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	assert.NotContains(t, m, "min_margin_ms")
	assert.Equal(t, 1.0, m["intervals"])
	assert.Equal(t, 0.0, m["max_gap_ms"])
}
