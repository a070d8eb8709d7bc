package redisleader

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A Resign that lands just as Run's Campaign returns must never delete the
// key before onElected has run and returned: Run registers the term before
// the acquisition is handed over.
func TestResignRacingRun(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		s := newSession(t, b.client, WithTTL(10*time.Second))
		e := mustElection(t, s, "racy")
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		resigners := make(chan struct{}, 2)
		for range 2 {
			go func() {
				defer func() { resigners <- struct{}{} }()
				for ctx.Err() == nil {
					_ = e.Resign(context.Background())
				}
			}()
		}
		var terms, gone atomic.Int64
		_ = e.Run(ctx, "me", func(lctx context.Context, l *Lock) error {
			terms.Add(1)
			if !strings.HasPrefix(b.get(l.Key()), l.token+"\n") {
				gone.Add(1)
			}
			<-lctx.Done()
			return nil
		})
		<-resigners
		<-resigners
		require.Greater(t, terms.Load(), int64(10), "too few terms to race")
		assert.Zero(t, gone.Load(), "onElected started with its key already deleted in %d of %d terms", gone.Load(), terms.Load())
	})
}

// Close and Resign called from a nested Run's onElected, with its context,
// neither wait for the terms they are called from nor lose their own effect.
func TestNestedRunCloseAndResign(t *testing.T) {
	_, c := newMini(t)
	t.Run("Resign the outer term", func(t *testing.T) {
		s := newSession(t, c, fastOpts()...)
		a, b := mustElection(t, s, "outer"), mustElection(t, s, "inner")
		res := make(chan error, 1)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			_ = a.Run(ctx, "a", func(actx context.Context, _ *Lock) error {
				return b.Run(actx, "b", func(bctx context.Context, _ *Lock) error {
					res <- a.Resign(bctx)
					<-bctx.Done()
					return nil
				})
			})
		}()
		assert.NoError(t, recvWithin(t, res, 3*time.Second, "the outer Resign from the inner onElected"))
	})
	t.Run("Close", func(t *testing.T) {
		s, err := NewSession(c, fastOpts()...)
		require.NoError(t, err)
		a, b := mustElection(t, s, "outer2"), mustElection(t, s, "inner2")
		closed := make(chan error, 1)
		go func() {
			_ = a.Run(context.Background(), "a", func(actx context.Context, _ *Lock) error {
				return b.Run(actx, "b", func(bctx context.Context, _ *Lock) error {
					closed <- s.Close(bctx)
					return nil
				})
			})
		}()
		assert.NoError(t, recvWithin(t, closed, 3*time.Second, "Close from the inner onElected"))
	})
}

// The Campaign idiom `defer lead.Release(context.Background())` inside
// onElected does not hang: Lock.Release of a Run term ends it without
// waiting for Run's delete (Election.Resign is the waiting form).
func TestReleaseInsideOnElectedDoesNotWait(t *testing.T) {
	_, c := newMini(t)
	s := newSession(t, c, fastOpts()...)
	e := mustElection(t, s, "defer")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	elected, runDone := make(chan struct{}, 1), make(chan error, 1)
	go func() {
		runDone <- e.Run(ctx, "a", func(_ context.Context, lead *Lock) error {
			defer lead.Release(context.Background())
			select {
			case elected <- struct{}{}:
			default:
			}
			return nil
		})
	}()
	recvWithin(t, elected, 2*time.Second, "elected")
	cancel()
	assert.ErrorIs(t, recvWithin(t, runDone, 2*time.Second, "Run after its ctx ended"), context.Canceled)
}

// stallProclaim holds the proclaim script until its call's context ends,
// telling the test when one is held.
type stallProclaim struct {
	*redis.Client
	held chan struct{}
}

func (c *stallProclaim) Process(ctx context.Context, cmd redis.Cmder) error {
	if a := cmd.Args(); len(a) > 1 && (a[1] == proclaimScript.sha || a[1] == proclaimScript.src) {
		c.held <- struct{}{}
		<-ctx.Done()
		cmd.SetErr(ctx.Err())
		return cmd.Err()
	}
	return c.Client.Process(ctx, cmd)
}

// A Proclaim queued behind another one in flight returns with its context.
func TestProclaimQueuedReturnsWithItsContext(t *testing.T) {
	_, rc := newMini(t)
	c := &stallProclaim{Client: rc, held: make(chan struct{}, 1)}
	s := newSession(t, c, WithTTL(12*time.Second))
	e := mustElection(t, s, "p")
	_, err := e.Campaign(context.Background(), "v0")
	require.NoError(t, err)
	go func() { _ = e.Proclaim(context.Background(), "v1") }()
	recvWithin(t, c.held, 2*time.Second, "the first Proclaim in flight")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	assert.ErrorIs(t, e.Proclaim(ctx, "v2"), context.DeadlineExceeded)
	assert.Less(t, time.Since(start), 300*time.Millisecond, "the queued Proclaim outlived its context")
}

// Close of one session, called with the onElected context of another
// session's Run, still returns when that context ends.
func TestCloseWithAnotherSessionsTermContext(t *testing.T) {
	_, c := newMini(t)
	s1 := newSession(t, c, fastOpts()...)
	s2, err := NewSession(c, fastOpts()...)
	require.NoError(t, err)
	stuck, elected2 := make(chan struct{}), make(chan struct{}, 1)
	defer close(stuck)
	go func() {
		_ = mustElection(t, s2, "two").Run(context.Background(), "x", func(context.Context, *Lock) error {
			elected2 <- struct{}{}
			<-stuck
			return nil
		})
	}()
	recvWithin(t, elected2, 2*time.Second, "s2 elected")
	ctx, cancel := context.WithCancel(context.Background())
	res, elected1 := make(chan error, 1), make(chan struct{}, 1)
	go func() {
		_ = mustElection(t, s1, "one").Run(ctx, "y", func(lctx context.Context, _ *Lock) error {
			elected1 <- struct{}{}
			res <- s2.Close(lctx)
			return nil
		})
	}()
	recvWithin(t, elected1, 2*time.Second, "s1 elected")
	cancel() // lctx ends; s2's onElected never returns
	assert.ErrorIs(t, recvWithin(t, res, 2*time.Second, "s2.Close after lctx ended"), context.Canceled)
}
