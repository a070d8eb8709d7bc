package redisleader

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader/internal/redisserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisleader/redisleader/internal/lease"
)

func TestElectionRejectsBadInput(t *testing.T) {
	m, c := newMini(t)
	s := newSession(t, c)
	_, err := s.Election("a{b")
	assert.ErrorIs(t, err, ErrInvalid)
	e := mustElection(t, s, "ok")
	_, err = e.Campaign(context.Background(), strings.Repeat("v", 64<<10+1))
	assert.ErrorIs(t, err, ErrInvalid)
	assert.Contains(t, err.Error(), "value is 65537 bytes long; it must be at most 65536")
	err = e.Run(context.Background(), "v", nil)
	assert.ErrorIs(t, err, ErrInvalid)
	assert.Zero(t, m.CommandCount(), "bad input must not reach Redis")
}

func TestCampaignHandover(t *testing.T) { forBackends(t, campaignHandover) }

// campaignHandover: a follower campaigning on b takes over as soon as the
// leader resigns, woken by the release, with a higher fence.
func campaignHandover(t *testing.T, b *backend) {
	ctx := context.Background()
	a := mustElection(t, newSession(t, b.client, fastOpts()...), "handover")
	f := mustElection(t, newSession(t, b.client, fastOpts()...), "handover")

	first, err := a.Campaign(ctx, "host-a:1")
	require.NoError(t, err)
	assert.Equal(t, "host-a:1", first.Value())

	got := make(chan *Lock, 1)
	go func() {
		l, err := f.Campaign(ctx, "host-f:2")
		assert.NoError(t, err)
		got <- l
	}()
	l, err := a.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, "host-a:1", l.Value)
	assert.Equal(t, first.Fence(), l.Fence)

	start := time.Now()
	require.NoError(t, first.Release(ctx), "resign")
	select {
	case second := <-got:
		t.Logf("handover took %v", time.Since(start))
		assert.Greater(t, second.Fence(), first.Fence())
		assert.Equal(t, "host-f:2", second.Value())
		// The follower was woken by the release, not by polling: on
		// miniredis nothing expires without FastForward, and the leader's
		// lease was far from its end.
		assert.Less(t, time.Since(start), 300*time.Millisecond)
		require.NoError(t, second.Release(ctx))
	case <-time.After(2 * time.Second):
		t.Fatal("the follower did not take over after the resignation")
	}
	assert.ErrorIs(t, first.Release(ctx), nil, "resigning twice is a no-op")
}

func TestLeader(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		e := mustElection(t, newSession(t, b.client, WithTTL(5*time.Second)), "who")
		_, err := e.Leader(ctx)
		assert.ErrorIs(t, err, ErrNoLeader)
		lead, err := e.Campaign(ctx, "me")
		require.NoError(t, err)
		l, err := e.Leader(ctx)
		require.NoError(t, err)
		assert.Equal(t, Leader{Value: "me", Fence: lead.Fence(), TTL: l.TTL}, l)
		assert.InDelta(t, 5*time.Second, l.TTL, float64(time.Second))
		require.NoError(t, lead.Release(ctx))
		_, err = e.Leader(ctx)
		assert.ErrorIs(t, err, ErrNoLeader)
		b.set(e.keys.Lock, "garbage")
		_, err = e.Leader(ctx)
		assert.ErrorContains(t, err, "holds a value this package did not write")
	})
}

func TestCampaignEndsWithSessionOrContext(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		leader, err := mustElection(t, newSession(t, b.client), "busy").Campaign(ctx, "leader")
		require.NoError(t, err)

		t.Run("session closed while waiting", func(t *testing.T) {
			s, err := NewSession(b.client)
			require.NoError(t, err)
			errc := make(chan error, 1)
			go func() {
				_, err := mustElection(t, s, "busy").Campaign(ctx, "waiter")
				errc <- err
			}()
			require.NoError(t, s.Close(ctx))
			select {
			case err := <-errc:
				assert.ErrorIs(t, err, ErrSessionClosed)
			case <-time.After(time.Second):
				t.Fatal("Campaign did not return when its session closed") // etcd's would not
			}
		})
		t.Run("session closed before", func(t *testing.T) {
			s, err := NewSession(b.client)
			require.NoError(t, err)
			require.NoError(t, s.Close(ctx))
			_, err = mustElection(t, s, "busy").Campaign(ctx, "waiter")
			assert.ErrorIs(t, err, ErrSessionClosed)
		})
		t.Run("ctx cancelled while waiting", func(t *testing.T) {
			s := newSession(t, b.client)
			cctx, cancel := context.WithCancel(ctx)
			errc := make(chan error, 1)
			go func() {
				_, err := mustElection(t, s, "busy").Campaign(cctx, "waiter")
				errc <- err
			}()
			cancel()
			assert.ErrorIs(t, recvWithin(t, errc, time.Second, "Campaign did not return when ctx was cancelled"), context.Canceled)
		})
		h, ok := lease.ParseHolder(b.get(leader.Key()))
		require.True(t, ok)
		assert.Equal(t, leader.lease.Token, h.Token, "waiters that gave up left the leader's key alone")
		assert.True(t, leader.Held())
		checkNoLeaksExcept(t, 2) // the leader's session and the backend's own
	})
}

// checkNoLeaksExcept is checkNoLeaks for a test that keeps some sessions
// open: it only checks that no Observe or Campaign goroutine is left.
func checkNoLeaksExcept(t testing.TB, _ int) {
	t.Helper()
	g := waitNoLeaks(2 * time.Second)
	for _, stack := range strings.Split(g, "\n\n") {
		if strings.Contains(stack, "(*Election).observe") || strings.Contains(stack, "(*Session).acquire") {
			t.Fatalf("goroutine left behind:\n%s", stack)
		}
	}
}

// Twenty candidates on a real redis-server, over resign and crash cycles:
// belief intervals never overlap, fences strictly increase, and a bystander's
// Observe sees leaders in order, the last one, and a vacancy between each two.
func TestTwentyCandidates(t *testing.T) {
	srv := redisserver.Start(t)
	c := srv.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true; o.PoolSize = 64 })
	opts := []Option{WithTTL(300 * time.Millisecond), WithRetryInterval(20 * time.Millisecond)}
	const candidates, terms, crashEvery = 20, 60, 6
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	bystander := mustElection(t, newSession(t, c, opts...), "twenty")
	octx, ocancel := context.WithCancel(context.Background())
	defer ocancel()
	o := observe(octx, bystander)
	o.waitFor(t, "initial vacancy", func(l Leader) bool { return l.Fence == 0 })

	type interval struct {
		start, end time.Time
		fence      int64
		crashed    bool
	}
	var (
		mu        sync.Mutex
		intervals []interval
		termsLeft = terms
	)
	var wg sync.WaitGroup
	for i := 0; i < candidates; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for {
				s, err := NewSession(c, opts...)
				if !assert.NoError(t, err) {
					return
				}
				lead, err := mustElection(t, s, "twenty").Campaign(ctx, fmt.Sprint("candidate-", i))
				if err != nil {
					_ = s.Close(context.Background())
					return // ctx ended: the run is over
				}
				start := time.Now()
				mu.Lock()
				termsLeft--
				n := termsLeft
				mu.Unlock()
				if n < 0 {
					_ = s.Close(context.Background())
					return
				}
				// Hold for a little while, then resign or crash.
				select {
				case <-time.After(time.Duration(rand.N(5)) * time.Millisecond):
				case <-lead.Done():
				}
				iv := interval{start: start, fence: lead.Fence()}
				if n%crashEvery == 0 {
					iv.end = time.Now()
					crash(s)
					iv.crashed = true
				} else {
					iv.end = time.Now() // belief ends before the release is sent
					assert.NoError(t, lead.Release(context.Background()))
				}
				if err := lead.Err(); errors.Is(err, ErrLost) {
					iv.end = lead.Deadline() // ended by loss: the deadline bounds it
				}
				mu.Lock()
				intervals = append(intervals, iv)
				done := len(intervals) >= terms
				mu.Unlock()
				_ = s.Close(context.Background())
				if done {
					cancel()
				}
			}
		}(i)
	}
	wg.Wait()

	require.Len(t, intervals, terms)
	slices.SortFunc(intervals, func(a, b interval) int { return a.start.Compare(b.start) })
	crashes := 0
	for i, iv := range intervals {
		if iv.crashed {
			crashes++
		}
		if i == 0 {
			continue
		}
		prev := intervals[i-1]
		assert.False(t, iv.start.Before(prev.end), "term %d (fence %d) began %v before term %d (fence %d) ended",
			i, iv.fence, prev.end.Sub(iv.start), i-1, prev.fence)
		assert.Greater(t, iv.fence, prev.fence, "fences strictly increase")
	}
	assert.Equal(t, terms/crashEvery, crashes)

	// The bystander saw only real leaders, in order, with a vacancy between
	// each two, and ends with the last vacancy. (It reads Redis on every
	// change, so a term shorter than a read, here 0–5ms, may be missed.)
	o.waitFor(t, "the last vacancy", func(l Leader) bool { return l.Fence == 0 })
	var want []int64
	for _, iv := range intervals {
		want = append(want, iv.fence)
	}
	events := fenceList(o.snapshot())
	next := 0 // index in want of the earliest leader not yet matched
	for i, f := range events {
		if f == 0 {
			continue
		}
		j := slices.Index(want[next:], f)
		if !assert.GreaterOrEqual(t, j, 0, "Observe reported fence %d, not a later real leader: %v", f, events) {
			break
		}
		next += j + 1
		assert.Zero(t, events[i-1], "a vacancy before each new leader: %v", events)
	}
	assert.NotZero(t, next, "Observe saw no leader at all: %v", events)
	ocancel()
	waitClosed(t, o.closed, time.Second, "Observe")
}

// stallProclaim holds the proclaim script until its call's context ends,
// telling the test when one is held.
type stallProclaim struct {
	*redis.Client
	held chan struct{}
}

func (c *stallProclaim) Process(ctx context.Context, cmd redis.Cmder) error {
	if isCall(cmd, lease.ProclaimRun) {
		c.held <- struct{}{}
		<-ctx.Done()
		cmd.SetErr(ctx.Err())
		return cmd.Err()
	}
	return c.Client.Process(ctx, cmd)
}

// A Proclaim queued behind another one in flight returns with its context.
func TestProclaimQueuedReturnsWithItsContext(t *testing.T) {
	_, rc := newMini(t)
	c := &stallProclaim{Client: rc, held: make(chan struct{}, 1)}
	s := newSession(t, c, WithTTL(12*time.Second))
	e := mustElection(t, s, "p")
	_, err := e.Campaign(context.Background(), "v0")
	require.NoError(t, err)
	go func() { _ = e.Proclaim(context.Background(), "v1") }()
	recvWithin(t, c.held, 2*time.Second, "the first Proclaim in flight")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	assert.ErrorIs(t, e.Proclaim(ctx, "v2"), context.DeadlineExceeded)
	assert.Less(t, time.Since(start), 300*time.Millisecond, "the queued Proclaim outlived its context")
}

// TryCampaign makes one attempt: it leads a free election, and while another
// candidate leads it returns ErrLocked with the leader's fence at once,
// leaving the leader's key as it was.
func TestTryCampaign(t *testing.T) {
	m, c := newMini(t)
	ctx := context.Background()
	a, b := mustElection(t, newSession(t, c), "try"), mustElection(t, newSession(t, c), "try")
	lead, err := a.TryCampaign(ctx, "a")
	require.NoError(t, err)
	assert.Equal(t, "a", lead.Value())
	stored, err := m.Get(lead.Key())
	require.NoError(t, err)

	other, err := b.TryCampaign(ctx, "b")
	assert.Nil(t, other)
	assert.ErrorIs(t, err, ErrLocked)
	assert.ErrorContains(t, err, fmt.Sprintf("fence %d", lead.Fence()))
	after, err := m.Get(lead.Key())
	require.NoError(t, err)
	assert.Equal(t, stored, after, "a failed TryCampaign must not touch the leader's key")

	_, err = a.TryCampaign(ctx, "a")
	assert.ErrorIs(t, err, ErrLocked, "a session never waits for itself, nor leads twice")
	_, err = b.TryCampaign(ctx, strings.Repeat("x", 64<<10+1))
	assert.ErrorIs(t, err, ErrInvalid)

	require.NoError(t, lead.Release(ctx))
	won, err := b.TryCampaign(ctx, "b")
	require.NoError(t, err)
	assert.Greater(t, won.Fence(), lead.Fence())
}

// countingClient returns a client for addr whose commands are counted.
func countingClient(t testing.TB, addr string) (*redis.Client, *countingHook) {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	h := &countingHook{}
	c.AddHook(h.hook())
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
		assert.Equal(t, lead.lease.Token, strings.SplitN(b.get(lead.Key()), "\n", 2)[0], "the leader's key after a non-leader's Resign")

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
		c.(*redis.Client).AddHook(scripts[i].hook())
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
	assert.ErrorContains(t, err, "permission denied for PUBLISH "+lead.lease.Keys.Channel)
	assert.Equal(t, stored, admin.Get(ctx, lead.Key()).Val())
	assert.Equal(t, "a", lead.Value())

	setUser(t, admin, "proclaimer", "&redisleader:*")
	broken := lead.lease.Token + "\nno-fence"
	require.NoError(t, admin.Set(ctx, lead.Key(), broken, time.Minute).Err())
	err = e.Proclaim(ctx, "b")
	assert.True(t, permanent(err), "%v", err)
	assert.ErrorContains(t, err, "holds our token but no fence")
	assert.Equal(t, broken, admin.Get(ctx, lead.Key()).Val())
}
