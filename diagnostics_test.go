package redisleader

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader/internal/redisserver"
	"github.com/redisleader/redisleader/internal/syncbuf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRiskyClientIsLogged(t *testing.T) {
	m, _ := newMini(t)
	var buf strings.Builder
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	risky := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer risky.Close()
	newSession(t, risky, WithLogger(logger))
	assert.Contains(t, buf.String(), "ContextTimeoutEnabled is false")

	buf.Reset()
	safe := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	defer safe.Close()
	newSession(t, safe, WithLogger(logger))
	assert.Empty(t, buf.String())
}

// TestServerSettingsAreChecked: the first time a session holds a lock it
// warns about an eviction policy that can evict lock keys and about a Redis
// without persistence; a safe server produces no warning.
func TestServerSettingsAreChecked(t *testing.T) {
	ctx := context.Background()
	srv := redisserver.Start(t)
	c := srv.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	warnings := func() string {
		var buf syncbuf.Buffer
		round, roundDone := rounds()
		s := newSession(t, c, WithTTL(300*time.Millisecond), round,
			WithLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))))
		l, err := s.TryLock(ctx, "settings")
		require.NoError(t, err)
		require.False(t, waitRound(t, roundDone, 5*time.Second)) // the check runs before the first round
		require.NoError(t, s.Close(ctx))
		assert.ErrorIs(t, l.Err(), ErrSessionClosed)
		return buf.String()
	}
	// The test server runs without persistence and with noeviction.
	out := warnings()
	assert.Contains(t, out, "persistence is off")
	assert.NotContains(t, out, "maxmemory-policy")

	require.NoError(t, c.ConfigSet(ctx, "maxmemory-policy", "volatile-ttl").Err())
	require.NoError(t, c.ConfigSet(ctx, "appendonly", "yes").Err())
	out = warnings()
	assert.Contains(t, out, "maxmemory-policy=volatile-ttl")
	assert.NotContains(t, out, "persistence is off")

	require.NoError(t, c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
	assert.Empty(t, warnings())
}
