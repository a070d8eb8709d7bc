package redisleader

import (
	"context"
	"maps"
	"slices"
	"time"
)

// staleTokens are the ended locks whose tokens may still be in Redis, which
// the heartbeat deletes at the end of its rounds (cleanStale). Session.mu
// guards it.
type staleTokens map[*Lock]staleness

// staleness says how the heartbeat cleans up an ended lock's token.
type staleness struct {
	until  time.Time // stop trying then: the token must have expired
	repeat bool      // a request of ours may still set the key: keep deleting until then
}

// mark records l's token until then at least, repeated if either mark
// says so.
func (st staleTokens) mark(l *Lock, until time.Time, repeat bool) {
	prev := st[l]
	if prev.until.After(until) {
		until = prev.until
	}
	st[l] = staleness{until: until, repeat: repeat || prev.repeat}
}

// sweep forgets the locks whose deletes are done: done(i) reports
// whether locks[i]'s delete needs no retry. A lock is forgotten once its
// delete succeeded (unless repeated), or once its token must have expired
// by now anyway.
func (st staleTokens) sweep(locks []*Lock, done func(i int) bool, now time.Time) {
	for i, l := range locks {
		if s := st[l]; (done(i) && !s.repeat) || now.After(s.until) {
			delete(st, l)
		}
	}
}

// markStale hands an ended lock to the heartbeat for a best-effort delete:
// a renewal that reached Redis but whose reply came after the deadline (or
// never came) may have left our token there for up to another TTL, and so
// may a release whose outcome is unknown. The heartbeat tries until the
// delete succeeds or the token must have expired (two TTLs after the lock's
// deadline or now, whichever is later). With repeat (an abandoned acquire:
// an attempt still on its way to Redis can set the key after any delete),
// it keeps deleting until then.
func (s *Session) markStale(l *Lock, repeat bool) {
	until := time.Now()
	if d := l.Deadline(); d.After(until) {
		until = d
	}
	until = until.Add(2 * s.cfg.TTL)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.hb.stale.mark(l, until, repeat)
		s.hb.wake()
	}
}

// staleLocks returns the ended locks whose tokens wait for cleanStale.
func (s *Session) staleLocks() []*Lock {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Keys(s.hb.stale))
}

// cleanStale deletes the keys of locks, ended (staleLocks), if they still
// hold their tokens (compare-and-delete, so it never touches anyone
// else's), giving up at deadline.
func (s *Session) cleanStale(ctx context.Context, locks []*Lock, deadline time.Time) {
	if len(locks) == 0 {
		return
	}
	outcomes := s.place.ReleaseAll(ctx, endings(locks), deadline)
	now := time.Now()
	s.mu.Lock()
	s.hb.stale.sweep(locks, func(i int) bool { return !outcomes[i].Retry }, now)
	s.mu.Unlock()
}
