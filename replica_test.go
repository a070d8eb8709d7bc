package redisleader

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader/internal/faultproxy"
	"github.com/redisleader/redisleader/internal/lease"
	"github.com/redisleader/redisleader/internal/syncbuf"
	"github.com/redisleader/redisleader/internal/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReplicaAcksRejectsBadOptions(t *testing.T) {
	m, c := newMini(t)
	for _, tt := range []struct {
		opt  Option
		want string
	}{
		{WithReplicaAcks(0, 10*time.Millisecond), "WithReplicaAcks(0, 10ms): the number of replicas must be at least 1"},
		{WithReplicaAcks(1, 0), "WithReplicaAcks(1, 0s): the timeout must be a positive whole number of milliseconds"},
		{WithReplicaAcks(1, 1500*time.Microsecond), "the timeout must be a positive whole number of milliseconds"},
		{WithReplicaAcks(1, time.Second), "WithReplicaAcks(1, 1s): the timeout must be below the call timeout (1s)"},
	} {
		_, err := NewSession(c, tt.opt)
		assert.ErrorIs(t, err, ErrInvalid)
		assert.ErrorContains(t, err, tt.want)
	}
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{m.Addr()}})
	defer cluster.Close()
	_, err := NewSession(cluster, WithReplicaAcks(1, 10*time.Millisecond))
	assert.ErrorIs(t, err, ErrInvalid)
	assert.ErrorContains(t, err, "ClusterClient")
	assert.Zero(t, m.CommandCount(), "bad options must not reach Redis")
}

// TestReplicaAcks: with WithReplicaAcks an acquire or a renewal counts only
// when a replica acknowledged it; with replication cut, TryLock fails with
// ErrReplication and leaves no key, and a held lock ends at its deadline.
func TestReplicaAcks(t *testing.T) {
	primary, replica, link := replicated(t)
	ctx := context.Background()
	c := primary.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	var logs syncbuf.Buffer
	round, roundDone := rounds()
	// Call timeout 500ms: room for WAIT's 200ms plus Redis's 100ms timeout check
	// (200ms, not less: a busy machine delays the replica's acknowledgement).
	s := newSession(t, c, WithTTL(3*time.Second), WithReplicaAcks(1, 200*time.Millisecond), round,
		WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))

	l, err := s.TryLock(ctx, "acked")
	require.NoError(t, err)
	rc := replica.Client(t)
	v, err := rc.Get(ctx, l.Key()).Result()
	require.NoError(t, err, "the replica has the key once TryLock returned")
	assert.Contains(t, v, "\n")
	require.False(t, waitRound(t, roundDone, 3*time.Second), "an acknowledged renewal")
	assert.True(t, l.Held())

	link.Blackhole(faultproxy.Both)
	_, err = s.TryLock(ctx, "unacked")
	assert.ErrorIs(t, err, ErrReplication)
	assert.ErrorContains(t, err, "0 of 1 replicas acknowledged within 200ms")
	n, _ := c.Exists(ctx, "redisleader:{unacked}").Result()
	assert.Zero(t, n, "an unacknowledged acquire must not leave its key")

	d := l.Deadline()
	waitClosed(t, l.Done(), 3*time.Second, "Done with replication cut")
	assert.ErrorIs(t, l.Err(), ErrExpired)
	assert.False(t, time.Now().Before(d), "not before the deadline")
	exists, _ := c.Exists(ctx, l.Key()).Result()
	assert.EqualValues(t, 1, exists, "the primary still had the key: renewals ran but were not acknowledged")
	assert.NotContains(t, logs.String(), "has replicas", "no replication warning with WithReplicaAcks")
}

// TestReplicasWithoutAcksAreWarned: a session on a primary with replicas and
// without WithReplicaAcks warns that a failover can lose a lock.
func TestReplicasWithoutAcksAreWarned(t *testing.T) {
	primary, _, _ := replicated(t)
	c := primary.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	var logs syncbuf.Buffer
	round, roundDone := rounds()
	s := newSession(t, c, WithTTL(300*time.Millisecond), round,
		WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	_, err := s.TryLock(context.Background(), "warned")
	require.NoError(t, err)
	require.False(t, waitRound(t, roundDone, 2*time.Second))
	assert.Contains(t, logs.String(), "connected_replicas=1")
}

// TestReplicaAcksRetriesUntilAcknowledged: a blocking acquire whose first
// attempts are not acknowledged keeps its acquisition's arguments intact
// and succeeds once replication is back (regression: the give-back used to
// overwrite them, and every later attempt failed with a Lua error).
func TestReplicaAcksRetriesUntilAcknowledged(t *testing.T) {
	primary, _, link := replicated(t)
	ctx := context.Background()
	c := primary.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	refused := make(chan struct{}, 1)
	s := newSession(t, c, WithTTL(3*time.Second), WithReplicaAcks(1, 200*time.Millisecond),
		withAttemptHook(func(_ string, err error) {
			if errors.Is(err, ErrReplication) {
				select {
				case refused <- struct{}{}:
				default:
				}
			}
		}))
	link.Blackhole(faultproxy.Both)
	got := lockAndRelease(ctx, s, "retry")
	select {
	case <-refused:
	case <-time.After(5 * time.Second):
		t.Fatal("no unacknowledged attempt")
	}
	link.Heal()
	link.ResetConns() // the replica reconnects and resynchronises
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Lock did not succeed once replication was back")
	}
}

// lateHook sends the first single call of the script with SHA sha to Redis
// only when deliver is closed: a request still on its way, which lands late
// (a connection that stalled, then delivered). Its caller gets a lost reply
// at once, or, with retried, the reply of the same request sent again at
// once (go-redis's MaxRetries on a new connection).
type lateHook struct {
	sc      *wire.Script
	retried bool
	mu      sync.Mutex
	used    bool
	sent    chan struct{} // closed when the call got its lost reply
	deliver chan struct{} // closed by the test: the request lands
	landed  chan any      // the late request's reply, or its error
}

func newLateHook(sc *wire.Script, retried bool) *lateHook {
	return &lateHook{sc: sc, retried: retried, sent: make(chan struct{}), deliver: make(chan struct{}), landed: make(chan any, 1)}
}

// hook returns the hook that applies h to calls sent alone.
func (h *lateHook) hook() testHook {
	return testHook{single: func(ctx context.Context, cmds []redis.Cmder, send sendFunc) error {
		cmd := cmds[0]
		if !isCall(cmd, h.sc) {
			return send(ctx, cmds)
		}
		h.mu.Lock()
		first := !h.used
		h.used = true
		h.mu.Unlock()
		if !first {
			return send(ctx, cmds)
		}
		late := redis.NewCmd(context.Background(), cmd.Args()...)
		go func() {
			<-h.deliver
			if err := send(context.Background(), []redis.Cmder{late}); err != nil {
				h.landed <- err
				return
			}
			h.landed <- late.Val()
		}()
		defer close(h.sent)
		if h.retried {
			return send(ctx, cmds)
		}
		cmd.SetErr(context.DeadlineExceeded)
		return context.DeadlineExceeded
	}}
}

// A give-back's request may land after the acquisition's next attempt: one
// whose reply was lost, or one go-redis sent again on a new connection (the
// caller sees the retry's reply). It must not delete the key that attempt
// took. (With the same token for every attempt it did, and another session
// took the name while the first still held it: two owners.) The acquisition
// moves to a new token after a give-back, so the late delete finds another
// token.
func TestLateGiveBackNeverDeletesTheNextAttempt(t *testing.T) {
	for _, retried := range []bool{false, true} {
		t.Run(map[bool]string{false: "reply lost", true: "retried by go-redis"}[retried], func(t *testing.T) {
			primary, _, link := replicated(t)
			c := primary.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
			// A server that has our scripts, as in steady state: the late
			// request runs (on a server without them it would meet NOSCRIPT
			// and do nothing).
			require.NoError(t, c.ScriptLoad(context.Background(), lease.ReleaseRun.Src()).Err())
			h := newLateHook(lease.ReleaseRun, retried)
			c.AddHook(h.hook())
			s := newSession(t, c, WithTTL(12*time.Second), WithRenewInterval(4*time.Second), WithCallTimeout(2*time.Second),
				WithRetryInterval(20*time.Millisecond), WithReplicaAcks(1, 200*time.Millisecond))

			link.Blackhole(faultproxy.Both) // the first attempt is not acknowledged: it is given back
			locked := make(chan tryResult, 1)
			go func() {
				l, err := s.Lock(context.Background(), "late-give-back")
				locked <- tryResult{l, err}
			}()
			waitClosed(t, h.sent, 5*time.Second, "the give-back")
			link.Heal()
			link.ResetConns() // the replica resynchronises: a later attempt is acknowledged
			res := recvWithin(t, locked, 15*time.Second, "Lock")
			require.NoError(t, res.err)

			close(h.deliver)
			assert.EqualValues(t, 0, recvWithin(t, h.landed, 5*time.Second, "the late give-back"),
				"the late give-back deleted a key (it should find another token)")
			assert.EqualValues(t, 1, c.Exists(context.Background(), res.l.Key()).Val(), "the held lock's key was deleted")
			s2 := newSession(t, primary.Client(t))
			l2, err := s2.TryLock(context.Background(), "late-give-back")
			if err == nil {
				t.Errorf("another session took the name while the first still holds it (Held=%v, %v): two owners", res.l.Held(), l2.Held())
			} else {
				assert.ErrorIs(t, err, ErrLocked)
			}
			require.NoError(t, s2.Close(context.Background()))
			require.NoError(t, s.Close(context.Background()))
			checkNoLeaks(t)
		})
	}
}
