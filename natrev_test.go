package redisleader

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisleader/redisleader/internal/lease"
	"github.com/redisleader/redisleader/internal/redisserver"
	"github.com/redisleader/redisleader/internal/wire"
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

// namedCluster is a user's wrapper that holds its ClusterClient in a named
// field and offers the Cluster's ForEachMaster: KindOf counts it a Cluster
// by its methods (so does the session: NewSession, the Combiner), but
// ClusterOf, which Node.isCluster asks, does not see the ClusterClient.
type namedCluster struct{ cc *redis.ClusterClient }

func (w namedCluster) Process(ctx context.Context, cmd redis.Cmder) error {
	return w.cc.Process(ctx, cmd)
}
func (w namedCluster) Pipeline() redis.Pipeliner { return w.cc.Pipeline() }
func (w namedCluster) Subscribe(ctx context.Context, channels ...string) *redis.PubSub {
	return w.cc.Subscribe(ctx, channels...)
}
func (w namedCluster) ForEachMaster(ctx context.Context, fn func(context.Context, *redis.Client) error) error {
	return w.cc.ForEachMaster(ctx, fn)
}

// TestNativeClusterByMethods: native.go keeps a Cluster client's calls on
// the scripts (go-redis does not keep a keyless MULTI on the key's node),
// but decides "Cluster" with wire.ClusterOf, which misses a wrapper that
// holds the ClusterClient in a named field, while the rest of the library
// (wire.KindOf) counts it a Cluster by its methods. Such a session sends
// MULTI and EXEC, keyless, wherever go-redis's cluster pipeline puts them
// (a random slot's master), apart from the DELIFEQ on the key's master: the
// delete runs outside any transaction, and a MULTI whose EXEC went to
// another node leaves that node's pooled connection inside MULTI, where
// every later command is only QUEUED (see TestNativeRenewQueued). Fix:
// Node.isCluster as wire.KindOf(n.C) == wire.KindCluster.
func TestNativeClusterByMethods(t *testing.T) {
	cluster := redisserver.StartCluster(t, 3)
	ctx := context.Background()
	info, err := cluster.Nodes()[0].Client(t).Do(ctx, "command", "info", "delifeq").Slice()
	require.NoError(t, err)
	if info[0] == nil {
		t.Skip("the server has no DELIFEQ (Valkey 9.0+: REDIS_SERVER=$(bash .ci/servers path valkey))")
	}
	cc := cluster.Client(t)
	log := &cmdLog{}
	cc.AddHook(log.hook())
	c := namedCluster{cc}
	require.Equal(t, wire.KindCluster, wire.KindOf(c), "a Cluster by its methods")
	s := newSession(t, c, WithTTL(time.Minute))
	var failed []string
	for i := range 12 {
		name := "native-cluster-" + strconv.Itoa(i)
		l, err := s.TryLock(ctx, name)
		require.NoError(t, err)
		if r := renewOnce(s, l); r != (lease.Renewal{}) {
			failed = append(failed, name+" renew: "+fmt.Sprint(r))
		}
		if err := l.Release(ctx); err != nil {
			failed = append(failed, name+" release: "+err.Error())
		}
		if n := cc.Exists(ctx, l.lease.Keys.Lock).Val(); n != 0 {
			failed = append(failed, name+": not deleted")
		}
	}
	assert.Empty(t, failed)
	assert.Zero(t, log.count("multi"), "a Cluster client's release takes the script")
}

// TestNativeOlderValue: a Proclaim's write that Redis loses (a failover to
// a replica it had not reached, a restart from an AOF fsynced a second
// earlier) leaves the key holding our token with the former value, which
// the leader does not know. The scripts compare the token alone: the lease
// renews and releases as before. The native path compares the whole value
// that the last Proclaim stored (its Held did not change, so the nil and
// the 0 count): the renewal ends the leadership ("not owner") while Redis
// holds our token, and the release reports success (Missing, only logged)
// while leaving our key in place until its TTL, with nothing (no stale
// record) to delete it. Fix: treat every nil or 0 of a native call as
// ambiguous and let the script decide (it is the rare path: a loss or a
// retried release), which also retires the Held-changed rule.
func TestNativeOlderValue(t *testing.T) {
	srv := redisserver.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	for _, path := range []string{"native", "script"} {
		t.Run(path, func(t *testing.T) {
			s, _ := nativeSession(t, srv, path)
			first, err := s.TryLock(ctx, "native-older-first-"+path)
			require.NoError(t, err)
			require.NoError(t, first.Release(ctx), "a first release, which learns the path (no probe below)")
			e := mustElection(t, s, "native-older-"+path)
			l, err := e.Campaign(ctx, "a")
			require.NoError(t, err)
			key := l.lease.Keys.Lock
			before := admin.Get(ctx, key).Val()
			require.NoError(t, e.Proclaim(ctx, "b"))
			require.Equal(t, lease.Renewal{}, renewOnce(s, l), "the proclaimed value renews")

			// The Proclaim's write is lost: our token, the former value.
			require.NoError(t, admin.Do(ctx, "set", key, before, "keepttl").Err())
			assert.Equal(t, lease.Renewal{}, renewOnce(s, l), "the key holds our token: renewed, as the script does")
			assert.Equal(t, lease.Deleted{}, s.place.Release(ctx, lease.Ending{Lease: &l.lease}), "ours: deleted")
			assert.Zero(t, admin.Exists(ctx, key).Val(), "the name is free (%q)", admin.Get(ctx, key).Val())
		})
	}
}
