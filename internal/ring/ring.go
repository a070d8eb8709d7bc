// Package ring spreads a session's renewals over its renew interval: the
// slots of the held locks' renewals (Ring) and the rounds that walk them
// (Schedule), with no session and no I/O.
package ring

import (
	"maps"
	"math/bits"
	"slices"
	"time"
)

// A Ring spreads a session's renewals over its renew interval, so that a
// session holding many locks never sends Redis all their renewals at once:
// other clients wait behind a slice at most. Each held lock has a slot,
// fixed while it is held; slot i is renewed at offset i·gap of each round.
// A slot takes SliceMax locks before the next one opens (or, once every
// slot is that full, the least loaded takes the next), so a session holding
// up to SliceMax locks renews them all in one round trip per interval, at
// offset 0. Slots open in bit-reversed order (0, n/2, n/4, 3n/4, …), which
// spreads any number of open slots evenly over the first half of the
// interval; the second half is left to the clean-up of stale tokens.
//
// The ring knows nothing of locks or sessions (K is *Lock in a session);
// its user guards it (Session.mu).
type Ring[K comparable] struct {
	slots []map[K]struct{} // slot i's members
	order []int            // the order in which slots open
	gap   time.Duration    // between two slots' offsets
}

const (
	// SliceMax is how many renewals a slot takes before the next one
	// opens: about 14 KB of requests, under the 16 KB that Redis reads
	// from one client at a time (PROTO_IOBUF_LEN) before it serves others.
	SliceMax = 100
	// slotsMax bounds a ring's slots (the heartbeat scans them each round),
	// and gapMin the time between two slots' offsets.
	slotsMax = 1024
	gapMin   = 500 * time.Microsecond
)

// New returns the ring of a renew interval: as many slots (a power of
// two, up to slotsMax) as fit gapMin apart in half the interval.
func New[K comparable](interval time.Duration) Ring[K] {
	k := 0
	for 2<<k <= slotsMax && time.Duration(2<<k)*gapMin <= interval/2 {
		k++
	}
	n := 1 << k
	r := Ring[K]{slots: make([]map[K]struct{}, n), order: make([]int, n), gap: interval / 2 / time.Duration(n)}
	for i := range n {
		r.order[i] = int(bits.Reverse(uint(i)) >> (bits.UintSize - k))
	}
	return r
}

// Gap is the time between two slots' offsets.
func (r *Ring[K]) Gap() time.Duration { return r.gap }

// Span is the part of a round over which the slots' offsets lie.
func (r *Ring[K]) Span() time.Duration { return time.Duration(len(r.slots)) * r.gap }

// Offset is slot i's offset from a round's start.
func (r *Ring[K]) Offset(i int) time.Duration { return time.Duration(i) * r.gap }

// Add gives k a slot (see Ring) and returns it.
func (r *Ring[K]) Add(k K) (slot int) {
	pick := -1
	for _, i := range r.order {
		if len(r.slots[i]) < SliceMax {
			pick = i
			break
		}
		if pick < 0 || len(r.slots[i]) < len(r.slots[pick]) {
			pick = i
		}
	}
	if r.slots[pick] == nil {
		r.slots[pick] = make(map[K]struct{})
	}
	r.slots[pick][k] = struct{}{}
	return pick
}

// Remove takes k out of slot, the one Add returned.
func (r *Ring[K]) Remove(k K, slot int) { delete(r.slots[slot], k) }

// Next returns the first occupied slot at or after from, or -1.
func (r *Ring[K]) Next(from int) int {
	for i := from; i < len(r.slots); i++ {
		if len(r.slots[i]) > 0 {
			return i
		}
	}
	return -1
}

// Members returns slot i's members.
func (r *Ring[K]) Members(i int) []K { return slices.Collect(maps.Keys(r.slots[i])) }

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
// The heartbeat runs the schedule (the root's heartbeat.go), asking it once
// each time its timer fires what to do then (Turn); its user guards the ring
// it reads (Session.mu), not the schedule, which is the heartbeat
// goroutine's alone.
type Schedule[K comparable] struct {
	T        *time.Timer   // the heartbeat's
	Interval time.Duration // the renew interval: a round starts this long after the one before
	Active   bool          // a round is under way (else the heartbeat is idle)
	Base     time.Time     // the round's start: slot i is due at Base + i·gap
	Next     int           // the round's first slot not yet renewed
	Held     int           // live locks the round's slices renewed (or tried to)
	Failed   bool          // a slice of the round failed
	LastDue  time.Time     // the due time and end of the round's last slice
	LastEnd  time.Time
	Retries  []Retry[K] // failed slices, in the order they are due again
}

// A Retry is a failed slice's members, to be renewed again At (unless
// their slot's turn comes first).
type Retry[K comparable] struct {
	At      time.Time
	Slot    int
	Members []K
}

// A Turn is what a heartbeat does when its timer fires (Schedule.Turn):
// renew Members, the locks of Slot (a slice, or a failed slice's retry),
// or end the round (End: the next round has begun), or nothing yet (Slot
// -1, not End); then it asks again At, or when a retry is due if sooner.
type Turn[K comparable] struct {
	Slot    int  // the slot whose locks to renew now, or -1
	Members []K  // its locks
	Retry   bool // the slice is a failed one's retry, not the slot's turn
	End     bool // the round ended, and the next one has begun
	Idle    bool // End, and the round renewed nothing and no retry waits
	Failed  bool // End, and a slice of the round failed
	// At is when to ask again: when the next occupied slot is due or the
	// round's span ends; after End, when the new round's first slice is
	// due (its start if no slot is occupied), which is also as long as the
	// clean-up of stale tokens may take.
	At time.Time
}

// Turn is what is due at now, in this order: a failed slice's retry, the
// round's next occupied slot of r, or the round's end, which begins the
// next round (NextRound; stale: tokens wait for the clean-up). A slice
// drops its slot's retries: it supersedes them. The heartbeat sets LastEnd
// once a slot's slice (not a retry) has ended.
func (sc *Schedule[K]) Turn(r *Ring[K], now time.Time, stale bool) Turn[K] {
	t := Turn[K]{Slot: -1}
	slot, at := sc.NextSlot(r)
	switch {
	case len(sc.Retries) > 0 && !sc.Retries[0].At.After(now):
		t.Slot, t.Members, t.Retry = sc.Retries[0].Slot, sc.Retries[0].Members, true
		sc.Retries = sc.Retries[1:]
	case at.After(now):
		t.At = at
		return t
	case slot >= 0:
		sc.Next, sc.LastDue = slot+1, at
		t.Slot, t.Members = slot, r.Members(slot)
	default:
		next, first := sc.NextRound(r, sc.Interval, stale)
		t.End, t.Idle, t.Failed, t.At = true, sc.Held == 0 && len(sc.Retries) == 0, sc.Failed, first
		sc.Begin(next, 0)
		return t
	}
	sc.Retries = slices.DeleteFunc(sc.Retries, func(q Retry[K]) bool { return q.Slot == t.Slot })
	_, t.At = sc.NextSlot(r)
	return t
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
