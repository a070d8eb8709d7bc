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
