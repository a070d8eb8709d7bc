package redisleader

import (
	"context"
	"fmt"
	"time"

	"github.com/redisleader/redisleader/internal/lease"
)

// semaphore.go: the Semaphore handle, its options, Holders and the limit's
// change. Its Acquire and TryAcquire are in acquire.go, beside Lock and
// TryLock, so that one acquisition reads in one file before it reaches the
// lease floor (internal/lease/semaphore.go: the keys, the protocol).

// A Semaphore is a session's handle on a name of which at most N permits
// are held at once, across sessions. A permit is a *Lock: renewed by the
// heartbeat, fenced (fences increase across the name's permits), ended at
// its deadline (Done, Err), released by Release or Close; a dead holder's
// permit is free once its lease ends, within a TTL by the server's clock.
// A session may hold several. N is the name's contract: the first acquire
// stores it, a handle with another N fails naming both values (not
// retried), and SetSemaphoreLimit changes it. Redlock sessions refuse
// semaphores; a fair session's are not fair. Safe for concurrent use.
type Semaphore struct {
	s     *Session
	keys  lease.Keys
	limit int
	value string
	args  *lease.Permits // boxed once for every acquire
}

// A SemaphoreOption configures a Semaphore (Session.Semaphore).
type SemaphoreOption interface {
	applySemaphore(*Semaphore) error
}

type semaphoreOptionFunc func(*Semaphore) error

func (f semaphoreOptionFunc) applySemaphore(m *Semaphore) error { return f(m) }

// WithPermitValue publishes value with each permit the Semaphore acquires,
// for Holders to show (at most 64 KiB; the default is empty).
func WithPermitValue(value string) SemaphoreOption {
	return semaphoreOptionFunc(func(m *Semaphore) error {
		if err := checkValue(value); err != nil {
			return fmt.Errorf("WithPermitValue: %w", err)
		}
		m.value = value
		return nil
	})
}

// errRedlockSemaphore refuses a semaphore on a Redlock session.
var errRedlockSemaphore = invalidf("semaphores are not available on a Redlock session (a set of permits on a majority of independent nodes is not one fact: two quorums could each admit N)")

// Semaphore returns the session's handle on the semaphore name with limit
// N permits. It does no I/O. A bad name, a limit outside 1 to 1,000,000,
// a bad option or a Redlock session return an error matching ErrInvalid.
func (s *Session) Semaphore(name string, limit int, opts ...SemaphoreOption) (*Semaphore, error) {
	k, err := semaphoreArgs(s, name, limit)
	if err != nil {
		return nil, err
	}
	m := &Semaphore{s: s, keys: k, limit: limit}
	if err := eachOption("SemaphoreOption", opts, func(o SemaphoreOption) error { return o.applySemaphore(m) }); err != nil {
		return nil, err
	}
	m.args = lease.NewPermits(k, limit)
	return m, nil
}

// semaphoreArgs checks a semaphore's name and limit, and that the session
// can hold one, and derives its keys.
func semaphoreArgs(s *Session, name string, limit int) (lease.Keys, error) {
	k, err := lease.SemKeysOf(name)
	if err == nil {
		err = lease.CheckLimit(limit)
	}
	if err == nil {
		err = s.unsupported[permitting]
	}
	return k, err
}

// Name returns the semaphore's name.
func (m *Semaphore) Name() string { return m.keys.Name }

// Limit returns the limit N the handle was made with.
func (m *Semaphore) Limit() int { return m.limit }

// A SemaphoreHolder is a permit held now, as Holders reads it.
type SemaphoreHolder struct {
	Value string        // published with WithPermitValue
	Fence int64         // the permit's fence
	TTL   time.Duration // left on its lease on the server when read
}

// Holders reads the permits held now, in the order their leases end, and
// the limit stored for the name (0 if none is: nobody acquired since it
// was made). Tokens are never shown. Data this package did not write in
// the semaphore's keys is an error naming the key.
func (m *Semaphore) Holders(ctx context.Context) (holders []SemaphoreHolder, limit int, err error) {
	if err := m.s.enter(); err != nil {
		return nil, 0, err
	}
	defer m.s.work.Done()
	cl := lease.HoldersCall(m.keys)
	permits, limit, err := lease.DecodeHolders(m.keys, m.s.wire.Combiner().Call(ctx, time.Time{}, cl.Script, cl.Argv))
	if err != nil {
		return nil, 0, fmt.Errorf("redisleader: holders of semaphore %q: %w", m.keys.Name, err)
	}
	for _, p := range permits {
		holders = append(holders, SemaphoreHolder(p))
	}
	return holders, limit, nil
}

// SetSemaphoreLimit makes limit the semaphore name's limit N, and returns
// the one it replaced (0: none stored): the one way to change it. The
// holders keep their permits; under a lower limit no permit is given
// until fewer than the new N are held. Handles made with the old limit
// fail from then on (make new ones); waiters are woken to try again. Bad
// input returns an error matching ErrInvalid, nothing written.
func (s *Session) SetSemaphoreLimit(ctx context.Context, name string, limit int) (previous int, err error) {
	k, err := semaphoreArgs(s, name, limit)
	if err != nil {
		return 0, err
	}
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.work.Done()
	cl := lease.LimitCall(k, limit)
	previous, err = s.wire.Combiner().Call(ctx, time.Time{}, cl.Script, cl.Argv).Int()
	if err != nil {
		return 0, fmt.Errorf("redisleader: set the limit of semaphore %q: %w", name, err)
	}
	return previous, nil
}
