package redisleader

import (
	"maps"
	"math/bits"
	"slices"
	"time"
)

// registry.go: what a session holds and waits for, and how a lock joins
// and leaves it: Session.add registers a lock, gives it its slot in the
// heartbeat's ring (below) and wakes the heartbeat, all under Session.mu.

// registry is what a session holds and waits for: the held locks (by
// identity and by name), the leaderships Election.Run releases itself, and
// the fair acquisitions that may have a place in a queue. Session.mu
// guards it.
type registry struct {
	locks   map[*Lock]struct{}
	names   map[string]*Lock     // the held lock of each name in locks
	terms   map[*Lock]*term      // leaderships Election.Run releases itself (run.go)
	waiting map[*waiter]struct{} // fair acquisitions that may have a place in a queue (fair.go)
}

func newRegistry() registry {
	return registry{
		locks:   make(map[*Lock]struct{}),
		names:   make(map[string]*Lock),
		terms:   make(map[*Lock]*term),
		waiting: make(map[*waiter]struct{}),
	}
}

// hold registers l as held, its name's lock, unless its protocol shares
// the name (a semaphore's permit is one of several: lease.PermitProtocol).
func (r *registry) hold(l *Lock) {
	r.locks[l] = struct{}{}
	if _, shared := l.lease.Proto.(interface{ Shared() }); !shared {
		r.names[l.lease.Keys.Name] = l
	}
}

// drop forgets l, and reports whether it was held.
func (r *registry) drop(l *Lock) (held bool) {
	_, held = r.locks[l]
	delete(r.locks, l)
	if r.names[l.lease.Keys.Name] == l {
		delete(r.names, l.lease.Keys.Name)
	}
	return held
}

// add registers an acquired lock with the heartbeat and wakes the session's
// fair waiters for its name, which end with ErrLocked (a session never waits
// for itself; default-mode waiters hear the acquire's own message). It fails
// when the session was closed meanwhile; the caller then releases the key.
func (s *Session) add(l *Lock) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	s.reg.hold(l)
	l.slot = s.hb.ring.add(l)
	s.hb.wake()
	s.wakeWaitersLocked(l.lease.Keys.Name)
	return nil
}

// wakeWaitersLocked wakes the session's queued waiters for name, which has
// just become the session's: they find it held by their next look and end
// (a session never waits for itself). A waiter not yet registered makes
// that check after it registers. s.mu must be held.
func (s *Session) wakeWaitersLocked(name string) {
	for w := range s.reg.waiting {
		if w.keys.Name == name && w.sub != nil {
			w.sub.Poke()
		}
	}
}

func (s *Session) remove(l *Lock) {
	s.mu.Lock()
	if s.reg.drop(l) {
		s.hb.ring.remove(l, l.slot)
	}
	s.mu.Unlock()
}

// wake kicks the heartbeat if it is idle. Session.mu must be held.
func (h *heartbeatState) wake() {
	if h.idle {
		h.idle = false
		select {
		case h.kick <- struct{}{}:
		default:
		}
	}
}

// The ring spreads a session's renewals over its renew interval, so that a
// session holding many locks never sends Redis all their renewals at once:
// other clients wait behind a slice at most. Each held lock has a slot,
// fixed while it is held; slot i is renewed at offset i·gap of each round.
// A slot takes sliceMax locks before the next one opens (or, once every
// slot is that full, the least loaded takes the next), so a session holding
// up to sliceMax locks renews them all in one round trip per interval, at
// offset 0. Slots open in bit-reversed order (0, n/2, n/4, 3n/4, …), which
// spreads any number of open slots evenly over the first half of the
// interval; the second half is left to the clean-up of stale tokens.
//
// The ring knows nothing of locks or sessions (K is *Lock in a session);
// its user guards it (Session.mu).
type ring[K comparable] struct {
	slots []map[K]struct{} // slot i's members
	order []int            // the order in which slots open
	gap   time.Duration    // between two slots' offsets
}

const (
	// sliceMax is how many renewals a slot takes before the next one
	// opens: about 14 KB of requests, under the 16 KB that Redis reads
	// from one client at a time (PROTO_IOBUF_LEN) before it serves others.
	sliceMax = 100
	// slotsMax bounds a ring's slots (the heartbeat scans them each round),
	// and gapMin the time between two slots' offsets.
	slotsMax = 1024
	gapMin   = 500 * time.Microsecond
)

// newRing returns the ring of a renew interval: as many slots (a power of
// two, up to slotsMax) as fit gapMin apart in half the interval.
func newRing[K comparable](interval time.Duration) ring[K] {
	k := 0
	for 2<<k <= slotsMax && time.Duration(2<<k)*gapMin <= interval/2 {
		k++
	}
	n := 1 << k
	r := ring[K]{slots: make([]map[K]struct{}, n), order: make([]int, n), gap: interval / 2 / time.Duration(n)}
	for i := range n {
		r.order[i] = int(bits.Reverse(uint(i)) >> (bits.UintSize - k))
	}
	return r
}

// span is the part of a round over which the slots' offsets lie.
func (r *ring[K]) span() time.Duration { return time.Duration(len(r.slots)) * r.gap }

// offset is slot i's offset from a round's start.
func (r *ring[K]) offset(i int) time.Duration { return time.Duration(i) * r.gap }

// add gives k a slot (see ring) and returns it.
func (r *ring[K]) add(k K) (slot int) {
	pick := -1
	for _, i := range r.order {
		if len(r.slots[i]) < sliceMax {
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

// remove takes k out of slot, the one add returned.
func (r *ring[K]) remove(k K, slot int) { delete(r.slots[slot], k) }

// next returns the first occupied slot at or after from, or -1.
func (r *ring[K]) next(from int) int {
	for i := from; i < len(r.slots); i++ {
		if len(r.slots[i]) > 0 {
			return i
		}
	}
	return -1
}

// members returns slot i's members.
func (r *ring[K]) members(i int) []K { return slices.Collect(maps.Keys(r.slots[i])) }
