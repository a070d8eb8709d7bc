package redisleader

import (
	"context"
	"slices"
	"time"

	"github.com/redisleader/redisleader/internal/lease"
	"github.com/redisleader/redisleader/internal/wire"
)

// heartbeat is the session's one goroutine. It sleeps while nothing is held;
// otherwise it renews every held lock once each renew interval, in slices
// spread over the interval (see ring), on a schedule that a slice's duration
// does not shift, and retries a slice that failed after a jittered retry
// delay. It never decides that a lock is lost by itself except on a "not
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
// guards ring, stale and idle.
type heartbeatState struct {
	ring    ring[*Lock]        // the slots of the held locks' renewals (registry.go)
	stale   staleTokens        // ended locks whose token may still be in Redis (stale.go)
	idle    bool               // the heartbeat sleeps until kicked
	kick    chan struct{}      // capacity 1: work was added while idle
	cancel  context.CancelFunc // stops the heartbeat
	done    chan struct{}      // closed when the heartbeat goroutine has returned
	checked bool               // the server check has run; the heartbeat's alone
}

// newHeartbeatState returns the state of an idle heartbeat renewing every
// interval.
func newHeartbeatState(interval time.Duration, cancel context.CancelFunc) heartbeatState {
	return heartbeatState{
		ring:   newRing[*Lock](interval),
		stale:  make(staleTokens),
		idle:   true,
		kick:   make(chan struct{}, 1),
		cancel: cancel,
		done:   make(chan struct{}),
	}
}

// A round renews every held lock once: it walks the ring's slots, renewing
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
type schedule struct {
	t       *time.Timer
	active  bool      // a round is under way (else the heartbeat is idle)
	base    time.Time // the round's start: slot i is due at base + i·gap
	next    int       // the round's first slot not yet renewed
	held    int       // live locks the round's slices renewed (or tried to)
	failed  bool      // a slice of the round failed
	lastDue time.Time // the due time and end of the round's last slice
	lastEnd time.Time
	retries []retry // failed slices, in the order they are due again
}

// retry is a failed slice's locks, to be renewed again at at (unless their
// slot's turn comes first).
type retry struct {
	at    time.Time
	slot  int
	locks []*Lock
}

// begin starts a round at base, whose slots before next are passed.
func (sc *schedule) begin(base time.Time, next int) {
	sc.active, sc.base, sc.next, sc.held, sc.failed = true, base, next, 0, false
	sc.lastDue, sc.lastEnd = base, base
}

// beat runs rounds until ctx ends; with retry, the first one after the
// retry delay.
func (s *Session) beat(ctx context.Context, retry bool) {
	sc := schedule{t: time.NewTimer(time.Hour)}
	sc.t.Stop()
	defer sc.t.Stop()
	if retry {
		sc.begin(time.Now().Add(min(s.cfg.RenewInterval, s.cfg.RetryDelay())), 0)
	}
	for {
		if sc.active {
			s.step(ctx, &sc)
		}
		select {
		case <-ctx.Done():
			return
		case <-s.hb.kick:
			if !sc.active {
				// The round the held locks' leases began in: its slots
				// due by now hold only fresh leases, renewed next round.
				from := s.leasesFrom()
				sc.begin(from, int(time.Since(from)/s.hb.ring.gap)+1)
			}
			if !s.hb.checked { // the first time the session holds something
				s.hb.checked = true
				s.checkServer(ctx)
			}
		case <-sc.t.C:
		}
	}
}

// step runs what is due (retries of failed slices, the round's slices in
// slot order, the round's end), then arms the timer for what comes next,
// unless the heartbeat goes idle.
func (s *Session) step(ctx context.Context, sc *schedule) {
	for ctx.Err() == nil {
		now := time.Now()
		if len(sc.retries) > 0 && !sc.retries[0].at.After(now) {
			r := sc.retries[0]
			sc.retries = sc.retries[1:]
			s.slice(ctx, sc, r.slot, r.locks)
			continue
		}
		slot, at := s.nextSlot(sc)
		if len(sc.retries) > 0 && sc.retries[0].at.Before(at) {
			at = sc.retries[0].at
		}
		switch {
		case at.After(now):
			sc.t.Reset(time.Until(at))
			return
		case slot >= 0:
			sc.next = slot + 1
			sc.lastDue = sc.base.Add(s.hb.ring.offset(slot))
			s.slice(ctx, sc, slot, s.slotLocks(slot))
			sc.lastEnd = time.Now()
		case !s.endRound(ctx, sc):
			return // idle
		}
	}
}

// nextSlot returns the round's next occupied slot and when it is due, or
// -1 and the end of the round's span (the round ends then, or once its
// last slice has ended, if later).
func (s *Session) nextSlot(sc *schedule) (int, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := s.hb.ring.next(sc.next); i >= 0 {
		return i, sc.base.Add(s.hb.ring.offset(i))
	}
	return -1, sc.base.Add(s.hb.ring.span())
}

// slice renews locks, of slot, in one round trip. The slot's retry, if any,
// is dropped: this renewal supersedes it. A failed renewal is retried after
// the retry delay, or with the slot's next turn if that comes first.
func (s *Session) slice(ctx context.Context, sc *schedule, slot int, locks []*Lock) {
	sc.retries = slices.DeleteFunc(sc.retries, func(r retry) bool { return r.slot == slot })
	start := time.Now()
	held, failed := s.renewSlice(ctx, locks)
	s.cfg.hooks.round(start, held, len(failed))
	sc.held += held
	if len(failed) > 0 {
		sc.failed = true
		at := time.Now().Add(min(s.cfg.RenewInterval, s.cfg.RetryDelay()))
		i, _ := slices.BinarySearchFunc(sc.retries, at, func(r retry, at time.Time) int { return r.at.Compare(at) })
		sc.retries = slices.Insert(sc.retries, i, retry{at, slot, failed})
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

// endRound ends a round (see schedule): it deletes stale tokens, unless
// renewals are failing (never delay a retry), until the next round's first
// slice is due (nor the next round: the TTL rules do not count the
// clean-up), and starts the next round, or reports whether the heartbeat
// went idle instead.
func (s *Session) endRound(ctx context.Context, sc *schedule) (going bool) {
	stale := s.staleLocks()
	next := sc.base.Add(s.cfg.RenewInterval)
	first := s.firstDue(next)
	now := time.Now()
	if late := sc.lastEnd.Sub(sc.lastDue); late > 0 && (len(stale) > 0 || first.Before(now)) {
		next, first = next.Add(late), first.Add(late)
	}
	if behind := now.Sub(next.Add(s.hb.ring.span())); behind > 0 { // a whole round late (a stalled heartbeat)
		next, first = next.Add(behind), first.Add(behind)
	}
	if len(sc.retries) == 0 {
		s.cleanStale(ctx, stale, first)
	}
	if len(stale) > 0 && s.cfg.test.round != nil {
		s.cfg.test.round(0, sc.failed)
	}
	if sc.held == 0 && len(sc.retries) == 0 && s.goIdle() {
		sc.active = false
		return false
	}
	sc.begin(next, 0)
	return true
}

// slotLocks returns the locks of slot i.
func (s *Session) slotLocks(i int) []*Lock {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hb.ring.members(i)
}

// firstDue is when the first occupied slot of a round starting at base is
// due, or base if none is.
func (s *Session) firstDue(base time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := s.hb.ring.next(0); i >= 0 {
		return base.Add(s.hb.ring.offset(i))
	}
	return base
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
