package redisleader

import (
	"context"
	"time"

	"github.com/redisleader/redisleader/internal/lease"
)

// A place is where a session's leases live: one Redis server (node, node.go)
// or a majority of independent ones (quorum, in redlock.go). It runs the
// scripts and turns what Redis answered into one outcome per lock; what the
// session does with an outcome (arm a deadline, extend it, lose the lock,
// retry, log) is the same for both, and is written once, in the callers.
type place interface {
	// Acquire makes one acquire attempt for l, bounded by ctx, the call
	// timeout and deadline (the local deadline the lease would get).
	Acquire(ctx context.Context, l *lease.Lease, deadline time.Time) lease.Attempt
	// renew renews every lock once, bounded by ctx, the call timeout and
	// deadline (the earliest of the locks' local deadlines; zero: none).
	renew(ctx context.Context, locks []*Lock, deadline time.Time) []renewal
	// release deletes l's token wherever the key still holds it.
	release(ctx context.Context, l *Lock) deleted
	// releaseAll is release for several locks at once, in one round trip,
	// bounded by ctx, the call timeout and deadline (zero: none).
	releaseAll(ctx context.Context, locks []*Lock, deadline time.Time) []deleted
	// inspect reads who holds k and the TTL left.
	inspect(ctx context.Context, k lease.Keys) (Leader, bool, error)
	// proclaim stores value as l's value, keeping token, fence and TTL,
	// as the seq'th Proclaim of l's term; it reports whether the key still
	// held l's token, and errSuperseded when a later one is stored already.
	proclaim(ctx context.Context, l *Lock, seq int64, value string, deadline time.Time) (bool, error)
	// each runs f for every server at once and waits for all of them.
	each(f func(c Client))
	// supports returns nil if the place can do f, else an error matching
	// ErrInvalid that says why not: the question is asked once, here,
	// never by asserting a place's type.
	supports(f feature) error
}

// A feature is what only a place on one server can do: each needs one fact
// in one place, which a majority of independent nodes is not.
type feature int

const (
	proclaiming  feature = iota // Election.Proclaim
	transferring                // Election.Transfer
	prioritising                // WithPriority, Election.Candidates
)

// renewal is the outcome of one lock's renewal: renewed when lost and err
// are zero.
type renewal struct {
	lost   bool   // Redis says the key no longer holds the token (for a quorum: no quorum can)
	err    error  // the renewal failed: retried until the local deadline
	better string // renewed, and this candidate has a higher priority (priority.go)
}

// deleted is the outcome of one lock's compare-and-delete.
type deleted struct {
	err     error // the delete failed (for a quorum: on a quorum of nodes)
	retry   bool  // it failed somewhere: the token may still be there
	missing bool  // the key did not hold the token (for a quorum: on a quorum)
}
