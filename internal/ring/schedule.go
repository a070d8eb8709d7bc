package ring

import (
	"slices"
	"time"
)

// A Schedule is a heartbeat's rounds. A round renews every held lock once: it walks the ring's slots, renewing
// each occupied slot's locks in one pipelined round trip (a slice) at the
// slot's offset from the round's start, and ends once every slot's offset
// has passed and its last slice has ended, with the clean-up of stale
// tokens. The next round starts a renew interval after this one started,
// whatever its slices took, so that each lock is renewed every interval
// exactly and each slice's leases run from its own send time: a waiter that
// sleeps until a lease it saw can have expired never arrives just before
// the renewal due then. But it starts later by as much as the round's last
// slice ended late (as the TTL rules count a round that overran) when it
// overran the next round's first slice, or when stale tokens wait for the
// clean-up, which then gets a whole interval after that slice.
//
// The heartbeat runs the schedule (the root's heartbeat.go); its user guards
// the ring it reads (Session.mu), not the schedule, which is the heartbeat
// goroutine's alone.
type Schedule[K comparable] struct {
	T       *time.Timer // the heartbeat's
	Active  bool        // a round is under way (else the heartbeat is idle)
	Base    time.Time   // the round's start: slot i is due at Base + i·gap
	Next    int         // the round's first slot not yet renewed
	Held    int         // live locks the round's slices renewed (or tried to)
	Failed  bool        // a slice of the round failed
	LastDue time.Time   // the due time and end of the round's last slice
	LastEnd time.Time
	Retries []Retry[K] // failed slices, in the order they are due again
}

// A Retry is a failed slice's members, to be renewed again At (unless
// their slot's turn comes first).
type Retry[K comparable] struct {
	At      time.Time
	Slot    int
	Members []K
}

// Begin starts a round at base, whose slots before next are passed.
func (sc *Schedule[K]) Begin(base time.Time, next int) {
	sc.Active, sc.Base, sc.Next, sc.Held, sc.Failed = true, base, next, 0, false
	sc.LastDue, sc.LastEnd = base, base
}

// Retry queues the members of slot, whose slice failed, to be renewed again
// at at, in the order the retries are due.
func (sc *Schedule[K]) Retry(at time.Time, slot int, members []K) {
	i, _ := slices.BinarySearchFunc(sc.Retries, at, func(r Retry[K], at time.Time) int { return r.At.Compare(at) })
	sc.Retries = slices.Insert(sc.Retries, i, Retry[K]{at, slot, members})
}

// NextSlot returns the round's next occupied slot of r and when it is due,
// or -1 and the end of the round's span (the round ends then, or once its
// last slice has ended, if later).
func (sc *Schedule[K]) NextSlot(r *Ring[K]) (int, time.Time) {
	if i := r.Next(sc.Next); i >= 0 {
		return i, sc.Base.Add(r.Offset(i))
	}
	return -1, sc.Base.Add(r.Span())
}

// NextRound is when the round after this one starts (next), a renew
// interval after this one started, and when its first occupied slot of r is
// due (first): both later by as much as this round's last slice ended late
// when it overran first, or when stale tokens wait for the clean-up
// (stale), and later still by as much as next's round is already a whole
// round late (a stalled heartbeat). It reads the clock.
func (sc *Schedule[K]) NextRound(r *Ring[K], interval time.Duration, stale bool) (next, first time.Time) {
	next = sc.Base.Add(interval)
	first = next
	if i := r.Next(0); i >= 0 {
		first = next.Add(r.Offset(i))
	}
	now := time.Now()
	if late := sc.LastEnd.Sub(sc.LastDue); late > 0 && (stale || first.Before(now)) {
		next, first = next.Add(late), first.Add(late)
	}
	if behind := now.Sub(next.Add(r.Span())); behind > 0 {
		next, first = next.Add(behind), first.Add(behind)
	}
	return next, first
}
