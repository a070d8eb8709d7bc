// Package probe lets this module's reliability tests watch the library's
// lease events as they happen: an acquisition handed to its caller, each
// accepted renewal, the end of an acquisition. At each of these points the
// library loads Hook and calls it if a test installed one with Set; nothing
// is recorded, and a point costs one atomic load, unless a test did. Being internal, it cannot be used from
// outside this module.
package probe

import (
	"sync/atomic"
	"time"
)

// Kinds of events.
const (
	Acquired = "acquired" // the acquisition is handed to its caller
	Renewed  = "renewed"  // a renewal's reply was accepted and moved the deadline
	Ignored  = "ignored"  // a renewal's reply arrived after the deadline and was ignored
	Ended    = "ended"    // the acquisition ended (release started, loss, close)
)

// An Event is one lease event of one acquisition.
type Event struct {
	Kind     string
	Name     string    // the lock or election name
	Value    string    // the candidate's value (empty for a plain lock)
	Token    string    // the acquisition's random token
	Fence    int64     // its fencing token
	At       time.Time // when it happened (reply arrival for Acquired/Renewed)
	Sent     time.Time // send time of the acquire or renew behind the deadline
	Deadline time.Time // the local deadline after the event
	Reason   error     // Ended: why (ErrReleased, ErrNotOwner, ...)
}

// Hook is the installed hook (Set), nil when none. The library's one emit
// point (lock.go's emitLocked) loads it and builds an event only when it is
// set, so that the check reads where the event is made.
var Hook atomic.Pointer[func(Event)]

// Set installs f as the hook (nil removes it) and returns a function that
// restores the previous one. f runs on the library's goroutines, sometimes
// with a lock's mutex held: it must be quick and must not call back into
// the library.
func Set(f func(Event)) (restore func()) {
	var p *func(Event)
	if f != nil {
		p = &f
	}
	old := Hook.Swap(p)
	return func() { Hook.Store(old) }
}
