package redisleader

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redisleader/redisleader/internal/probe"

	"github.com/redisleader/redisleader/internal/lease"
	"github.com/redisleader/redisleader/internal/wire"
)

// A Lock is one successful acquisition of one name by a session. Its identity
// (name, key, fence) never changes; it ends exactly once, when it is released,
// lost, or its session closes. A Lock is safe for concurrent use.
//
// Methods on a nil *Lock (what a failed acquire returns) do not panic: Held
// is false, Done is closed, Err and Release return an error matching
// ErrInvalid, and the other methods return zero values.
type Lock struct {
	s *Session
	// lease is the acquisition as Redis sees it: keys, token, arguments,
	// protocol (internal/lease).
	lease lease.Lease
	// lead is what a leadership carries beyond a plain lock (election.go);
	// nil for a plain lock.
	lead *leadership
	// slot is the lock's slot in its session's ring (heartbeat.go) while it
	// is registered, -1 until the heartbeat gave it one; guarded by the
	// session's mu.
	slot int

	mu     sync.Mutex // protects value, timing, ending, delivered(At), lead
	value  string     // as acquired, then as last proclaimed
	timing            // the local deadline and what moves it
	ending            // how and when the lock ended
	// delivered is set when the acquisition is handed to its caller (after
	// any takeover delay): from then on someone believes it holds the name.
	delivered bool
	// deliveredAt is when delivered was set, as a time since hookEpoch
	// (8 bytes, not a time.Time's 24), for Hooks.
	deliveredAt time.Duration
}

// timing is a lock's local deadline and what moves it; guarded by Lock.mu.
type timing struct {
	deadline time.Time   // local deadline D on the monotonic clock
	renewed  time.Time   // send time of the last successful acquire or renew
	timer    *time.Timer // fires at the deadline; re-arms if it moved
}

// ending is how a lock ends; guarded by Lock.mu.
type ending struct {
	err    error         // nil while held
	done   chan struct{} // created lazily by Done, closed by end
	onEnds map[*func()]struct{}
}

// Name returns the name the lock was acquired under.
func (l *Lock) Name() string {
	if l == nil {
		return ""
	}
	return l.lease.Keys.Name
}

// String describes l for logs and fmt's verbs (GoString too, for %#v): its
// key and fence, never its token, with which anyone could renew or release
// it.
func (l *Lock) String() string {
	if l == nil {
		return "redisleader.Lock(nil)"
	}
	return fmt.Sprintf("redisleader.Lock{key: %q, fence: %d}", l.Key(), l.Fence())
}

// GoString is String.
func (l *Lock) GoString() string { return l.String() }

// Value returns the value published with the lock: the candidate's value for
// an election (see Election.Campaign), or the last one Election.Proclaim
// stored and returned nil for; empty for a plain lock.
func (l *Lock) Value() string {
	if l == nil {
		return ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.value
}

// Key returns the Redis key that holds the lock ("redisleader:{name}").
func (l *Lock) Key() string {
	if l == nil {
		return ""
	}
	return l.lease.Keys.Lock
}

// Fence returns the fencing token of this acquisition. Fences strictly
// increase across successive acquisitions of a name, so a resource that
// rejects writes carrying a fence lower than the highest it has seen rejects
// writes from a former owner that acts late (after a pause, say). Fences are
// derived from the Redis server's clock in microseconds (see the package
// documentation) and may have gaps.
func (l *Lock) Fence() int64 {
	if l == nil {
		return 0
	}
	return l.lease.Fence
}

// Done returns a channel that is closed when the lock ends: released, lost,
// or its session closed. It is closed exactly once, by this package.
func (l *Lock) Done() <-chan struct{} {
	if l == nil {
		return wire.ClosedChan
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done == nil {
		l.done = make(chan struct{})
	}
	return l.done
}

// Err returns nil while the lock is held; once it has ended it says why:
// ErrReleased, ErrNotOwner or ErrExpired (both match ErrLost), or
// ErrSessionClosed. Like Held, it compares against the clock: past the local
// deadline it ends the lock (closing Done) and returns ErrExpired even if the
// deadline timer has not run yet.
func (l *Lock) Err() error { return l.check() }

// Held reports whether the lock is still held: it has not ended and the local
// deadline has not passed. It compares against the clock on every call, so a
// late timer or a stuck heartbeat can never make it report a stale "true".
func (l *Lock) Held() bool { return l.check() == nil }

// check ends the lock with ErrExpired if its deadline has passed, and
// returns why it ended (nil while held).
func (l *Lock) check() error {
	if l == nil {
		return errNilLock
	}
	l.mu.Lock()
	err, due := l.err, l.err == nil && !time.Now().Before(l.deadline)
	l.mu.Unlock()
	if due {
		l.lose(ErrExpired)
		l.mu.Lock()
		err = l.err
		l.mu.Unlock()
	}
	return err
}

// Deadline returns the current local deadline: the instant, on this process's
// monotonic clock, until which the lock is held unless it is renewed. It moves
// forward with every successful renewal.
func (l *Lock) Deadline() time.Time {
	if l == nil {
		return time.Time{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// Release gives the lock up (for an election's leadership: resigns, as
// Election.Resign does). The lock ends with ErrReleased first, then its key
// is deleted in Redis if it still holds this acquisition's token, and
// waiting owners are told at once. A lock that already ended is not written:
// Release returns nil if it was released before, or the reason it ended
// (ErrNotOwner, ErrExpired, ErrSessionClosed). A Redis error is returned
// wrapped; the session then retries the delete in the background (the key
// expires within the TTL at the latest). A term of Election.Run ends, and
// Release returns nil without waiting for Run's delete (package
// documentation, Elections).
func (l *Lock) Release(ctx context.Context) error { return l.release(ctx, false) }

// release is Release; for a Run term, wait says whether to wait for Run's
// delete (Election.Resign) or not (Lock.Release).
func (l *Lock) release(ctx context.Context, wait bool) error {
	if err := l.check(); err != nil && err != ErrReleased {
		return err // lost, or the session closed: nothing of ours to delete
	}
	ended, t, err := l.resign(ctx, "", wait)
	if ended {
		return err
	}
	switch err := l.Err(); {
	case err != ErrReleased:
		return err // lost meanwhile
	case t != nil:
		return l.awaitTerm(ctx, t, wait) // resigned before: Run's delete all the same
	}
	return nil
}

// resign is the one transition by which a holder gives l up (Release,
// Resign, Transfer): if l is still held, it ends l with ErrReleased and
// with heir ("": none) as the successor its release hands the name to, both
// at once, then deletes the key or hands it over; for a Run term t, Run does
// that once onElected has returned (awaitTerm). ended reports whether this
// call made the transition; if not, l had ended and Err (and heir) say how.
// t is the Run term l is (nil: none), as it was before the transition.
func (l *Lock) resign(ctx context.Context, heir string, wait bool) (ended bool, t *term, err error) {
	t = l.s.termOf(l)
	if l.check() != nil || !l.endTo(ErrReleased, heir) {
		return false, t, nil
	}
	if t != nil {
		return true, t, l.awaitTerm(ctx, t, wait)
	}
	return true, nil, l.del(ctx)
}

// termOf returns the term of l (run.go), or nil when l is not a Run term.
func (s *Session) termOf(l *Lock) *term {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reg.terms[l]
}

// del runs the compare-and-delete for this lock's token, once the
// acquisition has ended. A key that no longer holds the token is not
// reported as an error: go-redis retries a delete whose reply was lost, and
// the retry finds the key gone; it is logged, since it may also mean that
// the key was deleted or expired behind our back just before. If the delete
// fails, its outcome is unknown (the request may never have run: a NOSCRIPT
// reply lost on the way, say), so the session's heartbeat retries it until
// it succeeds or the token has expired; so it does if a hook on the client
// panics (the panic goes on to del's caller).
func (l *Lock) del(ctx context.Context) error {
	d := lease.Deleted{Retry: true} // until the release returns: a hook's panic leaves it to the heartbeat
	defer func() {
		if d.Retry || l.lease.Leftover {
			l.s.markStale(l, l.lease.Leftover)
		}
	}()
	d = l.s.place.Release(ctx, l.leaseEnding())
	switch {
	case d.Err != nil:
		return fmt.Errorf("redisleader: release %q (retried in the background; the key expires within the TTL at the latest): %w", l.lease.Keys.Name, d.Err)
	case d.Missing:
		l.s.cfg.logger.Info("redisleader: released key did not hold our token (a retried delete, or the key was gone)",
			"name", l.lease.Keys.Name, "fence", l.lease.Fence)
	}
	return nil
}

// leaseEnding is l's lease to release with its succession: the heir a Transfer
// that ended l named, if any.
func (l *Lock) leaseEnding() lease.Ending { return lease.Ending{Lease: &l.lease, Heir: l.heir()} }

// endings is leaseEnding for each of locks.
func endings(locks []*Lock) []lease.Ending {
	out := make([]lease.Ending, len(locks))
	for i, l := range locks {
		out[i] = l.leaseEnding()
	}
	return out
}

// heir returns the successor that l's release hands the name to, if a
// Transfer ended l ("" otherwise).
func (l *Lock) heir() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lead == nil {
		return ""
	}
	return l.lead.heir
}

// markDelivered marks the acquisition, whose call started at start, as handed to
// its caller, unless it has already ended or expired (then the caller finds
// it ended).
func (l *Lock) markDelivered(start time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := time.Now(); l.err == nil && now.Before(l.deadline) {
		l.delivered, l.deliveredAt = true, now.Sub(hookEpoch)
		l.emitLocked(probe.Acquired, now, now.Sub(start))
	}
}

// hookEpoch is the origin of Lock.deliveredAt, on the monotonic clock.
var hookEpoch = time.Now()

// emitLocked reports a lease event of l at now: to the reliability tests'
// probe (a no-op unless a test installed one) if l was delivered, and to
// the user's Hooks (Acquired, after a call that took wait; at its end, if
// it was handed over, Lost or Released with l.err as the cause). l.mu must
// be held.
func (l *Lock) emitLocked(kind string, now time.Time, wait time.Duration) {
	if f := probe.Hook.Load(); f != nil && l.delivered {
		(*f)(probe.Event{Kind: kind, Name: l.lease.Keys.Name, Value: l.value, Token: l.lease.Token, Fence: l.lease.Fence,
			At: now, Sent: l.renewed, Deadline: l.deadline, Reason: l.err})
	}
	switch h := &l.s.cfg.hooks; {
	case kind == probe.Acquired && h.Acquired != nil:
		h.Acquired(AcquireEvent{Name: l.lease.Keys.Name, Value: l.value, Fence: l.lease.Fence, Wait: wait})
	case kind == probe.Ended && l.delivered && (h.Lost != nil || h.Released != nil):
		f := h.Released
		if errors.Is(l.err, ErrLost) {
			f = h.Lost
		}
		if f != nil {
			f(EndEvent{Name: l.lease.Keys.Name, Value: l.value, Fence: l.lease.Fence, Held: now.Sub(hookEpoch) - l.deliveredAt, Cause: l.err})
		}
	}
}

// onDeadline runs on the deadline timer. If a renewal moved the deadline it
// re-arms; otherwise the lock is lost with ErrExpired.
func (l *Lock) onDeadline() {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return
	}
	if left := time.Until(l.deadline); left > 0 {
		l.timer.Reset(left)
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	l.lose(ErrExpired)
}

// lose ends the lock because ownership was lost, and logs it.
func (l *Lock) lose(why error) {
	if l.end(why) {
		if why == ErrExpired {
			l.s.markStale(l, false)
		}
		l.s.cfg.logger.Warn("redisleader: lock lost", "name", l.lease.Keys.Name, "fence", l.lease.Fence, "err", why)
	}
}

// end ends the lock with err unless it already ended, reporting whether it
// did, and unregisters it from its session (the heartbeat stops renewing it).
func (l *Lock) end(err error) bool { return l.endTo(err, "") }

// endTo is end that also names heir, unless "", as the successor that the
// lock's release hands the name to (Transfer): one step, so that of
// concurrent ends one wins, and the heir is that one's or none.
func (l *Lock) endTo(err error, heir string) bool {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return false
	}
	if heir != "" {
		l.leadLocked().heir = heir
	}
	fs := l.endLocked(err)
	l.mu.Unlock()
	for _, f := range fs {
		f()
	}
	l.s.remove(l)
	return true
}

// remove takes an ended lock out of the session's registry (registry.go)
// and, if it was held, out of the heartbeat's joined locks, or leaves its
// slot for the heartbeat to free (heartbeatState.settle).
func (s *Session) remove(l *Lock) {
	name := l.lease.Keys.Name
	s.mu.Lock()
	if _, held := s.reg.locks[l]; held {
		delete(s.reg.locks, l)
		if l.slot < 0 { // joined, never slotted
			i := slices.Index(s.hb.joined, l)
			s.hb.joined = slices.Delete(s.hb.joined, i, i+1)
		} else {
			s.hb.left = append(s.hb.left, l) // the heartbeat frees its slot
		}
	}
	if s.reg.names[name] == l {
		delete(s.reg.names, name)
	}
	s.mu.Unlock()
}

// leadLocked returns l's leadership, made if l has none. l.mu must be held.
func (l *Lock) leadLocked() *leadership {
	if l.lead == nil {
		l.lead = &leadership{}
	}
	return l.lead
}

// endLocked records the end and returns the onEnd callbacks, which the caller
// runs after unlocking l.mu.
func (l *Lock) endLocked(err error) []func() {
	l.err = err
	l.emitLocked(probe.Ended, time.Now(), 0)
	if l.done == nil {
		l.done = wire.ClosedChan
	} else {
		close(l.done)
	}
	if l.timer != nil { // nil for an acquisition that never succeeded
		l.timer.Stop()
	}
	fs := make([]func(), 0, len(l.onEnds))
	for f := range l.onEnds {
		fs = append(fs, *f)
	}
	l.onEnds = nil
	return fs
}

// onEnd arranges for f to run once, on the goroutine that ends the lock (at
// once if it has ended already), and returns a function that cancels that.
// f must not block.
func (l *Lock) onEnd(f func()) (stop func()) {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		f()
		return func() {}
	}
	if l.onEnds == nil {
		l.onEnds = make(map[*func()]struct{})
	}
	key := &f
	l.onEnds[key] = struct{}{}
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		delete(l.onEnds, key)
		l.mu.Unlock()
	}
}
