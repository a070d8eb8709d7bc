package redisleader

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader/internal/redisserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countingHook counts the commands a client sends (with scriptsOnly, its
// script calls).
type countingHook struct {
	n           atomic.Int64
	scriptsOnly bool
	match       string // if set, only commands with an argument equal to it count
}

func (h *countingHook) count(cmds ...redis.Cmder) {
	for _, cmd := range cmds {
		if (!h.scriptsOnly || isScript(cmd)) && (h.match == "" || slices.ContainsFunc(cmd.Args(), func(a any) bool { return fmt.Sprint(a) == h.match })) {
			h.n.Add(1)
		}
	}
}

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return beforeHook(h.count).ProcessHook(next)
}
func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return beforeHook(h.count).ProcessPipelineHook(next)
}

// beforeHook is a hook that calls itself with the commands of each call,
// single or pipelined, before sending them.
type beforeHook func(cmds ...redis.Cmder)

func (f beforeHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (f beforeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		f(cmd)
		return next(ctx, cmd)
	}
}
func (f beforeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		f(cmds...)
		return next(ctx, cmds)
	}
}

// countingClient returns a client for addr whose commands are counted.
func countingClient(t testing.TB, addr string) (*redis.Client, *countingHook) {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	h := &countingHook{}
	c.AddHook(h)
	return c, h
}

// TestResign: the leader's Resign deletes the key, a waiting candidate
// takes over at once and observers see the vacancy; Resign by a session
// that does not lead returns nil and sends nothing.
func TestResign(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		// A long TTL: only the resignation, never an expiry, can hand over.
		opts := []Option{WithTTL(10 * time.Second)}
		o := observe(ctx, mustElection(t, newSession(t, b.client, opts...), "resign"))
		o.waitFor(t, "initial vacancy", func(l Leader) bool { return l.Fence == 0 })
		a := mustElection(t, newSession(t, b.client, opts...), "resign")
		lead, err := a.Campaign(ctx, "a")
		require.NoError(t, err)
		o.waitFor(t, "leader a", func(l Leader) bool { return l.Fence == lead.Fence() })

		fc, hook := countingClient(t, b.addr)
		f := mustElection(t, newSession(t, fc, opts...), "resign")
		next := campaign(t, ctx, f, "f")
		sent := hook.n.Load()
		require.NoError(t, f.Resign(ctx), "Resign by a candidate that does not lead")
		assert.Equal(t, sent, hook.n.Load(), "Resign by a non-leader sent commands")
		assert.True(t, lead.Held())
		assert.Equal(t, lead.token, strings.SplitN(b.get(lead.Key()), "\n", 2)[0], "the leader's key after a non-leader's Resign")

		start := time.Now()
		require.NoError(t, a.Resign(ctx))
		assert.ErrorIs(t, lead.Err(), ErrReleased)
		second := recvWithin(t, next, 2*time.Second, "the follower's leadership")
		assert.Less(t, time.Since(start), time.Second, "the follower was not woken by the resignation")
		assert.Greater(t, second.Fence(), lead.Fence())
		o.waitFor(t, "leader f", func(l Leader) bool { return l.Fence == second.Fence() })
		assert.Equal(t, []int64{0, lead.Fence(), 0, second.Fence()}, fenceList(o.snapshot()), "the vacancy between the terms")

		require.NoError(t, a.Resign(ctx), "Resign after resigning")
		require.NoError(t, f.Resign(ctx))
		assert.Empty(t, b.get(second.Key()))
		o.waitFor(t, "vacancy", func(l Leader) bool { return l.Fence == 0 })
	})
}

// TestProclaim: the leader's new value reaches Observe (through the hint:
// the TTL is long) and Leader with the same fence, and renewals go on; a
// follower's Proclaim fails and writes nothing.
func TestProclaim(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		roundOpt, roundDone := rounds()
		opts := []Option{WithTTL(10 * time.Second)}
		o := observe(ctx, mustElection(t, newSession(t, b.client, opts...), "proclaim"))
		o.waitFor(t, "initial vacancy", func(l Leader) bool { return l.Fence == 0 })
		e := mustElection(t, newSession(t, b.client, WithTTL(time.Second), WithRenewInterval(100*time.Millisecond), roundOpt), "proclaim")
		lead, err := e.Campaign(ctx, "host-a:1")
		require.NoError(t, err)
		o.waitFor(t, "leader", func(l Leader) bool { return l.Fence == lead.Fence() })

		require.NoError(t, e.Proclaim(ctx, "host-a:2"))
		assert.Equal(t, "host-a:2", lead.Value())
		got := o.waitFor(t, "the new value", func(l Leader) bool { return l.Value == "host-a:2" })
		assert.Equal(t, lead.Fence(), got.Fence, "Proclaim keeps the fence")
		assert.Equal(t, []int64{0, lead.Fence(), lead.Fence()}, fenceList(o.snapshot()), "no vacancy reported")
		l, err := e.Leader(ctx)
		require.NoError(t, err)
		assert.Equal(t, Leader{Value: "host-a:2", Fence: lead.Fence(), TTL: l.TTL}, l)
		assert.Positive(t, l.TTL, "Proclaim keeps the TTL")
		for range 3 {
			assert.False(t, waitRound(t, roundDone, 2*time.Second), "a renewal round failed")
		}
		assert.True(t, lead.Held(), "renewals after Proclaim: %v", lead.Err())
		require.NoError(t, e.Proclaim(ctx, ""), "an empty value")
		assert.Equal(t, "", lead.Value())

		fc, hook := countingClient(t, b.addr)
		f := mustElection(t, newSession(t, fc, opts...), "proclaim")
		stored := b.get(lead.Key())
		sent := hook.n.Load()
		assert.ErrorIs(t, f.Proclaim(ctx, "host-f:1"), ErrNotLeader)
		assert.ErrorIs(t, f.Proclaim(ctx, strings.Repeat("v", maxValueLen+1)), ErrInvalid)
		assert.Equal(t, sent, hook.n.Load(), "a follower's Proclaim sent commands")
		assert.Equal(t, stored, b.get(lead.Key()))

		require.NoError(t, e.Resign(ctx))
		assert.ErrorIs(t, e.Proclaim(ctx, "host-a:3"), ErrNotLeader, "Proclaim after Resign")
		assert.Empty(t, b.get(lead.Key()))
	})
}

// TestProclaimAfterLoss: a leader whose key was taken learns it from
// Proclaim, which writes nothing and ends the leadership with ErrNotOwner.
func TestProclaimAfterLoss(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		s := newSession(t, b.client, WithTTL(10*time.Second)) // no renewal during the test
		e := mustElection(t, s, "proclaim-lost")
		lead, err := e.Campaign(ctx, "a")
		require.NoError(t, err)
		b.set(lead.Key(), "other\n1\nthief")
		err = e.Proclaim(ctx, "b")
		assert.ErrorIs(t, err, ErrNotLeader)
		assert.ErrorIs(t, err, ErrNotOwner)
		assert.ErrorIs(t, lead.Err(), ErrNotOwner)
		assert.Equal(t, "a", lead.Value())
		assert.Equal(t, "other\n1\nthief", b.get(lead.Key()), "Proclaim wrote to another owner's key")
		assert.ErrorIs(t, e.Proclaim(ctx, "b"), ErrNotLeader, "after the loss")
		require.NoError(t, e.Resign(ctx), "Resign after the loss")
		assert.Equal(t, "other\n1\nthief", b.get(lead.Key()), "Resign wrote to another owner's key")
	})
}

// TestResignAndProclaimRedlock: Resign clears every node; Proclaim is
// refused with ErrInvalid, without I/O.
func TestResignAndProclaimRedlock(t *testing.T) {
	ms, cs := redlockNodes(t, 3)
	ctx := context.Background()
	// Script calls only: the session's first server check (CONFIG GET,
	// INFO) runs on its heartbeat when it first holds a name, at any moment
	// of the test. No renewal round runs during the test, and the node calls
	// Campaign stopped waiting for once a quorum answered (a late acquire or
	// fence write-back) have ended before the calls are counted.
	scripts := make([]*countingHook, len(cs))
	for i, c := range cs {
		scripts[i] = &countingHook{scriptsOnly: true}
		c.(*redis.Client).AddHook(scripts[i])
	}
	e := mustElection(t, newRedlock(t, cs, WithTTL(10*time.Second), WithRenewInterval(3*time.Second)), "redlock-resign")
	lead, err := e.Campaign(ctx, "a")
	require.NoError(t, err)
	e.s.left.wg.Wait()
	before := make([]int64, len(cs))
	for i, h := range scripts {
		before[i] = h.n.Load()
		require.Positive(t, before[i], "node %d: Campaign's script calls counted", i)
	}
	assert.ErrorIs(t, e.Proclaim(ctx, "b"), ErrInvalid)
	for i, h := range scripts {
		assert.Equal(t, before[i], h.n.Load(), "node %d", i)
	}
	require.NoError(t, e.Resign(ctx))
	for i, m := range ms {
		assert.False(t, m.Exists(lead.Key()), "node %d", i)
	}
}

// TestProclaimErrorsWriteNothing: a Proclaim whose PUBLISH the user's ACL
// denies, or that finds our token without a fence, fails with a permanent
// error and leaves the key as it was.
func TestProclaimErrorsWriteNothing(t *testing.T) {
	srv := redisserver.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	setUser(t, admin, "proclaimer", aclRule)
	e := mustElection(t, newSession(t, userClient(t, srv, "proclaimer"), WithTTL(10*time.Second)), "denied-proclaim")
	lead, err := e.Campaign(ctx, "a")
	require.NoError(t, err)
	stored := admin.Get(ctx, lead.Key()).Val()

	setUser(t, admin, "proclaimer", "resetchannels")
	err = e.Proclaim(ctx, "b")
	assert.True(t, permanent(err), "%v", err)
	assert.ErrorContains(t, err, "permission denied for PUBLISH "+lead.keys.channel())
	assert.Equal(t, stored, admin.Get(ctx, lead.Key()).Val())
	assert.Equal(t, "a", lead.Value())

	setUser(t, admin, "proclaimer", "&redisleader:*")
	broken := lead.token + "\nno-fence"
	require.NoError(t, admin.Set(ctx, lead.Key(), broken, time.Minute).Err())
	err = e.Proclaim(ctx, "b")
	assert.True(t, permanent(err), "%v", err)
	assert.ErrorContains(t, err, "holds our token but no fence")
	assert.Equal(t, broken, admin.Get(ctx, lead.Key()).Val())
}
