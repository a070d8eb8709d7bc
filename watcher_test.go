package redisleader

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader/internal/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hungSession returns a session (with fastOpts) on a hungServer.
func hungSession(t testing.TB) *Session {
	t.Helper()
	addr, _ := hungServer(t, false)
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return newSession(t, c, fastOpts()...)
}

// Against a server that accepts connections and never answers, every
// blocking call returns when its context ends, and Close stops the session's
// goroutines within about a call timeout, not after go-redis's own socket
// timeouts (seconds).
func TestWatcherHungServer(t *testing.T) {
	s := hungSession(t)
	const wait = 200 * time.Millisecond
	// An acquisition whose last attempt timed out leaves its token's delete
	// to the background once its context has ended (Lock.abandon).
	acquire := wait + slack
	e := mustElection(t, s, "hung")
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		d := timed(func() {
			for range e.Observe(ctx) {
				t.Error("Observe reported a leader of a server that never answers")
			}
		})
		cancel()
		t.Logf("Observe closed after %v", d)
		assert.Less(t, d, wait+slack, "Observe #%d", i)

		ctx, cancel = context.WithTimeout(context.Background(), wait)
		var err error
		d = timed(func() { _, err = s.Lock(ctx, "hung") })
		cancel()
		t.Logf("Lock returned after %v", d)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Less(t, d, acquire, "Lock #%d", i)

		ctx, cancel = context.WithTimeout(context.Background(), wait)
		d = timed(func() { _, err = e.Campaign(ctx, "me") })
		cancel()
		t.Logf("Campaign returned after %v", d)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Less(t, d, acquire, "Campaign #%d", i)
	}

	// Close(context.Background()) returns once every goroutine of the
	// session has stopped: within about a call timeout (the release of the
	// abandoned tokens, while the watcher's connection setup in progress
	// runs out).
	d := timed(func() { _ = s.Close(context.Background()) })
	t.Logf("Close returned after %v", d)
	assert.Less(t, d, fastCallTimeout+slack)
	assert.Empty(t, waitNoLeaks(slack), "goroutines outlived Close")
}

// A blocking call waiting on a hung server returns ErrSessionClosed at once
// when the session closes, and Close(ctx) returns within ctx.
func TestWatcherHungServerCloseWhileWaiting(t *testing.T) {
	s := hungSession(t)
	errc := make(chan error, 1)
	go func() {
		_, err := s.Lock(context.Background(), "hung")
		errc <- err
	}()
	// Start the watcher, in case Lock has not yet.
	sub, err := s.wire.Subscribe(context.Background(), "redisleader:{other}:ch", nil)
	require.NoError(t, err)
	sub.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	d := timed(func() { _ = s.Close(ctx) })
	assert.Less(t, d, 50*time.Millisecond+slack, "Close(ctx)")
	// Lock's attempt in flight ends at the call timeout, and abandoning it
	// deletes its token, bounded by the call timeout again.
	assert.ErrorIs(t, recvWithin(t, errc, 2*fastCallTimeout+slack, "Lock's return"), ErrSessionClosed)
	assert.Empty(t, waitNoLeaks(2*fastCallTimeout+slack), "goroutines outlived Close")
}

// The watcher's memory is bounded by the names in use, not by time: a
// session with a long TTL that waits on many names one after another keeps
// only a few idle channels subscribed, and none once they have been idle
// for min(TTL, wire.MaxIdleTime).
func TestWatcherIdleChannelsBounded(t *testing.T) {
	_, c := newMini(t)
	s := newSession(t, c, WithTTL(time.Hour))
	ctx := context.Background()
	for i := range 1000 {
		l, err := s.Lock(ctx, fmt.Sprint("name-", i))
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
	}
	kept := s.wire.Channels
	assert.LessOrEqual(t, kept(), wire.MaxIdleChannels, "channels kept by the watcher")
	waitSubscribed(t, c, wire.MaxIdleChannels)

	s.wire.PruneIdle(time.Now().Add(wire.MaxIdleTime))
	assert.Zero(t, kept(), "channels kept after wire.MaxIdleTime")
	waitSubscribed(t, c, 0)
}

// waitSubscribed waits until the server has at most n channels subscribed.
func waitSubscribed(t testing.TB, c *redis.Client, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		chans, err := c.PubSubChannels(context.Background(), "*").Result()
		require.NoError(t, err)
		if len(chans) <= n {
			return
		}
		require.True(t, time.Now().Before(deadline), "%d channels still subscribed on the server, want at most %d", len(chans), n)
		runtimeYield()
	}
}
