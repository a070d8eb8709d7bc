package redisleader

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader/internal/probe"
)

// A Lock is one successful acquisition of one name by a session. Its identity
// (name, key, fence) never changes; it ends exactly once, when it is released,
// lost, or its session closes. A Lock is safe for concurrent use.
//
// Methods on a nil *Lock (what a failed acquire returns) do not panic: Held
// is false, Done is closed, Err and Release return an error matching
// ErrInvalid, and the other methods return zero values.
type Lock struct {
	s        *Session
	keys     keys
	token    string
	tokenArg any // token, boxed once for script arguments
	fence    int64
	// argv is the script argument vector: {_, _, 2, lock key, fence key,
	// token, TTL, value} for acquire, then {_, _, 1, lock key, token} for the
	// release. Only the acquiring goroutine, then the one releaser, use it.
	argv [8]any

	mu       sync.Mutex    // protects value, deadline, renewed, err, done, onEnds and runReleases
	value    string        // as acquired, then as last proclaimed
	deadline time.Time     // local deadline D on the monotonic clock
	renewed  time.Time     // send time of the last successful acquire or renew
	err      error         // nil while held
	done     chan struct{} // created lazily by Done, closed by end
	timer    *time.Timer   // fires at the deadline; re-arms if it moved
	onEnds   map[*func()]struct{}
	// delivered is set when the acquisition is handed to its caller (after
	// any takeover delay): from then on someone believes it holds the name.
	delivered bool
	// runReleases: Release ended this Election.Run term and left the delete
	// to Run, which does it once onElected has returned.
	runReleases bool
	// runErr is what Run's delete of a term's key returned; written before
	// the term's released channel is closed, read after.
	runErr error
	// term is closed once Election.Run has released this term; nil unless
	// Run acquired it (set before the acquisition is handed over).
	term chan struct{}
	// proclaiming serialises Election.Proclaim calls, so that the value
	// kept here is the last one stored in Redis.
	proclaiming chan struct{} // capacity 1, made by the first Proclaim under mu
	// leftover: a give-back left this acquisition's token on some node.
	// Only the acquiring goroutine uses it.
	leftover bool
	// deliveredAt is when delivered was set, as a time since hookEpoch
	// (8 bytes, not a time.Time's 24), for Hooks. l.mu protects it.
	deliveredAt time.Duration
}

// errNilLock is what Err and Release say on a nil *Lock.
var errNilLock = invalidf("nil *Lock: the acquire that should have returned it failed (check its error)")

// closedChan is the Done channel of a lock that ended before anyone asked.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Name returns the name the lock was acquired under.
func (l *Lock) Name() string {
	if l == nil {
		return ""
	}
	return l.keys.name
}

// Value returns the value published with the lock: the candidate's value for
// an election (see Election.Campaign), or the last one Election.Proclaim
// stored; empty for a plain lock.
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
	return l.keys.lock
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
	return l.fence
}

// Done returns a channel that is closed when the lock ends: released, lost,
// or its session closed. It is closed exactly once, by this package.
func (l *Lock) Done() <-chan struct{} {
	if l == nil {
		return closedChan
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
// expires within the TTL at the latest). The call is bounded by ctx and the
// call timeout.
//
// A leadership that Election.Run holds is deleted by Run, once onElected has
// returned: Release ends it (onElected's context is cancelled with cause
// ErrReleased) and returns nil without waiting for that delete, so it may be
// called from onElected itself; Election.Resign is the form that waits.
func (l *Lock) Release(ctx context.Context) error { return l.release(ctx, false) }

// release is Release; for a Run term, wait says whether to wait for Run's
// delete (Election.Resign) or not (Lock.Release).
func (l *Lock) release(ctx context.Context, wait bool) error {
	err := l.check()
	if err == nil || err == ErrReleased {
		if released := l.s.termOf(l); released != nil {
			return l.resignTerm(ctx, released, wait)
		}
	}
	if err == nil {
		if l.end(ErrReleased) {
			l.s.remove(l)
			return l.del(ctx)
		}
		err = l.check() // it ended meanwhile
	}
	if err == ErrReleased {
		return nil
	}
	return err
}

// del runs the compare-and-delete for this lock's token. It is called at most
// once per lock, after the acquisition ended: it overwrites the acquire
// arguments in l.argv. A key that no longer holds the
// token is not reported as an error: go-redis retries a delete whose reply
// was lost, and the retry finds the key gone; it is logged, since it may
// also mean that the key was deleted or expired behind our back just before.
// If the delete fails, its outcome is unknown (the request may never have
// run: a NOSCRIPT reply lost on the way, say), so the session's heartbeat
// retries it until it succeeds or the token has expired.
func (l *Lock) del(ctx context.Context) error {
	if l.s.quorum > 1 {
		return l.delQuorum(ctx)
	}
	argv := l.argv[:5]
	argv[2], argv[4] = 1, l.tokenArg
	callCtx := l.s.bound(ctx, time.Time{})
	n, err := releaseScript.run(callCtx, l.s.client, argv).Int()
	unbind(callCtx)
	switch {
	case err != nil:
		l.s.markStale(l, false)
		return fmt.Errorf("redisleader: release %q (retried in the background; the key expires within the TTL at the latest): %w", l.keys.name, err)
	case n == 0:
		l.s.cfg.logger.Info("redisleader: released key did not hold our token (a retried delete, or the key was gone)",
			"name", l.keys.name, "fence", l.fence)
	}
	return nil
}

// liveDeadline returns the deadline if the lock is still held at now.
func (l *Lock) liveDeadline(now time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline, l.err == nil && now.Before(l.deadline)
}

// extend moves the deadline after a successful renewal sent at sent. A reply
// that arrives after the deadline is ignored: ownership never resurrects.
func (l *Lock) extend(sent time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if l.err != nil || !now.Before(l.deadline) {
		l.emitLocked(probe.Ignored, now)
		return
	}
	if d := sent.Add(l.s.cfg.validity()); d.After(l.deadline) {
		l.deadline, l.renewed = d, sent
	}
	l.emitLocked(probe.Renewed, now)
}

// deliver marks the acquisition, whose call started at start, as handed to
// its caller, unless it has already ended or expired (then the caller finds
// it ended).
func (l *Lock) deliver(start time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := time.Now(); l.err == nil && now.Before(l.deadline) {
		l.delivered, l.deliveredAt = true, now.Sub(hookEpoch)
		l.emitLocked(probe.Acquired, now)
		l.s.cfg.hooks.acquired(l, start, now)
	}
}

// emitLocked reports a lease event of a delivered acquisition to the
// reliability tests' probe (a no-op unless a test installed one). l.mu must
// be held.
func (l *Lock) emitLocked(kind string, at time.Time) {
	if !l.delivered || !probe.On() {
		return
	}
	probe.Emit(probe.Event{Kind: kind, Name: l.keys.name, Value: l.value, Token: l.token, Fence: l.fence,
		At: at, Sent: l.renewed, Deadline: l.deadline, Reason: l.err})
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
		l.s.remove(l)
		if why == ErrExpired {
			l.s.markStale(l, false)
		}
		l.s.cfg.logger.Warn("redisleader: lock lost", "name", l.keys.name, "fence", l.fence, "err", why)
	}
}

// resignTerm is Release of an Election.Run term: it ends the lock, leaving
// the delete to Run, and with wait waits until Run has done it (not when
// ctx comes from the term's own onElected, which cannot return meanwhile).
func (l *Lock) resignTerm(ctx context.Context, released <-chan struct{}, wait bool) error {
	if l.endAs(ErrReleased, true) {
		l.s.remove(l)
	}
	if !wait || termsOf(ctx).has(l) {
		return nil
	}
	select {
	case <-released:
		return l.runErr
	case <-ctx.Done():
		return fmt.Errorf("redisleader: release %q: Election.Run deletes the key once onElected has returned: %w", l.keys.name, ctx.Err())
	}
}

// releaseTerm is Election.Run's release of a term, once onElected has
// returned: it deletes the key if the term was still held, or if Release or
// Close ended it and left the delete to Run.
func (l *Lock) releaseTerm(ctx context.Context) error {
	if l.check() == nil && l.end(ErrReleased) {
		l.s.remove(l)
		return l.del(ctx)
	}
	l.mu.Lock()
	left := l.runReleases || errors.Is(l.err, ErrSessionClosed)
	l.mu.Unlock()
	if left {
		return l.del(ctx)
	}
	return nil
}

// end ends the lock with err unless it already ended, reporting whether it did.
func (l *Lock) end(err error) bool { return l.endAs(err, false) }

// endAs is end that, with runReleases, records that the key is left for
// Election.Run to delete.
func (l *Lock) endAs(err error, runReleases bool) bool {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return false
	}
	l.runReleases = runReleases
	fs := l.endLocked(err)
	l.mu.Unlock()
	for _, f := range fs {
		f()
	}
	return true
}

// endLocked records the end and returns the onEnd callbacks, which the caller
// runs after unlocking l.mu.
func (l *Lock) endLocked(err error) []func() {
	l.err = err
	l.emitLocked(probe.Ended, time.Now())
	l.s.cfg.hooks.ended(l)
	if l.done == nil {
		l.done = closedChan
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

// Lock acquires name, blocking until it is acquired, ctx ends, or the session
// closes. While another owner holds the name it waits on the session's
// pub/sub connection: a release wakes it at once, and otherwise it tries
// again when the holder's lease can have expired (about one command per TTL
// while a healthy owner holds; within milliseconds of a crashed owner's
// expiry).
// It returns the lock, or: an error matching ErrInvalid for a bad name (no
// Redis I/O); ErrSessionClosed; ctx's error joined with the last Redis error,
// if any; or a Redis error that retrying cannot fix (wrong key type, missing
// permission). Transient Redis errors are retried. If an attempt's outcome
// was unknown when Lock gives up, the key is released with this attempt's
// token, so no unowned lock is left behind. A session never waits for
// itself: on a name it holds, Lock returns at once an error matching
// ErrLocked that says so.
func (s *Session) Lock(ctx context.Context, name string) (*Lock, error) {
	return s.acquire(ctx, name, "", true, false)
}

// TryLock makes one attempt to acquire name. Locks are not reentrant: a name
// the same session already holds is ErrLocked too. It returns ErrLocked (wrapped
// with the holder's fence) if another owner holds it, an error matching
// ErrInvalid for a bad name, ErrSessionClosed, or a Redis error; in the last
// case the key is released with this attempt's token in case the attempt took
// effect.
func (s *Session) TryLock(ctx context.Context, name string) (*Lock, error) {
	return s.acquire(ctx, name, "", false, false)
}

// acquire runs acquisition attempts with one token until the key is ours, or
// (blocking) ctx or the session ends, or (non-blocking) after one attempt.
// Every attempt uses the same token, so an attempt whose reply was lost is
// confirmed by the next one rather than mistaken for another owner.
//
// With term (Election.Run), the acquisition is registered as a Run term
// before it is handed over, so that no Release or Close can see it as a
// plain lock and delete its key before onElected has run and returned.
func (s *Session) acquire(ctx context.Context, name, value string, block, term bool) (*Lock, error) {
	start := time.Now()
	if err := checkName(name); err != nil {
		return nil, err
	}
	if err := checkValue(value); err != nil {
		return nil, err
	}
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.work.Done()
	if s.holds(name) {
		return nil, &heldError{name}
	}
	k := newKeys(name)
	var sub *subscription
	if block {
		// Subscribe before the first attempt, so a release between a failed
		// attempt and the wait is never missed.
		var err error
		if sub, err = s.watch.subscribe(ctx, k.channel()); err != nil {
			return nil, err
		}
		defer sub.Close()
	}
	l := s.newLock(k, value)
	var (
		lastErr  error     // of the last attempt, if it failed with a Redis error
		unsure   bool      // an attempt's outcome is unknown: our token may be, or get, in Redis
		loggedAt time.Time // errors are logged at most once per TTL
	)
	for {
		if err := s.Err(); err != nil {
			return nil, l.abandon(ctx, unsure, lastErr, err)
		}
		if err := ctx.Err(); err != nil {
			return nil, l.abandon(ctx, unsure, lastErr, err)
		}
		left, err := l.attempt(ctx)
		if s.cfg.onAttempt != nil {
			s.cfg.onAttempt(name, err)
		}
		locked := errors.Is(err, ErrLocked)
		switch {
		case err == nil:
			lost, err := l.takeover(ctx)
			switch {
			case err != nil:
				return nil, err
			case lost == nil:
				if term {
					s.registerTerm(l)
				}
				l.deliver(start)
				return l, nil
			case !block:
				return nil, fmt.Errorf("redisleader: acquire %q: the lease ended before it could be handed over: %w", name, lost)
			}
			l = s.newLock(k, value) // start over with a new token
			continue
		case errors.Is(err, ErrSessionClosed):
			return nil, err // attempt has given the key back already
		case locked && s.holds(name):
			return nil, l.abandon(ctx, unsure, nil, &heldError{name})
		case !locked:
			lastErr, unsure = err, true
		}
		if !block || permanent(err) {
			return nil, l.abandon(ctx, unsure, nil, err)
		}
		wait := s.retryDelay()
		if locked {
			lastErr = nil
			wait = s.followDelay(left, sub)
		} else if time.Since(loggedAt) >= s.cfg.ttl {
			loggedAt = time.Now()
			s.cfg.logger.Warn("redisleader: acquire failed; retrying", "name", name, "err", err)
		}
		if err := s.wait(ctx, sub, wait); err != nil {
			return nil, l.abandon(ctx, unsure, lastErr, err)
		}
	}
}

// heldError: the session asked for a name it holds itself. Locks are not
// reentrant, and a session never waits for itself.
type heldError struct{ name string }

func (e *heldError) Error() string {
	return fmt.Sprintf("redisleader: %q is already held by this session (locks are not reentrant, and a session never waits for itself)", e.name)
}

func (e *heldError) Is(target error) bool { return target == ErrLocked }

// followDelay is how long a waiter sleeps after finding the name held with
// left to go on the holder's lease (negative: the key has no TTL): until
// that lease can have expired, plus 1–2ms (PTTL is in whole milliseconds and
// Redis expires a key only once its time has passed; the spread keeps
// waiters from arriving all at once). A healthy holder renews meanwhile, so a
// waiter sends about one command per TTL; a crashed one is replaced within
// milliseconds of its expiry; a release wakes the waiter at once through its
// subscription. Without a confirmed subscription, or when the key has no TTL,
// it polls at the retry interval instead.
func (s *Session) followDelay(left time.Duration, sub *subscription) time.Duration {
	if left < 0 {
		return s.retryDelay()
	}
	d := left + time.Millisecond + mrand.N(time.Millisecond)
	if sub == nil || !sub.confirmed() {
		d = min(d, s.retryDelay())
	}
	return d
}

// wait sleeps for d, or until a message arrives on sub, ctx ends or the
// session closes.
func (s *Session) wait(ctx context.Context, sub *subscription, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	var notify <-chan struct{}
	if sub != nil {
		notify = sub.notify
	}
	select {
	case <-t.C:
	case <-notify:
		sub.take()
	case <-ctx.Done():
		return ctx.Err()
	case <-s.done:
		return ErrSessionClosed
	}
	return nil
}

// newLock prepares an acquisition: a fresh random token (128 bits) and the
// script argument vector, boxed once and reused by every attempt and by the
// release.
func (s *Session) newLock(k keys, value string) *Lock {
	token := rand.Text()
	l := &Lock{s: s, keys: k, token: token, tokenArg: token, value: value}
	l.argv = [8]any{nil, nil, 2, k.lock, k.fence, l.tokenArg, s.ttlArg, value}
	return l
}

// attempt makes one acquire call (on every node, for a Redlock session).
// On success the lock is armed (deadline timer) and registered with the
// heartbeat. If another owner holds the key it returns ErrLocked and how
// long that owner's lease has left on the server.
func (l *Lock) attempt(ctx context.Context) (time.Duration, error) {
	s := l.s
	if s.quorum > 1 {
		return l.attemptQuorum(ctx)
	}
	sent := time.Now()
	deadline := sent.Add(s.cfg.validity())
	var (
		res    []any
		err    error
		ackErr error
	)
	callCtx := s.bound(ctx, deadline)
	if s.cfg.acks.n == 0 {
		res, err = acquireScript.run(callCtx, s.client, l.argv[:]).Slice()
	} else {
		var cmds []*redis.Cmd
		cmds, ackErr = acquireScript.runAllWait(callCtx, s.client, [][]any{l.argv[:]}, s.cfg.acks)
		res, err = cmds[0].Slice()
	}
	unbind(callCtx)
	r := l.acquireReply(res, err)
	switch {
	case r.err != nil:
		return r.left, r.err
	case ackErr != nil:
		// Taken on the primary but not seen by enough replicas: a failover
		// could lose it, so it does not count. Give the key back.
		l.giveBack(ctx)
		return 0, fmt.Errorf("redisleader: acquire %q: %w", l.keys.name, ackErr)
	}
	return 0, l.arm(sent, deadline, r.fence)
}

// acquired is what one node answered to an acquire.
type acquired struct {
	fence int64         // ours when err is nil, else the holder's (ErrLocked)
	left  time.Duration // ErrLocked: the holder's PTTL (-1: no TTL)
	err   error         // nil: acquired; ErrLocked wrapped; or the Redis error
}

// acquireReply decodes the acquire script's reply.
func (l *Lock) acquireReply(res []any, err error) acquired {
	if err != nil {
		return acquired{err: fmt.Errorf("redisleader: acquire %q: %w", l.keys.name, err)}
	}
	if len(res) < 2 {
		return acquired{err: fmt.Errorf("redisleader: acquire %q: unexpected reply %v", l.keys.name, res)}
	}
	if ok, _ := res[0].(int64); ok == 1 {
		fence, _ := res[1].(int64)
		return acquired{fence: fence}
	}
	var r acquired
	if stored, ok := res[1].(string); ok {
		h, _ := parseHolder(stored)
		r.fence = h.fence
	}
	if len(res) > 2 {
		if ms, ok := res[2].(int64); ok && ms >= 0 {
			r.left = time.Duration(ms) * time.Millisecond
		} else {
			r.left = -1 // no TTL: nothing to align with
		}
	}
	r.err = fmt.Errorf("%w (fence %d)", ErrLocked, r.fence)
	return r
}

// arm completes a successful acquire sent at sent: unless the reply came
// after the deadline, it starts the deadline timer and registers the lock
// with the heartbeat.
func (l *Lock) arm(sent, deadline time.Time, fence int64) error {
	if !time.Now().Before(deadline) {
		// The reply came too late to trust the lease. The key is ours, so the
		// next attempt (same token) refreshes it and starts a new deadline.
		return fmt.Errorf("redisleader: acquire %q: reply arrived after the lease's local deadline", l.keys.name)
	}
	l.fence = fence
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
	if testHookArmed != nil {
		testHookArmed(l)
	}
	l.mu.Lock()
	if l.err == nil {
		l.timer = time.AfterFunc(time.Until(l.deadline), l.onDeadline)
	}
	l.mu.Unlock()
	return nil
}

// testHookArmed, when set by a test, runs in arm between registering the
// lock and starting its deadline timer.
var testHookArmed func(*Lock)

// giveBack deletes this acquisition's token after an attempt that did not
// count, best effort. The acquisition goes on with the same token, so
// unlike del it neither overwrites the acquire arguments nor hands the token
// to the stale-token cleanup, which could delete it after a later attempt
// of this acquisition has succeeded with it. A node where the delete failed
// keeps the token until the next attempt takes it again, or, if the
// acquisition gives up, abandon cleans it up.
func (l *Lock) giveBack(ctx context.Context) {
	if l.s.deleteTokens(ctx, []*Lock{l})[0].failed > 0 {
		l.leftover = true
	}
}

// takeover waits out the takeover delay (WithTakeoverDelay) of a fresh
// acquisition while the heartbeat renews it. It returns why the acquisition
// ended if it ended before it could be handed over (a deadline can pass
// even with no delay), or ctx's error or ErrSessionClosed if those ended
// first (the key is then released, by the caller here or by Close).
func (l *Lock) takeover(ctx context.Context) (lost, err error) {
	if d := l.s.cfg.takeoverDelay; d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-l.Done():
		case <-ctx.Done():
			if l.end(ErrReleased) {
				l.s.remove(l)
				l.dispose(ctx, false)
			}
			return nil, ctx.Err()
		case <-l.s.done:
			return nil, ErrSessionClosed
		}
	}
	lost = l.check()
	if errors.Is(lost, ErrSessionClosed) {
		return nil, lost
	}
	return lost, nil
}

// abandon ends an acquisition that will not be returned and returns err,
// joined with lastErr when they differ. If an attempt's outcome was unknown
// (unsure), or a give-back after one failed, our token may be in Redis, or
// get there later (an attempt still on its way): dispose deletes it and has
// the heartbeat keep deleting it until it must have expired, so no phantom
// lock blocks others for a TTL.
func (l *Lock) abandon(ctx context.Context, unsure bool, lastErr, err error) error {
	if unsure || l.leftover {
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
	if ctx.Err() == nil {
		_ = l.del(ctx)
		return
	}
	l.s.work.Add(1) // Close waits for it
	go func() {
		defer l.s.work.Done()
		_ = l.del(context.WithoutCancel(ctx))
	}()
}
