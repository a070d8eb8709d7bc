package redisleader

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redisleader/redisleader/internal/redisserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisleader/redisleader/internal/lease"
)

// TestClusterLocksAcrossSlots: on a 3-master Redis Cluster, locks on names
// spread over every master work (one slot per name: lock and fence keys
// share the hash tag), renewal rounds keep them, and an election hands over
// through pub/sub long before the lease could expire.
func TestClusterLocksAcrossSlots(t *testing.T) {
	cluster := redisserver.StartCluster(t, 3)
	locksAcrossSlots(t, cluster, func(t *testing.T) Client { return clusterClient(t, cluster) })
}

// locksAcrossSlots is TestClusterLocksAcrossSlots with two sessions on
// cluster, each on a client from newClient.
func locksAcrossSlots(t *testing.T, cluster *redisserver.Cluster, newClient func(*testing.T) Client) {
	ctx := context.Background()
	round, roundDone := rounds()
	a := newSession(t, newClient(t), WithTTL(3*time.Second), WithRenewInterval(200*time.Millisecond), round)
	blocked := make(chan struct{}, 1) // b found the election held
	b := newSession(t, newClient(t), WithTTL(3*time.Second), withAttemptHook(func(name string, err error) {
		if name == "cluster-election" && errors.Is(err, ErrLocked) {
			select {
			case blocked <- struct{}{}:
			default:
			}
		}
	}))

	owners := map[string]bool{}
	var locks []*Lock
	for i := range 12 {
		name := fmt.Sprintf("job-%d", i)
		k := lease.NewKeys(name)
		require.Equal(t, redisserver.Slot(k.Lock), redisserver.Slot(k.Fence), "lock and fence keys share a slot")
		owners[cluster.Owner(redisserver.Slot(k.Lock)).Addr()] = true
		l, err := a.TryLock(ctx, name)
		require.NoError(t, err, name)
		locks = append(locks, l)
		_, err = b.TryLock(ctx, name)
		assert.ErrorIs(t, err, ErrLocked, name)
	}
	assert.Len(t, owners, 3, "the names cover every master")
	for range 3 {
		require.False(t, waitRound(t, roundDone, 3*time.Second), "a renewal round across the masters failed")
	}
	for _, l := range locks {
		assert.True(t, l.Held(), l.Name())
		require.NoError(t, l.Release(ctx))
	}

	ea, _ := a.Election("cluster-election")
	eb, _ := b.Election("cluster-election")
	la, err := ea.Campaign(ctx, "a")
	require.NoError(t, err)
	got := campaign(t, ctx, eb, "b")
	// b waits on pub/sub once it has found the name held; then resign.
	select {
	case <-blocked:
	case <-time.After(5 * time.Second):
		t.Fatal("b never found the election held")
	}
	released := time.Now()
	require.NoError(t, la.Release(ctx))
	lb := recvWithin(t, got, 10*time.Second, "the handover on the cluster")
	assert.Less(t, time.Since(released), time.Second, "the handover came by pub/sub, not by expiry (TTL 3s)")
	assert.Greater(t, lb.Fence(), la.Fence())
	require.NoError(t, lb.Release(ctx))
}

// TestClusterSlotMigration: the slot of a held election moves to another
// master (keys, TTLs and the fence key with it); the leader keeps
// renewing through MOVED/ASK redirections, and the next leader's fence is
// higher.
func TestClusterSlotMigration(t *testing.T) {
	cluster := redisserver.StartCluster(t, 3)
	ctx := context.Background()
	round, roundDone := rounds()
	a := newSession(t, clusterClient(t, cluster), WithTTL(time.Second), round)
	b := newSession(t, clusterClient(t, cluster), WithTTL(time.Second))
	ea, _ := a.Election("moving")
	eb, _ := b.Election("moving")
	la, err := ea.Campaign(ctx, "a")
	require.NoError(t, err)
	slot, _, dst := slotOf(cluster, la.Key())
	cluster.MigrateSlot(t, slot, dst)
	require.Equal(t, dst.Addr(), cluster.Owner(slot).Addr())
	for range 3 {
		waitRound(t, roundDone, 3*time.Second)
	}
	assert.True(t, la.Held(), "leadership survived the migration: %v", la.Err())
	leader, err := eb.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, "a", leader.Value)
	require.NoError(t, la.Release(ctx))
	lb, err := eb.Campaign(ctx, "b")
	require.NoError(t, err)
	assert.Greater(t, lb.Fence(), la.Fence())
}

// TestClusterMasterRestart: the master serving a held election restarts
// without persistence and loses the key: the leader learns it at its next
// renewal (ErrNotOwner, not silence), a follower takes over, and the fence
// still increases (the server-time fence does not need the lost fence key).
func TestClusterMasterRestart(t *testing.T) {
	cluster := redisserver.StartCluster(t, 3)
	ctx := context.Background()
	a := newSession(t, clusterClient(t, cluster), WithTTL(time.Second))
	b := newSession(t, clusterClient(t, cluster), WithTTL(time.Second))
	ea, _ := a.Election("restart")
	eb, _ := b.Election("restart")
	la, err := ea.Campaign(ctx, "a")
	require.NoError(t, err)
	got := campaign(t, ctx, eb, "b")
	cluster.RestartNode(t, cluster.Owner(redisserver.Slot(la.Key())))
	waitClosed(t, la.Done(), 5*time.Second, "the leader learns its key is gone")
	assert.ErrorIs(t, la.Err(), ErrLost)
	lb := recvWithin(t, got, 10*time.Second, "a new leader after the master restart")
	assert.Greater(t, lb.Fence(), la.Fence())
	require.NoError(t, lb.Release(ctx))
}

// TestClusterFair: fair mode on a 3-master Redis Cluster. The queue keys
// share the name's slot with the lock (no CROSSSLOT), waiters' re-checks
// renew their places on every master, and a release wakes the waiter
// through its session's channel.
func TestClusterFair(t *testing.T) {
	cluster := redisserver.StartCluster(t, 3)
	ctx := context.Background()
	a := newSession(t, clusterClient(t, cluster), WithFairness(), WithTTL(3*time.Second))
	hook, locked := queued()
	b := newSession(t, clusterClient(t, cluster), WithFairness(), WithTTL(3*time.Second), hook)

	const n = 9
	owners := map[string]bool{}
	var held []*Lock
	got := make(chan *Lock, n)
	for i := range n {
		name := fmt.Sprintf("fair-job-%d", i)
		k := lease.NewKeys(name)
		for _, key := range []string{k.Fence, k.Queue, k.Leases} {
			require.Equal(t, redisserver.Slot(k.Lock), redisserver.Slot(key), "%s shares the lock's slot", key)
		}
		owners[cluster.Owner(redisserver.Slot(k.Lock)).Addr()] = true
		l, err := a.Lock(ctx, name)
		require.NoError(t, err, name)
		held = append(held, l)
		go func() {
			l, err := b.Lock(ctx, name)
			assert.NoError(t, err, name)
			got <- l
		}()
		recvWithin(t, locked, 5*time.Second, name+" queued")
	}
	assert.Len(t, owners, 3, "the names cover every master")
	for range n { // each waiter checks again within its place's lease, renewing it
		recvWithin(t, locked, 5*time.Second, "a waiter's re-check")
	}
	start := time.Now()
	for _, l := range held {
		require.NoError(t, l.Release(ctx))
	}
	for range n {
		l := recvWithin(t, got, 5*time.Second, "waiter served")
		require.NotNil(t, l)
		require.NoError(t, l.Release(ctx))
	}
	t.Logf("%d handovers in %v", n, time.Since(start))
	assert.Less(t, time.Since(start), time.Second, "woken, not polling (TTL 3s)")
}

// On Redis Cluster a release takes along only the oldest queued call on its
// own name, in its own slot: calls for other names, which another master
// may hold up, would hold the release up with them.
func TestClusterReleaseTakesOnlyItsNameAlong(t *testing.T) {
	cluster := redisserver.StartCluster(t, 3)
	cc := clusterClient(t, cluster)
	ctx := context.Background()
	b := &backend{name: "cluster", client: cc, get: func(k string) string { v, _ := cc.Get(ctx, k).Result(); return v }}
	s, _, locks, read, freeWire := fullWire(t, b, "cl-release")
	names := []string{"cl-other-a", "cl-other-b"}
	tries := tryAll(background(len(names)), s, names)
	waitQueued(t, s, len(names)+1)
	require.NoError(t, locks[0].Release(ctx), "Release while the wire is full")
	require.ErrorIs(t, recvWithin(t, read, 5*time.Second, "the queued read of the released name"), ErrNoLeader)
	assert.Equal(t, len(names), s.queued(), "a release took calls for other names along")
	freeWire()
	for i, ch := range tries {
		require.NoError(t, recvWithin(t, ch, 5*time.Second, names[i]).err, names[i])
	}
	require.NoError(t, s.Close(ctx))
	checkNoLeaks(t)
}
