package lease

import (
	"sync"
	"sync/atomic"

	"github.com/redisleader/redisleader/internal/wire"
)

// A Lease is one acquisition's hold on a name as Redis sees it: its keys,
// its token (128 random bits), its arguments (boxed once, reused by every
// attempt and by the release) and its protocol. An acquisition names its
// keys and protocol, and its first attempt makes the rest (New); its
// success sets Fence; from then on only Leftover changes.
type Lease struct {
	Keys  Keys
	Token string
	Args  Args
	// Fence is the lease's fence once acquired, set by the acquiring
	// goroutine before the lock is delivered.
	Fence int64
	// Proto is how the acquisition keeps the lease in Redis: Plain, a
	// *Fair or a *Candidate.
	Proto Protocol
	// Leftover: a give-back failed somewhere, or an attempt went unanswered
	// on a Redlock node, so this token may be, or get, in Redis after a
	// delete: every delete is then repeated until the token must have
	// expired. Written only by the acquiring goroutine, before the lock is
	// delivered.
	Leftover bool
	// hold is the value Redis holds for the lease, for its native calls
	// (native.go): nil until the first one; a new Held at each change.
	hold atomic.Pointer[Held]
	// first is hold's first value, made once (firstOnce) in the lease
	// itself rather than in an allocation of its own.
	first     Held
	firstOnce sync.Once
	// argv is the buffer of the acquire script's argument vector; only the
	// acquiring goroutine uses it.
	argv [8]any
}

// Args are one lease's arguments, each boxed once: its lock and fence keys,
// its token, the session's TTL in ms, and the value it was taken with (for
// a candidate, the value it campaigned with). They never change, so any
// goroutine may read them; a vector built into a caller's buffer is that
// caller's.
type Args struct {
	Lock, Fence, Token, TTL, Value any
}

// A Protocol is how one acquisition keeps its lease in Redis on one
// server: Plain (the default, node.go), *Fair (a place in the name's
// queue, fair.go) or *Candidate (a priority, candidate.go). It builds the
// lease's script calls; the place runs them. A Redlock session's leases
// are plain ones, which the quorum runs with its own scripts.
type Protocol interface {
	// AcquireCall is l's acquire attempt.
	AcquireCall(l *Lease) wire.Call
	// RenewCall is l's renewal.
	RenewCall(l *Lease) wire.Call
	// ReleaseCall is l's release, which hands the name to heir ("": to
	// nobody named).
	ReleaseCall(l *Lease, heir string) wire.Call
}
