package redisleader

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisleader/redisleader/internal/lease"
)

func TestCloseReleasesEverything(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		for _, n := range []int{1, 4} {
			t.Run(fmt.Sprint(n, " locks"), func(t *testing.T) {
				s, err := NewSession(b.client, fastOpts()...)
				require.NoError(t, err)
				var locks []*Lock
				for i := 0; i < n; i++ {
					l, err := s.TryLock(ctx, fmt.Sprintf("close-%d-%d", n, i))
					require.NoError(t, err)
					locks = append(locks, l)
				}
				require.NoError(t, s.Close(ctx))
				waitClosed(t, s.Done(), time.Second, "session Done")
				assert.ErrorIs(t, s.Err(), ErrSessionClosed)
				for _, l := range locks {
					waitClosed(t, l.Done(), time.Second, "lock Done")
					assert.ErrorIs(t, l.Err(), ErrSessionClosed)
					assert.Empty(t, b.get(l.Key()), "released on Close")
				}
				_, err = s.TryLock(ctx, "after-close")
				assert.ErrorIs(t, err, ErrSessionClosed)
				_, err = s.Lock(ctx, "after-close")
				assert.ErrorIs(t, err, ErrSessionClosed)
				assert.Empty(t, b.get(lease.NewKeys("after-close").Lock))
				assert.NoError(t, s.Close(ctx), "Close is idempotent")
				checkNoLeaks(t)
			})
		}
	})
}

func TestCloseDuringAcquireLeavesNoKey(t *testing.T) {
	_, c := newMini(t)
	ctx := context.Background()
	for i := 0; i < 20; i++ {
		s, err := NewSession(c, fastOpts()...)
		require.NoError(t, err)
		name := fmt.Sprint("racing-", i)
		got := make(chan *Lock, 1)
		go func() {
			l, _ := s.TryLock(ctx, name)
			got <- l
		}()
		require.NoError(t, s.Close(ctx))
		if l := <-got; l != nil {
			waitClosed(t, l.Done(), time.Second, "lock of a closed session")
			assert.ErrorIs(t, l.Err(), ErrSessionClosed)
		}
		n, err := c.Exists(ctx, lease.NewKeys(name).Lock).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "no key outlives a closed session (round %d)", i)
	}
	checkNoLeaks(t)
}

// holdAcquire holds the reply of the first acquire (an EVALSHA with two
// keys), after it has run in Redis: ran is closed then, and the reply is
// handed on once the test closes release.
type holdAcquire struct {
	once         sync.Once
	ran, release chan struct{}
}

func newHoldAcquire() *holdAcquire {
	return &holdAcquire{ran: make(chan struct{}), release: make(chan struct{})}
}

// hook returns the hook that applies h to calls sent alone.
func (h *holdAcquire) hook() testHook {
	return testHook{single: func(ctx context.Context, cmds []redis.Cmder, send sendFunc) error {
		err := send(ctx, cmds)
		if args := cmds[0].Args(); len(args) > 2 && args[2] == 2 {
			first := false
			h.once.Do(func() { first = true; close(h.ran) })
			if first {
				<-h.release
			}
		}
		return err
	}}
}

// Close waits for acquisitions in flight, so a key they take after Close
// started is given back before Close returns (and before the caller closes
// its client).
func TestCloseWaitsForAcquisitionsInFlight(t *testing.T) {
	_, c := newMini(t)
	hold := newHoldAcquire()
	c.AddHook(hold.hook())
	s, err := NewSession(c)
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() {
		_, err := s.TryLock(context.Background(), "in-flight")
		errc <- err
	}()
	waitClosed(t, hold.ran, 5*time.Second, "the acquire ran in Redis")
	closed := make(chan error, 1)
	go func() { closed <- s.Close(context.Background()) }()
	waitClosed(t, s.Done(), 5*time.Second, "Close started")
	close(hold.release) // the acquisition's reply arrives after Close started
	require.NoError(t, recvWithin(t, closed, 5*time.Second, "Close"))
	n, err := c.Exists(context.Background(), lease.NewKeys("in-flight").Lock).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the in-flight acquisition gave its key back before Close returned")
	assert.ErrorIs(t, recvWithin(t, errc, 5*time.Second, "TryLock"), ErrSessionClosed)
	checkNoLeaks(t)
}

func TestConcurrentCloseWaitsForTheFirst(t *testing.T) {
	_, c := newMini(t)
	hold := newHoldAcquire()
	c.AddHook(hold.hook())
	s, err := NewSession(c)
	require.NoError(t, err)
	go func() { _, _ = s.TryLock(context.Background(), "slow") }()
	waitClosed(t, hold.ran, 5*time.Second, "the acquire ran in Redis")
	go func() { _ = s.Close(context.Background()) }()
	waitClosed(t, s.Done(), 5*time.Second, "the first Close started")
	second := make(chan error, 1)
	go func() { second <- s.Close(context.Background()) }()
	select {
	case <-second:
		t.Fatal("the second Close returned while the first waits for an acquisition in flight")
	case <-time.After(50 * time.Millisecond): // a negative observation window, not a synchronisation
	}
	close(hold.release)
	require.NoError(t, recvWithin(t, second, 5*time.Second, "the second Close"))
	select {
	case <-s.closed: // the first Close has finished
	default:
		t.Fatal("the second Close returned before the first finished")
	}
	n, err := c.Exists(context.Background(), lease.NewKeys("slow").Lock).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "everything the first Close waits for was done")
	checkNoLeaks(t)
}

// Close deletes the token of a lock that expired locally (it may still be in
// Redis: the stale-token cleanup exists for it) — for a plain lock, the
// control case of TestCloseDeletesExpiredRunTermToken.
func TestCloseDeletesExpiredLockToken(t *testing.T) {
	assert.False(t, closeAfterExpiry(t, false), "Close left the expired plain lock's token in Redis")
}
