package redisleader

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fastOpts are the timings most tests use: a short lease renewed often.
func fastOpts(extra ...Option) []Option {
	return append([]Option{
		WithTTL(600 * time.Millisecond),
		WithRenewInterval(100 * time.Millisecond),
		WithCallTimeout(100 * time.Millisecond),
		WithRetryInterval(20 * time.Millisecond),
	}, extra...)
}

func TestTryLockContention(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		const n = 100
		sessions := make([]*Session, n)
		for i := range sessions {
			sessions[i] = newSession(t, b.client)
		}
		var (
			wg      sync.WaitGroup
			winners atomic.Int32
			locked  atomic.Int32
			start   = make(chan struct{})
			won     = make(chan *Lock, n)
		)
		for _, s := range sessions {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				l, err := s.TryLock(context.Background(), "contended")
				switch {
				case err == nil:
					winners.Add(1)
					won <- l
				case errors.Is(err, ErrLocked):
					locked.Add(1)
				default:
					t.Errorf("TryLock: unexpected error %v", err)
				}
			}()
		}
		close(start)
		wg.Wait()
		require.Equal(t, int32(1), winners.Load(), "exactly one winner")
		assert.Equal(t, int32(n-1), locked.Load(), "every other session sees ErrLocked")
		l := <-won
		h, ok := parseHolder(b.get(l.Key()))
		require.True(t, ok)
		assert.Equal(t, l.token, h.token, "the key holds the winner's token")
		assert.Equal(t, l.Fence(), h.fence)
		require.NoError(t, l.Release(context.Background()))
		assert.Empty(t, b.get(l.Key()))
	})
}

func TestFencesStrictlyIncrease(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		a, c := newSession(t, b.client), newSession(t, b.client)
		var last int64
		for i := 0; i < 20; i++ {
			s := a
			if i%2 == 1 {
				s = c
			}
			l, err := s.TryLock(ctx, "fenced")
			require.NoError(t, err)
			assert.Greater(t, l.Fence(), last, "acquisition %d", i)
			last = l.Fence()
			if i == 10 {
				// Redis loses its data (restart without persistence): the
				// time-based fence still moves forward.
				b.del(l.Key())
				b.del(newKeys("fenced").fence)
				require.NoError(t, l.Release(ctx), "a key already gone is not a release error")
				continue
			}
			require.NoError(t, l.Release(ctx))
		}
	})
}

func TestFenceCounterAheadOfClock(t *testing.T) {
	_, c := newMini(t)
	ctx := context.Background()
	s := newSession(t, c)
	// A counter far ahead of the server clock (written by a server whose clock
	// ran fast, say) still grows by one per acquisition.
	ahead := int64(1) << 52
	require.NoError(t, c.Set(ctx, newKeys("ahead").fence, ahead, 0).Err())
	for i := int64(1); i <= 3; i++ {
		l, err := s.TryLock(ctx, "ahead")
		require.NoError(t, err)
		assert.Equal(t, ahead+i, l.Fence())
		require.NoError(t, l.Release(ctx))
	}
}

func TestAcquireIsIdempotentForOwnToken(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		k := newKeys("idem")
		run := func(token string) []any {
			res, err := acquireScript.run(ctx, b.client, []any{nil, nil, 2, k.lock, k.fence, token, "1000", "v"}).Slice()
			require.NoError(t, err)
			return res
		}
		first := run("tok-a")
		require.Equal(t, int64(1), first[0])
		b.client.PExpire(ctx, k.lock, 100*time.Millisecond)
		again := run("tok-a")
		assert.Equal(t, first, again, "same token: acquired again with the same fence")
		pttl, err := b.client.PTTL(ctx, k.lock).Result()
		require.NoError(t, err)
		assert.Greater(t, pttl, 500*time.Millisecond, "a confirmed acquire refreshes the TTL")
		other := run("tok-b")
		assert.Equal(t, int64(0), other[0], "another token: held")
		h, ok := parseHolder(other[1].(string))
		require.True(t, ok)
		assert.Equal(t, holder{token: "tok-a", fence: first[1].(int64), value: "v"}, h)
	})
}

func TestLossPaths(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		cases := []struct {
			name  string
			steal func(key string)
		}{
			{"key deleted", b.del},
			{"key overwritten", func(k string) { b.set(k, "someone-else\n1\n") }},
			{"key expired on the server", b.expire},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				s := newSession(t, b.client, fastOpts()...)
				l, err := s.TryLock(context.Background(), "loss-"+strings.ReplaceAll(tc.name, " ", "-"))
				require.NoError(t, err)
				require.True(t, l.Held())
				before := b.get(l.Key())
				tc.steal(l.Key())
				after := b.get(l.Key())
				waitClosed(t, l.Done(), time.Second, "Done after "+tc.name)
				assert.ErrorIs(t, l.Err(), ErrNotOwner)
				assert.ErrorIs(t, l.Err(), ErrLost)
				assert.False(t, l.Held())
				assert.NotEqual(t, before, after)
				assert.Equal(t, after, b.get(l.Key()), "renewal must not touch a key that is not ours")
				assert.ErrorIs(t, l.Release(context.Background()), ErrNotOwner, "Release of a lost lock reports the loss")
				assert.Equal(t, after, b.get(l.Key()), "Release of a lost lock writes nothing")
			})
		}
	})
}

func TestDeadlineFiresWhileRedisFails(t *testing.T) {
	m, c := newMini(t)
	hook, roundsCh := rounds()
	s := newSession(t, c, fastOpts(hook)...)
	l, err := s.TryLock(context.Background(), "unreachable")
	require.NoError(t, err)
	require.False(t, waitRound(t, roundsCh, time.Second), "a healthy round succeeds")

	m.SetError("LOADING Redis is loading the dataset in memory")
	require.True(t, waitRound(t, roundsCh, time.Second), "rounds fail while Redis errors")
	assert.True(t, l.Held(), "a Redis error is not a loss before the deadline")
	assert.NoError(t, l.Err())

	d := l.Deadline()
	waitClosed(t, l.Done(), 2*time.Second, "Done at the deadline")
	late := time.Since(d)
	assert.GreaterOrEqual(t, late, time.Duration(0), "never before the deadline")
	assert.Less(t, late, 50*time.Millisecond, "Done closes at the deadline")
	assert.ErrorIs(t, l.Err(), ErrExpired)
	assert.ErrorIs(t, l.Err(), ErrLost)

	// Redis recovers and still holds our token: no resurrection, and the
	// heartbeat deletes the stale token so others need not wait a TTL.
	require.True(t, m.Exists(l.Key()))
	m.SetError("")
	for m.Exists(l.Key()) {
		waitRound(t, roundsCh, time.Second)
	}
	assert.False(t, l.Held())
	assert.ErrorIs(t, l.Err(), ErrExpired)
	assert.ErrorIs(t, l.Release(context.Background()), ErrExpired, "Release of an expired lock reports it and writes nothing")
}

func TestRenewalKeepsTheKey(t *testing.T) {
	m, c := newMini(t)
	hook, roundsCh := rounds()
	s := newSession(t, c, fastOpts(hook)...)
	ctx := context.Background()
	var locks []*Lock
	for i := 0; i < 3; i++ {
		l, err := s.TryLock(ctx, fmt.Sprint("renewed-", i))
		require.NoError(t, err)
		locks = append(locks, l)
	}
	for i := 0; i < 5; i++ {
		// Server time moves 400ms per round, far past a TTL over 5 rounds.
		m.FastForward(400 * time.Millisecond)
		require.False(t, waitRound(t, roundsCh, time.Second))
		for _, l := range locks {
			assert.Equal(t, 600*time.Millisecond, m.TTL(l.Key()), "renewed to the full TTL")
		}
	}
	for _, l := range locks {
		assert.True(t, l.Held())
		assert.Greater(t, time.Until(l.Deadline()), 300*time.Millisecond)
	}
}

func TestScriptFlushDoesNotLoseLocks(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		for _, n := range []int{1, 3} { // one lock: a plain call; several: a pipeline
			t.Run(fmt.Sprint(n, " locks"), func(t *testing.T) {
				hook, roundsCh := rounds()
				s := newSession(t, b.client, fastOpts(hook)...)
				var locks []*Lock
				for i := 0; i < n; i++ {
					l, err := s.TryLock(ctx, fmt.Sprintf("flush-%d-%d", n, i))
					require.NoError(t, err)
					locks = append(locks, l)
				}
				for i := 0; i < 3; i++ {
					require.NoError(t, b.client.ScriptFlush(ctx).Err())
					assert.False(t, waitRound(t, roundsCh, time.Second), "NOSCRIPT is handled within the round")
				}
				for _, l := range locks {
					assert.True(t, l.Held())
					assert.NoError(t, l.Err())
				}
				require.NoError(t, b.client.ScriptFlush(ctx).Err())
				for _, l := range locks {
					require.NoError(t, l.Release(ctx), "release after SCRIPT FLUSH")
				}
			})
		}
	})
}

func TestRelease(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		s := newSession(t, b.client)
		l, err := s.TryLock(ctx, "released")
		require.NoError(t, err)
		assert.Equal(t, "released", l.Name())
		assert.Equal(t, "redisleader:{released}", l.Key())

		sub := b.client.Subscribe(ctx, newKeys("released").channel())
		defer sub.Close()
		_, err = sub.Receive(ctx) // subscription confirmed
		require.NoError(t, err)

		require.NoError(t, l.Release(ctx))
		waitClosed(t, l.Done(), time.Second, "Done after Release")
		assert.ErrorIs(t, l.Err(), ErrReleased)
		assert.False(t, l.Held())
		assert.Empty(t, b.get(l.Key()), "key deleted")
		select {
		case msg := <-sub.Channel():
			assert.Equal(t, newKeys("released").channel(), msg.Channel)
		case <-time.After(time.Second):
			t.Fatal("release published nothing")
		}
		assert.NoError(t, l.Release(ctx), "a second Release is a no-op")

		// Another owner takes it; the old handle cannot touch it.
		l2, err := s.TryLock(ctx, "released")
		require.NoError(t, err)
		assert.NoError(t, l.Release(ctx))
		assert.True(t, l2.Held())
		assert.NotEmpty(t, b.get(l2.Key()))
	})
}

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

func TestBlockingLock(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		holder := newSession(t, b.client, fastOpts()...)
		held, err := holder.TryLock(ctx, "blocking")
		require.NoError(t, err)

		t.Run("acquires after release", func(t *testing.T) {
			waiter := newSession(t, b.client, fastOpts()...)
			got := make(chan *Lock, 1)
			go func() {
				l, err := waiter.Lock(ctx, "blocking")
				assert.NoError(t, err)
				got <- l
			}()
			select {
			case <-got:
				t.Fatal("acquired while held")
			case <-time.After(50 * time.Millisecond): // a few retry intervals
			}
			require.NoError(t, held.Release(ctx))
			select {
			case l := <-got:
				assert.Greater(t, l.Fence(), held.Fence())
				require.NoError(t, l.Release(ctx))
				held, err = holder.TryLock(ctx, "blocking")
				require.NoError(t, err)
			case <-time.After(2 * time.Second):
				t.Fatal("waiter did not acquire after release")
			}
		})

		t.Run("ctx cancel leaves no key", func(t *testing.T) {
			waiter := newSession(t, b.client, fastOpts()...)
			cctx, cancel := context.WithCancel(ctx)
			errc := make(chan error, 1)
			go func() {
				_, err := waiter.Lock(cctx, "blocking")
				errc <- err
			}()
			cancel()
			assert.ErrorIs(t, recvWithin(t, errc, time.Second, "Lock ignored ctx"), context.Canceled)
			h, ok := parseHolder(b.get(held.Key()))
			require.True(t, ok)
			assert.Equal(t, held.token, h.token, "the holder is untouched")
		})

		t.Run("session close ends the wait", func(t *testing.T) {
			waiter, err := NewSession(b.client, fastOpts()...)
			require.NoError(t, err)
			errc := make(chan error, 1)
			go func() {
				_, err := waiter.Lock(ctx, "blocking")
				errc <- err
			}()
			require.NoError(t, waiter.Close(ctx))
			select {
			case err := <-errc:
				assert.ErrorIs(t, err, ErrSessionClosed)
			case <-time.After(time.Second):
				t.Fatal("Lock ignored the session's end")
			}
		})

		t.Run("deadline-bounded", func(t *testing.T) {
			waiter := newSession(t, b.client, fastOpts()...)
			cctx, cancel := context.WithTimeout(ctx, 80*time.Millisecond)
			defer cancel()
			_, err := waiter.Lock(cctx, "blocking")
			assert.ErrorIs(t, err, context.DeadlineExceeded)
		})
	})
}

func TestAmbiguousAcquire(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		t.Run("client retries (MaxRetries 3)", func(t *testing.T) {
			var drop atomic.Int32
			c := dropClient(t, b.addr, &drop, nil)
			require.NoError(t, c.Ping(ctx).Err())
			s := newSession(t, c)
			drop.Store(1) // the reply to the acquire is lost; go-redis re-sends it
			l, err := s.TryLock(ctx, "ambiguous-retried")
			require.NoError(t, err, "the retried acquire must be recognised as ours")
			assert.Zero(t, drop.Load(), "a reply was dropped")
			h, ok := parseHolder(b.get(l.Key()))
			require.True(t, ok)
			assert.Equal(t, l.token, h.token)
			assert.Equal(t, l.Fence(), h.fence, "one fence for one acquisition")
			require.NoError(t, l.Release(ctx))
		})
		t.Run("no client retries, TryLock", func(t *testing.T) {
			var drop atomic.Int32
			c := dropClient(t, b.addr, &drop, func(o *redis.Options) { o.MaxRetries = -1 })
			require.NoError(t, c.Ping(ctx).Err())
			s := newSession(t, c)
			drop.Store(1)
			l, err := s.TryLock(ctx, "ambiguous-try")
			require.Error(t, err)
			assert.Nil(t, l)
			assert.NotErrorIs(t, err, ErrLocked, "an unknown outcome is never 'held by another'")
			assert.Empty(t, b.get(newKeys("ambiguous-try").lock), "the phantom lock was cleaned up")
		})
		t.Run("no client retries, Lock", func(t *testing.T) {
			var drop atomic.Int32
			c := dropClient(t, b.addr, &drop, func(o *redis.Options) { o.MaxRetries = -1 })
			require.NoError(t, c.Ping(ctx).Err())
			s := newSession(t, c, fastOpts()...)
			drop.Store(1)
			l, err := s.Lock(ctx, "ambiguous-lock")
			require.NoError(t, err, "Lock retries with the same token and finds the key ours")
			h, ok := parseHolder(b.get(l.Key()))
			require.True(t, ok)
			assert.Equal(t, l.token, h.token)
			require.NoError(t, l.Release(ctx))
		})
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

func TestErrAndHeldCheckTheClock(t *testing.T) {
	_, c := newMini(t)
	s := newSession(t, c)
	l, err := s.TryLock(context.Background(), "clock")
	require.NoError(t, err)
	// As if the deadline timer were late (a starved runtime): the deadline
	// has passed but nothing has ended the lock yet.
	l.mu.Lock()
	l.deadline = time.Now().Add(-time.Millisecond)
	l.mu.Unlock()
	assert.ErrorIs(t, l.Err(), ErrExpired)
	select {
	case <-l.Done():
	default:
		t.Fatal("Done must be closed once Err reported the expiry")
	}
	assert.False(t, l.Held())
}

func TestReleaseWithLostReply(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		var drop atomic.Int32
		c := dropClient(t, b.addr, &drop, nil)
		s := newSession(t, c)
		l, err := s.TryLock(ctx, "lost-release-reply")
		require.NoError(t, err)
		drop.Store(1) // the delete runs; its reply is lost; go-redis re-sends it
		assert.NoError(t, l.Release(ctx), "a retried delete that finds the key gone is no loss")
		assert.Zero(t, drop.Load())
		assert.ErrorIs(t, l.Err(), ErrReleased)
		assert.Empty(t, b.get(l.Key()))
	})
}

func TestFenceKeyGarbageIsAnError(t *testing.T) {
	ctx := context.Background()
	for _, v := range []string{"abc", "-1", "1.5", "9007199254740991", "inf", "1e300"} {
		_, c := newMini(t)
		s := newSession(t, c)
		require.NoError(t, c.Set(ctx, newKeys("garbage").fence, v, 0).Err())
		_, err := s.TryLock(ctx, "garbage")
		assert.ErrorContains(t, err, "does not hold a fence", v)
		assert.True(t, permanent(err), "a broken fence key is not retried (%s)", v)
		_, err = s.Lock(ctx, "garbage")
		assert.ErrorContains(t, err, "does not hold a fence", "blocking Lock returns at once (%s)", v)
		n, _ := c.Exists(ctx, newKeys("garbage").lock).Result()
		assert.Zero(t, n, "no lock without a valid fence (%s)", v)
	}
}

// failFirstInPipeline fails the first command of every pipeline with a
// timeout and reports that error, as go-redis does for the first failure.
type failFirstInPipeline struct{ on atomic.Bool }

func (h *failFirstInPipeline) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *failFirstInPipeline) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (h *failFirstInPipeline) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if h.on.Load() && len(cmds) > 1 {
			timeout := errors.New("i/o timeout (injected)")
			cmds[0].SetErr(timeout)
			return timeout
		}
		return err
	}
}

// A NOSCRIPT hidden behind another error in the same pipeline (another
// Cluster node timing out, say) is still handled: healthy locks stay held.
func TestNoScriptBehindAnotherError(t *testing.T) {
	_, c := newMini(t)
	hook := &failFirstInPipeline{}
	c.AddHook(hook)
	roundHook, roundsCh := rounds()
	s := newSession(t, c, fastOpts(roundHook)...)
	ctx := context.Background()
	var locks []*Lock
	for i := 0; i < 3; i++ {
		l, err := s.TryLock(ctx, fmt.Sprint("hidden-", i))
		require.NoError(t, err)
		locks = append(locks, l)
	}
	hook.on.Store(true)
	for i := 0; i < 8; i++ { // more rounds than fit in one lease
		require.NoError(t, c.ScriptFlush(ctx).Err())
		waitRound(t, roundsCh, time.Second)
	}
	held := 0
	for _, l := range locks {
		if l.Held() {
			held++
		}
	}
	assert.GreaterOrEqual(t, held, 2, "only the lock whose renewal keeps failing may expire")
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

// TestTakeoverDelay: with WithTakeoverDelay an acquisition holds (and renews)
// the key for the delay before it is handed over; cancelling or closing
// during the delay leaves no key, and a loss during the delay makes a
// blocking acquire start over with a new fence.
func TestTakeoverDelay(t *testing.T) {
	const delay = 300 * time.Millisecond
	ctx := context.Background()
	m, c := newMini(t)
	s := newSession(t, c, fastOpts(WithTakeoverDelay(delay))...)
	key := newKeys("td").lock

	type result struct {
		l   *Lock
		err error
		at  time.Time
	}
	try := func(ctx context.Context, block bool) <-chan result {
		ch := make(chan result, 1)
		go func() {
			var r result
			if block {
				r.l, r.err = s.Lock(ctx, "td")
			} else {
				r.l, r.err = s.TryLock(ctx, "td")
			}
			r.at = time.Now()
			ch <- r
		}()
		return ch
	}
	keyHeld := func() bool { return m.Exists(key) }

	// Handed over only after the delay; the key is ours meanwhile.
	start := time.Now()
	res := try(ctx, false)
	require.Eventually(t, keyHeld, 5*time.Second, time.Millisecond)
	select {
	case r := <-res:
		require.NoError(t, r.err)
		assert.GreaterOrEqual(t, r.at.Sub(start), delay)
		assert.True(t, r.l.Held())
		require.NoError(t, r.l.Release(ctx))
	case <-time.After(10 * time.Second):
		t.Fatal("TryLock did not return")
	}

	// Cancelled during the delay: ctx's error, key deleted.
	cctx, cancel := context.WithCancel(ctx)
	res = try(cctx, true)
	require.Eventually(t, keyHeld, 5*time.Second, time.Millisecond)
	cancel()
	r := <-res
	assert.ErrorIs(t, r.err, context.Canceled)
	// The delete runs in the background, the caller's ctx having ended.
	assert.Eventually(t, func() bool { return !keyHeld() }, time.Second, time.Millisecond,
		"a cancelled takeover must release its key")

	// Lost during the delay: a blocking acquire starts over with a new fence.
	res = try(ctx, true)
	require.Eventually(t, keyHeld, 5*time.Second, time.Millisecond)
	first := parseFence(t, m, key)
	m.Del(key) // the heartbeat's next renewal finds it gone
	r = <-res
	require.NoError(t, r.err)
	assert.Greater(t, r.l.Fence(), first)
	require.NoError(t, r.l.Release(ctx))

	// Session closed during the delay: ErrSessionClosed, key released by Close.
	res = try(ctx, true)
	require.Eventually(t, keyHeld, 5*time.Second, time.Millisecond)
	require.NoError(t, s.Close(ctx))
	r = <-res
	assert.ErrorIs(t, r.err, ErrSessionClosed)
	assert.False(t, keyHeld())
	checkNoLeaks(t)
}

// parseFence reads the fence stored in a lock key on miniredis.
func parseFence(t *testing.T, m interface{ Get(string) (string, error) }, key string) int64 {
	t.Helper()
	v, err := m.Get(key)
	require.NoError(t, err)
	h, ok := parseHolder(v)
	require.True(t, ok, v)
	return h.fence
}

// A failed TryLock returns a nil *Lock; `defer lock.Release(ctx)` right
// after it, or any other method, must not panic.
func TestNilLockMethods(t *testing.T) {
	var l *Lock
	ctx := context.Background()
	assert.ErrorIs(t, l.Release(ctx), ErrInvalid)
	assert.ErrorContains(t, l.Release(ctx), "nil *Lock")
	assert.ErrorIs(t, l.Err(), ErrInvalid)
	assert.False(t, l.Held())
	select {
	case <-l.Done():
	default:
		t.Fatal("Done of a nil *Lock is not closed")
	}
	assert.Empty(t, l.Name())
	assert.Empty(t, l.Value())
	assert.Empty(t, l.Key())
	assert.Zero(t, l.Fence())
	assert.True(t, l.Deadline().IsZero())
}

// A session never waits for itself: Lock, Campaign and TryLock on a name it
// holds return at once with an error matching ErrLocked that says so, also
// when another call of the same session won the name meanwhile.
func TestSessionNeverWaitsForItself(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		s := newSession(t, b.client, fastOpts()...)
		held, err := s.Lock(ctx, "self")
		require.NoError(t, err)
		for what, acquire := range map[string]func() error{
			"Lock":     func() error { _, err := s.Lock(ctx, "self"); return err },
			"TryLock":  func() error { _, err := s.TryLock(ctx, "self"); return err },
			"Campaign": func() error { _, err := mustElection(t, s, "self").Campaign(ctx, "v"); return err },
		} {
			done := make(chan error, 1)
			go func() { done <- acquire() }()
			err := recvWithin(t, done, time.Second, what+" on a name the session holds")
			assert.ErrorIs(t, err, ErrLocked, what)
			assert.ErrorContains(t, err, `"self" is already held by this session`, what)
		}
		require.NoError(t, held.Release(ctx))
		again, err := s.Lock(ctx, "self")
		require.NoError(t, err, "Lock after the release")
		require.NoError(t, again.Release(ctx))

		// Two calls of one session race for a free name: one wins, the
		// other returns at once instead of waiting for the winner.
		errs := make(chan error, 2)
		locks := make(chan *Lock, 2)
		for range 2 {
			go func() {
				l, err := s.Lock(ctx, "race")
				locks <- l
				errs <- err
			}()
		}
		e1, e2 := recvWithin(t, errs, time.Second, "first"), recvWithin(t, errs, time.Second, "second")
		assert.True(t, (e1 == nil) != (e2 == nil), "exactly one wins: %v, %v", e1, e2)
		for _, err := range []error{e1, e2} {
			if err != nil {
				assert.ErrorIs(t, err, ErrLocked)
			}
		}
		for range 2 {
			_ = (<-locks).Release(ctx)
		}
	})
}

// arm registers a fresh lock with the session before its deadline timer can
// end it: a deadline that passes in between must not leave an ended lock
// among the session's locks (the heartbeat would never idle), and the
// acquisition is not handed over expired.
func TestArmRacingItsDeadline(t *testing.T) {
	m, c := newMini(t)
	armed := func(l *Lock) {
		// The deadline passes before the timer starts (no renewal gets through).
		m.SetError("LOADING stalled")
		defer m.SetError("")
		for d := l.Deadline(); time.Now().Before(d); d = l.Deadline() {
			<-time.After(time.Until(d))
		}
		l.mu.Lock()
		started := l.timer != nil
		l.mu.Unlock()
		if started { // code that starts the timer first: let it end the lock now
			<-l.Done()
		}
	}
	s := newSession(t, c, append(fastOpts(), withArmedHook(armed))...)
	l, err := s.TryLock(context.Background(), "racing")
	assert.Nil(t, l)
	assert.ErrorIs(t, err, ErrExpired)
	require.Eventually(t, func() bool { return len(s.held()) == 0 }, time.Second, time.Millisecond,
		"the expired lock is still registered with the session")
}

// lateAcquire is a client whose first acquire call reaches Redis only when
// the test says so, after its caller gave up on it (a request held up on
// the way, say by a paused network path): the caller sees a timeout.
type lateAcquire struct {
	*redis.Client
	once    sync.Once
	deliver chan struct{}
	ran     chan *redis.Cmd
}

func (c *lateAcquire) Process(ctx context.Context, cmd redis.Cmder) error {
	args := cmd.Args()
	held := false
	if len(args) > 1 && (args[1] == acquireScript.sha || args[1] == acquireScript.src) {
		c.once.Do(func() { held = true })
	}
	if !held {
		return c.Client.Process(ctx, cmd)
	}
	late := redis.NewCmd(context.Background(), slices.Clone(args)...) // written to the wire now
	go func() {
		<-c.deliver
		_ = c.Client.Process(context.Background(), late)
		c.ran <- late
	}()
	cmd.SetErr(context.DeadlineExceeded)
	return cmd.Err()
}

// An abandoned acquisition whose attempt is still on its way to Redis can
// take the key after the acquisition gave up, even when its last attempt
// found the name held by another: the session deletes that token when it
// appears instead of leaving an unrenewed key for a TTL.
func TestAbandonedAcquireLandingLate(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		opts := fastOpts(WithTTL(3 * time.Second))
		holder, err := newSession(t, b.client, opts...).Lock(ctx, "late")
		require.NoError(t, err)
		c := &lateAcquire{Client: redis.NewClient(&redis.Options{Addr: b.addr, ContextTimeoutEnabled: true}),
			deliver: make(chan struct{}), ran: make(chan *redis.Cmd, 1)}
		defer c.Client.Close()
		s := newSession(t, c, opts...)
		lctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err = s.Lock(lctx, "late") // first attempt held up, the next ones find the holder
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.NoError(t, holder.Release(ctx))
		close(c.deliver)
		res, err := recvWithin(t, c.ran, time.Second, "the late acquire").Slice()
		require.NoError(t, err)
		require.Equal(t, int64(1), res[0], "the late acquire took the key")
		require.Eventually(t, func() bool { return b.get(holder.Key()) == "" }, time.Second, 5*time.Millisecond,
			"the late acquire's key (TTL 3s) is still there")
	})
}

// hangRelease holds every release script call (with all, every call) until
// its context ends.
type hangRelease struct {
	*redis.Client
	all bool
}

func (h hangRelease) Process(ctx context.Context, cmd redis.Cmder) error {
	if a := cmd.Args(); h.all || (len(a) > 1 && (a[1] == releaseScript.sha || a[1] == releaseScript.src)) {
		<-ctx.Done()
		cmd.SetErr(ctx.Err())
		return cmd.Err()
	}
	return h.Client.Process(ctx, cmd)
}

// A blocking Lock returns with its context also when the context ends
// during the takeover delay and the release then hangs, and (Redlock) when
// an attempt short of a quorum gives back its keys on a node that hangs.
func TestLockReturnsWithItsContextWhileGivingBack(t *testing.T) {
	const wait = 100 * time.Millisecond
	lockWithin := func(t *testing.T, s *Session, name string) {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		start := time.Now()
		_, err := s.Lock(ctx, name)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Less(t, time.Since(start), wait+200*time.Millisecond, "Lock outlived its context")
	}
	t.Run("takeover delay", func(t *testing.T) {
		_, c := newMini(t)
		s := newSession(t, hangRelease{Client: c}, WithTTL(6*time.Second), WithCallTimeout(time.Second), WithTakeoverDelay(2*time.Second))
		lockWithin(t, s, "takeover-hang")
	})
	t.Run("Redlock give-back", func(t *testing.T) {
		ms, cs := redlockNodes(t, 3)
		cs[2] = hangRelease{Client: cs[2].(*redis.Client), all: true}
		k := newKeys("giveback-hang")
		ms[1].Set(k.lock, "other\n1\n")
		ms[1].SetTTL(k.lock, time.Minute)
		s, err := NewRedlockSession(cs, WithTTL(6*time.Second), WithCallTimeout(time.Second))
		require.NoError(t, err)
		defer s.Close(context.Background())
		lockWithin(t, s, "giveback-hang")
	})
}
