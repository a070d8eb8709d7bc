package redisleader

import (
	"context"
	"time"

	"github.com/redisleader/redisleader/internal/lease"
	"github.com/redisleader/redisleader/internal/probe"
	"github.com/redisleader/redisleader/internal/ring"
	"github.com/redisleader/redisleader/internal/stale"
	"github.com/redisleader/redisleader/internal/wire"
)

// heartbeat is the session's one goroutine. It sleeps while nothing is held;
// otherwise it renews every held lock once each renew interval, in slices
// spread over the interval (internal/ring: Ring), on a schedule (Schedule)
// that a slice's duration does not shift, and retries a slice that failed
// after a jittered retry delay. It never decides that a lock is lost by itself except on a "not
// owner" reply: deadlines are timer-driven.
//
// After a hook fault (internal/wire/hookfaults.go) in a slice or in the server check, a
// new heartbeat takes over as after a failed slice: it starts a round after
// the retry delay, and checks the server once per session all the same.
func (s *Session) heartbeat(ctx context.Context, retry bool) {
	wire.OnUnwind(func() {
		s.beat(ctx, retry)
		close(s.hb.done)
	}, func() {
		if ctx.Err() == nil {
			go s.heartbeat(ctx, true)
			return
		}
		close(s.hb.done)
	})
}

// heartbeatState is what the session keeps for its heartbeat. Session.mu
// guards ring, joined, left, stale and idle.
//
// Only the heartbeat touches the ring: an acquired lock joins (joined, slot
// -1) and a released one leaves (left) on their own goroutines, and the
// heartbeat gives and takes their slots (settle) whenever it reads the
// ring, so that it reads the ring as if they had at once.
type heartbeatState struct {
	ring    ring.Ring[*Lock]    // the slots of the held locks' renewals (internal/ring)
	joined  []*Lock             // held locks without a slot yet
	left    []*Lock             // ended locks still in their slot
	stale   stale.Tokens[*Lock] // ended locks whose token may still be in Redis (stale.go)
	idle    bool                // the heartbeat sleeps until kicked
	kick    chan struct{}       // capacity 1: work was added while idle
	cancel  context.CancelFunc  // stops the heartbeat
	done    chan struct{}       // closed when the heartbeat goroutine has returned
	checked bool                // the server check has run; the heartbeat's alone
}

// newHeartbeatState returns the state of an idle heartbeat renewing every
// interval.
func newHeartbeatState(interval time.Duration, cancel context.CancelFunc) heartbeatState {
	return heartbeatState{
		ring:   ring.New[*Lock](interval),
		stale:  make(stale.Tokens[*Lock]),
		idle:   true,
		kick:   make(chan struct{}, 1),
		cancel: cancel,
		done:   make(chan struct{}),
	}
}

// beat runs rounds until ctx ends; with retry, the first one after the
// retry delay.
func (s *Session) beat(ctx context.Context, retry bool) {
	sc := ring.Schedule[*Lock]{T: time.NewTimer(time.Hour), Interval: s.cfg.RenewInterval}
	sc.T.Stop()
	defer sc.T.Stop()
	if retry {
		sc.Begin(time.Now().Add(min(s.cfg.RenewInterval, s.cfg.RetryDelay())), 0)
	}
	for {
		if sc.Active {
			s.step(ctx, &sc)
		}
		select {
		case <-ctx.Done():
			return
		case <-s.hb.kick:
			if !sc.Active {
				// The round the held locks' leases began in: its slots
				// due by now hold only fresh leases, renewed next round.
				from := s.leasesFrom()
				sc.Begin(from, int(time.Since(from)/s.hb.ring.Gap())+1)
			}
			if !s.hb.checked { // the first time the session holds something
				s.hb.checked = true
				s.checkServer(ctx)
			}
		case <-sc.T.C:
		}
	}
}

// step takes the schedule's turn (ring.Schedule.Turn, asked once each time
// the timer fires: a retry of a failed slice, a slot's slice, or the
// round's end), then arms the timer for the next, unless the heartbeat
// goes idle or the session closes. Whether stale tokens wait is read here,
// under Session.mu; the clean-up (stale.go) runs only then.
func (s *Session) step(ctx context.Context, sc *ring.Schedule[*Lock]) {
	if ctx.Err() != nil {
		return // closing: no turn, and the timer stays unarmed
	}
	s.mu.Lock()
	s.hb.settle()
	stale := len(s.hb.stale) > 0
	t := sc.Turn(&s.hb.ring, time.Now(), stale)
	s.mu.Unlock()
	switch {
	case t.Slot >= 0:
		s.slice(ctx, sc, t.Slot, t.Members)
		if !t.Retry {
			sc.LastEnd = time.Now()
		}
	case t.End && !s.endRound(ctx, sc, t, stale):
		return // idle
	}
	at := t.At
	if len(sc.Retries) > 0 && sc.Retries[0].At.Before(at) {
		at = sc.Retries[0].At
	}
	sc.T.Reset(time.Until(at))
}

// slice renews locks, of slot, in one round trip. A failed renewal is
// retried after the retry delay, or with the slot's next turn if that comes
// first (ring.Schedule.Turn drops the slot's retries then).
func (s *Session) slice(ctx context.Context, sc *ring.Schedule[*Lock], slot int, locks []*Lock) {
	start := time.Now()
	held, failed := s.renewSlice(ctx, locks)
	s.cfg.hooks.round(start, held, len(failed))
	sc.Held += held
	if len(failed) > 0 {
		sc.Failed = true
		sc.Retry(time.Now().Add(min(s.cfg.RenewInterval, s.cfg.RetryDelay())), slot, failed)
	}
	if held > 0 && s.cfg.test.round != nil {
		s.cfg.test.round(held, len(failed) > 0)
	}
}

// round reports to the user's Hooks a renewal round trip (a slice) that
// started at start (hooks.go has the other events).
func (h *Hooks) round(start time.Time, locks, failures int) {
	if h.RenewalRound != nil && locks > 0 {
		h.RenewalRound(RenewalEvent{Duration: time.Since(start), Locks: locks, Failures: failures})
	}
}

// endRound ends a round, t (ring.Schedule.Turn has begun the next): when
// stale tokens wait, it deletes them (stale.go), unless renewals are
// failing (never delay a retry), until the next round's first slice is due
// (nor the next round: the TTL rules do not count the clean-up). It
// reports whether the heartbeat goes on, or went idle instead.
func (s *Session) endRound(ctx context.Context, sc *ring.Schedule[*Lock], t ring.Turn[*Lock], stale bool) (going bool) {
	if stale {
		if len(sc.Retries) == 0 {
			s.cleanStale(ctx, t.At)
		}
		if s.cfg.test.round != nil {
			s.cfg.test.round(0, t.Failed)
		}
	}
	if t.Idle && s.goIdle() {
		sc.Active = false
		return false
	}
	return true
}

// settle gives each joined lock its slot and takes each lock that left out
// of its slot. Session.mu must be held.
func (h *heartbeatState) settle() {
	for _, l := range h.left {
		h.ring.Remove(l, l.slot)
	}
	for _, l := range h.joined {
		l.slot = h.ring.Add(l)
	}
	clear(h.left)
	clear(h.joined)
	h.left, h.joined = h.left[:0], h.joined[:0]
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
// clean up, so that the next add kicks it; it reports whether it did. Locks
// that joined meanwhile get their slots first: they are held.
func (s *Session) goIdle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hb.settle()
	if len(s.reg.locks) > 0 || len(s.hb.stale) > 0 {
		return false
	}
	s.hb.idle = true
	return true
}

// renewSlice renews locks in one round trip (on a Cluster, one per master,
// concurrently: a silent master fails only its own locks' renewals; see
// wire.RunCalls) and reports how many were still held and which renewals
// failed with an error (to be retried). The slice's context ends at the
// earliest of their local deadlines, and each lease renewed runs from the
// slice's send time.
func (s *Session) renewSlice(ctx context.Context, locks []*Lock) (held int, failed []*Lock) {
	sent := time.Now()
	earliest := time.Time{}
	live, leases := locks[:0], make([]*lease.Lease, 0, len(locks))
	for _, l := range locks {
		d, ok := l.liveDeadline(sent)
		if !ok {
			continue // its timer ends it; never renew past the deadline
		}
		if earliest.IsZero() || d.Before(earliest) {
			earliest = d
		}
		live, leases = append(live, l), append(leases, &l.lease)
	}
	if len(live) == 0 {
		return 0, nil
	}
	outcomes := s.place.Renew(ctx, leases, earliest)
	if ctx.Err() != nil {
		return len(live), nil // closing
	}
	for i, r := range outcomes {
		l := live[i]
		switch {
		case r.Err != nil:
			failed = append(failed, l)
			if left := time.Until(l.Deadline()); left > 0 {
				s.cfg.logger.Warn("redisleader: renewal failed; retrying until the local deadline",
					"name", l.lease.Keys.Name, "fence", l.lease.Fence, "deadline_in", left, "err", r.Err)
			}
		case r.Lost:
			l.lose(ErrNotOwner)
		default:
			l.extend(sent)
			if r.Better != "" {
				l.preferred()
			}
		}
	}
	return len(live), failed
}

// liveDeadline returns the deadline if the lock is still held at now.
func (l *Lock) liveDeadline(now time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline, l.err == nil && now.Before(l.deadline)
}

// extend moves the deadline after a successful renewal sent at sent. A reply
// that arrives after the deadline is ignored: ownership never resurrects.
// Its events (renewed, ignored) go to the probe alone: emitLocked (lock.go,
// the one emit point) runs only when a probe listens.
func (l *Lock) extend(sent time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	live := l.err == nil && now.Before(l.deadline)
	if d := sent.Add(l.s.cfg.Validity); live && d.After(l.deadline) {
		l.deadline, l.renewed = d, sent
	}
	if l.delivered && probe.Hook.Load() != nil {
		kind := probe.Ignored
		if live {
			kind = probe.Renewed
		}
		l.emitLocked(kind, now, 0)
	}
}
