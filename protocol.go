package redisleader

import "github.com/redisleader/redisleader/internal/wire"

// A protocol is how one acquisition keeps its lease in Redis on one server:
// plain (the default, here), fair (a place in the name's queue: *waiter,
// fair.go) or candidate (a priority: priority.go). It builds the
// acquisition's script calls; the place runs them and interprets nothing
// of the mode. Every Lock of an acquisition carries its protocol. A
// Redlock session's leases are plain ones, which the quorum runs with its
// own scripts (redlock.go).
type protocol interface {
	// acquire is l's acquire attempt.
	acquire(l *Lock) wire.Call
	// renew is l's renewal.
	renew(l *Lock) wire.Call
	// release is l's release, which hands the name to heir ("": to
	// nobody named).
	release(l *Lock, heir string) wire.Call
}

// protocolFor is the protocol of an acquisition with waiter w (nil: not
// fair) as candidate c (nil: no priority).
func protocolFor(w *waiter, c *candidacy) protocol {
	var p protocol = plain{}
	if w != nil {
		p = w
	}
	if c != nil {
		p = &candidate{base: p, c: c}
	}
	return p
}

// plain is the default protocol.
type plain struct{}

func (plain) acquire(l *Lock) wire.Call {
	return wire.Call{Script: acquireScript, Argv: l.args.Acquire(&l.argv)}
}

func (plain) renew(l *Lock) wire.Call { return wire.Call{Script: renewScript, Argv: l.args.Renew()} }

func (plain) release(l *Lock, heir string) wire.Call {
	if heir != "" {
		return l.handOffCall(heir, "")
	}
	return wire.Call{Script: releaseScript, Argv: l.args.Release()}
}

// releaseCall is l's release on one server: its protocol's, with the heir
// that ended it (Transfer), if any, as its succession.
func releaseCall(l *Lock) wire.Call { return l.proto.release(l, l.heir()) }
