package redisleader

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader/internal/redisserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// With the renewal blocked by a paused (SIGSTOP) redis-server, the lock ends
// at its local deadline, driven by the timer alone.
func TestDeadlineWhileRedisPaused(t *testing.T) {
	srv := redisserver.Start(t)
	c := srv.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	hook, roundsCh := rounds()
	s := newSession(t, c, WithTTL(time.Second), hook)
	ctx := context.Background()
	l, err := s.TryLock(ctx, "paused")
	require.NoError(t, err)
	require.False(t, waitRound(t, roundsCh, 2*time.Second), "a healthy renewal first")

	srv.Pause(t)
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume(t)
		}
	}()
	d := l.Deadline()
	assert.True(t, l.Held())
	waitClosed(t, l.Done(), 3*time.Second, "Done while Redis is paused")
	late := time.Since(d)
	t.Logf("Done closed %v after the local deadline", late)
	assert.GreaterOrEqual(t, late, time.Duration(0), "never before the deadline")
	assert.Less(t, late, 10*time.Millisecond, "Done closes within 10ms of the deadline")
	assert.ErrorIs(t, l.Err(), ErrExpired)
	assert.False(t, l.Held())

	srv.Resume(t)
	resumed = true
	// The renewals queued during the pause may now run on the server, but the
	// lock stays ended: no resurrection.
	waitRound(t, roundsCh, 2*time.Second)
	assert.ErrorIs(t, l.Err(), ErrExpired)
	assert.False(t, l.Held())
	require.NoError(t, s.Close(ctx))
	checkNoLeaks(t)
}

// Every call is bounded by the call timeout, whatever Redis does: with the
// server stopped, TryLock and Close return within their bounds.
func TestCallsBoundedWhileRedisPaused(t *testing.T) {
	t.Run("default retries", func(t *testing.T) { testCallsBounded(t, 3) })
	t.Run("many slow retries", func(t *testing.T) { testCallsBounded(t, 10) })
}

func testCallsBounded(t *testing.T, retries int) {
	srv := redisserver.Start(t)
	c := srv.Client(t, func(o *redis.Options) {
		o.ContextTimeoutEnabled = true
		o.MaxRetries = retries
		o.MinRetryBackoff, o.MaxRetryBackoff = 200*time.Millisecond, time.Second
	})
	const callTimeout = 100 * time.Millisecond
	s, err := NewSession(c, WithTTL(time.Second), WithCallTimeout(callTimeout))
	require.NoError(t, err)
	ctx := context.Background()
	held, err := s.TryLock(ctx, "bounded-held")
	require.NoError(t, err)

	srv.Pause(t)
	defer srv.Resume(t)

	start := time.Now()
	_, err = s.TryLock(ctx, "bounded-new")
	took := time.Since(start)
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrLocked, "a timeout is not 'held by another'")
	// One acquire attempt plus the best-effort release of its token.
	assert.Less(t, took, 2*callTimeout+50*time.Millisecond, "TryLock took %v", took)

	start = time.Now()
	err = s.Close(ctx)
	took = time.Since(start)
	assert.Error(t, err, "the release on Close cannot reach Redis")
	// A renewal in flight plus the release, each bounded by the call timeout.
	assert.Less(t, took, 2*callTimeout+50*time.Millisecond, "Close took %v", took)
	assert.ErrorIs(t, held.Err(), ErrSessionClosed)
	checkNoLeaks(t)
}
