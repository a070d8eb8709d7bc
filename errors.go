package redisleader

import (
	"errors"
	"fmt"

	"github.com/redisleader/redisleader/internal/lease"
	"github.com/redisleader/redisleader/internal/wire"
)

// Errors returned by this package. Match them with errors.Is: returned errors
// may wrap them together with a cause (a Redis error, or the context's error).
var (
	// ErrInvalid is matched by every error about bad input: a nil client, a
	// bad name, or options that break a rule. Such calls write nothing to Redis.
	ErrInvalid = lease.ErrInvalid

	// ErrLocked is returned by TryLock when another owner holds the key, and
	// by Lock, TryLock and Campaign when this session holds it.
	ErrLocked = lease.ErrLocked

	// ErrLost is matched by both ways of losing ownership without releasing it:
	// ErrNotOwner and ErrExpired.
	ErrLost = errors.New("redisleader: ownership lost")

	// ErrNotOwner: Redis says the key no longer holds this acquisition's token
	// (it was deleted, expired on the server, or taken by another owner).
	// errors.Is(ErrNotOwner, ErrLost) is true.
	ErrNotOwner error = &lostError{"not owner any more (key deleted, expired on the server, or taken)"}

	// ErrExpired: the local deadline passed before a renewal succeeded, so
	// ownership can no longer be assumed (Redis unreachable, slow, or paused).
	// errors.Is(ErrExpired, ErrLost) is true.
	ErrExpired error = &lostError{"local lease deadline passed before a renewal succeeded"}

	// ErrReleased: the lock was released by its owner (Release, or Resign).
	ErrReleased = errors.New("redisleader: released")

	// ErrSessionClosed: the session was closed; blocking calls on it return
	// this, and locks it held end with it.
	ErrSessionClosed = wire.ErrClosed

	// ErrReplication: with WithReplicaAcks, fewer replicas than required
	// acknowledged an acquire within the WAIT timeout, so it was not taken
	// (its key was deleted again). TryLock returns it wrapped; blocking
	// acquisitions retry. A renewal that is not acknowledged is retried until
	// the local deadline, like any other failed renewal.
	ErrReplication = wire.ErrReplication

	// ErrNoLeader is returned by Election.Leader when nobody leads.
	ErrNoLeader = errors.New("redisleader: no leader")

	// ErrNotLeader is returned by Election.Proclaim and Election.Transfer
	// when this session does not lead the election, or its leadership ended
	// while the call ran (the error then also matches why: ErrReleased, say).
	ErrNotLeader = errors.New("redisleader: this session does not lead the election")
)

type lostError struct{ why string }

func (e *lostError) Error() string { return "redisleader: ownership lost: " + e.why }

func (e *lostError) Is(target error) bool { return target == ErrLost }

// invalidf is a bad-input error; it matches ErrInvalid (lease.Invalidf).
func invalidf(format string, args ...any) error { return lease.Invalidf(format, args...) }

// eachOption applies each of opts, options of the interface type kind, in
// order, until apply returns an error; a nil one (which would panic) is an
// error matching ErrInvalid: "<kind> must not be nil".
func eachOption[O comparable](kind string, opts []O, apply func(O) error) error {
	var none O
	for _, o := range opts {
		if o == none {
			return invalidf("%s must not be nil", kind)
		}
		if err := apply(o); err != nil {
			return err
		}
	}
	return nil
}

// heldError: the session asked for a name it holds itself.
type heldError struct{ name string }

func (e *heldError) Error() string {
	return fmt.Sprintf("redisleader: %q is already held by this session (locks are not reentrant, and a session never waits for itself)", e.name)
}

func (e *heldError) Is(target error) bool { return target == ErrLocked }

// errNilLock is what Err and Release say on a nil *Lock.
var errNilLock = invalidf("nil *Lock: the acquire that should have returned it failed (check its error)")
