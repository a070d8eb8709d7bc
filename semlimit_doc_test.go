package redisleader

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisleader/redisleader/internal/redisserver"
	"github.com/redisleader/redisleader/internal/syncbuf"
)

// The limit key has no TTL, and a deleted one (by hand, or evicted under
// allkeys-*) is tampering the set cannot see: the next acquire with room
// stores its own handle's N, and holders under the old N keep their
// permits (docs/locks.md, Semaphores, Limits). A session whose first lease
// is a permit warns about an eviction policy as one holding a lock does.
func TestSemaphoreLimitKeyDeletedAndEvictionWarned(t *testing.T) {
	ctx := context.Background()
	srv := redisserver.Start(t)
	c := srv.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	require.NoError(t, c.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err())
	var buf syncbuf.Buffer
	round, roundDone := rounds()
	s := newSession(t, c, WithTTL(time.Second), round,
		WithLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	old, err := mustSemaphore(t, s, "limited", 1).TryAcquire(ctx)
	require.NoError(t, err)
	require.False(t, waitRound(t, roundDone, 5*time.Second)) // the check runs before the first round
	assert.Contains(t, buf.String(), "maxmemory-policy=allkeys-lru")
	ttl, err := c.PTTL(ctx, "redisleader:{limited}:sem:limit").Result()
	require.NoError(t, err)
	assert.Equal(t, time.Duration(-1), ttl, "the limit key has a TTL")

	other := newSession(t, c, fastOpts()...)
	_, err = mustSemaphore(t, other, "limited", 3).TryAcquire(ctx)
	require.ErrorContains(t, err, "holds N=1, this caller says N=3", "another N while the limit key holds 1")
	require.NoError(t, c.Del(ctx, "redisleader:{limited}:sem:limit").Err())
	more, err := mustSemaphore(t, other, "limited", 3).TryAcquire(ctx)
	require.NoError(t, err, "the next handle with room stores its own N")
	assert.Equal(t, "3", c.Get(ctx, "redisleader:{limited}:sem:limit").Val())
	assert.True(t, old.Held(), "the old holder keeps its permit")
	_, err = mustSemaphore(t, s, "limited", 1).TryAcquire(ctx)
	require.ErrorContains(t, err, "holds N=3, this caller says N=1", "the old N is refused now")
	require.NoError(t, more.Release(ctx))
	require.NoError(t, old.Release(ctx))
}
