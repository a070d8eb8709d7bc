//go:build autopipeline

// Tests of go-redis's AutoPipeline clients, which go-redis has from v9.22
// on: above the floor go.mod pins, so this file builds only with
// -tags autopipeline, and .ci/run runs it in its job against the newest
// go-redis (section "floors").

package redisleader

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader/internal/faultproxy"
	"github.com/redisleader/redisleader/internal/redisserver"
	"github.com/redisleader/redisleader/internal/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// autoPipeline returns c's AutoPipeline client, closed when the test ends
// (before c, whose Cleanup was registered first).
func autoPipeline(t *testing.T, c interface {
	AutoPipeline() (*redis.AutoPipeliner, error)
}) *redis.AutoPipeliner {
	t.Helper()
	ap, err := c.AutoPipeline()
	require.NoError(t, err)
	t.Cleanup(func() { _ = ap.Close() })
	return ap
}

// TestAutoPipelineKinds: an AutoPipeline client has the kind of the client
// under it. Over a *redis.ClusterClient it is a cluster client (no
// WithReplicaAcks, not a Redlock node, its pipelines sent per master),
// also when wrapped; over a *redis.Client it is a client of one server.
func TestAutoPipelineKinds(t *testing.T) {
	cluster, _, cs := unreachableNodes(t)
	ap := autoPipeline(t, cluster)
	for _, cc := range []Client{ap, wrappedIface{ap}} {
		t.Run(fmt.Sprintf("%T", cc), func(t *testing.T) {
			assertClusterKind(t, cc, cs)
			assert.Same(t, cluster, wire.ClusterOf(cc), "wire.RunCalls finds the Cluster client under it")
		})
	}
	plain := autoPipeline(t, unreachableClient(t))
	assertPlainKind(t, plain, cs)
	assert.Nil(t, wire.ClusterOf(plain))
}

// TestAutoPipelineOverClusterClient: on a 3-master Redis Cluster, sessions
// on AutoPipeline clients of *redis.ClusterClients get the Cluster's
// handling: WithReplicaAcks is refused (WAIT would go to any master, not
// to the connection that wrote), a release takes along only a call on its
// own name, not calls that another master could hold up, and locks and an
// election work across the masters.
func TestAutoPipelineOverClusterClient(t *testing.T) {
	cluster := redisserver.StartCluster(t, 3)
	newClient := func(t *testing.T) Client { return autoPipeline(t, clusterClient(t, cluster)) }
	t.Run("no WithReplicaAcks", func(t *testing.T) {
		ap := newClient(t)
		s, err := NewSession(ap, WithReplicaAcks(1, 10*time.Millisecond))
		assertRejected(t, s, err, "WithReplicaAcks(1, 10ms) needs WAIT on the connection that wrote, which a cluster client (*redis.AutoPipeliner is or wraps a *redis.ClusterClient) does not give; use it with a *redis.Client (also from redis.NewFailoverClient)")
	})
	t.Run("a release takes only its name along", func(t *testing.T) {
		// Seen on the combiner: TestClusterReleaseTakesOnlyItsNameAlong's
		// calls held on the wire do not work here, as the AutoPipeliner
		// batches the session's calls with one another in its own way.
		s := newSession(t, newClient(t))
		assert.True(t, s.wire.Combiner().Cluster(), "the session's combiner takes the client for a Cluster's")
	})
	t.Run("locks across slots", func(t *testing.T) { locksAcrossSlots(t, cluster, newClient) })
}

// TestAutoPipelineOverClient: sessions on an AutoPipeline client of a
// *redis.Client lock, release, read the leader and hand an election over
// as on the client itself.
func TestAutoPipelineOverClient(t *testing.T) {
	srv := redisserver.Start(t)
	ap := autoPipeline(t, srv.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true }))
	ctx := context.Background()
	b := &backend{name: "autopipeline", addr: srv.Addr(), client: ap,
		get: func(k string) string { v, _ := ap.Get(ctx, k).Result(); return v },
		set: func(k, v string) { ap.Set(ctx, k, v, 0) },
	}
	t.Run("lock and release", func(t *testing.T) {
		a, c := newSession(t, ap, fastOpts()...), newSession(t, ap, fastOpts()...)
		l, err := a.Lock(ctx, "ap-lock")
		require.NoError(t, err)
		_, err = c.TryLock(ctx, "ap-lock")
		require.ErrorIs(t, err, ErrLocked)
		assert.Contains(t, b.get(l.Key()), "\n", "the key holds the lock's token")
		require.NoError(t, l.Release(ctx))
		assert.Empty(t, b.get(l.Key()), "Release deleted the key")
		l2, err := c.TryLock(ctx, "ap-lock")
		require.NoError(t, err)
		assert.Greater(t, l2.Fence(), l.Fence())
		require.NoError(t, l2.Release(ctx))
	})
	t.Run("leader and handover", func(t *testing.T) { campaignHandover(t, b) })
}

// TestAutoPipelineReplicaAcks: WithReplicaAcks works on an AutoPipeline
// client of a *redis.Client: WAIT runs on the connection that wrote, so an
// acquire that the replica, cut off, did not acknowledge is not taken.
func TestAutoPipelineReplicaAcks(t *testing.T) {
	primary, replica, link := replicated(t)
	ctx := context.Background()
	ap := autoPipeline(t, primary.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true }))
	s := newSession(t, ap, WithTTL(3*time.Second), WithReplicaAcks(1, 200*time.Millisecond))
	l, err := s.TryLock(ctx, "ap-acked")
	require.NoError(t, err)
	_, err = replica.Client(t).Get(ctx, l.Key()).Result()
	require.NoError(t, err, "the replica has the key once TryLock returned")
	link.Blackhole(faultproxy.Both)
	_, err = s.TryLock(ctx, "ap-unacked")
	assert.ErrorIs(t, err, ErrReplication)
	require.NoError(t, l.Release(ctx))
}
