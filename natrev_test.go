package redisleader

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisleader/redisleader/internal/lease"
	"github.com/redisleader/redisleader/internal/redisserver"
)

// Defects of the native path (internal/lease/native.go) that the review of
// branch native found; each test fails on the branch as reviewed.

// TestNativeReleaseWithoutExec: a user whose rule has MULTI but not EXEC
// (the documented rule before +multi +exec, plus +multi; or +@all -exec)
// on a server with DELIFEQ. The transaction is refused at EXEC (EXECABORT
// … NOPERM … 'exec'), which releaseVerdict reads as the release's own
// error: the probe's script right behind it did delete the key, yet the
// release reports a failure, nothing is learnt (DELIFEQ stays unknown),
// and every later release probes and fails the same way.
func TestNativeReleaseWithoutExec(t *testing.T) {
	srv := redisserver.Start(t)
	admin := srv.Client(t)
	if !probeNatives(t, admin).delifeq {
		t.Skip("the server has no DELIFEQ (Valkey 9.0+: REDIS_SERVER=$(bash .ci/servers path valkey))")
	}
	rule := strings.Replace(aclRule, " +exec", "", 1)
	setUser(t, admin, "noexec", rule, aclOptional, aclIdentity, aclDelifeq)
	s := newSession(t, userClient(t, srv, "noexec"), WithTTL(10*time.Second))
	ctx := context.Background()
	for i := range 2 {
		l, err := s.TryLock(ctx, "native-noexec")
		require.NoError(t, err)
		assert.NoError(t, l.Release(ctx), "release %d: the key was deleted (by the probe's script)", i)
		assert.Zero(t, admin.Exists(ctx, l.lease.Keys.Lock).Val(), "release %d: released", i)
	}
	_, known := nativeOf(s).Has("delifeq")
	assert.True(t, known, "the refused EXEC is learnt, as a refused DELIFEQ is")
}

// TestNativeRenewQueued: a pooled connection left inside MULTI (a user's
// own MULTI on the shared client, or a keyless MULTI and EXEC that a
// pipeline sent to different nodes) answers every command "+QUEUED",
// runs nothing, and stays in the pool. The script's renewal reads that
// reply as an error (DecodeRenew: not an integer); renewVerdict reads any
// reply of SET … IFEQ without an error as "renewed", so the renewal that
// ran nothing extends the lock's local deadline while its key keeps
// counting down: lost ownership, silent. A native renewal must count only
// "OK".
func TestNativeRenewQueued(t *testing.T) {
	srv := redisserver.Start(t)
	if !probeNatives(t, srv.Client(t)).ifeq {
		t.Skip("the server has no SET … IFEQ (Valkey 8.1+: REDIS_SERVER=$(bash .ci/servers path valkey))")
	}
	admin := srv.Client(t)
	ctx := context.Background()
	for _, path := range []string{"native", "script"} {
		t.Run(path, func(t *testing.T) {
			c := srv.Client(t, func(o *redis.Options) { o.PoolSize, o.ContextTimeoutEnabled = 1, true })
			s := newSession(t, c, WithTTL(time.Minute))
			if path == "script" {
				nativeOf(s).Off()
			}
			l, err := s.TryLock(ctx, "native-queued-"+path)
			require.NoError(t, err)
			require.Equal(t, lease.Renewal{}, renewOnce(s, l), "a first renewal, which learns the path")
			key := l.lease.Keys.Lock
			require.NoError(t, admin.PExpire(ctx, key, 5*time.Second).Err())

			require.NoError(t, c.Do(ctx, "multi").Err()) // the pool's one connection, left inside MULTI
			r := renewOnce(s, l)
			require.NoError(t, c.Do(ctx, "discard").Err())

			assert.Less(t, admin.PTTL(ctx, key).Val(), 6*time.Second, "nothing ran: the key was not renewed")
			assert.Error(t, r.Err, "a renewal that ran nothing must not count as renewed (got %+v)", r)
		})
	}
}
