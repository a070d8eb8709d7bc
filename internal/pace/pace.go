// Package pace computes how long an acquisition waits between its attempts:
// pure arithmetic on durations and the clock, with no session and no I/O.
// The root's acquisition.delay decides which wait applies; pace says how
// long it is.
package pace

import (
	mrand "math/rand/v2"
	"time"
)

// Follow is how long a waiter sleeps after finding the name held with left
// to go on the holder's lease (negative: the key has no TTL): until that
// lease can have expired, plus 1–2ms (PTTL is in whole milliseconds and
// Redis expires a key only once its time has passed; the spread keeps
// waiters from arriving all at once). A release wakes the waiter sooner,
// through its subscription; without a confirmed one (confirmed false), or
// when the key has no TTL, it polls at the retry interval instead: retry
// returns the random retry delay (see the package documentation of
// redisleader, section Waiting).
func Follow(left time.Duration, confirmed bool, retry func() time.Duration) time.Duration {
	if left < 0 {
		return retry()
	}
	d := left + time.Millisecond + mrand.N(time.Millisecond)
	if !confirmed {
		d = min(d, retry())
	}
	return d
}

// Splits counts the Redlock split votes in a row of one acquisition.
type Splits int

// Backoff is the wait after a Redlock split vote short of ErrLocked (the
// nodes that did not answer could have made a quorum either way) by an
// attempt that took took, from its first send to its give-back: retry (the
// random retry delay), plus a random part of a window that starts at two
// such attempts and doubles with each split in a row, up to ttl (binary
// exponential backoff). The contenders of a split each held their nodes for
// about took, so they split again unless their next attempts start further
// apart than that; the retry jitter alone does not part them when attempts
// are long, as when a node that never answers holds each one to the call
// timeout (S21-hung).
func (s *Splits) Backoff(took, ttl, retry time.Duration) time.Duration {
	*s = min(*s+1, 16)
	window := min(took<<*s, ttl)
	return retry + mrand.N(max(window, 0)+1)
}

// KeepPlace shortens a queued fair waiter's wait d so that its next attempt,
// which renews its place, reaches Redis before the place's lease can have
// run out: sent within the lease's local validity less a call timeout
// (within, as a lock's renewal is bounded by its deadline) of kept, when
// the attempt that last renewed the place was sent (zero: none yet). The
// attempts a waiter makes anyway (about one per TTL) keep its place so,
// with no command of its own. Once that moment has passed (the attempts
// since failed), the place may be lost, and the next attempt, whenever it
// comes, joins again at the back.
func KeepPlace(d time.Duration, kept time.Time, within time.Duration) time.Duration {
	if kept.IsZero() {
		return d
	}
	if left := time.Until(kept.Add(within)); left > 0 {
		return min(d, left)
	}
	return d
}
