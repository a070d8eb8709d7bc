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

// poolClient is a client with a pool of one connection, as an application
// may configure it, and a PoolTimeout far above the call timeouts below.
func poolClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 1, PoolTimeout: 2 * time.Second})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// holdConn takes the pool's only connection, as an application's blocking
// BLPOP on the same client would, and returns the function that gives it
// back.
func holdConn(t *testing.T, c *redis.Client) (release func()) {
	t.Helper()
	conn := c.Conn()
	require.NoError(t, conn.Ping(context.Background()).Err())
	return func() { _ = conn.Close() }
}

// A call waiting for a connection of a full pool ends at its bound, not at
// the client's PoolTimeout (2s here).
func TestPoolExhaustedCallsBounded(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		const callTimeout = 100 * time.Millisecond
		c := poolClient(t, b.addr)
		s := newSession(t, c, WithTTL(time.Second), WithCallTimeout(callTimeout))
		release := holdConn(t, c)
		defer release()

		// An acquire, then the release of its token (its outcome is unknown).
		start := time.Now()
		_, err := s.TryLock(context.Background(), "pool-trylock")
		took := time.Since(start)
		t.Logf("TryLock returned after %v: %v", took, err)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Less(t, took, 400*time.Millisecond, "TryLock waited for the pool")

		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		start = time.Now()
		_, err = s.Lock(ctx, "pool-lock")
		took = time.Since(start)
		t.Logf("Lock(200ms) returned after %v: %v", took, err)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Less(t, took, 500*time.Millisecond, "Lock waited for the pool")

		el, err := s.Election("pool-election")
		require.NoError(t, err)
		start = time.Now()
		_, err = el.Leader(context.Background())
		took = time.Since(start)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Less(t, took, 300*time.Millisecond, "Leader waited for the pool")

		release()
		l, err := s.TryLock(context.Background(), "pool-trylock")
		require.NoError(t, err, "the session works once the connection is back")
		require.NoError(t, l.Release(context.Background()))
	})
}

// A renewal round stuck on a full pool ends at the lease's local deadline,
// not at PoolTimeout, and the lease ends there by its timer. The timings make
// the third failed round start within a call timeout of the deadline: rounds
// start 333ms after the acquire and fail after 250ms, retried after 1ms.
func TestPoolExhaustedRenewalBounded(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		type round struct {
			at     time.Time
			held   int
			failed bool
		}
		rounds := make(chan round, 100)
		c := poolClient(t, b.addr)
		s := newSession(t, c, WithTTL(time.Second), WithCallTimeout(250*time.Millisecond),
			WithRetryInterval(time.Millisecond), WithRetryJitter(0),
			withRoundHook(func(held int, failed bool) {
				select {
				case rounds <- round{time.Now(), held, failed}:
				default:
				}
			}))
		l, err := s.TryLock(context.Background(), "pool-renew")
		require.NoError(t, err)
		// The session's first renewal asks the server for the native
		// commands in a pipeline, which go-redis v9.23 sends while the
		// pool's one connection is taken (a plain command waits for it): it
		// must be done before the pool is taken. The deadline is the
		// renewed one.
		select {
		case r := <-rounds:
			require.False(t, r.failed, "the first round, before the pool is taken")
		case <-time.After(3 * time.Second):
			t.Fatal("no first renewal round")
		}
		release := holdConn(t, c)
		defer release()

		d := l.Deadline()
		waitClosed(t, l.Done(), 3*time.Second, "lock Done while the pool is exhausted")
		assert.ErrorIs(t, l.Err(), ErrExpired)
		// The first round to end near the deadline is the one in flight there.
		for {
			var r round
			select {
			case r = <-rounds:
			case <-time.After(3 * time.Second):
				t.Fatal("no renewal round ended after the deadline")
			}
			if r.at.Before(d.Add(-50 * time.Millisecond)) {
				assert.True(t, r.failed, "a round before the deadline cannot renew")
				continue
			}
			t.Logf("the round in flight at the deadline ended %v after it (held %d, failed %v)", r.at.Sub(d), r.held, r.failed)
			assert.Less(t, r.at.Sub(d), 100*time.Millisecond, "the round waited for the pool past the lease deadline")
			assert.True(t, r.failed && r.held == 1)
			break
		}
		release()
		l, err = s.TryLock(context.Background(), "pool-renew-after") // the expired key may still be in Redis
		require.NoError(t, err, "the session works once the connection is back")
		require.NoError(t, l.Release(context.Background()))
	})
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
