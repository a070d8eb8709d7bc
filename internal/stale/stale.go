// Package stale records the ended leases whose tokens may still be in
// Redis, until when and whether to keep deleting them: pure bookkeeping for
// the heartbeat's clean-up (no session, no I/O).
package stale

import "time"

// Tokens are the ended leases (K: *Lock in a session) whose tokens may
// still be in Redis, which the heartbeat deletes at the end of its rounds.
// Its user guards it (Session.mu).
type Tokens[K comparable] map[K]Staleness

// Staleness says how the heartbeat cleans up an ended lease's token.
type Staleness struct {
	Until  time.Time // stop trying then: the token must have expired
	Repeat bool      // a request of ours may still set the key: keep deleting until then
}

// Mark records k's token until then at least, repeated if either mark
// says so.
func (st Tokens[K]) Mark(k K, until time.Time, repeat bool) {
	prev := st[k]
	if prev.Until.After(until) {
		until = prev.Until
	}
	st[k] = Staleness{Until: until, Repeat: repeat || prev.Repeat}
}

// Sweep forgets the leases whose deletes are done: done(i) reports
// whether keys[i]'s delete needs no retry. A lease is forgotten once its
// delete succeeded (unless repeated), or once its token must have expired
// by now anyway.
func (st Tokens[K]) Sweep(keys []K, done func(i int) bool, now time.Time) {
	for i, k := range keys {
		if s := st[k]; (done(i) && !s.Repeat) || now.After(s.Until) {
			delete(st, k)
		}
	}
}
