package redisleader

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redisleader/redisleader/internal/lease"
	"github.com/redisleader/redisleader/internal/redisserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// evictingScriptCache reports whether srv keeps EVAL's scripts in an LRU of
// 500 (Redis 8.0+, Valkey 8.0+; a gate on valkey_version there).
func evictingScriptCache(v redisserver.Version) bool {
	return v.AtLeast("redis", 8, 0) || v.AtLeast("valkey", 8, 0)
}

// plainEvalCalls returns how many EVAL commands (not EVALSHA) the server has run.
func plainEvalCalls(t *testing.T, srv *redisserver.Server) int {
	t.Helper()
	stats, _ := srv.Do(t, "INFO", "commandstats").(string)
	_, rest, ok := strings.Cut(stats, "cmdstat_eval:calls=")
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
	require.NoError(t, err)
	return n
}

// TestScriptCacheEviction: on a server whose EVAL script cache is an LRU of
// 500 (Redis 8.0, Valkey 8.0), a busy neighbour's 600 scripts evict ours
// (loaded by EVAL after a NOSCRIPT); a held lock is still renewed and a
// new acquire succeeds, each through the EVAL fallback, which is seen to
// run again, and the scripts are back in the cache.
func TestScriptCacheEviction(t *testing.T) {
	srv := redisserver.Start(t)
	if v := srv.Version(t); !evictingScriptCache(v) {
		t.Skipf("%v does not evict EVAL scripts (Redis 8.0+ and Valkey 8.0+ do); CI runs this on Valkey", v)
	}
	ctx := context.Background()
	round, roundDone := rounds()
	s := newSession(t, srv.Client(t), WithTTL(300*time.Millisecond), round)
	l, err := s.TryLock(ctx, "evicted") // a fresh server: NOSCRIPT, then EVAL loads the script
	require.NoError(t, err)
	require.False(t, waitRound(t, roundDone, 2*time.Second), "a renewal failed")

	shas := []any{lease.AcquireRun.SHA(), lease.RenewRun.SHA()}
	cached := func() []any {
		return srv.Do(t, append([]any{"SCRIPT", "EXISTS"}, shas...)...).([]any)
	}
	// The neighbour's scripts, in batches on one connection.
	const neighbour = 600
	for i := 0; i < neighbour; i += 100 {
		var cmds [][]any
		for j := i; j < i+100; j++ {
			cmds = append(cmds, []any{"EVAL", fmt.Sprintf("return %d", j), 0})
		}
		srv.DoSeq(t, cmds...)
	}
	// The acquire script, used once, is gone; the renew script may be back
	// already (the heartbeat keeps running), so it is not asserted.
	require.Equal(t, int64(0), cached()[0], "the acquire script survived %d other EVAL scripts", neighbour)

	before := plainEvalCalls(t, srv)
	for range 3 {
		require.False(t, waitRound(t, roundDone, 2*time.Second), "a renewal failed after the eviction")
	}
	assert.True(t, l.Held())
	l2, err := s.TryLock(ctx, "evicted-2")
	require.NoError(t, err, "an acquire after the eviction")
	assert.Greater(t, plainEvalCalls(t, srv), before, "no EVAL fallback ran after the eviction")
	want := []any{int64(1), int64(1)}
	if native, _ := nativeOf(s).Has("ifeq"); native {
		// Renewed by SET … IFEQ (native.go): the renew script is not used.
		want[1] = cached()[1]
	}
	assert.Equal(t, want, cached(), "the fallback did not load the scripts again")
	require.NoError(t, l2.Release(ctx))
	require.NoError(t, l.Release(ctx))
}
