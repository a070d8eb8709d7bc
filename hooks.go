package redisleader

import "time"

// Hooks are callbacks through which a session reports what happens to the
// names it holds and observes, for metrics and alerts (see WithHooks, and
// the adapters/prometheus and adapters/otel modules). A nil field is never
// called, and a session without hooks pays nothing for them. Hooks run
// synchronously: on the heartbeat, deadline timers, Observe goroutines, and
// any caller of a method that can start or end a lock (Held, Err included);
// Acquired, Lost and Released under that lock's mutex. They must not block
// or call into this package. They may run concurrently, for different names
// and sessions. An acquisition reports Acquired once, when handed to its
// caller, then exactly one of Lost or Released; one that ended before
// (WithTakeoverDelay) reports nothing. A panic in a hook is not recovered.
type Hooks struct {
	// Acquired: Lock, TryLock, Campaign or Run acquired a name and is handing
	// it to its caller.
	Acquired func(AcquireEvent)
	// Lost: an acquisition ended because ownership was lost; Cause is
	// ErrNotOwner or ErrExpired.
	Lost func(EndEvent)
	// Released: an acquisition ended because it was given up; Cause is
	// ErrReleased (Release, or Run resigning) or ErrSessionClosed (Close).
	Released func(EndEvent)
	// RenewalRound: the heartbeat finished a renewal round trip for at least
	// one live lock: a slice of a round, which is all the locks of a session
	// holding up to 100, or a retry of a failed slice (whether or not the
	// renewals succeeded; one cut short by Close reports no failures).
	RenewalRound func(RenewalEvent)
	// LeaderChanged: an Observe goroutine is sending a state on its channel:
	// first the current one (Initial), then one per change. Each Observe
	// call reports on its own.
	LeaderChanged func(LeaderEvent)
}

// An AcquireEvent describes an acquisition handed to its caller.
type AcquireEvent struct {
	Name  string
	Value string // the candidate's value; empty for a plain lock
	Fence int64
	// Wait is the time from the call to Lock, TryLock or Campaign (or Run's
	// campaign) until it returned the lock, including WithTakeoverDelay.
	Wait time.Duration
}

// An EndEvent describes the end of an acquisition that was handed to its
// caller.
type EndEvent struct {
	Name  string
	Value string
	Fence int64
	Held  time.Duration // from the hand-over to the end
	Cause error         // why it ended: what Lock.Err returns from now on
}

// A RenewalEvent describes one renewal round trip of a session's heartbeat.
type RenewalEvent struct {
	Duration time.Duration // from the start of the round trip to its outcome
	Locks    int           // locks the round trip renewed (or tried to)
	// Failures is the number of those locks whose renewal failed with an
	// error (they are retried soon; one that cannot be renewed before its
	// local deadline is then Lost with ErrExpired). A "not owner" reply is
	// not a failure but a loss, reported by Lost.
	Failures int
}

// A LeaderEvent is a leader state that Observe is sending.
type LeaderEvent struct {
	Name    string
	Leader  Leader // Fence 0: nobody leads
	Initial bool   // the first state this Observe call sends, not a change
}

// WithHooks adds hooks to the session (see Hooks for the contract). It may
// be given several times: each hook of every WithHooks is called, in the
// order the options were given.
func WithHooks(h Hooks) Option {
	return optionFunc(func(c *config) {
		c.hooks = Hooks{
			Acquired:      chain(c.hooks.Acquired, h.Acquired),
			Lost:          chain(c.hooks.Lost, h.Lost),
			Released:      chain(c.hooks.Released, h.Released),
			RenewalRound:  chain(c.hooks.RenewalRound, h.RenewalRound),
			LeaderChanged: chain(c.hooks.LeaderChanged, h.LeaderChanged),
		}
	})
}

// chain returns a hook that calls f, then g; nil ones are left out.
func chain[E any](f, g func(E)) func(E) {
	switch {
	case f == nil:
		return g
	case g == nil:
		return f
	}
	return func(e E) { f(e); g(e) }
}

// observed reports a state an observer of name is sending.
func (h *Hooks) observed(name string, l Leader, initial bool) {
	if h.LeaderChanged != nil {
		h.LeaderChanged(LeaderEvent{Name: name, Leader: l, Initial: initial})
	}
}
