package redisgocron

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/redisleader/redisleader"
)

// DefaultPrefix is the prefix of lock names a Locker uses unless
// WithPrefix sets another.
const DefaultPrefix = "gocron:"

// ErrClosed is returned by Locker.Lock after Close, and by Elector.IsLeader
// after Close.
var ErrClosed = errors.New("redisgocron: closed")

// A Locker is a gocron.Locker on a redisleader Session: each run of a job
// takes the lock named LockName(prefix, job name) with one TryLock (it never
// waits: a job whose lock another scheduler holds is skipped for this tick),
// and keeps it, renewed by the session's heartbeat, until the job has
// returned and at least MinHold has passed since it was acquired, so that a
// scheduler whose timer for the same tick fires a little later finds the
// lock still held. Pass it to gocron.WithDistributedLocker or
// gocron.WithDistributedJobLocker. It is safe for concurrent use.
type Locker struct {
	s       *redisleader.Session
	minHold time.Duration
	prefix  string

	mu      sync.Mutex
	closed  bool
	pending map[*lock]struct{} // unlocked, waiting for MinHold to pass
	idle    chan struct{}      // closed when pending becomes empty after Close
	wg      sync.WaitGroup     // releases in flight
}

// A LockerOption configures a Locker.
type LockerOption func(*Locker)

// WithPrefix sets the prefix of lock names (DefaultPrefix by default). Use
// one prefix per group of schedulers that share jobs; it must follow
// redisleader's naming rules (valid UTF-8, printable, no '{' or '}') and be
// at most 446 bytes.
func WithPrefix(prefix string) LockerOption {
	return func(l *Locker) { l.prefix = prefix }
}

// NewLocker returns a Locker that takes its locks in s. minHold is how long
// after its acquisition a lock is kept at least, however quickly the job
// returns (see the README for how to choose it: above the splay between the
// schedulers' timers for one tick, below the job's interval minus that
// splay). It must not be negative. The Locker does not own s: close the
// Locker, then the session.
func NewLocker(s *redisleader.Session, minHold time.Duration, opts ...LockerOption) (*Locker, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: redisgocron.NewLocker: nil session", redisleader.ErrInvalid)
	}
	if minHold < 0 {
		return nil, fmt.Errorf("%w: redisgocron.NewLocker: minHold %v is negative", redisleader.ErrInvalid, minHold)
	}
	l := &Locker{s: s, minHold: minHold, prefix: DefaultPrefix, pending: make(map[*lock]struct{})}
	for _, o := range opts {
		o(l)
	}
	if err := checkPrefix(l.prefix); err != nil {
		return nil, fmt.Errorf("%w: %v", redisleader.ErrInvalid, err)
	}
	return l, nil
}

// MinHold returns the minimum hold the Locker was created with.
func (l *Locker) MinHold() time.Duration { return l.minHold }

// Lock makes one attempt to take the lock of the job key (gocron passes the
// job's name). It returns an error matching redisleader.ErrLocked if another
// scheduler holds it, or this Locker's session still holds it from an
// earlier run (its MinHold has not passed, or the job is still running);
// gocron then skips this run and calls the job's AfterLockError listener.
// Other errors are Redis errors, redisleader.ErrSessionClosed and ErrClosed.
func (l *Locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	rl, err := l.s.TryLock(ctx, LockName(l.prefix, key))
	if err != nil {
		return nil, err
	}
	// MinHold counts from the reply, not the request: the longer of the two.
	return &lock{l: l, rl: rl, holdUntil: time.Now().Add(l.minHold)}, nil
}

// Close waits until every lock whose job has returned has been held for its
// MinHold and released, then returns; if ctx ends first, it releases them at
// once and returns ctx's error. Locks of jobs still running stay held until
// their Unlock (which then releases at once) or the session's Close. After
// Close, Lock returns ErrClosed. Close does not close the session.
func (l *Locker) Close(ctx context.Context) error {
	l.mu.Lock()
	l.closed = true
	if l.idle == nil {
		l.idle = make(chan struct{})
		if len(l.pending) == 0 {
			close(l.idle)
		}
	}
	idle := l.idle
	l.mu.Unlock()
	var err error
	select {
	case <-idle:
	case <-ctx.Done():
		err = ctx.Err()
		l.mu.Lock()
		var now []*lock
		for p := range l.pending {
			if p.timer.Stop() {
				now = append(now, p)
			}
		}
		l.mu.Unlock()
		for _, p := range now {
			p.release()
		}
	}
	l.wg.Wait()
	return err
}

// lock is one held run of a job.
type lock struct {
	l         *Locker
	rl        *redisleader.Lock
	holdUntil time.Time
	once      sync.Once
	timer     *time.Timer // set under l.mu while pending
}

// Unlock is called by gocron when the job has returned. If MinHold has
// passed since the acquisition it releases the lock at once; otherwise it
// returns at once and a timer releases it when MinHold has passed (the
// session renews it until then). A lock that was lost meanwhile (see
// redisleader.Lock.Err) is not an error here: nothing is left to release.
// The release does not depend on ctx (gocron passes the job's context, which
// ends when the job is removed or the scheduler shuts down); it is bounded by
// the session's call timeout. Later calls do nothing.
func (k *lock) Unlock(ctx context.Context) error {
	var err error
	k.once.Do(func() {
		left := time.Until(k.holdUntil)
		l := k.l
		l.mu.Lock()
		if left <= 0 || l.closed {
			l.wg.Add(1)
			l.mu.Unlock()
			err = k.releaseNow(context.WithoutCancel(ctx))
			return
		}
		l.pending[k] = struct{}{}
		l.wg.Add(1)
		k.timer = time.AfterFunc(left, k.release)
		l.mu.Unlock()
	})
	return err
}

// release runs when MinHold has passed (or Close gave up waiting).
func (k *lock) release() {
	l := k.l
	l.mu.Lock()
	delete(l.pending, k)
	if l.idle != nil && len(l.pending) == 0 {
		select {
		case <-l.idle:
		default:
			close(l.idle)
		}
	}
	l.mu.Unlock()
	_ = k.releaseNow(context.Background())
}

// releaseNow releases the lock; the caller has done l.wg.Add(1).
func (k *lock) releaseNow(ctx context.Context) error {
	defer k.l.wg.Done()
	err := k.rl.Release(ctx)
	if errors.Is(err, redisleader.ErrLost) || errors.Is(err, redisleader.ErrSessionClosed) {
		return nil // nothing left to release
	}
	return err
}
