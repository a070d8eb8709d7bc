package redisleader

import (
	"context"
	"errors"
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
			assert.Empty(t, b.get(e.keys.Lock), "released after the callback returned")
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
			b.del(e.keys.Lock) // stolen
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
			assert.Empty(t, b.get(e.keys.Lock), "resigned")
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
			assert.Empty(t, b.get(e.keys.Lock), "resigned before the panic propagated")
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
		assert.Empty(t, b.get(lease.NewKeys("self-close").Lock))
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
		assert.Empty(t, b.get(lease.NewKeys("close-self").Lock), "the leadership after Run returned")
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

// A Resign that lands just as Run's Campaign returns must never delete the
// key before onElected has run and returned: Run registers the term before
// the acquisition is handed over.
func TestResignRacingRun(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		s := newSession(t, b.client, WithTTL(10*time.Second))
		e := mustElection(t, s, "racy")
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		resigners := make(chan struct{}, 2)
		for range 2 {
			go func() {
				defer func() { resigners <- struct{}{} }()
				for ctx.Err() == nil {
					_ = e.Resign(context.Background())
				}
			}()
		}
		var terms, gone atomic.Int64
		_ = e.Run(ctx, "me", func(lctx context.Context, l *Lock) error {
			terms.Add(1)
			if !strings.HasPrefix(b.get(l.Key()), l.lease.Token+"\n") {
				gone.Add(1)
			}
			<-lctx.Done()
			return nil
		})
		<-resigners
		<-resigners
		require.Greater(t, terms.Load(), int64(10), "too few terms to race")
		assert.Zero(t, gone.Load(), "onElected started with its key already deleted in %d of %d terms", gone.Load(), terms.Load())
	})
}

// Close and Resign called from a nested Run's onElected, with its context,
// neither wait for the terms they are called from nor lose their own effect.
func TestNestedRunCloseAndResign(t *testing.T) {
	_, c := newMini(t)
	t.Run("Resign the outer term", func(t *testing.T) {
		s := newSession(t, c, fastOpts()...)
		a, b := mustElection(t, s, "outer"), mustElection(t, s, "inner")
		res := make(chan error, 1)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			_ = a.Run(ctx, "a", func(actx context.Context, _ *Lock) error {
				return b.Run(actx, "b", func(bctx context.Context, _ *Lock) error {
					res <- a.Resign(bctx)
					<-bctx.Done()
					return nil
				})
			})
		}()
		assert.NoError(t, recvWithin(t, res, 3*time.Second, "the outer Resign from the inner onElected"))
	})
	t.Run("Close", func(t *testing.T) {
		s, err := NewSession(c, fastOpts()...)
		require.NoError(t, err)
		a, b := mustElection(t, s, "outer2"), mustElection(t, s, "inner2")
		closed := make(chan error, 1)
		go func() {
			_ = a.Run(context.Background(), "a", func(actx context.Context, _ *Lock) error {
				return b.Run(actx, "b", func(bctx context.Context, _ *Lock) error {
					closed <- s.Close(bctx)
					return nil
				})
			})
		}()
		assert.NoError(t, recvWithin(t, closed, 3*time.Second, "Close from the inner onElected"))
	})
}

// The Campaign idiom `defer lead.Release(context.Background())` inside
// onElected does not hang: Lock.Release of a Run term ends it without
// waiting for Run's delete (Election.Resign is the waiting form).
func TestReleaseInsideOnElectedDoesNotWait(t *testing.T) {
	_, c := newMini(t)
	s := newSession(t, c, fastOpts()...)
	e := mustElection(t, s, "defer")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	elected, runDone := make(chan struct{}, 1), make(chan error, 1)
	go func() {
		runDone <- e.Run(ctx, "a", func(_ context.Context, lead *Lock) error {
			defer lead.Release(context.Background())
			select {
			case elected <- struct{}{}:
			default:
			}
			return nil
		})
	}()
	recvWithin(t, elected, 2*time.Second, "elected")
	cancel()
	assert.ErrorIs(t, recvWithin(t, runDone, 2*time.Second, "Run after its ctx ended"), context.Canceled)
}

// Close of one session, called with the onElected context of another
// session's Run, still returns when that context ends.
func TestCloseWithAnotherSessionsTermContext(t *testing.T) {
	_, c := newMini(t)
	s1 := newSession(t, c, fastOpts()...)
	s2, err := NewSession(c, fastOpts()...)
	require.NoError(t, err)
	stuck, elected2 := make(chan struct{}), make(chan struct{}, 1)
	defer close(stuck)
	go func() {
		_ = mustElection(t, s2, "two").Run(context.Background(), "x", func(context.Context, *Lock) error {
			elected2 <- struct{}{}
			<-stuck
			return nil
		})
	}()
	recvWithin(t, elected2, 2*time.Second, "s2 elected")
	ctx, cancel := context.WithCancel(context.Background())
	res, elected1 := make(chan error, 1), make(chan struct{}, 1)
	go func() {
		_ = mustElection(t, s1, "one").Run(ctx, "y", func(lctx context.Context, _ *Lock) error {
			elected1 <- struct{}{}
			res <- s2.Close(lctx)
			return nil
		})
	}()
	recvWithin(t, elected1, 2*time.Second, "s1 elected")
	cancel() // lctx ends; s2's onElected never returns
	assert.ErrorIs(t, recvWithin(t, res, 2*time.Second, "s2.Close after lctx ended"), context.Canceled)
}

// TestResignDuringRun: Resign of a leadership that Run holds cancels
// onElected at once (cause ErrReleased) but leaves the key until onElected
// has returned; Resign waits for that, within its context, and not at all
// from onElected with onElected's context. Run then campaigns again.
func TestResignDuringRun(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx, stop := context.WithCancel(context.Background())
		defer stop()
		s := newSession(t, b.client, fastOpts()...)
		e := mustElection(t, s, "resign-run")
		terms, causes := make(chan *Lock, 4), make(chan error, 4)
		finish := make(chan struct{}, 4)
		selfResign := make(chan error, 1)
		runErr := make(chan error, 1)
		go func() {
			n := 0
			runErr <- e.Run(ctx, "me", func(lctx context.Context, l *Lock) error {
				n++
				terms <- l
				if n == 3 {
					selfResign <- e.Resign(lctx)
				}
				<-lctx.Done()
				causes <- context.Cause(lctx)
				<-finish
				return nil
			})
		}()
		ours := func(l *Lock) bool { return strings.HasPrefix(b.get(l.Key()), l.lease.Token+"\n") }

		// Resign waits for onElected, then for Run's delete.
		first := recvWithin(t, terms, 2*time.Second, "first term")
		resigned := make(chan error, 1)
		go func() { resigned <- e.Resign(context.Background()) }()
		assert.ErrorIs(t, recvWithin(t, causes, 2*time.Second, "onElected cancelled"), ErrReleased)
		assert.ErrorIs(t, first.Err(), ErrReleased)
		select {
		case err := <-resigned:
			t.Fatalf("Resign returned %v while onElected still runs", err)
		case <-time.After(100 * time.Millisecond): // an observation window, not synchronisation
		}
		assert.True(t, ours(first), "the key was deleted while onElected still runs")
		finish <- struct{}{}
		require.NoError(t, recvWithin(t, resigned, 2*time.Second, "Resign once onElected returned"))
		assert.False(t, ours(first), "the key after Resign returned")

		// Run campaigns again; a Resign whose context ends first returns
		// that error, and Run still deletes the key after onElected.
		second := recvWithin(t, terms, 2*time.Second, "second term")
		assert.Greater(t, second.Fence(), first.Fence())
		rctx, cancel := context.WithCancel(context.Background())
		go func() { resigned <- e.Resign(rctx) }()
		assert.ErrorIs(t, recvWithin(t, causes, 2*time.Second, "onElected cancelled"), ErrReleased)
		cancel()
		assert.ErrorIs(t, recvWithin(t, resigned, 2*time.Second, "Resign with its context ended"), context.Canceled)
		assert.True(t, ours(second), "the key was deleted while onElected still runs")
		go func() { resigned <- e.Resign(context.Background()) }()
		select {
		case err := <-resigned:
			t.Fatalf("a second Resign returned %v while onElected still runs", err)
		case <-time.After(100 * time.Millisecond): // an observation window, not synchronisation
		}
		finish <- struct{}{}
		require.NoError(t, recvWithin(t, resigned, 2*time.Second, "the second Resign once onElected returned"))
		assert.False(t, ours(second), "the key after Run's delete")
		require.NoError(t, second.Release(context.Background()), "Release after Run's delete")

		// From onElected, with its context: no wait for itself.
		third := recvWithin(t, terms, 2*time.Second, "third term")
		require.NoError(t, recvWithin(t, selfResign, 2*time.Second, "Resign from onElected"))
		assert.ErrorIs(t, recvWithin(t, causes, 2*time.Second, "onElected cancelled"), ErrReleased)
		assert.True(t, ours(third), "the key was deleted while onElected still runs")
		stop()
		finish <- struct{}{}
		assert.ErrorIs(t, recvWithin(t, runErr, 2*time.Second, "Run's return"), context.Canceled)
		assert.False(t, ours(third), "the key after Run returned")
	})
}

// closeAfterExpiry sets up a session whose one lock (a Run term with
// runTerm, a plain Lock otherwise) has expired locally while Redis failed,
// so that its token is in the session's stale set, with the heartbeat parked
// before it could clean it up; then Redis recovers and Close runs while (for
// a term) onElected has not returned yet. It reports whether the key still
// holds the token once Close has returned.
func closeAfterExpiry(t *testing.T, runTerm bool) (leftOver bool) {
	m, c := newMini(t)
	var (
		sp     atomic.Pointer[Session]
		lp     atomic.Pointer[Lock]
		parked = make(chan struct{}, 1)
	)
	hook := withRoundHook(func(held int, failed bool) {
		l, s := lp.Load(), sp.Load()
		if l == nil || s == nil || !errors.Is(l.Err(), ErrExpired) {
			return
		}
		// The lock expired and a stale cleanup failed: park the heartbeat
		// so that it cannot retry the cleanup before Close.
		select {
		case parked <- struct{}{}:
		default:
		}
		<-s.Done()
	})
	s, err := NewSession(c, fastOpts(hook)...)
	require.NoError(t, err)
	sp.Store(s)
	t.Cleanup(func() { _ = s.Close(context.Background()) })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var ran chan error
	if runTerm {
		e, err := s.Election("expired-term")
		require.NoError(t, err)
		elected := make(chan *Lock, 1)
		ran = make(chan error, 1)
		go func() {
			ran <- e.Run(ctx, "v", func(lctx context.Context, l *Lock) error {
				elected <- l
				<-lctx.Done()
				<-s.Done() // still winding down when Close starts
				return nil
			})
		}()
		select {
		case l := <-elected:
			lp.Store(l)
		case <-time.After(5 * time.Second):
			t.Fatal("not elected")
		}
	} else {
		l, err := s.Lock(ctx, "expired-lock")
		require.NoError(t, err)
		lp.Store(l)
	}
	l := lp.Load()
	require.True(t, m.Exists(l.Key()))

	m.SetError("ERR injected by the test")
	waitClosed(t, l.Done(), 5*time.Second, "the lock expires while Redis fails")
	require.ErrorIs(t, l.Err(), ErrExpired)
	select {
	case <-parked:
	case <-time.After(5 * time.Second):
		t.Fatal("heartbeat not parked")
	}
	m.SetError("")
	require.True(t, m.Exists(l.Key()), "miniredis keeps the expired lease's key (its TTL has not run)")

	require.NoError(t, s.Close(context.Background()))
	if runTerm {
		require.ErrorIs(t, <-ran, ErrSessionClosed)
	}
	if v, err := m.Get(l.Key()); err == nil {
		h, _ := lease.ParseHolder(v)
		return h.Token == l.lease.Token
	}
	return false
}

// Close deletes the token of a Run term that expired while onElected was
// still returning: Run does not delete a term that was lost, so Close must.
// It used to skip every term, and the next leader waited out the key's TTL.
func TestCloseDeletesExpiredRunTermToken(t *testing.T) {
	assert.False(t, closeAfterExpiry(t, true), "Close left the expired Run term's token in Redis")
}

// Resign, Release and Close racing on a Run term end it once; Run deletes
// the key; Close waits for that and returns; Run returns ErrSessionClosed.
func TestRunTermConcurrentEnds(t *testing.T) {
	for i := range 30 {
		m, c := newMini(t)
		s, err := NewSession(c, fastOpts()...)
		require.NoError(t, err)
		e, err := s.Election("race")
		require.NoError(t, err)
		elected := make(chan *Lock, 1)
		ran := make(chan error, 1)
		go func() {
			ran <- e.Run(context.Background(), "v", func(lctx context.Context, l *Lock) error {
				select {
				case elected <- l:
				default:
				}
				<-lctx.Done()
				return nil
			})
		}()
		l := <-elected
		errs := make(chan error, 3)
		go func() { errs <- e.Resign(context.Background()) }()
		go func() { errs <- l.Release(context.Background()) }()
		go func() { errs <- s.Close(context.Background()) }()
		for range 3 {
			select {
			case err := <-errs:
				if err != nil { // Release of a term Close ended first says so
					assert.ErrorIs(t, err, ErrSessionClosed, "round %d", i)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("round %d: deadlock", i)
			}
		}
		select {
		case err := <-ran:
			assert.ErrorIs(t, err, ErrSessionClosed)
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: Run did not return", i)
		}
		assert.False(t, m.Exists(l.Key()), "round %d: key left", i)
	}
}
