package redisleader

import (
	"context"
	"maps"
	"math/rand/v2"
	"slices"
	"time"
)

// heartbeat is the session's one goroutine. It sleeps while nothing is held;
// otherwise it renews every held key each renew interval, on a schedule that
// a round's duration does not shift (see below), and sooner (after a
// jittered retry delay) when a round failed. It never decides that a lock is
// lost by itself except on a "not owner" reply: deadlines are timer-driven.
//
// After a hook fault (hookfaults.go) in a round or in the server check, a
// new heartbeat takes over as after a failed round: it retries after the
// retry delay, and checks the server once per session all the same.
func (s *Session) heartbeat(ctx context.Context, retry bool) {
	onGoexit(func() {
		s.beat(ctx, retry)
		close(s.hbDone)
	}, func() {
		if ctx.Err() == nil {
			go s.heartbeat(ctx, true)
			return
		}
		close(s.hbDone)
	})
}

// schedule is the heartbeat's timer: whether a round is armed, and when it
// is due.
type schedule struct {
	t     *time.Timer
	armed bool
	due   time.Time
}

func (sc *schedule) arm(at time.Time) {
	sc.due, sc.armed = at, true
	sc.t.Reset(time.Until(at))
}

// beat runs rounds until ctx ends; with retry, the first one after the
// retry delay.
func (s *Session) beat(ctx context.Context, retry bool) {
	sc := schedule{t: time.NewTimer(0)}
	if !sc.t.Stop() {
		<-sc.t.C
	}
	defer sc.t.Stop()
	if retry {
		sc.arm(time.Now().Add(min(s.cfg.renewInterval, s.retryDelay())))
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
			if !sc.armed {
				sc.arm(s.leasesFrom().Add(s.cfg.renewInterval))
			}
			if !s.checked { // the first time the session holds something
				s.checked = true
				s.checkServer(ctx)
			}
			continue
		case <-sc.t.C:
			sc.armed = false
		}
		s.round(ctx, &sc)
	}
}

// round renews every held lock once, cleans stale tokens up and arms the
// next round, unless the heartbeat goes idle.
func (s *Session) round(ctx context.Context, sc *schedule) {
	start := time.Now()
	held, failures := s.renewRound(ctx)
	s.cfg.hooks.round(start, held, failures)
	failed := failures > 0
	// Due an interval after this round was due, not after it ended: a
	// schedule that drifts by each round's duration has a waiter, which
	// sleeps until the lease it saw can have expired, arrive just before
	// the renewal due then, and try again two thirds of a TTL later. But an
	// interval after its end (as the TTL rules count) when the round
	// overran the interval, or when stale tokens wait for the clean-up,
	// which then gets a whole interval.
	stale := s.staleLocks()
	next := sc.due.Add(s.cfg.renewInterval)
	if now := time.Now(); next.Before(now) || len(stale) > 0 {
		next = now.Add(s.cfg.renewInterval)
	}
	if !failed { // not while Redis misbehaves: never delay a renewal retry
		s.cleanStale(ctx, stale, next) // nor the next round: the TTL rules do not count it
	}
	if s.cfg.test.round != nil {
		s.cfg.test.round(held, failed)
	}
	switch {
	case failed:
		sc.arm(time.Now().Add(min(s.cfg.renewInterval, s.retryDelay())))
	case held > 0 || !s.goIdle():
		sc.arm(next)
	}
}

// leasesFrom is when the earliest lease of the held locks was last sent
// (their acquire, on a heartbeat woken from idle), or now if none is held:
// the schedule starts there, not when the heartbeat woke, so that the
// renewal due as a lease would expire lands before its waiters try.
func (s *Session) leasesFrom() time.Time {
	from := time.Now()
	for _, l := range s.held() {
		l.mu.Lock()
		if l.renewed.Before(from) {
			from = l.renewed
		}
		l.mu.Unlock()
	}
	return from
}

// goIdle marks the heartbeat idle if the session has nothing to renew or
// clean up, so that the next add kicks it; it reports whether it did.
func (s *Session) goIdle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.locks) > 0 || len(s.stale) > 0 {
		return false
	}
	s.idle = true
	return true
}

// renewRound renews every held lock in one round trip and reports how
// many locks are still held and how many renewals failed with an error (to
// be retried soon). The round's context ends at the earliest local
// deadline.
func (s *Session) renewRound(ctx context.Context) (held, failed int) {
	locks := s.held()
	if len(locks) == 0 {
		return 0, 0
	}
	sent := time.Now()
	earliest := time.Time{}
	live := locks[:0]
	for _, l := range locks {
		d, ok := l.liveDeadline(sent)
		if !ok {
			continue // its timer ends it; never renew past the deadline
		}
		if earliest.IsZero() || d.Before(earliest) {
			earliest = d
		}
		live = append(live, l)
	}
	if len(live) == 0 {
		return 0, 0
	}
	outcomes := s.place.renew(ctx, live, earliest)
	if ctx.Err() != nil {
		return len(live), 0 // closing
	}
	for i, r := range outcomes {
		l := live[i]
		switch {
		case r.err != nil:
			failed++
			if left := time.Until(l.Deadline()); left > 0 {
				s.cfg.logger.Warn("redisleader: renewal failed; retrying until the local deadline",
					"name", l.keys.name, "fence", l.fence, "deadline_in", left, "err", r.err)
			}
		case r.lost:
			l.lose(ErrNotOwner)
		default:
			l.extend(sent)
		}
	}
	return len(live), failed
}

// staleness says how the heartbeat cleans up an ended lock's token.
type staleness struct {
	until  time.Time // stop trying then: the token must have expired
	repeat bool      // a request of ours may still set the key: keep deleting until then
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
	until = until.Add(2 * s.cfg.ttl)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		prev := s.stale[l]
		if prev.until.After(until) {
			until = prev.until
		}
		s.stale[l] = staleness{until: until, repeat: repeat || prev.repeat}
		s.wakeLocked()
	}
}

// staleLocks returns the ended locks whose tokens wait for cleanStale.
func (s *Session) staleLocks() []*Lock {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Keys(s.stale))
}

// cleanStale deletes the keys of locks, ended (staleLocks), if they still
// hold their tokens (compare-and-delete, so it never touches anyone
// else's), giving up at deadline. A lock is forgotten once the delete
// succeeded, or once its token must have expired on the server anyway.
func (s *Session) cleanStale(ctx context.Context, locks []*Lock, deadline time.Time) {
	if len(locks) == 0 {
		return
	}
	outcomes := s.place.releaseAll(ctx, locks, deadline)
	now := time.Now()
	s.mu.Lock()
	for i, l := range locks {
		st := s.stale[l]
		if (!outcomes[i].retry && !st.repeat) || now.After(st.until) {
			delete(s.stale, l)
		}
	}
	s.mu.Unlock()
}

// retryDelay is the retry interval plus a random jitter in [0, retryJitter].
func (s *Session) retryDelay() time.Duration {
	d := s.cfg.retryInterval
	if j := s.cfg.retryJitter; j > 0 {
		d += rand.N(j + 1)
	}
	return d
}
