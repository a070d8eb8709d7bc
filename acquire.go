package redisleader

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redisleader/redisleader/internal/lease"
	"github.com/redisleader/redisleader/internal/pace"
	"github.com/redisleader/redisleader/internal/wire"
)

// Lock acquires name, blocking until it is acquired, ctx ends, or the session
// closes. While another owner holds the name it waits as the package
// documentation describes (section Waiting).
//
// It returns the lock, or: an error matching ErrInvalid for a bad name (no
// Redis I/O); ErrSessionClosed; ctx's error joined with the last Redis error,
// if any; or a Redis error that retrying cannot fix (wrong key type, missing
// permission). Transient Redis errors are retried. If an attempt's outcome
// was unknown when Lock gives up, the key is released with this attempt's
// token, so no unowned lock is left behind. On a name this session holds,
// Lock returns an error matching ErrLocked at once.
func (s *Session) Lock(ctx context.Context, name string) (*Lock, error) {
	k, err := s.keysOf(name)
	if err != nil {
		return nil, err
	}
	return s.acquire(ctx, k, "", block, nil)
}

// TryLock makes one attempt to acquire name. It returns an error matching
// ErrLocked if another owner holds it (wrapped with the holder's fence) or
// this session does, an error matching ErrInvalid
// for a bad name, ErrSessionClosed, or a Redis error; in the last case the
// key is released with this attempt's token in case the attempt took effect.
func (s *Session) TryLock(ctx context.Context, name string) (*Lock, error) {
	k, err := s.keysOf(name)
	if err != nil {
		return nil, err
	}
	return s.acquire(ctx, k, "", tryOnce, nil)
}

// keysOf is lease.KeysOf, remembered for the first maxNames valid names
// the session is asked to lock: a name asked for again skips the naming
// rule's checks and the three allocations of its keys.
func (s *Session) keysOf(name string) (lease.Keys, error) {
	s.names.mu.RLock()
	k, ok := s.names.m[name]
	full := len(s.names.m) >= maxNames
	s.names.mu.RUnlock()
	if ok {
		return k, nil
	}
	k, err := lease.KeysOf(name)
	if err != nil || full {
		return k, err // once full, a new name takes no write lock
	}
	s.names.mu.Lock()
	if len(s.names.m) < maxNames {
		if s.names.m == nil {
			s.names.m = make(map[string]lease.Keys)
		}
		k.Name = strings.Clone(name) // not a part of some larger string of the caller's
		s.names.m[k.Name] = k
	}
	s.names.mu.Unlock()
	return k, nil
}

// maxNames bounds the names whose keys a session remembers (keysOf): 256
// names take about 110 KB at 32 bytes each, 0.9 MB at the longest.
const maxNames = 256

// Acquire takes one permit, blocking until one is free, ctx ends or the
// session closes: a release wakes the waiters at once (pub/sub), and
// otherwise a waiter tries again when the first lease ends (never
// polling). Errors are those of Session.Lock, and the limit's (see
// Semaphore); a permit's acquire whose reply was lost is confirmed by the
// next attempt, never taken twice.
func (m *Semaphore) Acquire(ctx context.Context) (*Lock, error) {
	return m.s.acquireAs(ctx, m.acquisition(block))
}

// TryAcquire makes one attempt to take a permit. When all N are held it
// returns an error matching ErrLocked that says so; other errors are those
// of Acquire.
func (m *Semaphore) TryAcquire(ctx context.Context) (*Lock, error) {
	l, err := m.s.acquireAs(ctx, m.acquisition(tryOnce))
	if errors.Is(err, ErrLocked) {
		return nil, fmt.Errorf("redisleader: semaphore %q: all %d permits are held: %w", m.keys.Name, m.limit, err)
	}
	return l, err
}

// acquisition is one permit's acquisition in mode md.
func (m *Semaphore) acquisition(md mode) acquisition {
	return acquisition{keys: m.keys, value: m.value, mode: md, shared: &lease.PermitProtocol{P: m.args}}
}

// mode is how an acquisition goes on after an attempt that failed.
type mode uint8

const (
	tryOnce mode = iota // it does not: one attempt (TryLock, TryCampaign)
	block               // it waits and tries again until acquired (Lock, Campaign)
	// runTerm blocks, and registers the acquisition as an
	// Election.Run term before it is delivered, so that no Release or
	// Close can see it as a plain lock and delete its key before onElected
	// has run and returned.
	runTerm
)

// acquire acquires the name of k for value, as candidate c (nil: no
// priority): the setup of an acquisition (its place in a fair queue, its
// subscription), then its attempts (run).
func (s *Session) acquire(ctx context.Context, k lease.Keys, value string, m mode, c *candidacy) (*Lock, error) {
	return s.acquireAs(ctx, acquisition{keys: k, value: value, mode: m, cand: c})
}

// acquireAs runs the acquisition a, whose keys, value, mode, and candidacy
// or shared protocol are set (a semaphore's permit: semaphore.go).
func (s *Session) acquireAs(ctx context.Context, a acquisition) (*Lock, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.work.Done()
	a.s, a.start = s, time.Now()
	k, m := a.keys, a.mode
	if a.self() { // at once, before any I/O: a session never waits for itself
		return nil, &heldError{k.Name}
	}
	if s.cfg.fair && a.shared == nil {
		a.w = s.newWaiter(k, m != tryOnce)
		defer a.leave(ctx) // our place, if we have one, when we give up
	}
	if m != tryOnce {
		// Subscribe before the first attempt, so a release between a failed
		// attempt and the wait is never missed.
		var accept func(payload string) bool // default mode: every message wakes
		if a.w != nil {
			accept = lease.WakeFilter(a.w.id)
		}
		sub, err := s.wire.Subscribe(ctx, a.waitChannel(), accept)
		if err != nil {
			return nil, err
		}
		defer sub.Close()
		a.sub = sub
		if a.w != nil {
			a.w.sub = sub
		}
	}
	a.newLock()
	l, err := a.run(ctx)
	if err != nil && a.cand != nil {
		a.withdraw(ctx)
	}
	return l, err
}

// waitChannel is the channel on which a blocking acquisition waits: a fair
// waiter's on the session's wake-up channel for the name (a release wakes
// the head waiter only), any other on the name's channel.
func (a *acquisition) waitChannel() string {
	if a.w != nil {
		return a.keys.WakeChannel(a.s.id)
	}
	return a.keys.Channel
}

// self reports whether the session holds the acquisition's name itself
// (then it never waits for itself); a shared name, never.
func (a *acquisition) self() bool { return a.shared == nil && a.s.holds(a.keys.Name) }

// run makes attempts with one token until the key is ours, or (blocking)
// ctx or the session ends, or (tryOnce) after one attempt. Every attempt uses
// the same token, so an attempt whose reply was lost is confirmed by the
// next one rather than mistaken for another owner; only a give-back moves
// the acquisition to a new token (rotate).
func (a *acquisition) run(ctx context.Context) (*Lock, error) {
	s, name := a.s, a.keys.Name
	for {
		select {
		case <-s.done: // as s.Err, without leaving the file
			return nil, a.abandon(ctx, a.lastErr, ErrSessionClosed)
		default:
		}
		if err := ctx.Err(); err != nil {
			return nil, a.abandon(ctx, a.lastErr, err)
		}
		var sent time.Time
		if a.w != nil && a.mode != tryOnce {
			sent = time.Now() // the attempt renews our place: its lease runs from here
		}
		r := a.l.attempt(ctx)
		err := r.Err
		if s.cfg.test.attempt != nil {
			s.cfg.test.attempt(name, err)
		}
		locked := errors.Is(err, ErrLocked)
		if !sent.IsZero() {
			a.trackPlace(err, sent)
		}
		switch {
		case err == nil:
			if l, again, err := a.deliver(ctx); !again {
				return l, err
			}
			continue
		case errors.Is(err, ErrSessionClosed):
			return nil, err // attempt has given the key back already
		case locked && a.self():
			return nil, a.abandon(ctx, nil, &heldError{name})
		case !locked:
			a.unsure = true
			if cerr := ctx.Err(); cerr == nil || !errors.Is(err, cerr) {
				a.lastErr = err // a Redis error; ctx's end is reported as itself
			}
		}
		if a.mode == tryOnce || wire.Permanent(err) {
			return nil, a.abandon(ctx, nil, err)
		}
		if r.GiveBack {
			a.rotate()
		}
		if err := a.wait(ctx, r, err, locked); err != nil {
			return nil, a.abandon(ctx, a.lastErr, err)
		}
		if a.self() { // woken because this session took the name (Session.add)
			return nil, a.abandon(ctx, nil, &heldError{name})
		}
	}
}

// rotate moves the acquisition to a new token after a give-back. The
// give-back's delete may still reach Redis after a later attempt with this
// token took the key, and delete that: a request whose reply was lost, or
// one go-redis sent again on a new connection while the first was still on
// its way. If the give-back failed somewhere, the heartbeat deletes this
// token until it must have expired.
func (a *acquisition) rotate() {
	if a.l.lease.Leftover {
		a.s.markStale(a.l, true)
	}
	a.newLock()
}

// acquisition is the state of one acquire call across its attempts.
type acquisition struct {
	s        *Session
	start    time.Time
	keys     lease.Keys
	value    string
	mode     mode
	sub      *wire.Subscription // the name's channel (fair: our wake-up channel), unless mode is tryOnce
	l        *Lock              // the current attempt's lock and token
	w        *waiter            // fair mode: our place in the queue
	cand     *candidacy         // the candidate's priority, or nil
	shared   lease.Protocol     // a shared name's protocol (a semaphore's permit), or nil
	queued   bool               // fair mode: we may have a place in the queue
	kept     time.Time          // fair mode: when the attempt that last renewed our place was sent
	lastErr  error              // of the last attempt, if it failed with a Redis error
	unsure   bool               // an attempt's outcome is unknown: our token may be, or get, in Redis
	splits   pace.Splits        // Redlock split votes in a row (backoff)
	loggedAt time.Time          // errors are logged at most once per TTL
}

// deliver waits out the takeover delay (WithTakeoverDelay) of the lock
// just acquired, while the heartbeat renews it, then delivers it to its
// caller (registering it first as a Run term, in mode runTerm). again: the
// lease ended before it could be delivered (a deadline can pass even with
// no delay), and a blocking acquisition starts over with a new token. If
// ctx ends or the session closes first, it returns their error (the key is
// then released, here or by Close).
func (a *acquisition) deliver(ctx context.Context) (l *Lock, again bool, err error) {
	l = a.l
	if d := a.s.cfg.TakeoverDelay; d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-l.Done():
		case <-ctx.Done():
			if l.end(ErrReleased) {
				l.dispose(ctx, false)
			}
			return nil, false, ctx.Err()
		case <-a.s.done:
			return nil, false, ErrSessionClosed
		}
	}
	switch lost := l.check(); {
	case errors.Is(lost, ErrSessionClosed):
		return nil, false, lost
	case lost != nil && a.mode == tryOnce:
		return nil, false, fmt.Errorf("redisleader: acquire %q: the lease ended before it could be handed over: %w", a.keys.Name, lost)
	case lost != nil:
		a.newLock()
		return nil, true, nil
	}
	if a.mode == runTerm {
		a.s.registerTerm(l)
	}
	l.markDelivered(a.start)
	return l, false, nil
}

// newLock starts the acquisition's next attempt with a new lock, whose
// first attempt makes its lease and token (Lock.attempt).
func (a *acquisition) newLock() {
	p := a.shared
	if p == nil {
		p = protocolFor(a.w, a.cand)
	}
	a.l = &Lock{s: a.s, value: a.value, lease: lease.Lease{Keys: a.keys, Proto: p}}
	if a.cand != nil {
		a.l.lead = &leadership{cand: a.cand}
	}
}

// trackPlace keeps the session's record of a fair acquisition's place in
// step with its last attempt, sent at sent: acquired (the script removed our
// place), not (we have one, or may have after an error), or queued behind
// others (the script renewed our place's lease for a TTL).
func (a *acquisition) trackPlace(err error, sent time.Time) {
	switch {
	case err == nil && a.queued:
		a.s.dropWaiter(a.w)
		a.queued = false
	case err != nil && !a.queued:
		a.s.addWaiter(a.w)
		a.queued = true
	}
	if errors.Is(err, ErrLocked) {
		a.kept = sent
	}
}

// wait sleeps after a failed attempt r as delay says (a queued fair waiter
// no longer than pace.KeepPlace allows): until a message if delay follows
// them, and in any case until this session takes the name (Session.add
// wakes its waiters).
func (a *acquisition) wait(ctx context.Context, r lease.Attempt, err error, locked bool) error {
	d, follow := a.delay(r, err, locked)
	if a.queued { // its next attempt renews its place before the place's lease can run out
		d = pace.KeepPlace(d, a.kept, a.s.cfg.Validity-a.s.cfg.CallTimeout)
	}
	if a.s.cfg.test.pause != nil {
		a.s.cfg.test.pause(d, follow)
	}
	if follow {
		return a.s.wait(ctx, a.sub, d)
	}
	for end := time.Now().Add(d); ; {
		err := a.s.wait(ctx, a.sub, time.Until(end))
		if err != nil || !time.Now().Before(end) || a.self() {
			return err
		}
	}
}

// delay is how long to wait after a failed attempt r, and whether a release
// event, or a wake-up addressed to our fair waiter, ends the wait sooner
// (follow). When the name is held: until the
// holder's lease can have expired (in fair mode, behind the head waiter:
// until the holder's or the head's lease can have, whichever comes first,
// since we may be the head by then), or a release. Otherwise, and after a
// Redlock split vote, the random retry delay alone, or a growing one after a
// split that left the outcome to nodes that did not answer (backoff): only
// that keeps contenders that failed together from trying together again, and
// a release event (the other side's give-back) would wake them all at once.
// A failure other than "held" is logged at most once per TTL.
func (a *acquisition) delay(r lease.Attempt, err error, locked bool) (d time.Duration, follow bool) {
	if locked {
		a.lastErr, a.splits = nil, 0
		if r.Split {
			return a.s.cfg.RetryDelay(), false
		}
		return pace.Follow(r.Behind(), a.sub.Confirmed(), a.s.cfg.RetryDelay), true
	}
	if time.Since(a.loggedAt) >= a.s.cfg.TTL {
		a.loggedAt = time.Now()
		a.s.cfg.logger.Warn("redisleader: acquire failed; retrying", "name", a.keys.Name, "err", err)
	}
	if r.Split {
		return a.splits.Backoff(r.Took, a.s.cfg.TTL, a.s.cfg.RetryDelay()), false
	}
	a.splits = 0
	// A queued fair waiter keeps listening: it may be the head, which the
	// name waits for, and its wake-ups are addressed to it alone.
	return a.s.cfg.RetryDelay(), a.queued
}

// abandon gives the acquisition up with err (see Lock.abandon).
func (a *acquisition) abandon(ctx context.Context, lastErr, err error) error {
	return a.l.abandon(ctx, a.unsure, lastErr, err)
}

// wait sleeps for d, or until a message arrives on sub, ctx ends or the
// session closes (ErrSessionClosed).
func (s *Session) wait(ctx context.Context, sub *wire.Subscription, d time.Duration) error {
	return s.wire.Wait(ctx, sub, d)
}

// attempt makes one acquire attempt. On success the lock is armed
// (deadline timer) and registered with the heartbeat. If another owner holds
// the key (or, in fair mode, waiters came first) its error matches
// ErrLocked, and it says how long that owner's lease has left on the server
// and where we stand in the queue.
func (l *Lock) attempt(ctx context.Context) lease.Attempt {
	if l.lease.Token == "" { // the lock's first attempt: its lease, with a fresh token
		l.lease = lease.New(l.lease.Keys, l.s.ttlArg, l.value, l.lease.Proto)
	}
	sent := time.Now()
	deadline := sent.Add(l.s.cfg.Validity)
	returned := false
	defer func() {
		if !returned { // a hook on the client unwound us (wire.OnUnwind)
			l.s.markStale(l, true) // the token may be in Redis: the heartbeat deletes it
		}
	}()
	r := l.s.place.Acquire(ctx, &l.lease, deadline)
	if r.GiveBack {
		l.giveBack(ctx) // within ctx: what fails is left to abandon
	}
	returned = true
	if r.Split {
		r.Took = time.Since(sent) // only then: no clock read on the hot path
	}
	if r.Err == nil {
		r.Err = l.arm(sent, deadline, r.Fence)
	}
	return r
}

// arm completes a successful acquire sent at sent: unless the reply came
// after the deadline, it starts the deadline timer and registers the lock
// with the heartbeat.
func (l *Lock) arm(sent, deadline time.Time, fence int64) error {
	if !time.Now().Before(deadline) {
		// The reply came too late to trust the lease. The key is ours, so the
		// next attempt (same token) refreshes it and starts a new deadline.
		return fmt.Errorf("redisleader: acquire %q: reply arrived after the lease's local deadline", l.lease.Keys.Name)
	}
	l.lease.Fence = fence
	l.mu.Lock()
	l.deadline, l.renewed = deadline, sent
	l.mu.Unlock()
	// Registered before the timer starts, so that the timer's lose, which
	// unregisters it, always comes after.
	if err := l.s.add(l); err != nil {
		// The session closed while we acquired: give the key back now.
		l.end(err)
		_ = l.del(context.Background())
		return err
	}
	if l.s.cfg.test.armed != nil {
		l.s.cfg.test.armed(l)
	}
	l.mu.Lock()
	if l.err == nil {
		l.timer = time.AfterFunc(time.Until(l.deadline), l.onDeadline)
	}
	l.mu.Unlock()
	return nil
}

// add registers an acquired lock (registry.go) with the heartbeat, which
// gives it a slot of its ring (heartbeatState.settle), and wakes the session's fair waiters for its name,
// which end with ErrLocked (a session never waits for itself; default-mode
// waiters hear the acquire's own message). It fails when the session was
// closed meanwhile; the caller then releases the key.
func (s *Session) add(l *Lock) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	s.reg.locks[l] = struct{}{}
	if _, shared := l.lease.Proto.(interface{ Shared() }); !shared { // a permit is one of several (lease.PermitProtocol)
		s.reg.names[l.lease.Keys.Name] = l
	}
	l.slot = -1 // the heartbeat gives it one (heartbeatState.settle)
	s.hb.joined = append(s.hb.joined, l)
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

// giveBack deletes this acquisition's token after an attempt that did not
// count, best effort. Its request may still reach Redis later, even after a
// later attempt with this token took the key, so a blocking acquisition goes
// on with a new token (Session.acquire); if the delete failed somewhere
// (leftover), the stale-token cleanup, or abandon, deletes this one.
func (l *Lock) giveBack(ctx context.Context) {
	if l.s.place.Release(ctx, l.leaseEnding()).Retry {
		l.lease.Leftover = true
	}
}

// abandon ends an acquisition that will not be returned and returns err,
// joined with lastErr when they differ. If an attempt's outcome was unknown
// (unsure), or a give-back after one failed, our token may be in Redis, or
// get there later (an attempt still on its way): dispose deletes it and has
// the heartbeat keep deleting it until it must have expired, so no phantom
// lock blocks others for a TTL.
func (l *Lock) abandon(ctx context.Context, unsure bool, lastErr, err error) error {
	if unsure || l.lease.Leftover {
		l.dispose(ctx, true)
	}
	if lastErr != nil && lastErr != err {
		return errors.Join(err, lastErr)
	}
	return err
}

// dispose deletes an ended acquisition's token: within ctx, or in the
// background once ctx has ended, so that the caller returns with its context
// whatever Redis does; the heartbeat retries until the delete succeeded (with
// repeat: until the token must have expired). The caller must be registered
// with s.work.
func (l *Lock) dispose(ctx context.Context, repeat bool) {
	l.s.markStale(l, repeat)
	l.s.bestEffortCleanup(ctx, func(ctx context.Context) { _ = l.del(ctx) })
}

// bestEffortCleanup runs f, a best-effort clean-up, within ctx, or in the
// background once ctx has ended, so that the caller returns with its
// context whatever Redis does. The caller must be registered with s.work.
func (s *Session) bestEffortCleanup(ctx context.Context, f func(context.Context)) {
	if ctx.Err() == nil {
		f(ctx)
		return
	}
	s.work.Add(1) // Close waits for it
	go func() {
		defer s.work.Done()
		f(context.WithoutCancel(ctx))
	}()
}

// enter registers an acquisition or observer, unless the session is closed.
// Close waits for every registered one to call s.work.Done.
func (s *Session) enter() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	s.work.Add(1) // under mu, so never concurrently with Close's Wait
	return nil
}

// holds reports whether the session holds name now.
func (s *Session) holds(name string) bool {
	s.mu.Lock()
	l := s.reg.names[name]
	s.mu.Unlock()
	return l != nil && l.Held()
}

// protocolFor is the protocol of an acquisition with waiter w (nil: not
// fair) as candidate c (nil: no priority).
func protocolFor(w *waiter, c *candidacy) lease.Protocol {
	var p lease.Protocol = lease.Plain{}
	if w != nil {
		p = &w.proto
	}
	if c != nil {
		p = &lease.CandidateProtocol{Base: p, C: &c.args}
	}
	return p
}
