package redisleader

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
				assert.Empty(t, b.get(newKeys("after-close").lock))
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
		n, err := c.Exists(ctx, newKeys(name).lock).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "no key outlives a closed session (round %d)", i)
	}
	checkNoLeaks(t)
}

// delayAcquire holds the reply of every acquire (an EVALSHA with two keys)
// for d, after it has run in Redis.
type delayAcquire struct{ d time.Duration }

func (h delayAcquire) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h delayAcquire) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if args := cmd.Args(); len(args) > 2 && args[2] == 2 {
			<-time.After(h.d)
		}
		return err
	}
}

func (h delayAcquire) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Close waits for acquisitions in flight, so a key they take after Close
// started is given back before Close returns (and before the caller closes
// its client).
func TestCloseWaitsForAcquisitionsInFlight(t *testing.T) {
	_, c := newMini(t)
	c.AddHook(delayAcquire{100 * time.Millisecond})
	s, err := NewSession(c)
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() {
		_, err := s.TryLock(context.Background(), "in-flight")
		errc <- err
	}()
	// Wait until the acquire has run in Redis (its reply is being held).
	for {
		n, err := c.Exists(context.Background(), newKeys("in-flight").lock).Result()
		require.NoError(t, err)
		if n == 1 {
			break
		}
		runtimeYield()
	}
	require.NoError(t, s.Close(context.Background()))
	n, err := c.Exists(context.Background(), newKeys("in-flight").lock).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the in-flight acquisition gave its key back before Close returned")
	assert.ErrorIs(t, <-errc, ErrSessionClosed)
	checkNoLeaks(t)
}

func TestConcurrentCloseWaitsForTheFirst(t *testing.T) {
	_, c := newMini(t)
	c.AddHook(delayAcquire{100 * time.Millisecond})
	s, err := NewSession(c)
	require.NoError(t, err)
	go func() { _, _ = s.TryLock(context.Background(), "slow") }()
	for {
		n, _ := c.Exists(context.Background(), newKeys("slow").lock).Result()
		if n == 1 {
			break
		}
		runtimeYield()
	}
	go func() { _ = s.Close(context.Background()) }()
	<-s.Done() // the first Close has started
	require.NoError(t, s.Close(context.Background()))
	select {
	case <-s.closed: // the first Close has finished
	default:
		t.Fatal("the second Close returned before the first finished")
	}
	n, err := c.Exists(context.Background(), newKeys("slow").lock).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "everything the first Close waits for was done")
	checkNoLeaks(t)
}

// runtimeYield lets other goroutines run while a test waits for Redis state
// that it cannot be told about (a command running inside a hook).
func runtimeYield() { <-time.After(time.Millisecond) }

// Close deletes the token of a lock that expired locally (it may still be in
// Redis: the stale-token cleanup exists for it) — for a plain lock, the
// control case of TestCloseDeletesExpiredRunTermToken.
func TestCloseDeletesExpiredLockToken(t *testing.T) {
	assert.False(t, closeAfterExpiry(t, false), "Close left the expired plain lock's token in Redis")
}
