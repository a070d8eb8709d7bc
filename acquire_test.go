package redisleader

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisleader/redisleader/internal/lease"
)

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
		h, ok := lease.ParseHolder(b.get(l.Key()))
		require.True(t, ok)
		assert.Equal(t, l.lease.Token, h.Token, "the key holds the winner's token")
		assert.Equal(t, l.Fence(), h.Fence)
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
				b.del(lease.NewKeys("fenced").Fence)
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
	require.NoError(t, c.Set(ctx, lease.NewKeys("ahead").Fence, ahead, 0).Err())
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
		k := lease.NewKeys("idem")
		run := func(token string) any {
			res, err := lease.AcquireRun.Run(ctx, b.client, []any{nil, nil, 2, k.Lock, k.Fence, token, "1000", "v"}).Result()
			require.NoError(t, err)
			return res
		}
		first, ok := run("tok-a").(int64)
		require.True(t, ok, "taken with TIME's fence: one integer, the fence and the time its TTL runs from")
		b.client.PExpire(ctx, k.Lock, 100*time.Millisecond)
		again, ok := run("tok-a").([]any)
		require.True(t, ok, "already ours: {1, fence, time}")
		require.Len(t, again, 3)
		assert.Equal(t, []any{int64(1), first}, again[:2], "same token: acquired again with the same fence")
		assert.Greater(t, again[2], first, "the TIME the refreshed TTL runs from")
		pttl, err := b.client.PTTL(ctx, k.Lock).Result()
		require.NoError(t, err)
		assert.Greater(t, pttl, 500*time.Millisecond, "a confirmed acquire refreshes the TTL")
		other := run("tok-b").([]any)
		assert.Equal(t, int64(0), other[0], "another token: held")
		h, ok := lease.ParseHolder(other[1].(string))
		require.True(t, ok)
		assert.Equal(t, lease.Holder{Token: "tok-a", Fence: first, Value: "v"}, h)
	})
}

// The acquire script's key expires exactly when the server's clock passes
// the TIME it replies with (in ms) plus the TTL, on both paths: Redlock
// skips its write-back round on that (lease.Quorum.fenceSafe). Redis counts a
// relative PX from the script's start, before its TIME.
func TestAcquireExpiresFromItsReportedTime(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		if b.name == "miniredis" {
			t.Skip("miniredis has no PEXPIRETIME")
		}
		ctx := context.Background()
		k := lease.NewKeys("expires-at")
		for _, path := range []string{"take", "refresh"} {
			res, err := lease.AcquireRun.Run(ctx, b.client, []any{nil, nil, 2, k.Lock, k.Fence, "tok", "5000", "v"}).Result()
			require.NoError(t, err, path)
			r, err := lease.DecodeAcquire(res)
			require.NoError(t, err, path)
			require.True(t, r.Taken, path)
			at, err := b.client.PExpireTime(ctx, k.Lock).Result()
			require.NoError(t, err, path)
			assert.Equal(t, time.Duration(r.At/1000+5000)*time.Millisecond, at, path)
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
			h, ok := lease.ParseHolder(b.get(held.Key()))
			require.True(t, ok)
			assert.Equal(t, held.lease.Token, h.Token, "the holder is untouched")
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
			h, ok := lease.ParseHolder(b.get(l.Key()))
			require.True(t, ok)
			assert.Equal(t, l.lease.Token, h.Token)
			assert.Equal(t, l.Fence(), h.Fence, "one fence for one acquisition")
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
			assert.Empty(t, b.get(lease.NewKeys("ambiguous-try").Lock), "the phantom lock was cleaned up")
		})
		t.Run("no client retries, Lock", func(t *testing.T) {
			var drop atomic.Int32
			c := dropClient(t, b.addr, &drop, func(o *redis.Options) { o.MaxRetries = -1 })
			require.NoError(t, c.Ping(ctx).Err())
			s := newSession(t, c, fastOpts()...)
			drop.Store(1)
			l, err := s.Lock(ctx, "ambiguous-lock")
			require.NoError(t, err, "Lock retries with the same token and finds the key ours")
			h, ok := lease.ParseHolder(b.get(l.Key()))
			require.True(t, ok)
			assert.Equal(t, l.lease.Token, h.Token)
			require.NoError(t, l.Release(ctx))
		})
	})
}

func TestFenceKeyGarbageIsAnError(t *testing.T) {
	ctx := context.Background()
	// Numbers tonumber reads but this package never writes are someone
	// else's too (before: read as fences, and overwritten).
	for _, v := range []string{"abc", "-1", "1.5", "9007199254740991", "inf", "1e300",
		"0x10", " 5", "5 ", "5.0", "1e3", "+5", "00007"} {
		_, c := newMini(t)
		s := newSession(t, c)
		require.NoError(t, c.Set(ctx, lease.NewKeys("garbage").Fence, v, 0).Err())
		_, err := s.TryLock(ctx, "garbage")
		assert.ErrorContains(t, err, "does not hold a fence", v)
		assert.True(t, permanent(err), "a broken fence key is not retried (%s)", v)
		_, err = s.Lock(ctx, "garbage")
		assert.ErrorContains(t, err, "does not hold a fence", "blocking Lock returns at once (%s)", v)
		n, _ := c.Exists(ctx, lease.NewKeys("garbage").Lock).Result()
		assert.Zero(t, n, "no lock without a valid fence (%s)", v)
	}
}

// TestFenceKeyForms pins how acquire reads the fence key on both sides of
// its shortcut (a fence of plain digits is compared with TIME's as a
// string, anything else through fenceOf): a stored fence below the clock
// gives TIME's fence, one ahead of it (as long as TIME's, or longer) the
// stored one plus one, and one at or past 2^53-1, or with a leading zero
// (this package never writes one), an error that writes nothing.
func TestFenceKeyForms(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		for i, tt := range []struct {
			stored string
			want   int64 // 0: TIME's fence (the reply's time); -1: an error
		}{
			{"0", 0}, {"7", 0}, {"0042", -1}, {"999999999999999", 0}, {"1000000000000000", 0},
			{"9000000000000000", 9000000000000001}, {"09000000000000000", -1},
			{"9007199254740990", 9007199254740991}, {"9007199254740991", -1},
			{"10000000000000000", -1}, {"009007199254740991", -1},
		} {
			k := lease.NewKeys(fmt.Sprintf("forms-%d", i))
			require.NoError(t, b.client.Set(ctx, k.Fence, tt.stored, 0).Err())
			res, err := lease.AcquireRun.Run(ctx, b.client, []any{nil, nil, 2, k.Lock, k.Fence, "tok", "1000", "v"}).Result()
			if tt.want == -1 {
				assert.ErrorContains(t, err, "does not hold a fence", tt.stored)
				assert.Equal(t, tt.stored, b.get(k.Fence), "the fence key was left as it was")
				assert.Empty(t, b.get(k.Lock), "no lock without a valid fence")
				continue
			}
			require.NoError(t, err, tt.stored)
			r, err := lease.DecodeAcquire(res)
			require.NoError(t, err, tt.stored)
			want := tt.want
			if want == 0 {
				want = r.At
				assert.IsType(t, int64(0), res, "TIME's fence: one integer (%s)", tt.stored)
			} else {
				assert.IsType(t, []any{}, res, "a fence past TIME's: {1, fence, time} (%s)", tt.stored)
			}
			assert.Equal(t, lease.Acquired{Taken: true, Fence: want, At: r.At}, r, tt.stored)
			assert.Equal(t, strconv.FormatInt(want, 10), b.get(k.Fence), tt.stored)
		}
	})
}

// parseFence reads the fence stored in a lock key on miniredis.
func parseFence(t *testing.T, m interface{ Get(string) (string, error) }, key string) int64 {
	t.Helper()
	v, err := m.Get(key)
	require.NoError(t, err)
	h, ok := lease.ParseHolder(v)
	require.True(t, ok, v)
	return h.Fence
}

// TestTakeoverDelay: with WithTakeoverDelay an acquisition holds (and renews)
// the key for the delay before it is handed over; cancelling or closing
// during the delay leaves no key, and a loss during the delay makes a
// blocking acquire start over with a new fence.
func TestTakeoverDelay(t *testing.T) {
	const delay = 300 * time.Millisecond
	ctx := context.Background()
	m, c := newMini(t)
	s := newSession(t, c, fastOpts(WithTakeoverDelay(delay))...)
	key := lease.NewKeys("td").Lock

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
	if isCall(cmd, lease.AcquireRun) {
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
		res, err := recvWithin(t, c.ran, time.Second, "the late acquire").Result()
		require.NoError(t, err)
		r, err := lease.DecodeAcquire(res)
		require.NoError(t, err)
		require.True(t, r.Taken, "the late acquire took the key")
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
	if h.all || isCall(cmd, lease.ReleaseRun) {
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
		k := lease.NewKeys("giveback-hang")
		ms[1].Set(k.Lock, "other\n1\n")
		ms[1].SetTTL(k.Lock, time.Minute)
		s, err := NewRedlockSession(cs, WithTTL(6*time.Second), WithCallTimeout(time.Second))
		require.NoError(t, err)
		defer s.Close(context.Background())
		lockWithin(t, s, "giveback-hang")
	})
}

// A lock key that holds data this package did not write is not another
// owner's lease (it may have no TTL at all): Lock, Campaign and TryLock
// return a permanent error at once, naming the key, Leader an error, and
// they leave it as it was. They used to wait for it until their context
// ended; a fence that is not a decimal as this package writes it (-1, +5,
// 05) was read as a holder's (Leader reported fence -1 or 5), and so was
// fence 0, which a lock key never holds (Leader: "no leader", and status
// --check that one leads; Lock waited for it).
func TestForeignValueAtTheLockKey(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		s := newSession(t, b.client, fastOpts()...)
		k := lease.NewKeys("foreign")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		acquire := map[string]func() error{
			"Lock":     func() error { _, err := s.Lock(ctx, "foreign"); return err },
			"TryLock":  func() error { _, err := s.TryLock(ctx, "foreign"); return err },
			"Campaign": func() error { _, err := mustElection(t, s, "foreign").Campaign(ctx, "v"); return err },
			"Leader":   func() error { _, err := mustElection(t, s, "foreign").Leader(ctx); return err },
		}
		for _, stored := range []string{"not ours", "x\n-1\nv", "x\n+5\nv", "x\n05\nv", "x\n\nv", "x\n0\nv"} {
			b.set(k.Lock, stored)
			for name, f := range acquire {
				start := time.Now()
				err := f()
				assert.ErrorContains(t, err, "key redisleader:{foreign} holds a value this package did not write", "%s %q", name, stored)
				assert.NotErrorIs(t, err, ErrLocked, name)
				assert.NotErrorIs(t, err, context.DeadlineExceeded, "%s waited for a lease that is not one", name)
				assert.Less(t, time.Since(start), time.Second, name)
			}
			assert.Equal(t, stored, b.get(k.Lock))
		}
	})
}

// TestCancelledAttemptIsNotARedisError: an attempt cut short because the
// caller's ctx ended is not a Redis error, so Campaign returns ctx's error
// alone (ExampleElection_Resign printed an extra "acquire … context
// canceled" line when its Run's next campaign was cut short that way).
func TestCancelledAttemptIsNotARedisError(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		held := make(chan struct{})
		var once sync.Once
		b.client.AddHook(eachCall(func(ctx context.Context, cmds []redis.Cmder, send sendFunc) error {
			if isCall(cmds[0], lease.AcquireRun) {
				once.Do(func() { close(held) })
				<-ctx.Done() // the attempt is on its way when the caller gives up
				return ctx.Err()
			}
			return send(ctx, cmds)
		}))
		e := mustElection(t, newSession(t, b.client), "cancelled-attempt")
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			<-held
			cancel()
		}()
		_, err := e.Campaign(ctx, "v")
		require.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, context.Canceled.Error(), err.Error(), "a cancelled attempt was reported as a Redis error")
	})
}

// TestHeldNameFailsBeforeAnyIO: Lock on a name the session holds returns
// ErrLocked before it subscribes (a slow or denied pub/sub connection must
// not delay "at once").
func TestHeldNameFailsBeforeAnyIO(t *testing.T) {
	_, c := newMini(t)
	s := newSession(t, c)
	ctx := context.Background()
	_, err := s.TryLock(ctx, "held-no-io")
	require.NoError(t, err)
	_, err = s.Lock(ctx, "held-no-io")
	require.ErrorIs(t, err, ErrLocked)
	started := s.wire.PubSub() != nil
	assert.False(t, started, "Lock on a held name started the pub/sub connection")
}

// TestKeysOfRemembered: a session remembers the keys of the names Lock and
// TryLock are given, at most maxNames of them and never a bad name's, and
// a remembered name's keys are those lease.KeysOf derives, so a lock taken
// with them is on the name's key.
func TestKeysOfRemembered(t *testing.T) {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	s, err := NewSession(c)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	ctx := context.Background()
	for range 2 {
		_, err := s.TryLock(ctx, "bad{name}")
		require.ErrorIs(t, err, ErrInvalid, "a bad name is refused each time")
	}
	assert.Empty(t, s.names.m, "a bad name is not remembered")
	for i := range maxNames + 3 {
		name := fmt.Sprintf("n%d", i)
		want, err := lease.KeysOf(name)
		require.NoError(t, err)
		for range 2 { // derived, then (the first maxNames) remembered
			k, err := s.keysOf(name)
			require.NoError(t, err)
			require.Equal(t, want, k, name)
		}
	}
	assert.Len(t, s.names.m, maxNames, "bounded")
	for range 2 {
		l, err := s.TryLock(ctx, "n1")
		require.NoError(t, err)
		assert.True(t, mr.Exists("redisleader:{n1}"), "held under the name's key")
		require.NoError(t, l.Release(ctx))
		assert.False(t, mr.Exists("redisleader:{n1}"), "released")
	}
}
