// Package history records leader-election events and checks them.
//
// Candidates (goroutines and child processes on one host) record events
// stamped with CLOCK_MONOTONIC nanoseconds ([Now], [Mono]). That clock is
// shared by every process on the host, so histories from several processes
// can be merged and compared directly.
//
// # Belief intervals
//
// Each acquisition has a unique random Token and a fencing token Fence. The
// library computes a local deadline D from the send time of the last
// successful acquire/renew: the candidate may believe it is leader until D,
// and no longer. The belief interval of an acquisition is
//
//	[acquired.Mono, min(latest D, ended.Mono))
//
// The end comes from the computed deadline D, not from when the candidate
// noticed it had lost leadership. A goroutine that is descheduled, or a
// timer that fires late, makes the ended event late, but the interval still
// ends at D, because D is what the library promised (and the library must
// not act as leader after D). Scheduler noise therefore cannot fake an
// overlap; only a real fault can, such as a D computed too late or a lease
// granted to a new leader before the previous leader's D has passed. How
// late the signal came is reported separately (Interval.LateNs,
// Report.MaxSignalLateMs).
//
// [Check] rebuilds the intervals ([Build]) and reports safety violations
// (overlapping intervals, fence regressions, renewals after the deadline,
// acquisitions that arrive after their own deadline, stale writes accepted
// by the fenced resource) and liveness figures (leaderless gaps).
package history

import (
	"sort"
	"sync"
	"time"
)

// Mono converts t, which must carry a monotonic reading taken in this
// process (as from time.Now()), to the CLOCK_MONOTONIC nanosecond scale.
//
// Go's monotonic clock is CLOCK_MONOTONIC shifted by a constant, so one
// anchor (a time.Time and its CLOCK_MONOTONIC reading) converts every time
// of the process exactly. The anchor is taken once, as the tightest of many
// samples. Reading both clocks on every call instead lets a preemption
// between the two readings shift an event by the length of the preemption,
// which made scheduler noise look like sub-millisecond overlaps.
func Mono(t time.Time) int64 {
	a := anchor()
	return a.mono + int64(t.Sub(a.t))
}

// anchor pairs a time.Time with its CLOCK_MONOTONIC reading, to within half
// the narrowest window of 1000 samples (well under a microsecond).
var anchor = sync.OnceValue(func() (a struct {
	t    time.Time
	mono int64
}) {
	best := int64(-1)
	for range 1000 {
		before := Now()
		t := time.Now()
		after := Now()
		if w := after - before; best < 0 || w < best {
			best = w
			a.t, a.mono = t, before+w/2
		}
	}
	return a
})

// Event is one recorded fact. Times are CLOCK_MONOTONIC nanoseconds.
type Event struct {
	Mono     int64  `json:"mono"`               // when it happened
	Who      string `json:"who"`                // candidate id, "resource", "nemesis", "observer"
	Kind     string `json:"kind"`               // see the Kind constants
	Token    string `json:"token,omitempty"`    // acquisition's random token
	Fence    int64  `json:"fence,omitempty"`    // fencing token
	Sent     int64  `json:"sent,omitempty"`     // send time of the acquire/renew
	Deadline int64  `json:"deadline,omitempty"` // local deadline D after acquired/renewed
	Reason   string `json:"reason,omitempty"`   // ended: "released", "not_owner", "expired", "session_closed"; fault: its name
}

// Event kinds.
const (
	Acquired = "acquired"  // Token, Fence, Sent, Deadline; Mono = reply arrival
	Renewed  = "renewed"   // Token, Sent, Deadline (new D); Mono = reply arrival
	Ended    = "ended"     // Token, Reason; Mono = when the library ended the acquisition
	WriteOK  = "write_ok"  // resource accepted a write carrying Fence (Who = writer)
	WriteRej = "write_rej" // resource rejected a write carrying Fence
	FaultOn  = "fault_on"  // Reason = fault name
	FaultOff = "fault_off" // Reason = fault name
)

// Recorder collects events; it is safe for concurrent use. The zero value
// is ready to use.
type Recorder struct {
	mu     sync.Mutex
	events []Event
}

// Add records e.
func (r *Recorder) Add(e Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// Events returns a copy of the recorded events, stably sorted by Mono.
func (r *Recorder) Events() []Event {
	r.mu.Lock()
	out := append([]Event(nil), r.events...)
	r.mu.Unlock()
	sort.SliceStable(out, func(i, j int) bool { return out[i].Mono < out[j].Mono })
	return out
}
