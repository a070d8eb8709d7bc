package redisgocron

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redisleader/redisleader"
)

// ErrNotLeader is what Elector.IsLeader returns while this instance does not
// lead.
var ErrNotLeader = errors.New("redisgocron: not the leader")

// An Elector is a gocron.Elector on a redisleader Election: from NewElector
// until Close it campaigns in the background (redisleader's Election.Run),
// and IsLeader returns nil exactly while this instance leads and the settle
// delay has passed. IsLeader does no I/O: it reads the current term's Lock,
// whose Held compares the lease's local deadline with the clock, so a leader
// cut off from Redis stops running jobs at that deadline, before Redis can
// hand leadership to another instance. After losing leadership the Elector
// campaigns again. Pass it to gocron.WithDistributedElector. It is safe for
// concurrent use.
type Elector struct {
	election *redisleader.Election
	value    string
	settle   time.Duration
	retry    time.Duration
	logger   *slog.Logger

	term   atomic.Pointer[redisleader.Lock] // the current term, once settled
	cancel context.CancelFunc
	done   chan struct{} // closed when the campaign goroutine has returned

	mu      sync.Mutex
	err     error         // why the campaign ended, once it has
	changed chan struct{} // closed and replaced when a term is published or ends
}

// An ElectorOption configures an Elector.
type ElectorOption func(*Elector)

// WithSettle makes a newly elected instance wait d, holding leadership,
// before IsLeader reports it, so that a tick the former leader ran just
// before it resigned is not run again by the new leader whose timer for the
// same tick fires up to d later (the splay between the schedulers' clocks
// and timers). The default is 0. A takeover after a crash needs no settle:
// the former leader stopped at its lease's local deadline, a TTL·drift +
// margin before Redis let the key go.
func WithSettle(d time.Duration) ElectorOption {
	return func(e *Elector) { e.settle = d }
}

// WithRetryDelay sets how long the Elector waits before campaigning again
// after the campaign failed with an error that redisleader does not retry
// itself (a missing permission, a wrong key type). The default is 1s.
func WithRetryDelay(d time.Duration) ElectorOption {
	return func(e *Elector) { e.retry = d }
}

// WithLogger sets the logger for campaign errors. The default discards them.
func WithLogger(l *slog.Logger) ElectorOption {
	return func(e *Elector) { e.logger = l }
}

// NewElector starts campaigning in the election name of s, publishing value
// (this instance's identity, such as host:port; see Election.Leader). It
// does no I/O itself. Close stops the campaign and resigns. The Elector does
// not own s: close the Elector, then the session; closing the session first
// (or the session failing) ends leadership too, and the Elector then stops
// campaigning (Err says why).
func NewElector(s *redisleader.Session, name, value string, opts ...ElectorOption) (*Elector, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: redisgocron.NewElector: nil session", redisleader.ErrInvalid)
	}
	election, err := s.Election(name)
	if err != nil {
		return nil, err
	}
	e := &Elector{
		election: election,
		value:    value,
		retry:    time.Second,
		logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		done:     make(chan struct{}),
		changed:  make(chan struct{}),
	}
	for _, o := range opts {
		o(e)
	}
	switch {
	case e.settle < 0:
		return nil, fmt.Errorf("%w: redisgocron.WithSettle(%v) is negative", redisleader.ErrInvalid, e.settle)
	case e.retry <= 0:
		return nil, fmt.Errorf("%w: redisgocron.WithRetryDelay(%v) must be positive", redisleader.ErrInvalid, e.retry)
	case e.logger == nil:
		return nil, fmt.Errorf("%w: redisgocron.WithLogger(nil)", redisleader.ErrInvalid)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	go e.campaign(ctx)
	return e, nil
}

// IsLeader returns nil while this instance leads (and has settled), and
// otherwise ErrNotLeader, or once the campaign has ended what Err says
// (ErrClosed, redisleader.ErrSessionClosed). It does no I/O.
func (e *Elector) IsLeader(context.Context) error {
	if l := e.term.Load(); l != nil && l.Held() {
		return nil
	}
	select {
	case <-e.done:
		return e.Err()
	default:
		return ErrNotLeader
	}
}

// Leadership returns the current term's Lock while this instance leads (and
// has settled), or nil. Its Fence is the fencing token to pass to resources
// that jobs write; its Done is closed when the term ends.
func (e *Elector) Leadership() *redisleader.Lock {
	if l := e.term.Load(); l != nil && l.Held() {
		return l
	}
	return nil
}

// WaitLeader blocks until this instance leads (and has settled) and returns
// nil, or returns ctx's error when ctx ends first, or Err once the campaign
// has ended. Leadership may already be over when it returns; IsLeader and
// Leadership say for sure.
func (e *Elector) WaitLeader(ctx context.Context) error {
	for {
		e.mu.Lock()
		changed := e.changed
		e.mu.Unlock()
		if e.IsLeader(ctx) == nil {
			return nil
		}
		select {
		case <-changed:
		case <-e.done:
			return e.Err()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Err returns nil while the Elector campaigns or leads; once its campaign
// has ended it says why: ErrClosed after Close, or
// redisleader.ErrSessionClosed if the session was closed first.
func (e *Elector) Err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

// Close stops campaigning and, if this instance leads, resigns (the key is
// deleted and waiting instances take over at once). It returns when the
// campaign goroutine has ended, or with ctx's error if ctx ends first. Later
// calls return nil once the first has finished.
func (e *Elector) Close(ctx context.Context) error {
	e.cancel()
	select {
	case <-e.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// campaign runs Election.Run until ctx ends or the session closes.
func (e *Elector) campaign(ctx context.Context) {
	defer close(e.done)
	for {
		err := e.election.Run(ctx, e.value, e.lead)
		switch {
		case ctx.Err() != nil:
			e.stop(ErrClosed)
			return
		case errors.Is(err, redisleader.ErrSessionClosed):
			e.stop(err)
			return
		}
		e.logger.Warn("redisgocron: campaign failed; retrying", "election", e.election.Name(), "err", err, "retry", e.retry)
		t := time.NewTimer(e.retry)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			e.stop(ErrClosed)
			return
		}
	}
}

// lead is one term: settle, publish the term, wait for its end.
func (e *Elector) lead(ctx context.Context, l *redisleader.Lock) error {
	if e.settle > 0 {
		t := time.NewTimer(e.settle)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil
		}
	}
	e.publish(l)
	<-ctx.Done()
	e.publish(nil)
	return nil
}

// publish sets the current term (nil: none) and wakes WaitLeader.
func (e *Elector) publish(l *redisleader.Lock) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.term.Store(l)
	close(e.changed)
	e.changed = make(chan struct{})
}

func (e *Elector) stop(err error) {
	e.mu.Lock()
	e.err = err
	e.mu.Unlock()
}
