package redisleader

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader/internal/redisserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisleader/redisleader/internal/lease"
)

// fairWaiting takes the name prefix-<backend> with a fair session (holder)
// and returns a second fair session (TTL 3 s) whose queued attempts are
// reported on locked.
func fairWaiting(t *testing.T, b *backend, prefix string) (name string, holder *Lock, s *Session, locked <-chan string) {
	t.Helper()
	name, holder = fairHeld(t, b, prefix)
	hook, locked := queued()
	return name, holder, newSession(t, b.client, WithFairness(), WithTTL(3*time.Second), hook), locked
}

// fairHeld takes the name prefix-<backend> with a fair session.
func fairHeld(t *testing.T, b *backend, prefix string) (string, *Lock) {
	t.Helper()
	name := prefix + "-" + b.name
	l, err := newSession(t, b.client, WithFairness()).Lock(context.Background(), name)
	require.NoError(t, err)
	return name, l
}

// TestFairOrder queues n waiters in a known order behind a holder and checks
// that they are served in that order, each woken by the release before it.
func TestFairOrder(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		const n = 8
		ctx := context.Background()
		name, first := fairHeld(t, b, "fair-order")

		served := make(chan int, n)
		errs := make(chan error, n)
		for i := range n {
			hook, locked := queued()
			s := newSession(t, b.client, WithFairness(), WithTTL(2*time.Second), hook)
			go func() {
				l, err := s.Lock(ctx, name)
				if err != nil {
					errs <- err
					return
				}
				served <- i
				errs <- l.Release(ctx)
			}()
			// The next waiter starts only once this one is in the queue.
			recvWithin(t, locked, 5*time.Second, fmt.Sprintf("waiter %d queued", i))
		}
		n0, err := b.client.ZCard(ctx, first.lease.Keys.Queue).Result()
		require.NoError(t, err)
		require.EqualValues(t, n, n0, "every waiter has a place")

		require.NoError(t, first.Release(ctx))
		var order []int
		for range n {
			order = append(order, recvWithin(t, served, 5*time.Second, "next waiter served"))
			require.NoError(t, recvWithin(t, errs, 5*time.Second, "release"))
		}
		want := make([]int, n)
		for i := range want {
			want[i] = i
		}
		assert.Equal(t, want, order, "served in arrival order")
		left, err := b.client.Exists(ctx, first.lease.Keys.Queue, first.lease.Keys.Leases).Result()
		require.NoError(t, err)
		assert.Zero(t, left, "the queue keys are gone with the last waiter")
	})
}

// TestFairTryLock: in fair mode TryLock takes a free name only if nobody
// waits for it.
func TestFairTryLock(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		name, l := fairHeld(t, b, "fair-try")

		hook, locked := queued()
		w := newSession(t, b.client, WithFairness(), hook)
		got := make(chan *Lock, 1)
		go func() {
			l, err := w.Lock(ctx, name)
			assert.NoError(t, err)
			got <- l
		}()
		recvWithin(t, locked, 5*time.Second, "waiter queued")

		// Free, but the waiter came first: the holder's key vanishes behind
		// the library's back (no release, so no wake-up), and TryLock must
		// not barge in ahead of the waiter; its attempt wakes the waiter,
		// which takes the name long before the holder's lease (15s) could
		// have expired.
		b.del(l.Key())
		try := newSession(t, b.client, WithFairness())
		_, err := try.TryLock(ctx, name)
		require.ErrorIs(t, err, ErrLocked)
		assert.Contains(t, err.Error(), "waiters came first")
		wl := recvWithin(t, got, 5*time.Second, "waiter served")
		_, err = try.TryLock(ctx, name)
		require.ErrorIs(t, err, ErrLocked, "held by the waiter")
		require.NoError(t, wl.Release(ctx))
		tl, err := try.TryLock(ctx, name)
		require.NoError(t, err, "free and nobody waits")
		require.NoError(t, tl.Release(ctx))
	})
}

// TestFairLeave: a waiter whose context ends, or whose session closes,
// takes its place out of the queue and leaves a tombstone, so that an
// attempt of its that reaches Redis afterwards queues nothing.
func TestFairLeave(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		name, l := fairHeld(t, b, "fair-leave")
		k := l.lease.Keys

		for _, how := range []string{"ctx", "close"} {
			hook, locked := queued()
			w, err := NewSession(b.client, WithFairness(), hook)
			require.NoError(t, err)
			wctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				_, err := w.Lock(wctx, name)
				done <- err
			}()
			recvWithin(t, locked, 5*time.Second, how+": waiter queued")
			members, err := b.client.ZRange(ctx, k.Queue, 0, -1).Result()
			require.NoError(t, err)
			require.Len(t, members, 1, how)
			if how == "ctx" {
				cancel()
				require.ErrorIs(t, recvWithin(t, done, 5*time.Second, "Lock returns"), context.Canceled)
			} else {
				require.NoError(t, w.Close(ctx)) // waits for the acquisition, and its leave
				require.ErrorIs(t, recvWithin(t, done, 5*time.Second, "Lock returns"), ErrSessionClosed)
			}
			cancel()
			// With ctx, the leave runs in the background: its tombstone shows when it is done.
			require.Eventually(t, func() bool {
				n, _ := b.client.ZCount(ctx, k.Leases, "-inf", "(0").Result()
				return n == 1
			}, 5*time.Second, time.Millisecond, how+": a tombstone")
			n, err := b.client.Exists(ctx, k.Queue).Result()
			require.NoError(t, err)
			assert.Zero(t, n, how+": the queue is empty")

			// A late attempt of the waiter that left: nothing queued.
			argv := []any{nil, nil, 4, k.Lock, k.Fence, k.Queue, k.Leases, "late-token", l.s.ttlArg, "", members[0], "1"}
			res, err := lease.FairAcquireRun.Run(ctx, b.client, argv).Slice()
			require.NoError(t, err)
			assert.EqualValues(t, -2, res[3], how+": the late attempt knows it left")
			n, err = b.client.Exists(ctx, k.Queue).Result()
			require.NoError(t, err)
			assert.Zero(t, n, how+": the late attempt queued nothing")
			_ = w.Close(ctx)
			b.client.Del(ctx, k.Leases)
		}
		require.NoError(t, l.Release(ctx))
	})
}

// TestFairHolderCrash: when the holder crashes, the head waiter takes over
// once the holder's lease can have expired, as in default mode, and a
// waiter behind it is served next.
func TestFairHolderCrash(t *testing.T) {
	srv := redisserver.Start(t)
	c := srv.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	ctx := context.Background()
	const name = "fair-crash"
	// A waiter's place is a lease of one TTL that its next attempt renews,
	// timed to arrive a call timeout early: fastOpts' 100ms of slack is
	// less than a starved waiter can be late under CI's parallel packages,
	// and a lapsed place rejoins at the back (fair order, not safety). So
	// this test of the head's takeover gives it 500ms.
	const ttl = 2 * time.Second
	opts := func(o ...Option) []Option {
		return fastOpts(append([]Option{WithTTL(ttl), WithCallTimeout(500 * time.Millisecond), WithFairness()}, o...)...)
	}
	holder := newSession(t, c, opts()...)
	_, err := holder.Lock(ctx, name)
	require.NoError(t, err)

	got := make(chan string, 2)
	for _, who := range []string{"first", "second"} {
		hook, locked := queued()
		s := newSession(t, c, opts(hook)...)
		done := lockAndRelease(ctx, s, name)
		go func() {
			if err := <-done; err != nil {
				who += ": " + err.Error()
			}
			got <- who
		}()
		recvWithin(t, locked, 5*time.Second, who+" queued")
	}
	crashed := time.Now()
	crash(holder)
	assert.Equal(t, "first", recvWithin(t, got, 5*time.Second, "takeover"))
	took := time.Since(crashed)
	t.Logf("takeover %v after the crash (TTL %v)", took, ttl)
	assert.Less(t, took, ttl+150*time.Millisecond, "within the TTL and a margin")
	assert.Equal(t, "second", recvWithin(t, got, 5*time.Second, "next"))
}

// TestFairRedlockRefused: fairness across independent nodes is not defined.
func TestFairRedlockRefused(t *testing.T) {
	var clients []Client
	for range 3 {
		_, c := newMini(t)
		clients = append(clients, c)
	}
	_, err := NewRedlockSession(clients, WithFairness())
	require.ErrorIs(t, err, ErrInvalid)
	assert.True(t, strings.Contains(err.Error(), "WithFairness"), err.Error())
}

var fairDuration = flag.Duration("fair.duration", 2*time.Second,
	"how long each mode of TestFairContention runs (issue 16 asks for 10s)")

// contention is what one mode of TestFairContention measured.
type contention struct {
	counts  []int           // acquisitions per session
	waits   []time.Duration // every Lock call's wait, sorted
	maxHold time.Duration   // longest time from Lock's return to Release's
	// handovers: from each Release's return to the next Lock's return, sorted
	handovers []time.Duration
}

func (c contention) String() string {
	lo, hi := slices.Min(c.counts), slices.Max(c.counts)
	total := 0
	for _, n := range c.counts {
		total += n
	}
	return fmt.Sprintf("%d acquisitions, per session min %d max %d (ratio %.2f), wait p50 %v p99 %v max %v, longest hold %v, handover p50 %v p99 %v",
		total, lo, hi, float64(hi)/float64(max(lo, 1)), pct(c.waits, 50), pct(c.waits, 99), c.waits[len(c.waits)-1], c.maxHold,
		pct(c.handovers, 50), pct(c.handovers, 99))
}

// pct returns the p-th percentile of sorted.
func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[(len(sorted)-1)*p/100]
}

// contend runs n sessions that loop Lock → 1–20ms of work → Release on one
// name for d, and measures what each got.
func contend(t *testing.T, b *backend, n int, d time.Duration, opts ...Option) contention {
	name := fmt.Sprintf("contend-%d", time.Now().UnixNano())
	end := time.Now().Add(d)
	ctx, cancel := context.WithDeadline(context.Background(), end)
	defer cancel()
	var (
		mu       sync.Mutex
		res      = contention{counts: make([]int, n)}
		wg       sync.WaitGroup
		released time.Time // the last Release's return
	)
	for i := range n {
		s := newSession(t, b.client, append([]Option{WithTTL(500 * time.Millisecond)}, opts...)...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				start := time.Now()
				l, err := s.Lock(ctx, name)
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("Lock: %v", err)
					}
					return
				}
				got := time.Now()
				mu.Lock()
				if !released.IsZero() {
					res.handovers = append(res.handovers, got.Sub(released))
				}
				mu.Unlock()
				work := time.NewTimer(time.Millisecond + rand.N(19*time.Millisecond)) // 1–20ms of work
				select {
				case <-work.C:
				case <-l.Done(): // lost: the work stops
					work.Stop()
				}
				err = l.Release(context.Background())
				now := time.Now()
				hold := now.Sub(got)
				if err != nil {
					t.Errorf("Release: %v", err)
				}
				mu.Lock()
				res.counts[i]++
				res.waits = append(res.waits, got.Sub(start))
				res.maxHold = max(res.maxHold, hold)
				released = now
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	slices.Sort(res.waits)
	slices.Sort(res.handovers)
	return res
}

// TestFairContention is issue 16's test: 20 sessions loop Lock → 1–20ms of
// work → Release on one name (TTL 500ms). In fair mode every session
// acquires, in turn (the most and fewest acquisitions per session differ by
// at most 2: a session that was slow to ask again loses one turn; over 10s,
// go test -run TestFairContention -args -fair.duration=10s, that is a ratio
// within 1.5, which is asserted too), and a wait's p99 stays below what the
// queue ahead can take: the other waiters × (the longest hold + the p99
// handover). Default mode's figures are logged beside them. Each mode runs
// -fair.duration (2s by default, to keep the suite short).
func TestFairContention(t *testing.T) {
	srv := redisserver.Start(t)
	c := srv.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true; o.PoolSize = 64 })
	b := &backend{name: "redis-server", addr: srv.Addr(), client: c}
	const n = 20
	def := contend(t, b, n, *fairDuration)
	t.Logf("default mode: %v", def)
	fair := contend(t, b, n, *fairDuration, WithFairness())
	t.Logf("fair mode:    %v", fair)

	lo, hi := slices.Min(fair.counts), slices.Max(fair.counts)
	require.Positive(t, lo, "every session acquires: %v", fair.counts)
	assert.LessOrEqual(t, hi-lo, 2, "most − fewest acquisitions per session: %v", fair.counts)
	if *fairDuration >= 10*time.Second {
		assert.LessOrEqual(t, float64(hi)/float64(lo), 1.5, "most/fewest acquisitions per session: %v", fair.counts)
	}
	bound := (n - 1) * (fair.maxHold + pct(fair.handovers, 99))
	assert.LessOrEqual(t, pct(fair.waits, 99), bound, "wait p99 within waiters × (longest hold + p99 handover)")
}

// TestFairRunTakesTurns: in fair mode a Run leader that resigns campaigns
// again at the back of the queue, so leadership passes around instead of
// back to the one that just resigned.
func TestFairRunTakesTurns(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		const terms = 12
		name := "fair-run-" + b.name
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var (
			mu    sync.Mutex
			order []string
		)
		queued := make(chan string, 64) // who made an attempt that found the name taken
		done := make(chan error, 3)
		for _, who := range []string{"a", "b", "c"} {
			hook := withAttemptHook(func(_ string, err error) {
				if errors.Is(err, ErrLocked) {
					select {
					case queued <- who:
					default:
					}
				}
			})
			e, err := newSession(t, b.client, WithFairness(), hook).Election(name)
			require.NoError(t, err)
			go func() {
				done <- e.Run(ctx, who, func(context.Context, *Lock) error {
					mu.Lock()
					order = append(order, who)
					first, last := len(order) == 1, len(order) == terms
					mu.Unlock()
					if first { // the two others queue behind the first leader
						if err := othersQueued(queued, who, 5*time.Second); err != nil {
							return err // Run returns it: the test fails below
						}
					}
					if last {
						cancel()
					}
					return nil // resign, campaign again
				})
			}()
		}
		for range 3 {
			require.ErrorIs(t, recvWithin(t, done, 10*time.Second, "Run returns"), context.Canceled)
		}
		mu.Lock()
		defer mu.Unlock()
		require.GreaterOrEqual(t, len(order), terms)
		for i := 1; i < len(order); i++ {
			assert.NotEqual(t, order[i-1], order[i], "term %d went back to %s: %v", i, order[i], order)
		}
	})
}

// othersQueued waits until the two candidates other than who have each made
// an attempt that found the name taken (their names arrive on queued), or
// returns an error after d. It runs on Run's goroutine, so it reports
// rather than failing the test itself.
func othersQueued(queued <-chan string, who string, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	seen := map[string]bool{}
	for len(seen) < 2 {
		select {
		case q := <-queued:
			if q != who {
				seen[q] = true
			}
		case <-t.C:
			return fmt.Errorf("only %d of the two other candidates queued within %v", len(seen), d)
		}
	}
	return nil
}

// errNetTimeout is a transient error a test hook fails a call with.
var errNetTimeout = &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}

// TestFairWaiterBehindItsOwnSessionsHeadSleeps: a waiter queued behind a
// head of its own session whose caller gave up, and whose leave failed (so
// its place lasts up to a TTL), used to wake itself on every attempt once
// the name was free: wake-ups went to the session, and each attempt woke
// the head's session again. Wake-ups are now addressed to one waiter, so it
// sleeps until the head's lease can have passed, then takes the name.
func TestFairWaiterBehindItsOwnSessionsHeadSleeps(t *testing.T) {
	const ttl = 2 * time.Second
	srv := redisserver.Start(t)
	ctx := context.Background()
	timeouts := func(o *redis.Options) { o.ContextTimeoutEnabled = true }
	holder, err := newSession(t, srv.Client(t, timeouts), WithFairness(), WithTTL(ttl)).Lock(ctx, "own-head")
	require.NoError(t, err)

	var acquires atomic.Int64
	var failLeave atomic.Bool
	left := make(chan struct{})
	c := srv.Client(t, timeouts)
	c.AddHook(cmdHook(func(cmd redis.Cmder) error {
		if isCall(cmd, lease.FairAcquireRun) {
			acquires.Add(1)
		}
		if isCall(cmd, lease.LeaveRun) && failLeave.CompareAndSwap(true, false) {
			close(left)
			return errNetTimeout
		}
		return nil
	}))
	hook, locked := queued()
	s := newSession(t, c, WithFairness(), WithTTL(ttl), hook)
	ctx1, cancel1 := context.WithCancel(ctx)
	defer cancel1()
	go func() { _, _ = s.Lock(ctx1, "own-head") }() // W1, the head
	recvWithin(t, locked, 5*time.Second, "W1 queued")
	got := make(chan error, 1)
	go func() { _, err := s.Lock(ctx, "own-head"); got <- err }() // W2, behind it
	recvWithin(t, locked, 5*time.Second, "W2 queued")

	failLeave.Store(true)
	cancel1()
	recvWithin(t, left, 5*time.Second, "W1's leave failed")
	before, start := acquires.Load(), time.Now()
	require.NoError(t, holder.Release(ctx))
	require.NoError(t, recvWithin(t, got, 2*ttl, "W2 leads"))
	took, n := time.Since(start), acquires.Load()-before
	t.Logf("name free and unserved for %v; W2 sent %d fair acquires meanwhile", took.Round(time.Millisecond), n)
	assert.LessOrEqual(t, n, int64(4), "W2 spun against Redis while its own session's head held its place")
	assert.Less(t, took, ttl+500*time.Millisecond, "the name stayed free longer than the head's lease")
}

// TestFairHeadInRetryDelayHearsItsWakeUp: a head waiter whose attempt met
// a transient error used to sleep its retry delay (up to 2 TTL with the
// options below) deaf to wake-ups, while its heartbeat kept its place at
// the head: the name stayed free and unserved for that long after a
// release. A queued waiter now listens through its retry delay.
func TestFairHeadInRetryDelayHearsItsWakeUp(t *testing.T) {
	const ttl = time.Second
	srv := redisserver.Start(t)
	ctx := context.Background()
	timeouts := func(o *redis.Options) { o.ContextTimeoutEnabled = true }
	holder, err := newSession(t, srv.Client(t, timeouts), WithFairness(), WithTTL(ttl)).Lock(ctx, "deaf-head")
	require.NoError(t, err)

	var failNext atomic.Bool
	failed := make(chan struct{}, 1)
	c := srv.Client(t, timeouts)
	c.AddHook(cmdHook(func(cmd redis.Cmder) error {
		if isCall(cmd, lease.FairAcquireRun) && failNext.CompareAndSwap(true, false) {
			failed <- struct{}{}
			return errNetTimeout
		}
		return nil
	}))
	hookA, lockedA := queued()
	a := newSession(t, c, WithFairness(), WithTTL(ttl), WithRetryInterval(time.Second),
		WithRetryJitter(time.Second), WithCallTimeout(50*time.Millisecond), hookA)
	hookB, lockedB := queued()
	b := newSession(t, srv.Client(t, timeouts), WithFairness(), WithTTL(ttl), hookB)
	led := make(chan string, 2)
	for _, w := range []struct {
		who    string
		s      *Session
		locked <-chan string
	}{{"head", a, lockedA}, {"behind", b, lockedB}} {
		go func() {
			if l, err := w.s.Lock(ctx, "deaf-head"); err == nil {
				led <- w.who
				_ = l.Release(ctx)
			}
		}()
		recvWithin(t, w.locked, 5*time.Second, w.who+" queued")
	}

	failNext.Store(true)
	recvWithin(t, failed, 5*time.Second, "the head's attempt failed") // it is in its retry delay now
	start := time.Now()
	require.NoError(t, holder.Release(ctx))
	assert.Equal(t, "head", recvWithin(t, led, 3*ttl, "someone leads"), "fair order")
	took := time.Since(start)
	t.Logf("name free and unserved for %v", took.Round(time.Millisecond))
	assert.Less(t, took, ttl/2, "the head slept through its wake-up")
}

// TestFairOwnWaiterEndsWhenItsSessionTakesTheName: a session never waits
// for itself. A waiter queued behind a waiter of its own session used to
// learn that its session took the name from an attempt of its own: at once
// when a wake-up for the session happened to rouse it, else on its next
// timer, up to a TTL later. The session now tells it, with no attempt.
func TestFairOwnWaiterEndsWhenItsSessionTakesTheName(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		name, holder, s, locked := fairWaiting(t, b, "own-taken")
		first := make(chan *Lock, 1)
		go func() {
			l, err := s.Lock(ctx, name)
			assert.NoError(t, err)
			first <- l
		}()
		recvWithin(t, locked, 5*time.Second, "W1 queued")
		second := make(chan error, 1)
		go func() { _, err := s.Lock(ctx, name); second <- err }()
		recvWithin(t, locked, 5*time.Second, "W2 queued")

		require.NoError(t, holder.Release(ctx))
		l := recvWithin(t, first, 5*time.Second, "W1 leads")
		require.NotNil(t, l)
		start := time.Now()
		err := recvWithin(t, second, 5*time.Second, "W2 ends")
		require.ErrorIs(t, err, ErrLocked)
		assert.Less(t, time.Since(start), time.Second, "W2 learnt late that its own session holds the name")
		assert.Empty(t, locked, "W2 needed an attempt to learn that its own session holds the name")
		require.NoError(t, l.Release(ctx))
	})
}

// TestFairTombstoneOutlivesShortTTLs: the sessions of a name may have
// different TTLs. A waiter of a session with a long TTL that gives up leaves
// a tombstone for its TTL (lease.LeaveRun), but the next join or renewal by a
// waiter of a short-TTL session sets PEXPIREAT on the leases to
// keepUntil(leases, now + short TTL), which only looks at the top score, a
// live lease, never at tombstones (negative scores): the tombstone dies
// with the key after the short TTL, and a late attempt of the waiter that
// left queues a ghost, which then holds the queue up for the long TTL.
func TestFairTombstoneOutlivesShortTTLs(t *testing.T) {
	m, c := newMini(t)
	ctx := context.Background()
	k := lease.NewKeys("review-tomb")
	q, ls := k.Queue, k.Leases
	// A holder, so that joins queue.
	require.NoError(t, c.Set(ctx, k.Lock, "holder\n1\n", 0).Err())

	join := func(member string, ttl int) []any {
		argv := []any{nil, nil, 4, k.Lock, k.Fence, q, ls, "tok-" + member, ttl, "", member, "1"}
		res, err := lease.FairAcquireRun.Run(ctx, c, argv).Slice()
		require.NoError(t, err)
		return res
	}
	join("LONG.1", 30000)
	require.NoError(t, lease.LeaveRun.Run(ctx, c, []any{nil, nil, 3, k.Lock, q, ls, "LONG.1", 30000}).Err())
	join("SHORT.1", 1000) // a waiter of a session with a 1s TTL

	pttl, err := c.PTTL(ctx, ls).Result()
	require.NoError(t, err)
	assert.Greater(t, pttl, 20*time.Second, "the leases key (holding LONG.1's 30s tombstone) expires in %v", pttl)

	m.FastForward(2 * time.Second) // SHORT.1 died; LONG.1's tombstone should live 28s more
	m.SetTime(time.Now().Add(2 * time.Second))
	res := join("LONG.1", 30000) // LONG.1's late attempt
	assert.EqualValues(t, -2, res[3], "a late attempt of a waiter that left must find its tombstone, not queue a ghost")
}

// TestFairHearsAnOlderReleasesWakeUp: releases from before wake-ups were
// addressed publish "W" on the head's session channel. A head of this
// release must still take that as its wake-up (a rolling upgrade), not
// sleep until the older holder's lease can have expired.
func TestFairHearsAnOlderReleasesWakeUp(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		name, holder, s, locked := fairWaiting(t, b, "legacy-wake")
		got := lockAndRelease(ctx, s, name)
		recvWithin(t, locked, 5*time.Second, "the waiter queued")
		// What a release of 4170eab does, and then nothing else.
		k := holder.lease.Keys
		require.NoError(t, b.client.Eval(ctx, `redis.call('PUBLISH', KEYS[1]..':ch', 'R')
redis.call('PUBLISH', KEYS[2], 'W')
return redis.call('DEL', KEYS[1])`, []string{k.Lock, k.WakeChannel(s.id)}).Err())
		start := time.Now()
		require.NoError(t, recvWithin(t, got, 5*time.Second, "the waiter leads"))
		assert.Less(t, time.Since(start), time.Second, "the head slept through an older release's wake-up")
	})
}

// TestFairWaiterUpkeep: while a healthy holder keeps the name, a queued fair
// waiter sends at most two scripts per TTL (issue 31). Its place used to be
// renewed in every heartbeat round besides its re-checks: about four per
// TTL with the default renew interval. Its re-checks, which renew the place
// too, now come before the place's lease can run out, and the heartbeat
// renews no place. The waiters also stay queued in order all along: the
// first to queue leads first once the holder resigns.
func TestFairWaiterUpkeep(t *testing.T) {
	const ttl, ttls, waiters = 600 * time.Millisecond, 5, 4
	srv := redisserver.Start(t)
	ctx := context.Background()
	timeouts := func(o *redis.Options) { o.ContextTimeoutEnabled = true }
	holder, err := newSession(t, srv.Client(t, timeouts), WithFairness(), WithTTL(ttl)).Lock(ctx, "upkeep")
	require.NoError(t, err)

	c := srv.Client(t, timeouts)
	count := &countingHook{scriptsOnly: true}
	c.AddHook(count.hook())
	led := make(chan int, waiters)
	for i := range waiters {
		hook, locked := queued()
		s := newSession(t, c, WithFairness(), WithTTL(ttl), hook)
		go func() {
			if l, err := s.Lock(ctx, "upkeep"); err == nil {
				led <- i
				_ = l.Release(ctx)
			}
		}()
		recvWithin(t, locked, 5*time.Second, fmt.Sprint("waiter ", i, " queued"))
	}
	before, start := count.n.Load(), time.Now()
	<-time.After(ttls * ttl) // the measured window: nothing to wait for but time
	scripts, took := count.n.Load()-before, time.Since(start)
	perTTL := float64(scripts) / waiters / (float64(took) / float64(ttl))
	t.Logf("%d scripts from %d waiters in %v: %.2f per waiter per TTL", scripts, waiters, took.Round(time.Millisecond), perTTL)
	assert.LessOrEqual(t, perTTL, 2.0, "a queued waiter's upkeep")
	require.True(t, holder.Held(), "the holder lost its lease during the measurement: %v", holder.Err())

	require.NoError(t, holder.Release(ctx))
	for i := range waiters {
		assert.Equal(t, i, recvWithin(t, led, 5*time.Second, "the next waiter leads"), "fair order")
	}
}

// A forged waiter in the queue whose lease ends further away than any
// lease the package gives (48 h: a TTL is at most 24 h), +inf here, is no
// live waiter: TryLock and Lock take the free name, and no queue key is
// given an expiry it cannot have. (It stood at the head forever, TryLock
// always found waiters first, and Lock, after its ZADDs, failed on
// PEXPIREAT "inf" with an error naming nothing, leaving its entries with
// no TTL.)
func TestFairForgedLeaseIsNoWaiter(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		s := newSession(t, b.client, fastOpts(WithFairness())...)
		k := lease.NewKeys("forged-lease")
		c := b.client.(*redis.Client)
		require.NoError(t, c.ZAdd(ctx, k.Queue, redis.Z{Score: 1, Member: "forged.1"}).Err())
		require.NoError(t, c.Do(ctx, "ZADD", k.Leases, "+inf", "forged.1").Err())
		l, err := s.TryLock(ctx, "forged-lease")
		require.NoError(t, err, "TryLock")
		require.NoError(t, l.Release(ctx))
		require.NoError(t, c.Do(ctx, "ZADD", k.Queue, 1, "forged.1").Err())
		require.NoError(t, c.Do(ctx, "ZADD", k.Leases, "+inf", "forged.1").Err())
		holder, err := s.TryLock(ctx, "forged-lease-holder") // unrelated: the session works
		require.NoError(t, err)
		require.NoError(t, holder.Release(ctx))
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		l, err = s.Lock(lctx, "forged-lease")
		require.NoError(t, err, "Lock")
		for _, key := range []string{k.Queue, k.Leases} {
			ttl, err := c.PTTL(ctx, key).Result()
			require.NoError(t, err)
			assert.NotEqual(t, time.Duration(-1), ttl, "%s has no expiry", key)
		}
		require.NoError(t, l.Release(ctx))
	})
}
