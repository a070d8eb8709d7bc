package redisleader

import (
	"context"
	"maps"
	"slices"
	"time"
)

// stale.go: the ended locks whose tokens may still be in Redis, which the
// heartbeat deletes at the end of its rounds when any wait (cleanStale);
// their record, s.hb.stale, is a stale.Tokens (internal/stale), guarded by
// Session.mu.

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
		s.hb.stale.Mark(l, until, repeat)
		s.hb.wake()
	}
}

// cleanStale deletes the keys of the ended locks that wait for it
// (markStale), if they still hold their tokens (compare-and-delete, so it
// never touches anyone else's), giving up at deadline.
func (s *Session) cleanStale(ctx context.Context, deadline time.Time) {
	s.mu.Lock()
	locks := slices.Collect(maps.Keys(s.hb.stale))
	s.mu.Unlock()
	if len(locks) == 0 {
		return
	}
	outcomes := s.place.ReleaseAll(ctx, endings(locks), deadline)
	now := time.Now()
	s.mu.Lock()
	s.hb.stale.Sweep(locks, func(i int) bool { return !outcomes[i].Retry }, now)
	s.mu.Unlock()
}
