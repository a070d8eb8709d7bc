package redisleader

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader/internal/redisserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func mustElection(t testing.TB, s *Session, name string) *Election {
	t.Helper()
	e, err := s.Election(name)
	require.NoError(t, err)
	return e
}

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

func TestCampaignHandover(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
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
	})
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
		b.set(e.keys.lock, "garbage")
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
		h, ok := parseHolder(b.get(leader.Key()))
		require.True(t, ok)
		assert.Equal(t, leader.token, h.token, "waiters that gave up left the leader's key alone")
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

// observed collects what an Observe channel delivers.
type observed struct {
	mu     sync.Mutex
	events []Leader
	more   chan struct{} // poked on every event
	closed chan struct{}
}

func observe(ctx context.Context, e *Election) *observed {
	o := &observed{more: make(chan struct{}, 1), closed: make(chan struct{})}
	ch := e.Observe(ctx)
	go func() {
		defer close(o.closed)
		for l := range ch {
			o.mu.Lock()
			o.events = append(o.events, l)
			o.mu.Unlock()
			select {
			case o.more <- struct{}{}:
			default:
			}
		}
	}()
	return o
}

// waitFor waits until the last event satisfies pred.
func (o *observed) waitFor(t testing.TB, what string, pred func(Leader) bool) Leader {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		o.mu.Lock()
		n := len(o.events)
		var last Leader
		if n > 0 {
			last = o.events[n-1]
		}
		o.mu.Unlock()
		if n > 0 && pred(last) {
			return last
		}
		select {
		case <-o.more:
		case <-deadline:
			t.Fatalf("Observe: no %s within 5s; saw %v", what, o.snapshot())
		}
	}
}

func (o *observed) snapshot() []Leader {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.events)
}

func TestObserve(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		bystander := mustElection(t, newSession(t, b.client, fastOpts()...), "watched")
		o := observe(ctx, bystander)
		o.waitFor(t, "initial vacancy", func(l Leader) bool { return l.Fence == 0 })

		a := mustElection(t, newSession(t, b.client, fastOpts()...), "watched")
		la, err := a.Campaign(ctx, "a")
		require.NoError(t, err)
		got := o.waitFor(t, "leader a", func(l Leader) bool { return l.Fence != 0 })
		assert.Equal(t, "a", got.Value)
		assert.Equal(t, la.Fence(), got.Fence)

		require.NoError(t, la.Release(ctx))
		o.waitFor(t, "vacancy after resign", func(l Leader) bool { return l.Fence == 0 })

		cs, err := NewSession(b.client, fastOpts()...)
		require.NoError(t, err)
		lc, err := mustElection(t, cs, "watched").Campaign(ctx, "c")
		require.NoError(t, err)
		o.waitFor(t, "leader c", func(l Leader) bool { return l.Fence == lc.Fence() })
		crash(cs)
		b.expire(lc.Key()) // its lease runs out on the server: nothing is published
		o.waitFor(t, "vacancy after crash", func(l Leader) bool { return l.Fence == 0 })

		events := o.snapshot()
		var fences []int64
		for i, l := range events {
			if i > 0 {
				assert.NotEqual(t, events[i-1].Fence, l.Fence, "no duplicate events: %v", events)
			}
			if l.Fence != 0 {
				fences = append(fences, l.Fence)
			}
		}
		assert.True(t, slices.IsSorted(fences), "leaders in fence order: %v", events)
		assert.Equal(t, []int64{0, la.Fence(), 0, lc.Fence(), 0}, fenceList(events))

		cancel()
		waitClosed(t, o.closed, time.Second, "Observe channel after ctx ends")
	})
}

// TestObserveIgnoresForgedEvents: anyone allowed to subscribe to a name's
// channel may also publish on it. Forged acquisitions (with a fence near
// 2^53), forged releases and garbage must never show up in Observe, and must
// not blind it to the real leaders that follow.
func TestObserveIgnoresForgedEvents(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		bystander := mustElection(t, newSession(t, b.client, fastOpts()...), "forged")
		channel := bystander.keys.channel()
		forge := func(payloads ...string) {
			t.Helper()
			for _, p := range payloads {
				require.NoError(t, b.client.Publish(ctx, channel, p).Err())
			}
		}
		o := observe(ctx, bystander)
		o.waitFor(t, "initial vacancy", func(l Leader) bool { return l.Fence == 0 })
		forge("A1000\nFAKE\n9007199254740000\nattacker", "", "A", "R", "garbage\n\n\n",
			strings.Repeat("A1\nX\n9\n", 10000))

		var fences []int64
		for i, who := range []string{"a", "b", "c"} {
			e := mustElection(t, newSession(t, b.client, fastOpts()...), "forged")
			l, err := e.Campaign(ctx, who)
			require.NoError(t, err)
			o.waitFor(t, "leader "+who, func(got Leader) bool { return got.Fence == l.Fence() && got.Value == who })
			fences = append(fences, 0, l.Fence())
			// A forged release of the real leader, a forged successor with
			// the next fence, and a forged acquisition at 2^53 − 1.
			forge(fmt.Sprintf("RFAKE\n%d\n", l.Fence()),
				fmt.Sprintf("A1000\nFAKE\n%d\nattacker%d", l.Fence()+1, i),
				"A1000\nFAKE\n9007199254740991\nattacker")
			require.NoError(t, l.Release(ctx))
			o.waitFor(t, "vacancy after "+who, func(got Leader) bool { return got.Fence == 0 })
		}
		events := o.snapshot()
		for _, l := range events {
			assert.NotContains(t, l.Value, "attacker", "a forged event reached Observe: %v", events)
		}
		assert.Equal(t, append(fences, 0), fenceList(events), "exactly the real leaders and vacancies: %v", events)
	})
}

func fenceList(ls []Leader) []int64 {
	out := make([]int64, len(ls))
	for i, l := range ls {
		out[i] = l.Fence
	}
	return out
}

func TestObserveEndsWithSession(t *testing.T) {
	_, c := newMini(t)
	s, err := NewSession(c)
	require.NoError(t, err)
	o := observe(context.Background(), mustElection(t, s, "x"))
	o.waitFor(t, "initial state", func(Leader) bool { return true })
	require.NoError(t, s.Close(context.Background()))
	waitClosed(t, o.closed, time.Second, "Observe channel after Close")
	closedCh := mustElection(t, s, "x").Observe(context.Background())
	_, ok := <-closedCh
	assert.False(t, ok, "Observe on a closed session returns a closed channel")
	checkNoLeaks(t)
}

func TestRun(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		t.Run("ctx cancel: release only after the callback returns", func(t *testing.T) {
			s := newSession(t, b.client, fastOpts()...)
			e := mustElection(t, s, "run-cancel")
			ctx, cancel := context.WithCancel(context.Background())
			stillMine := make(chan bool, 1)
			errc := make(chan error, 1)
			go func() {
				errc <- e.Run(ctx, "me", func(lctx context.Context, _ *Lock) error {
					cancel()
					<-lctx.Done()
					// Leadership is still ours in Redis until we return.
					l, err := e.Leader(context.Background())
					stillMine <- err == nil && l.Value == "me"
					return lctx.Err()
				})
			}()
			select {
			case err := <-errc:
				assert.ErrorIs(t, err, context.Canceled)
			case <-time.After(2 * time.Second):
				t.Fatal("Run did not return")
			}
			assert.True(t, <-stillMine, "the key was released before the callback returned")
			assert.Empty(t, b.get(e.keys.lock), "released after the callback returned")
		})

		t.Run("loss cancels the callback, then it campaigns again", func(t *testing.T) {
			s := newSession(t, b.client, fastOpts()...)
			e := mustElection(t, s, "run-loss")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			terms := make(chan int64, 4)
			causes := make(chan error, 4)
			errc := make(chan error, 1)
			go func() {
				errc <- e.Run(ctx, "me", func(lctx context.Context, lead *Lock) error {
					terms <- lead.Fence()
					<-lctx.Done()
					causes <- context.Cause(lctx)
					return lctx.Err()
				})
			}()
			first := recvWithin(t, terms, 2*time.Second, "first term")
			b.del(e.keys.lock) // stolen
			assert.ErrorIs(t, recvWithin(t, causes, 2*time.Second, "cancel on loss"), ErrNotOwner)
			second := recvWithin(t, terms, 2*time.Second, "second term")
			assert.Greater(t, second, first)
			cancel()
			assert.ErrorIs(t, recvWithin(t, errc, 2*time.Second, "Run's return"), context.Canceled)
		})

		t.Run("callback error while leading stops Run", func(t *testing.T) {
			s := newSession(t, b.client, fastOpts()...)
			e := mustElection(t, s, "run-error")
			boom := errors.New("boom")
			err := e.Run(context.Background(), "me", func(context.Context, *Lock) error { return boom })
			assert.ErrorIs(t, err, boom)
			assert.Empty(t, b.get(e.keys.lock), "resigned")
		})

		t.Run("nil return campaigns again, never concurrently", func(t *testing.T) {
			s := newSession(t, b.client, fastOpts()...)
			e := mustElection(t, s, "run-again")
			ctx, cancel := context.WithCancel(context.Background())
			var running, calls int
			var mu sync.Mutex
			err := e.Run(ctx, "me", func(context.Context, *Lock) error {
				mu.Lock()
				running++
				calls++
				concurrent := running > 1
				if calls == 3 {
					cancel()
				}
				mu.Unlock()
				assert.False(t, concurrent)
				mu.Lock()
				running--
				mu.Unlock()
				return nil
			})
			assert.ErrorIs(t, err, context.Canceled)
			assert.Equal(t, 3, calls)
		})

		t.Run("panic resigns, then propagates", func(t *testing.T) {
			s := newSession(t, b.client, fastOpts()...)
			e := mustElection(t, s, "run-panic")
			func() {
				defer func() {
					assert.Equal(t, "kaboom", recover())
				}()
				_ = e.Run(context.Background(), "me", func(context.Context, *Lock) error { panic("kaboom") })
			}()
			assert.Empty(t, b.get(e.keys.lock), "resigned before the panic propagated")
		})

		t.Run("session close ends Run", func(t *testing.T) {
			s, err := NewSession(b.client, fastOpts()...)
			require.NoError(t, err)
			e := mustElection(t, s, "run-close")
			errc := make(chan error, 1)
			elected := make(chan struct{})
			go func() {
				errc <- e.Run(context.Background(), "me", func(lctx context.Context, _ *Lock) error {
					close(elected)
					<-lctx.Done()
					return nil
				})
			}()
			recvWithin(t, elected, 2*time.Second, "elected")
			require.NoError(t, s.Close(context.Background()))
			assert.ErrorIs(t, recvWithin(t, errc, 2*time.Second, "Run's return"), ErrSessionClosed)
		})
	})
	checkNoLeaks(t)
}

// With Redis stopped past the deadline, the callback's context is cancelled
// at the local deadline, with ErrExpired as its cause.
func TestRunCancelsWhenRedisPaused(t *testing.T) {
	srv := redisserver.Start(t)
	c := srv.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	s := newSession(t, c, WithTTL(time.Second))
	e := mustElection(t, s, "paused-run")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type term struct {
		deadline time.Time
		cause    error
		late     time.Duration
	}
	terms := make(chan term, 1)
	elected := make(chan *Lock, 1)
	go func() {
		_ = e.Run(ctx, "me", func(lctx context.Context, lead *Lock) error {
			elected <- lead
			<-lctx.Done()
			d := lead.Deadline()
			terms <- term{deadline: d, cause: context.Cause(lctx), late: time.Since(d)}
			<-ctx.Done()
			return nil
		})
	}()
	recvWithin(t, elected, 2*time.Second, "elected")
	srv.Pause(t)
	got := recvWithin(t, terms, 3*time.Second, "cancel at the deadline")
	srv.Resume(t)
	assert.ErrorIs(t, got.cause, ErrExpired)
	t.Logf("callback context cancelled %v after the local deadline", got.late)
	assert.Less(t, got.late, 10*time.Millisecond)
	assert.GreaterOrEqual(t, got.late, time.Duration(0))
}

func recvWithin[T any](t testing.TB, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("%s: nothing within %v", what, d)
		var zero T
		return zero
	}
}

func TestHealth(t *testing.T) {
	m, c := newMini(t)
	hook, roundsCh := rounds()
	s := newSession(t, c, WithTTL(2*time.Second), WithRenewInterval(50*time.Millisecond), hook)
	_, err := s.TryLock(context.Background(), "healthy")
	require.NoError(t, err)
	require.False(t, waitRound(t, roundsCh, time.Second))
	require.NoError(t, s.CheckHealth(100*time.Millisecond))
	rec := httptest.NewRecorder()
	s.HealthHandler(100*time.Millisecond).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	assert.Equal(t, http.StatusOK, rec.Code)

	m.SetError("LOADING Redis is loading the dataset in memory")
	deadline := time.After(2 * time.Second)
	for s.CheckHealth(100*time.Millisecond) == nil {
		select {
		case <-roundsCh: // a failed round; check again
		case <-deadline:
			t.Fatal("still healthy while renewals fail")
		}
	}
	err = s.CheckHealth(100 * time.Millisecond)
	assert.ErrorContains(t, err, `"healthy" is held but was last renewed`)
	rec = httptest.NewRecorder()
	s.HealthHandler(100*time.Millisecond).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.Contains(t, rec.Body.String(), "last renewed")
	m.SetError("")
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

// A prune's UNSUBSCRIBE that races with a new subscriber to the same channel
// must not leave that subscriber deaf: the watcher subscribes again.
func TestWatcherResubscribesAfterRacingUnsubscribe(t *testing.T) {
	_, c := newMini(t)
	s := newSession(t, c)
	ctx := context.Background()
	const ch = "redisleader:{race}:ch"
	sub, err := s.watch.subscribe(ctx, ch)
	require.NoError(t, err)
	defer sub.Close()
	require.True(t, sub.confirmed())

	s.watch.mu.Lock()
	ps := s.watch.ps
	s.watch.mu.Unlock()
	require.NoError(t, ps.Unsubscribe(ctx, ch)) // as a racing prune would
	recvWithin(t, sub.notify, 2*time.Second, "gap after the unsubscribe")
	_, gap := sub.take()
	assert.True(t, gap, "subscribers are told they may have missed messages")

	// Once subscribed again, messages arrive.
	deadline := time.Now().Add(2 * time.Second)
	for {
		n, err := c.Publish(ctx, ch, "hello").Result()
		require.NoError(t, err)
		if n > 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the watcher did not subscribe again")
		runtimeYield()
	}
	recvMessage(t, sub, "hello", 2*time.Second)
}

// Closing the session of a Run leader cancels onElected at once, but the
// next leader starts only after onElected has returned.
func TestCloseDuringRunWaitsForOnElected(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		sa, err := NewSession(b.client, fastOpts()...)
		require.NoError(t, err)
		elected, cancelled, finish := make(chan struct{}), make(chan struct{}), make(chan struct{})
		runErr := make(chan error, 1)
		go func() {
			runErr <- mustElection(t, sa, "close-run").Run(ctx, "a", func(lctx context.Context, _ *Lock) error {
				close(elected)
				<-lctx.Done()
				close(cancelled)
				<-finish // still cleaning up
				return nil
			})
		}()
		recvWithin(t, elected, 2*time.Second, "a elected")
		next := make(chan *Lock, 1)
		go func() {
			l, err := mustElection(t, newSession(t, b.client, fastOpts()...), "close-run").Campaign(ctx, "b")
			if err == nil {
				next <- l
			}
		}()
		closed := make(chan error, 1)
		go func() { closed <- sa.Close(ctx) }()
		recvWithin(t, cancelled, time.Second, "onElected cancelled by Close")
		select {
		case <-next:
			t.Fatal("the next leader started while onElected was still running")
		case <-closed:
			t.Fatal("Close returned while onElected was still running")
		case <-time.After(200 * time.Millisecond): // an observation window, not synchronisation
		}
		close(finish)
		require.NoError(t, recvWithin(t, closed, 2*time.Second, "Close once onElected returned"))
		l := recvWithin(t, next, 2*time.Second, "b elected once onElected returned")
		assert.Equal(t, "b", l.Value())
		assert.ErrorIs(t, recvWithin(t, runErr, time.Second, "Run's return"), ErrSessionClosed)
	})
}

// The natural shutdown order, Session.Close then client.Close, must leave no
// key behind while Run's onElected is still returning: Close waits for the
// release Run owes. Close called from onElected with its context does not
// wait for itself.
func TestCloseWaitsForRunsRelease(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		client := redis.NewClient(&redis.Options{Addr: b.addr, ContextTimeoutEnabled: true})
		s, err := NewSession(client, fastOpts()...)
		require.NoError(t, err)
		elected, cancelled, finish := make(chan *Lock, 1), make(chan struct{}), make(chan struct{})
		go func() {
			_ = mustElection(t, s, "shutdown").Run(ctx, "a", func(lctx context.Context, l *Lock) error {
				elected <- l
				<-lctx.Done()
				close(cancelled)
				<-finish
				return nil
			})
		}()
		l := recvWithin(t, elected, 2*time.Second, "elected")
		closed := make(chan error, 1)
		go func() { closed <- s.Close(ctx) }()
		recvWithin(t, cancelled, time.Second, "onElected cancelled")
		select {
		case <-closed: // the old behaviour: close the client as a user would, then let onElected return
			_ = client.Close()
			close(finish)
			t.Fatalf("Close returned before Run released the leadership")
		case <-time.After(100 * time.Millisecond): // an observation window, not synchronisation
		}
		close(finish)
		require.NoError(t, recvWithin(t, closed, 2*time.Second, "Close"))
		require.NoError(t, client.Close())
		assert.Empty(t, b.get(l.Key()), "the leadership's key after Close and client.Close")

		// From inside onElected, with its context: no self-wait.
		s2 := newSession(t, b.client, fastOpts()...)
		runErr := make(chan error, 1)
		go func() {
			runErr <- mustElection(t, s2, "self-close").Run(ctx, "a", func(lctx context.Context, _ *Lock) error {
				return s2.Close(lctx)
			})
		}()
		assert.ErrorIs(t, recvWithin(t, runErr, 2*time.Second, "Run after Close from onElected"), ErrSessionClosed)
		assert.Empty(t, b.get(newKeys("self-close").lock))
	})
}

// Close called from onElected with its context releases the session's other
// keys and returns nil; it waits for everything but that onElected.
func TestCloseFromOnElectedReleasesTheRest(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		s, err := NewSession(b.client, fastOpts()...)
		require.NoError(t, err)
		other, err := s.TryLock(ctx, "close-self-other")
		require.NoError(t, err)
		closeErr, runErr := make(chan error, 1), make(chan error, 1)
		go func() {
			runErr <- mustElection(t, s, "close-self").Run(ctx, "a", func(lctx context.Context, _ *Lock) error {
				closeErr <- s.Close(lctx)
				return nil
			})
		}()
		assert.NoError(t, recvWithin(t, closeErr, 3*time.Second, "Close from onElected"))
		assert.Empty(t, b.get(other.Key()), "the session's other lock after Close")
		assert.ErrorIs(t, recvWithin(t, runErr, 3*time.Second, "Run"), ErrSessionClosed)
		assert.Empty(t, b.get(newKeys("close-self").lock), "the leadership after Run returned")
	})
}

// A Close that gave up on its context does not make a later Close return at
// once: the later one waits for what the first left running (here, Run's
// onElected and the release it owes).
func TestSecondCloseWaitsForTheFirstsWork(t *testing.T) {
	_, c := newMini(t)
	s, err := NewSession(c, fastOpts()...)
	require.NoError(t, err)
	elected, finish, returned := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(returned)
		_ = mustElection(t, s, "close-twice").Run(context.Background(), "a", func(lctx context.Context, _ *Lock) error {
			close(elected)
			<-finish
			return nil
		})
	}()
	recvWithin(t, elected, 2*time.Second, "elected")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	assert.ErrorIs(t, s.Close(ctx), context.DeadlineExceeded)
	second := make(chan error, 1)
	go func() { second <- s.Close(context.Background()) }()
	select {
	case err := <-second:
		t.Fatalf("the second Close returned %v while onElected still runs", err)
	case <-time.After(200 * time.Millisecond): // an observation window, not synchronisation
	}
	close(finish)
	assert.NoError(t, recvWithin(t, second, 2*time.Second, "the second Close"))
	recvWithin(t, returned, time.Second, "Run")
}
