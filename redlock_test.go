package redisleader

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader/internal/faultproxy"
	"github.com/redisleader/redisleader/internal/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisleader/redisleader/internal/lease"
)

func TestNewRedlockSessionRejectsBadInput(t *testing.T) {
	ms, cs := redlockNodes(t, 3)
	c4 := redis.NewClient(&redis.Options{Addr: ms[0].Addr()})
	defer c4.Close()
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{ms[0].Addr()}})
	defer cluster.Close()
	for _, tt := range []struct {
		clients []Client
		opts    []Option
		want    string
	}{
		{cs[:1], nil, "1 clients; Redlock needs at least 3 independent nodes"},
		{append(cs, c4), nil, "4 clients; use an odd number of nodes"},
		{[]Client{cs[0], nil, cs[2]}, nil, "client 1 is nil"},
		{[]Client{cs[0], (*redis.Client)(nil), cs[2]}, nil, "client 1 is nil"},
		{[]Client{cs[0], cs[1], cs[0]}, nil, "client 2 is also client 0"},
		{[]Client{cs[0], cs[1], cluster}, nil, "client 2 is a ClusterClient"},
		{cs, []Option{WithReplicaAcks(1, 10*time.Millisecond)}, "WithReplicaAcks is not available in Redlock mode"},
		{cs, []Option{WithTTL(0)}, "WithTTL(0s) must be at least 10ms"},
	} {
		s, err := NewRedlockSession(tt.clients, tt.opts...)
		assert.Nil(t, s)
		assert.ErrorIs(t, err, ErrInvalid)
		assert.ErrorContains(t, err, tt.want)
	}
	for _, m := range ms {
		assert.Zero(t, m.CommandCount(), "bad input must not reach Redis")
	}
}

// TestRedlockLock: a Redlock acquisition holds the token on every node,
// each node with a fence no larger than the acquisition's, the largest
// being the acquisition's; a second session is refused; Release clears
// every node, and the next acquisition's fence is larger.
func TestRedlockLock(t *testing.T) {
	ctx := context.Background()
	ms, cs := redlockNodes(t, 3)
	a, b := newRedlock(t, cs), newRedlock(t, cs)
	l, err := a.TryLock(ctx, "job")
	require.NoError(t, err)
	holding, largest := 0, int64(0) // a quorum at least; usually every node
	for _, m := range ms {
		v, err := m.Get(l.Key())
		if err != nil {
			continue
		}
		h, ok := lease.ParseHolder(v)
		require.True(t, ok)
		require.Equal(t, l.lease.Token, h.Token)
		assert.LessOrEqual(t, h.Fence, l.Fence())
		assert.GreaterOrEqual(t, fenceKey(t, m, "job"), h.Fence, "a holding node's fence key")
		holding++
		largest = max(largest, h.Fence)
	}
	assert.GreaterOrEqual(t, holding, 2, "a quorum holds the token")
	assert.Equal(t, l.Fence(), largest, "the acquisition's fence is the largest its nodes issued")
	_, err = b.TryLock(ctx, "job")
	assert.ErrorIs(t, err, ErrLocked)
	require.NoError(t, l.Release(ctx))
	for i, m := range ms {
		assert.False(t, m.Exists(l.Key()), "node %d", i)
	}
	lb, err := b.TryLock(ctx, "job")
	require.NoError(t, err)
	assert.Greater(t, lb.Fence(), l.Fence())
}

// fenceKey returns the fence stored in name's fence key on m.
func fenceKey(t *testing.T, m *miniredis.Miniredis, name string) int64 {
	t.Helper()
	stored, err := m.Get(lease.NewKeys(name).Fence)
	require.NoError(t, err)
	var f int64
	_, err = fmt.Sscan(stored, &f)
	require.NoError(t, err)
	return f
}

// scriptCounter counts the calls of one script sent alone through a client
// and, with sent set, sends the time of each.
func scriptCounter(sc *wire.Script, n *atomic.Int64, sent chan<- time.Time) testHook {
	return testHook{single: func(ctx context.Context, cmds []redis.Cmder, send sendFunc) error {
		if cmds[0].Name() == "evalsha" && isCall(cmds[0], sc) { // not the EVAL after NOSCRIPT
			n.Add(1)
			if sent != nil {
				sent <- time.Now()
			}
		}
		return send(ctx, cmds)
	}}
}

// slowOpts are options under which no renewal runs during a test.
func slowOpts() []Option {
	return []Option{WithTTL(10 * time.Second), WithRenewInterval(3 * time.Second)}
}

// TestRedlockAcquireWriteBack: an acquisition writes its fence back to the
// nodes in a second round only when a node's key could expire before the
// node's clock passes the fence: not when the nodes' fences come from their
// clocks, but when one node's fence key is ahead of its clock by more than
// a TTL; then the fence is stored on every node that took the key.
func TestRedlockAcquireWriteBack(t *testing.T) {
	ctx := context.Background()
	ms, cs := redlockNodes(t, 3)
	var raises atomic.Int64
	for _, c := range cs {
		c.(*redis.Client).AddHook(scriptCounter(lease.RedlockRenewRun, &raises, nil))
	}
	s := newRedlock(t, cs, slowOpts()...)
	l1, err := s.TryLock(ctx, "wb")
	require.NoError(t, err)
	assert.Zero(t, raises.Load(), "fences from the nodes' clocks: one round")
	require.NoError(t, l1.Release(ctx))

	ahead := time.Now().Add(30 * time.Second).UnixMicro() // 3 TTLs
	require.NoError(t, ms[1].Set(lease.NewKeys("wb").Fence, fmt.Sprint(ahead)))
	l2, err := s.TryLock(ctx, "wb")
	require.NoError(t, err)
	assert.Equal(t, ahead+1, l2.Fence())
	assert.Equal(t, int64(3), raises.Load(), "a fence key 3 TTLs ahead: the write-back round, on every node")
	for i, m := range ms {
		v, err := m.Get(l2.Key())
		require.NoError(t, err, "node %d", i)
		h, _ := lease.ParseHolder(v)
		assert.Equal(t, l2.Fence(), h.Fence, "node %d's lock value", i)
		stored, _ := m.Get(lease.NewKeys("wb").Fence)
		assert.Equal(t, fmt.Sprint(l2.Fence()), stored, "node %d's fence key", i)
	}
	require.NoError(t, l2.Release(ctx))
}

// TestRedlockRenewalAndReleaseWriteTheFenceBack: without a write-back at
// acquire, each node holds the fence it issued; the first renewal stores the
// acquisition's on every node that holds the token, lock value and fence
// key, and Release raises every fence key to it before deleting.
func TestRedlockRenewalAndReleaseWriteTheFenceBack(t *testing.T) {
	ctx := context.Background()
	ms, cs := redlockNodes(t, 3)
	s := newRedlock(t, cs, slowOpts()...)
	k := lease.NewKeys("rw")
	// Node 0 issues the largest fence (its key half a TTL ahead of its
	// clock), the others their clocks: all below it.
	ahead := time.Now().Add(5 * time.Second).UnixMicro()
	require.NoError(t, ms[0].Set(k.Fence, fmt.Sprint(ahead)))
	fenceOf := func(m *miniredis.Miniredis) (lock, key int64) {
		v, err := m.Get(k.Lock)
		require.NoError(t, err)
		h, ok := lease.ParseHolder(v)
		require.True(t, ok)
		return h.Fence, fenceKey(t, m, "rw")
	}

	l, err := s.TryLock(ctx, "rw")
	require.NoError(t, err)
	require.Equal(t, ahead+1, l.Fence())
	for i, m := range ms[1:] {
		lock, key := fenceOf(m)
		require.Less(t, lock, l.Fence(), "node %d before the first renewal", i+1)
		require.Equal(t, lock, key, "node %d before the first renewal", i+1)
	}
	out := s.place.Renew(ctx, []*lease.Lease{&l.lease}, time.Time{})
	require.Equal(t, lease.Renewal{}, out[0])
	for i, m := range ms {
		lock, key := fenceOf(m)
		assert.Equal(t, l.Fence(), lock, "node %d's lock value after a renewal", i)
		assert.Equal(t, l.Fence(), key, "node %d's fence key after a renewal", i)
	}

	// Release alone carries the fence too, to the nodes whose clocks have
	// not passed it: here every node, as node 0's fence key is half a TTL
	// ahead of the clocks.
	require.NoError(t, ms[0].Set(lease.NewKeys("rw2").Fence, fmt.Sprint(ahead)))
	l2, err := s.TryLock(ctx, "rw2")
	require.NoError(t, err)
	require.Equal(t, ahead+1, l2.Fence())
	require.Less(t, fenceKey(t, ms[1], "rw2"), l2.Fence())
	require.NoError(t, l2.Release(ctx))
	for i, m := range ms {
		assert.Equal(t, l2.Fence(), fenceKey(t, m, "rw2"), "node %d's fence key after Release", i)
	}
	l3, err := s.TryLock(ctx, "rw2")
	require.NoError(t, err)
	assert.Greater(t, l3.Fence(), l2.Fence())
	require.NoError(t, l3.Release(ctx))

	// A node whose clock has passed the fence needs no write: whatever it
	// issues next is larger. Here every node's clock has passed it by the
	// time of the release.
	l4, err := s.TryLock(ctx, "rw3")
	require.NoError(t, err)
	var before []int64
	for _, m := range ms {
		before = append(before, fenceKey(t, m, "rw3"))
	}
	require.NoError(t, l4.Release(ctx))
	for i, m := range ms {
		assert.Equal(t, before[i], fenceKey(t, m, "rw3"), "node %d's fence key after Release", i)
	}
}

// TestRedlockRenewalRefusesAForeignFenceKey: a fence key someone else
// overwrote makes that node's renewal an error that writes nothing (not
// even the TTL); the other two renew.
func TestRedlockRenewalRefusesAForeignFenceKey(t *testing.T) {
	ctx := context.Background()
	ms, cs := redlockNodes(t, 3)
	s := newRedlock(t, cs, slowOpts()...)
	l, err := s.TryLock(ctx, "foreign")
	require.NoError(t, err)
	require.NoError(t, ms[2].Set(l.lease.Keys.Fence, "not a fence"))
	ms[2].SetTTL(l.lease.Keys.Lock, time.Second)
	before, _ := ms[2].Get(l.lease.Keys.Lock)
	out := s.place.Renew(ctx, []*lease.Lease{&l.lease}, time.Time{})
	assert.Equal(t, lease.Renewal{}, out[0], "renewed on a quorum")
	after, _ := ms[2].Get(l.lease.Keys.Lock)
	assert.Equal(t, before, after)
	assert.Equal(t, time.Second, ms[2].TTL(l.lease.Keys.Lock), "the TTL on the node with the foreign fence key")
	stored, _ := ms[2].Get(l.lease.Keys.Fence)
	assert.Equal(t, "not a fence", stored)
	require.NoError(t, l.Release(ctx), "a release that fails on one node of three succeeds")
	assert.True(t, ms[2].Exists(l.lease.Keys.Lock), "the foreign fence key's node keeps the key until its TTL")
}

// TestRedlockFencesSurviveANodeAhead: a node whose fence counter is far
// ahead raises the fence once; the value is written back to the quorum, so
// later fences stay above it even after that node is gone.
func TestRedlockFencesSurviveANodeAhead(t *testing.T) {
	ctx := context.Background()
	ms, cs := redlockNodes(t, 3)
	s := newRedlock(t, cs)
	ahead := int64(8_000_000_000_000_000)
	require.NoError(t, ms[2].Set(lease.NewKeys("f").Fence, fmt.Sprint(ahead)))
	l1, err := s.TryLock(ctx, "f")
	require.NoError(t, err)
	assert.Equal(t, ahead+1, l1.Fence())
	require.NoError(t, l1.Release(ctx))
	ms[2].Close() // the node that was ahead is gone
	l2, err := s.TryLock(ctx, "f")
	require.NoError(t, err)
	assert.Greater(t, l2.Fence(), l1.Fence())
	require.NoError(t, l2.Release(ctx), "a release that fails on one node of three succeeds")
}

// TestRedlockOneNodeDown: with one node of three down, acquire, renewals,
// elections and handover work.
func TestRedlockOneNodeDown(t *testing.T) {
	ctx := context.Background()
	ms, cs := redlockNodes(t, 3)
	ms[1].Close()
	round, roundDone := rounds()
	a := newRedlock(t, cs, round)
	b := newRedlock(t, cs)
	ea, _ := a.Election("e")
	eb, _ := b.Election("e")
	la, err := ea.Campaign(ctx, "a")
	require.NoError(t, err)
	for range 3 {
		waitRound(t, roundDone, 2*time.Second) // rounds fail on node 1, succeed on a quorum
	}
	assert.True(t, la.Held(), "%v", la.Err())
	leader, err := eb.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, Leader{Value: "a", Fence: la.Fence(), TTL: leader.TTL}, leader)
	got := campaign(t, ctx, eb, "b")
	require.NoError(t, la.Release(ctx))
	lb := recvWithin(t, got, 5*time.Second, "a handover with one node down")
	assert.Greater(t, lb.Fence(), la.Fence())
	require.NoError(t, lb.Release(ctx))
}

// TestRedlockNoQuorum: with two nodes of three down there is no leader: an
// acquire fails (not with ErrLocked) and a held lock ends at its deadline.
func TestRedlockNoQuorum(t *testing.T) {
	ctx := context.Background()
	ms, cs := redlockNodes(t, 3)
	s := newRedlock(t, cs)
	l, err := s.TryLock(ctx, "q")
	require.NoError(t, err)
	ms[0].Close()
	ms[1].Close()
	_, err = s.TryLock(ctx, "other")
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrLocked)
	assert.ErrorContains(t, err, "acquired on 1 of 3 nodes (need 2)")
	assert.False(t, ms[2].Exists("redisleader:{other}"), "the minority's key is given back")
	d := l.Deadline()
	waitClosed(t, l.Done(), 3*time.Second, "Done without a quorum")
	assert.ErrorIs(t, l.Err(), ErrExpired)
	assert.False(t, time.Now().Before(d))
}

// TestRedlockQuorumLost: when a majority of nodes no longer hold the token,
// the next renewal ends the lock with ErrNotOwner; one node alone does not.
func TestRedlockQuorumLost(t *testing.T) {
	ctx := context.Background()
	ms, cs := redlockNodes(t, 3)
	round, roundDone := rounds()
	s := newRedlock(t, cs, round)
	l, err := s.TryLock(ctx, "lost")
	require.NoError(t, err)
	ms[0].Del(l.Key())
	waitRound(t, roundDone, 2*time.Second)
	assert.True(t, l.Held(), "one node of three is not a quorum")
	ms[1].Del(l.Key())
	waitClosed(t, l.Done(), 2*time.Second, "Done after the quorum was lost")
	assert.ErrorIs(t, l.Err(), ErrNotOwner)
}

// TestRedlockSplitVote: held by different owners on two nodes, the third
// free: no quorum is possible, so TryLock says ErrLocked and gives the free
// node back.
func TestRedlockSplitVote(t *testing.T) {
	ctx := context.Background()
	ms, cs := redlockNodes(t, 3)
	x := newRedlock(t, cs)
	key := lease.NewKeys("split").Lock
	require.NoError(t, ms[0].Set(key, "X\n1\n"))
	ms[0].SetTTL(key, time.Minute)
	require.NoError(t, ms[1].Set(key, "Y\n2\n"))
	ms[1].SetTTL(key, time.Minute)
	_, err := x.TryLock(ctx, "split")
	assert.ErrorIs(t, err, ErrLocked)
	assert.False(t, ms[2].Exists(key), "the free node is given back")
}

// TestRedlockRetryKeepsItsKeys: an attempt that fell short of a quorum
// gives its keys back, and the stale-token cleanup of its token (its
// give-back failed on the node that is down) must never delete the keys of
// the lock a later attempt holds (regression: found by S21 as two leaders at
// once with one node down, when attempts shared their token).
func TestRedlockRetryKeepsItsKeys(t *testing.T) {
	ctx := context.Background()
	ms, cs := redlockNodes(t, 3)
	ms[2].Close()
	key := lease.NewKeys("retry").Lock
	require.NoError(t, ms[0].Set(key, "X\n1\n")) // another owner on node 0
	ms[0].SetTTL(key, time.Minute)
	round, roundDone := rounds()
	refused := make(chan struct{}, 1)
	s := newRedlock(t, cs, round, withAttemptHook(func(_ string, err error) {
		if err != nil {
			select {
			case refused <- struct{}{}:
			default:
			}
		}
	}))
	got := make(chan *Lock, 1)
	go func() {
		l, err := s.Lock(ctx, "retry")
		assert.NoError(t, err)
		got <- l
	}()
	select {
	case <-refused: // node 0 held by X, node 2 down: no quorum
	case <-time.After(5 * time.Second):
		t.Fatal("no failed attempt")
	}
	ms[0].Del(key)
	var l *Lock
	select {
	case l = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("no lock after node 0 was freed")
	}
	for range 4 {
		waitRound(t, roundDone, 2*time.Second)
	}
	assert.True(t, l.Held(), "the retried acquisition keeps its keys: %v", l.Err())
}

// A node that took the holder's token outside its quorum (a request held up
// while the node was frozen, run after the acquisition) has a fence the
// holder never saw; Leader must report the holder's own fence.
func TestRedlockLeaderReportsTheHoldersFence(t *testing.T) {
	ms, cs := redlockNodes(t, 3)
	s := newRedlock(t, cs, slowOpts()...)
	ctx := context.Background()
	// Before the first renewal each node holds the fence it issued: node 2's
	// key half a TTL ahead makes it the largest, the acquisition's.
	k := lease.NewKeys("fenced")
	require.NoError(t, ms[2].Set(k.Fence, fmt.Sprint(time.Now().Add(5*time.Second).UnixMicro())))
	l, err := mustElection(t, s, "fenced").Campaign(ctx, "me")
	require.NoError(t, err)
	leader, err := mustElection(t, newRedlock(t, cs), "fenced").Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, l.Fence(), leader.Fence, "before the first renewal")

	// After a renewal, a node that took the token late with its own, larger
	// fence (node 0 here) is rewritten by the next renewal; until then, the
	// largest is reported (see doc.go).
	out := s.place.Renew(ctx, []*lease.Lease{&l.lease}, time.Time{})
	require.Equal(t, lease.Renewal{}, out[0])
	late := l.lease.Fence + 1000
	ms[0].Set(l.lease.Keys.Lock, fmt.Sprintf("%s\n%d\n%s", l.lease.Token, late, l.value))
	ms[0].SetTTL(l.lease.Keys.Lock, time.Second)
	leader, err = mustElection(t, newRedlock(t, cs), "fenced").Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, late, leader.Fence, "a late node's fence, until the next renewal")
	out = s.place.Renew(ctx, []*lease.Lease{&l.lease}, time.Time{})
	require.Equal(t, lease.Renewal{}, out[0])
	leader, err = mustElection(t, newRedlock(t, cs), "fenced").Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, l.Fence(), leader.Fence, "after the next renewal")
}

// failFirstRelease fails the first release script sent through it.
type failFirstRelease struct {
	*redis.Client
	once sync.Once
}

func (c *failFirstRelease) Process(ctx context.Context, cmd redis.Cmder) error {
	fail := false
	if isCall(cmd, lease.ReleaseRun) {
		c.once.Do(func() { fail = true })
	}
	if fail {
		cmd.SetErr(errors.New("connection reset by peer"))
		return cmd.Err()
	}
	return c.Client.Process(ctx, cmd)
}

// A Redlock attempt that fell short of a quorum gives back what it took; a
// node where that delete failed must not keep the token for a TTL once the
// acquisition gives up.
func TestRedlockGiveBackLeftoverIsCleaned(t *testing.T) {
	ms, cs := redlockNodes(t, 3)
	cs[2] = &failFirstRelease{Client: cs[2].(*redis.Client)}
	k := lease.NewKeys("leftover")
	for _, m := range ms[:2] {
		m.Set(k.Lock, "other\n1\n")
		m.SetTTL(k.Lock, time.Minute)
	}
	s := newRedlock(t, cs, WithTTL(3*time.Second))
	_, err := s.TryLock(context.Background(), "leftover")
	require.ErrorIs(t, err, ErrLocked)
	require.Eventually(t, func() bool { return !ms[2].Exists(k.Lock) }, time.Second, 5*time.Millisecond,
		"the token on the node whose give-back failed (TTL 3s) is still there")
}

// lateReply delays the reply of the first call of sc sent alone on a node
// past the lease's local deadline (the node has run it; only the reply is
// late).
func lateReply(sc *wire.Script, d time.Duration, done *atomic.Bool) testHook {
	return testHook{single: func(ctx context.Context, cmds []redis.Cmder, send sendFunc) error {
		err := send(ctx, cmds)
		if err == nil && isCall(cmds[0], sc) && done.CompareAndSwap(false, true) {
			<-time.After(d) // latency, not synchronisation
		}
		return err
	}}
}

// A Redlock acquire whose quorum reply came after the local deadline keeps
// its token only for the next attempt, whether the acquire script's reply
// was late or the write-back's (all fence keys 3 TTLs ahead). TryLock gives
// up and leaves no token on any node; Lock's next attempt confirms the same
// token and holds, with the largest fence its nodes hold.
func TestRedlockLateQuorumReply(t *testing.T) {
	for _, writeBack := range []bool{false, true} {
		for _, block := range []bool{false, true} {
			t.Run(fmt.Sprint("writeBack=", writeBack, ",block=", block), func(t *testing.T) {
				ms, cs := redlockNodes(t, 3)
				sc := lease.AcquireRun
				if writeBack {
					sc = lease.RedlockRenewRun // the write-back
					for _, m := range ms {
						m.Set(lease.NewKeys("late").Fence, fmt.Sprint(time.Now().Add(2*time.Second).UnixMicro()))
					}
				}
				for _, c := range cs {
					c.(*redis.Client).AddHook(lateReply(sc, 700*time.Millisecond, new(atomic.Bool)))
				}
				attempts := make(chan error, 10)
				s := newRedlock(t, cs, withAttemptHook(func(_ string, err error) { attempts <- err }))
				ctx := context.Background()
				var (
					l   *Lock
					err error
				)
				if block {
					l, err = s.Lock(ctx, "late")
				} else {
					l, err = s.TryLock(ctx, "late")
				}
				first := <-attempts
				require.ErrorContains(t, first, "after the lease's local deadline")
				key := lease.NewKeys("late").Lock
				if !block {
					require.Error(t, err)
					for i, m := range ms {
						assert.False(t, m.Exists(key), "node %d keeps a token TryLock gave up", i)
					}
					return
				}
				require.NoError(t, err)
				require.True(t, l.Held())
				largest := int64(0)
				for i, m := range ms {
					v, err := m.Get(key)
					require.NoError(t, err, "node %d", i)
					h, _ := lease.ParseHolder(v)
					assert.Equal(t, l.lease.Token, h.Token, "node %d", i)
					assert.LessOrEqual(t, h.Fence, l.Fence(), "node %d", i)
					largest = max(largest, h.Fence)
				}
				assert.Equal(t, l.Fence(), largest)
				require.NoError(t, l.Release(ctx))
			})
		}
	}
}

// behindProxy returns a client that reaches m through a fault proxy, and
// the proxy.
func behindProxy(t *testing.T, m *miniredis.Miniredis) (Client, *faultproxy.Proxy) {
	proxy, err := faultproxy.New(m.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c, proxy
}

// A Redlock node that hangs (it takes requests and never answers) holds up
// no acquire, release or renewal round once a quorum has answered: each
// returns within a grace period, not at the call timeout, although go-redis does not interrupt a
// read when its context is cancelled. The calls still waiting on that node
// end at their deadline, and Close waits for them: none outlives it.
func TestRedlockHangingNodeHoldsNothingUp(t *testing.T) {
	ctx := context.Background()
	ms, cs := redlockNodes(t, 3)
	var proxy *faultproxy.Proxy
	cs[2], proxy = behindProxy(t, ms[2])
	const callTimeout = time.Second
	const quick = callTimeout / 2
	roundTook := make(chan time.Duration, 64)
	opts := []Option{WithTTL(10 * time.Second), WithCallTimeout(callTimeout), WithRetryInterval(20 * time.Millisecond),
		WithHooks(Hooks{RenewalRound: func(e RenewalEvent) { roundTook <- e.Duration }})}
	s, err := NewRedlockSession(cs, opts...)
	require.NoError(t, err)
	other, err := NewRedlockSession(cs, opts...)
	require.NoError(t, err)
	_, err = other.TryLock(ctx, "taken")
	require.NoError(t, err)

	proxy.Blackhole(faultproxy.Both)
	timed := func(what string, f func()) {
		t.Helper()
		start := time.Now()
		f()
		assert.Less(t, time.Since(start), quick, "%s with one node of three hanging (call timeout %v)", what, callTimeout)
	}
	var l *Lock
	timed("TryLock", func() { l, err = s.TryLock(ctx, "free") })
	require.NoError(t, err)
	timed("TryLock of a held name", func() { _, err = s.TryLock(ctx, "taken") })
	assert.ErrorIs(t, err, ErrLocked)
	timed("Release", func() { err = l.Release(ctx) })
	assert.NoError(t, err)
	l, err = s.TryLock(ctx, "renewed")
	require.NoError(t, err)
	for range 2 {
		select {
		case d := <-roundTook:
			assert.Less(t, d, quick, "a renewal round with one node of three hanging")
		case <-time.After(10 * time.Second):
			t.Fatal("no renewal round")
		}
	}
	assert.True(t, l.Held(), "%v", l.Err())

	require.NoError(t, s.Close(ctx))
	require.NoError(t, other.Close(ctx))
	// A tenth of the call timeout: enough for a goroutine that has signalled
	// Close to return (the session's stopper closes s.closed after Close's
	// channel: CI caught it runnable there with no grace), far less than a
	// call left on the hanging node would live if Close had not waited for it.
	assert.Empty(t, waitNoLeaks(callTimeout/10), "goroutines outlived Close")
}

// Leader reports the holder's own fence even when the node that issued it
// (before the holder's first renewal, the only one that holds it) answers
// after the others.
func TestRedlockLeaderWaitsForTheSlowNode(t *testing.T) {
	ctx := context.Background()
	ms, cs := redlockNodes(t, 3)
	var proxy *faultproxy.Proxy
	cs[2], proxy = behindProxy(t, ms[2])
	s := newRedlock(t, cs, WithTTL(10*time.Second), WithRenewInterval(3*time.Second), WithCallTimeout(2*time.Second))
	ahead := time.Now().Add(5 * time.Second).UnixMicro()
	require.NoError(t, ms[2].Set(lease.NewKeys("f").Fence, fmt.Sprint(ahead)))
	l, err := s.TryLock(ctx, "f")
	require.NoError(t, err)
	require.Equal(t, ahead+1, l.Fence(), "node 2 issued the acquisition's fence")
	e, err := s.Election("f")
	require.NoError(t, err)
	_, err = e.Leader(ctx) // every node has the script: one round trip each
	require.NoError(t, err)
	proxy.Delay(faultproxy.ServerToClient, 300*time.Millisecond, 0) // slow, not dead
	ld, err := e.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, l.Fence(), ld.Fence, "Leader's fence is the holder's own")
}

// After a split vote (no quorum, and not held by others on enough nodes),
// a blocking acquisition retries after its random delay, not on the next
// release event: the contender it split with publishes one when it gives
// its node back, and two waiters woken together split again, and again.
func TestRedlockSplitVoteRetriesAfterTheRandomDelay(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ms, cs := redlockNodes(t, 3)
	k := lease.NewKeys("split")
	ms[0].Set(k.Lock, "other\n1\n")
	ms[0].SetTTL(k.Lock, time.Minute)
	ms[1].Close()
	attempts := make(chan time.Time, 16)
	const retry = 500 * time.Millisecond
	s := newRedlock(t, cs, WithRetryInterval(retry), WithRetryJitter(0),
		withAttemptHook(func(_ string, err error) {
			if err != nil && !errors.Is(err, ErrLocked) {
				attempts <- time.Now()
			}
		}))
	done := make(chan error, 1)
	go func() {
		_, err := s.Lock(ctx, "split")
		done <- err
	}()
	first := recvWithin(t, attempts, 2*time.Second, "a split vote")
	require.NoError(t, cs[0].(*redis.Client).Publish(ctx, k.Channel, "R").Err(), "the other contender gave its node back")
	second := recvWithin(t, attempts, 2*time.Second, "the next attempt")
	assert.GreaterOrEqual(t, second.Sub(first), retry*9/10, "retried on the release event, not after the random delay")
	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)
}

// Close ends every lock at once and deletes its keys on the nodes that
// answer, whatever calls a hanging node still holds (here a renewal left
// behind); with a short context, it returns at its end.
func TestRedlockCloseWithAHangingNode(t *testing.T) {
	ctx := context.Background()
	ms, cs := redlockNodes(t, 3)
	var proxy *faultproxy.Proxy
	cs[2], proxy = behindProxy(t, ms[2])
	opt, rounds := rounds()
	s, err := NewRedlockSession(cs, WithTTL(10*time.Second), WithRenewInterval(200*time.Millisecond),
		WithCallTimeout(time.Second), opt)
	require.NoError(t, err)
	l, err := s.TryLock(ctx, "c")
	require.NoError(t, err)
	proxy.Blackhole(faultproxy.Both)
	require.False(t, waitRound(t, rounds, 5*time.Second), "renewed by nodes 0 and 1; node 2's call left behind")

	closeCtx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	closed := make(chan error, 1)
	go func() { closed <- s.Close(closeCtx) }()
	took := waitClosed(t, l.Done(), 5*time.Second, "the lock's Done after Close")
	assert.Less(t, took, 250*time.Millisecond, "Close ended the lock late")
	assert.ErrorIs(t, <-closed, context.DeadlineExceeded, "node 2's calls outlast Close's context")
	for i := range 2 {
		assert.False(t, ms[i].Exists(l.Key()), "node %d still holds the closed session's token", i)
	}
	require.NoError(t, s.Close(ctx), "a second Close waits for the first to finish")
}

// A split vote that ErrLocked reports (each node taken by a different
// contender, one of them us) is retried after the random delay too, not on
// the next event: every contender's acquire and give-back publishes one.
// The wait is checked as chosen (the delay, not following events) and as
// made: its start and end are taken on the acquiring goroutine, and a timer
// never fires early, so load only lengthens the gap.
func TestRedlockThreeWaySplitRetriesAfterTheRandomDelay(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ms, cs := redlockNodes(t, 3)
	k := lease.NewKeys("split3")
	for i, who := range []string{"b", "c"} {
		ms[i+1].Set(k.Lock, who+"\n1\n") // contenders B and C took nodes 1 and 2
		ms[i+1].SetTTL(k.Lock, time.Minute)
	}
	type attempt struct {
		err error
		at  time.Time
	}
	type pause struct {
		d      time.Duration
		follow bool
	}
	attempts, pauses := make(chan attempt, 16), make(chan pause, 16)
	var first atomic.Bool
	const retry = 500 * time.Millisecond
	// fastOpts' 100ms calls can time out under load; this test is not about them.
	s := newRedlock(t, cs, WithTTL(10*time.Second), WithCallTimeout(time.Second),
		WithRetryInterval(retry), WithRetryJitter(0),
		withAttemptHook(func(_ string, err error) {
			if first.CompareAndSwap(false, true) {
				ms[1].Del(k.Lock) // B and C give back too
				ms[2].Del(k.Lock)
			}
			attempts <- attempt{err, time.Now()}
		}),
		withPauseHook(func(d time.Duration, follow bool) { pauses <- pause{d, follow} }))
	done := lockAndRelease(ctx, s, "split3")
	split := recvWithin(t, attempts, 2*time.Second, "the split")
	assert.ErrorIs(t, split.err, ErrLocked, "we took node 0, B and C the others")
	assert.Equal(t, pause{retry, false}, recvWithin(t, pauses, 2*time.Second, "the wait after the split"),
		"after a split vote: the retry delay (jitter 0), not the next event")
	require.NoError(t, cs[0].(*redis.Client).Publish(ctx, k.Channel, "R").Err(), "a contender's give-back")
	next := recvWithin(t, attempts, 2*time.Second, "the next attempt")
	assert.NoError(t, next.err)
	assert.GreaterOrEqual(t, next.at.Sub(split.at), retry, "retried on a release event after a split vote")
	assert.NoError(t, <-done)
}

// Split votes in a row part their contenders by more and more: after each,
// a blocking acquisition waits the random retry delay plus a random part of
// a window that doubles, from two attempts' length. Here node 0 is held by
// another owner, node 2 never answers (each attempt waits for it until the
// call timeout), and we take node 1 each time: a split, again and again.
// With the retry delay alone, contenders whose attempts last that long
// kept meeting, and no one led for seconds (S21-hung).
func TestRedlockSplitVotesBackOff(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ms, cs := redlockNodes(t, 3)
	var proxy *faultproxy.Proxy
	cs[2], proxy = behindProxy(t, ms[2])
	proxy.Blackhole(faultproxy.Both)
	k := lease.NewKeys("backoff")
	ms[0].Set(k.Lock, "other\n1\n")
	ms[0].SetTTL(k.Lock, time.Minute)
	const splits, retry = 6, 20 * time.Millisecond
	sent := make(chan time.Time, 64)
	cs[1].(*redis.Client).AddHook(scriptCounter(lease.AcquireRun, new(atomic.Int64), sent))
	ended := make(chan time.Time, 64)
	s := newRedlock(t, cs, WithTTL(10*time.Second), WithCallTimeout(50*time.Millisecond),
		WithRetryInterval(retry), WithRetryJitter(0),
		withAttemptHook(func(_ string, err error) {
			if !errors.Is(err, lease.ErrNoQuorum) {
				t.Errorf("attempt: %v, want a split vote", err)
			}
			ended <- time.Now()
		}))
	done := lockAndRelease(ctx, s, "backoff")
	var waited time.Duration // from each attempt's end to the next one's first send
	recvWithin(t, sent, 2*time.Second, "the first attempt")
	for i := range splits - 1 {
		end := recvWithin(t, ended, 2*time.Second, fmt.Sprintf("split %d", i+1))
		waited += recvWithin(t, sent, 10*time.Second, fmt.Sprintf("attempt %d", i+2)).Sub(end)
	}
	// The retry delays alone add up to 100ms; the backoff's random parts
	// (windows of at least 2, 4, 8, 16 and 32 attempts of 50ms or more) to
	// less than 200ms in fewer than 2 runs in 10,000.
	assert.Greater(t, waited, (splits-1)*retry+200*time.Millisecond, "the waits after %d split votes in a row", splits-1)
	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)
}

// A Redlock session coalesces per node: acquires that arrive while two of
// its calls are on the wire to each node ride in one pipeline to every node,
// each with its own reply. Once a quorum answered they return, whatever the
// third node's batch still does; Close waits for that batch, and no
// goroutine outlives it.
func TestRedlockCallsShareAPipelinePerNode(t *testing.T) {
	ctx := context.Background()
	ms, cs := redlockNodes(t, 3)
	gates := make([]*wireGate, len(cs))
	for i, c := range cs {
		gates[i] = newWireGate()
		c.(*redis.Client).AddHook(gates[i].hook())
	}
	s, err := NewRedlockSession(cs, WithTTL(10*time.Second), WithCallTimeout(2*time.Second))
	require.NoError(t, err)
	first := fillWire(t, s, gates[0])
	for _, g := range gates[1:] {
		g.heldOnWire(t, maxOnWire)
	}
	names := []string{"rl-batch-a", "rl-batch-b", "rl-batch-c"}
	results := tryAll(background(len(names)), s, names)
	q := s.place.(*quorum)
	for _, c := range q.Combs {
		waitQueuedOn(t, c, len(names))
	}
	gates[0].open()
	gates[1].open()
	hold := gates[2].sendHeld(t) // node 2's batch stays on the wire
	for range maxOnWire {
		require.NoError(t, recvWithin(t, first, 5*time.Second, "a call held on the wire"))
	}
	for i, r := range results {
		res := recvWithin(t, r, 5*time.Second, names[i])
		require.NoError(t, res.err, names[i])
		for n, m := range ms[:2] {
			v, err := m.Get(res.l.Key())
			require.NoError(t, err, "%s on node %d", names[i], n)
			h, ok := lease.ParseHolder(v)
			require.True(t, ok, "%s on node %d", names[i], n)
			assert.Equal(t, res.l.lease.Token, h.Token, "%s holds its own token on node %d", names[i], n)
		}
		require.NoError(t, res.l.Release(ctx))
	}
	for i, g := range gates {
		t.Run(fmt.Sprint("node ", i), func(t *testing.T) { sentTogether(t, g, names...) })
	}

	closed := closeStillWaiting(t, s, "with node 2's batch on the wire")
	close(hold)
	require.NoError(t, recvWithin(t, closed, 5*time.Second, "Close"))
	for i, c := range q.Combs {
		onWire, _ := c.OnWire()
		assert.Zero(t, onWire, "node %d: calls on the wire after Close", i)
	}
	checkNoLeaks(t)
}

// lateScript sends the first call of sc through it (once armed) to the
// server only when open is closed: a request delayed on its way. The
// caller meanwhile waits for it, or, with fail set, sees fail at once (a
// read that timed out while the request was still on its way).
type lateScript struct {
	sc           *wire.Script
	fail         error
	armed        *atomic.Bool
	open, landed chan struct{}
}

func newLateScript(sc *wire.Script, fail error) lateScript {
	return lateScript{sc: sc, fail: fail, armed: new(atomic.Bool), open: make(chan struct{}), landed: make(chan struct{})}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "read tcp: i/o timeout (test)" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// hook returns the hook that applies h to calls sent alone.
func (h lateScript) hook() testHook {
	return testHook{single: func(ctx context.Context, cmds []redis.Cmder, send sendFunc) error {
		cmd := cmds[0]
		if !isCall(cmd, h.sc) || !h.armed.CompareAndSwap(true, false) {
			return send(ctx, cmds)
		}
		late := func(cmd redis.Cmder) error {
			<-h.open
			defer close(h.landed)
			return send(context.WithoutCancel(ctx), []redis.Cmder{cmd})
		}
		if h.fail == nil {
			return late(cmd)
		}
		go func() { _ = late(redis.NewCmd(context.Background(), cmd.Args()...)) }()
		cmd.SetErr(h.fail)
		return h.fail
	}}
}

// An acquire that succeeded on a quorum while its request to another node
// was still on its way leaves that request behind, whether the caller
// stopped waiting for it or saw it time out (any failure that is not Redis's
// reply); if it lands after the release, the heartbeat deletes the token it
// set, so that it does not keep the next owner from a quorum for a TTL.
func TestRedlockReleaseBeforeALateAcquire(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail error
	}{{"unanswered", nil}, {"timed out", timeoutErr{}}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			ms, cs := redlockNodes(t, 3)
			h := newLateScript(lease.AcquireRun, tc.fail)
			cs[2].(*redis.Client).AddHook(h.hook())
			opts := []Option{WithTTL(3 * time.Second), WithCallTimeout(500 * time.Millisecond), WithRenewInterval(200 * time.Millisecond)}
			s := newRedlock(t, cs, opts...)
			other := newRedlock(t, cs, opts...)
			warm, err := s.TryLock(ctx, "warm") // every node has the scripts
			require.NoError(t, err)
			require.NoError(t, warm.Release(ctx))

			h.armed.Store(true)
			l, err := s.TryLock(ctx, "p")
			require.NoError(t, err, "nodes 0 and 1 took it")
			require.NoError(t, l.Release(ctx))
			close(h.open) // node 2's acquire lands now, after the release
			<-h.landed
			require.Eventually(t, func() bool { return !ms[2].Exists(l.Key()) }, 2*time.Second, 5*time.Millisecond,
				"released, yet node 2 keeps our token")
			ms[0].Close() // a quorum now needs nodes 1 and 2
			_, err = other.TryLock(ctx, "p")
			assert.NoError(t, err)
		})
	}
}

// A node that is only somewhat slower than the others (its requests 20ms
// late, the others' answers within a few ms) is waited for: the grace
// period is at least a tenth of the call timeout, so a healthy node delayed
// by the network or a pause of this process is not counted as failed.
func TestRedlockGraceWaitsForASlowerHealthyNode(t *testing.T) {
	ctx := context.Background()
	ms, cs := redlockNodes(t, 3)
	var proxy *faultproxy.Proxy
	cs[2], proxy = behindProxy(t, ms[2])
	s := newRedlock(t, cs, WithTTL(10*time.Second), WithCallTimeout(time.Second))
	warm, err := s.TryLock(ctx, "warm") // every node has the scripts and a connection
	require.NoError(t, err)
	require.NoError(t, warm.Release(ctx))

	proxy.Delay(faultproxy.ClientToServer, 20*time.Millisecond, 0)
	l, err := s.TryLock(ctx, "slow")
	require.NoError(t, err)
	assert.True(t, ms[2].Exists(l.Key()), "the slower node's acquire was not waited for")
	assert.False(t, l.lease.Leftover, "a healthy node's answer was counted as missing")
}

// closeUntilCombinerClosed starts s.Close and waits until it has closed c
// (Transport.Drain), which it does once its first deletes are done;
// Close's result arrives on the returned channel.
func closeUntilCombinerClosed(t *testing.T, s *Session, c *wire.Combiner) <-chan error {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- s.Close(context.Background()) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c.Draining() {
			return closed
		}
		require.False(t, time.Now().After(deadline), "Close never closed the combiner")
		runtimeYield()
	}
}

// ownPair counts in n the pipelines that carry a Redlock release and an
// acquire of the same token: a give-back that took its own acquire along.
func ownPair(n *atomic.Int64) testHook {
	return testHook{pipeline: func(ctx context.Context, cmds []redis.Cmder, send sendFunc) error {
		rel := map[string]bool{}
		for _, c := range cmds {
			if a := c.Args(); len(a) > 5 && isCall(c, lease.RedlockReleaseRun) {
				rel[fmt.Sprint(a[5])] = true
			}
		}
		for _, c := range cmds {
			if a := c.Args(); len(a) > 5 && isCall(c, lease.AcquireRun) && rel[fmt.Sprint(a[5])] {
				n.Add(1)
			}
		}
		return send(ctx, cmds)
	}}
}

// Close deletes the tokens that calls left behind may still set once every
// such call has ended, batches included: here two acquires ride in node 2's
// batch, held on the wire, while nodes 0 and 1 answer; Close's first deletes
// come before the batch lands, so it deletes them once more after it.
// (Found by review: the last delete ran before Close waited for the
// batches, and the tokens stayed on node 2 for a TTL.)
func TestRedlockCloseDeletesAfterBatchedAcquireLands(t *testing.T) {
	ms, cs := redlockNodes(t, 3)
	gate := newWireGate()
	cs[2].(*redis.Client).AddHook(gate.hook())
	s, err := NewRedlockSession(cs, WithTTL(20*time.Second), WithCallTimeout(3*time.Second))
	require.NoError(t, err)
	q := s.place.(*quorum)

	first := fillWire(t, s, gate)         // two acquires held on node 2's wire
	names := []string{"late-a", "late-b"} // two: a batch of one is sent as a single call
	results := tryAll(background(len(names)), s, names)
	waitQueuedOn(t, q.Combs[2], len(names))
	hold := gate.sendHeld(t) // node 2's batch, with our acquires, is on its way
	var locks []*Lock
	for i, res := range results {
		r := recvWithin(t, res, 5*time.Second, names[i])
		require.NoError(t, r.err, "nodes 0 and 1 took %s", names[i])
		require.True(t, r.l.lease.Leftover, "node 2's acquire of %s went unanswered", names[i])
		locks = append(locks, r.l)
	}
	for range maxOnWire {
		require.NoError(t, recvWithin(t, first, 5*time.Second, "a call held on the wire"))
	}

	closed := closeUntilCombinerClosed(t, s, q.Combs[2]) // Close's first deletes are done
	close(hold)                                          // the acquire reaches node 2 now
	require.NoError(t, recvWithin(t, closed, 10*time.Second, "Close"))
	for _, l := range locks {
		for i, m := range ms {
			assert.False(t, m.Exists(l.Key()), "node %d keeps the closed session's token of %s after Close", i, l.Key())
		}
	}
}

// An attempt that takes the one node that lacks the key of an owner holding
// a quorum is a split vote reported as ErrLocked: it retries after the
// retry delay, not the growing backoff, so that once the owner resigns the
// next one leads within a retry delay. (Found by review of the backoff: the
// window doubled with every such attempt, up to a TTL, for a whole
// leadership whenever a node had lost the holder's key.)
func TestRedlockQuorumHolderIsNotASplitVote(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ms, cs := redlockNodes(t, 3)
	opts := []Option{WithTTL(3 * time.Second), WithRenewInterval(time.Second), WithCallTimeout(500 * time.Millisecond),
		WithRetryInterval(20 * time.Millisecond), WithRetryJitter(0)}
	a := newRedlock(t, cs, opts...)
	held, err := a.TryLock(ctx, "q")
	require.NoError(t, err)
	ms[2].Del(held.Key()) // node 2 lost the holder's key (restart without persistence)

	// Attempts take a few milliseconds under -race: by the 10th the window
	// is 1024 of them, capped at the TTL (3s).
	const splits = 10
	attempts := make(chan error, 64)
	released := make(chan time.Time, 1)
	var n int
	b := newRedlock(t, cs, append(opts, withAttemptHook(func(_ string, err error) {
		attempts <- err
		if n++; n == splits {
			assert.NoError(t, held.Release(context.Background()), "the holder resigns")
			released <- time.Now()
		}
	}))...)
	got := make(chan time.Time, 1)
	go func() {
		if l, err := b.Lock(ctx, "q"); err == nil {
			got <- time.Now()
			_ = l.Release(context.Background())
		}
	}()
	start := time.Now()
	for i := range splits {
		err := recvWithin(t, attempts, 20*time.Second, fmt.Sprint("attempt ", i+1))
		require.ErrorIs(t, err, ErrLocked, "nodes 0 and 1 are the holder's")
	}
	t.Logf("%d attempts against a holder of a quorum in %v", splits, time.Since(start))
	at := recvWithin(t, released, 5*time.Second, "the release")
	select {
	case won := <-got:
		t.Logf("acquired %v after the release", won.Sub(at))
	case <-time.After(150 * time.Millisecond):
		t.Fatalf("the holder released (a release event on every node), yet the waiter did not acquire within 150ms (retry interval 20ms)")
	}
}

// Close's deletes are sent to every node at once, even where a call on the
// key was given up while its batch was on the wire (here two Leader reads
// held on node 2's wire). (Found by review: quorum.releaseAll waited for
// such calls only until its grace period, and then sent no delete at all,
// leaving the token on node 2 for a TTL.)
func TestRedlockCloseDeletesBehindAnUnsettledRead(t *testing.T) {
	ctx := context.Background()
	ms, cs := redlockNodes(t, 3)
	h := &holdHook{}
	cs[2].(*redis.Client).AddHook(h.hook())
	s, err := NewRedlockSession(cs, WithTTL(20*time.Second), WithCallTimeout(3*time.Second))
	require.NoError(t, err)
	q := s.place.(*quorum)
	l, err := s.TryLock(ctx, "k")
	require.NoError(t, err)
	for i, m := range ms {
		require.True(t, m.Exists(l.Key()), "node %d took it", i)
	}
	e, err := s.Election("k")
	require.NoError(t, err)

	rules, _ := holdWire(t, s, h, "rd") // two acquires held on node 2's wire
	readCtx, cancelReads := context.WithCancel(ctx)
	reads := make(chan error, 2)
	for range 2 { // two: a batch of one is sent as a single call
		go func() {
			_, err := e.Leader(readCtx)
			reads <- err
		}()
	}
	waitQueuedOn(t, q.Combs[2], 2)
	batch := h.rule(lease.NewKeys("k").Lock, true) // node 2's batch of the two reads
	for _, r := range rules {
		close(r.release)
	}
	waitClosed(t, batch.reached, 5*time.Second, "the reads' batch on the wire")
	cancelReads() // the readers give up: their reads are unsettled on node 2
	for range 2 {
		recvWithin(t, reads, 5*time.Second, "Leader")
	}

	closed := closeUntilCombinerClosed(t, s, q.Combs[2]) // Close's deletes are done
	close(batch.release)                                 // the reads end now; they write nothing
	recvWithin(t, closed, 10*time.Second, "Close")
	for i, m := range ms {
		assert.False(t, m.Exists(l.Key()), "node %d keeps the closed session's token", i)
	}
}

// A call whose caller has given up is never sent, not even by a batch that
// leaves before its caller takes it out of the queue: when the grace period
// ends, acquireAll returns before node 2's goroutine has taken its queued
// acquire out, and the give-back that follows at once must not carry it
// along after the delete. (Found by review: 43 of 300 give-backs did.)
func TestRedlockGiveBackNeverSendsItsOwnAcquire(t *testing.T) {
	ctx := context.Background()
	ms, cs := redlockNodes(t, 3)
	k := lease.NewKeys("g")
	for _, m := range ms[:2] {
		m.Set(k.Lock, "other\n1\n")
		m.SetTTL(k.Lock, time.Minute)
	}
	gate := newWireGate()
	var pairs atomic.Int64
	cs[2].(*redis.Client).AddHook(ownPair(&pairs))
	cs[2].(*redis.Client).AddHook(gate.hook())
	s := newRedlock(t, cs, WithTTL(3*time.Second), WithRenewInterval(time.Second), WithCallTimeout(100*time.Millisecond))
	fillWire(t, s, gate)
	defer gate.open()
	for range 100 {
		_, _ = s.TryLock(ctx, "g")
	}
	assert.Zero(t, pairs.Load(), "give-backs sent with their own acquire after them")
}
