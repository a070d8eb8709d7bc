package redisleader

import (
	"context"
	"time"

	"github.com/redisleader/redisleader/internal/lease"
)

// A place is where a session's leases live: one Redis server (node, session.go)
// or a majority of independent ones (quorum: lease.Quorum). It runs the
// scripts and turns what Redis answered into one outcome per lock; what the
// session does with an outcome (arm a deadline, extend it, lose the lock,
// retry, log) is the same for both, and is written once, in the callers.
type place interface {
	// Acquire makes one acquire attempt for l, bounded by ctx, the call
	// timeout and deadline (the local deadline the lease would get).
	Acquire(ctx context.Context, l *lease.Lease, deadline time.Time) lease.Attempt
	// Renew renews every lease once, bounded by ctx, the call timeout and
	// deadline (the earliest of the leases' local deadlines; zero: none).
	Renew(ctx context.Context, leases []*lease.Lease, deadline time.Time) []lease.Renewal
	// Release deletes r's token wherever the key still holds it (or hands
	// the name to r.Heir).
	Release(ctx context.Context, r lease.Ending) lease.Deleted
	// ReleaseAll is Release for several leases at once, in one round trip,
	// bounded by ctx, the call timeout and deadline (zero: none).
	ReleaseAll(ctx context.Context, rs []lease.Ending, deadline time.Time) []lease.Deleted
	// Inspect reads who holds k and the TTL left.
	Inspect(ctx context.Context, k lease.Keys) (lease.Inspected, error)
	// Proclaim stores value as l's value, keeping token, fence and TTL,
	// as the seq'th Proclaim of l's term; it reports whether the key still
	// held l's token, and lease.ErrSuperseded when a later one is stored already.
	Proclaim(ctx context.Context, l *lease.Lease, seq int64, value string, deadline time.Time) (bool, error)
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
	permitting                  // Semaphore, RWLock: a set of permits or grants is one fact
	nFeatures                   // how many features there are
)
