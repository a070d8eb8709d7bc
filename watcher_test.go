package redisleader

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader/internal/faultproxy"
	"github.com/redisleader/redisleader/internal/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hungSession returns a session (with fastOpts) on a hungServer.
func hungSession(t testing.TB) *Session {
	t.Helper()
	addr, _ := hungServer(t, false)
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return newSession(t, c, fastOpts()...)
}

// Against a server that accepts connections and never answers, every
// blocking call returns when its context ends, and Close stops the session's
// goroutines within about a call timeout, not after go-redis's own socket
// timeouts (seconds).
func TestWatcherHungServer(t *testing.T) {
	s := hungSession(t)
	const wait = 200 * time.Millisecond
	// An acquisition whose last attempt timed out leaves its token's delete
	// to the background once its context has ended (Lock.abandon).
	acquire := wait + slack
	e := mustElection(t, s, "hung")
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		d := timed(func() {
			for range e.Observe(ctx) {
				t.Error("Observe reported a leader of a server that never answers")
			}
		})
		cancel()
		t.Logf("Observe closed after %v", d)
		assert.Less(t, d, wait+slack, "Observe #%d", i)

		ctx, cancel = context.WithTimeout(context.Background(), wait)
		var err error
		d = timed(func() { _, err = s.Lock(ctx, "hung") })
		cancel()
		t.Logf("Lock returned after %v", d)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Less(t, d, acquire, "Lock #%d", i)

		ctx, cancel = context.WithTimeout(context.Background(), wait)
		d = timed(func() { _, err = e.Campaign(ctx, "me") })
		cancel()
		t.Logf("Campaign returned after %v", d)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Less(t, d, acquire, "Campaign #%d", i)
	}

	// Close(context.Background()) returns once every goroutine of the
	// session has stopped: within about a call timeout (the release of the
	// abandoned tokens, while the watcher's connection setup in progress
	// runs out).
	d := timed(func() { _ = s.Close(context.Background()) })
	t.Logf("Close returned after %v", d)
	assert.Less(t, d, fastCallTimeout+slack)
	assert.Empty(t, waitNoLeaks(slack), "goroutines outlived Close")
}

// A blocking call waiting on a hung server returns ErrSessionClosed at once
// when the session closes, and Close(ctx) returns within ctx.
func TestWatcherHungServerCloseWhileWaiting(t *testing.T) {
	s := hungSession(t)
	errc := make(chan error, 1)
	go func() {
		_, err := s.Lock(context.Background(), "hung")
		errc <- err
	}()
	// Start the watcher, in case Lock has not yet.
	sub, err := s.wire.Subscribe(context.Background(), "redisleader:{other}:ch", nil)
	require.NoError(t, err)
	sub.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	d := timed(func() { _ = s.Close(ctx) })
	assert.Less(t, d, 50*time.Millisecond+slack, "Close(ctx)")
	// Lock's attempt in flight ends at the call timeout, and abandoning it
	// deletes its token, bounded by the call timeout again.
	assert.ErrorIs(t, recvWithin(t, errc, 2*fastCallTimeout+slack, "Lock's return"), ErrSessionClosed)
	assert.Empty(t, waitNoLeaks(2*fastCallTimeout+slack), "goroutines outlived Close")
}

// recvMessage waits until a message (the one published as payload: the
// tests publish nothing else meanwhile) arrives on sub, past any gaps.
func recvMessage(t testing.TB, sub *wire.Subscription, payload string, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case <-sub.Notify():
			if msgs, _ := sub.Take(); msgs > 0 {
				return
			}
		case <-deadline:
			t.Fatalf("message %q: not within %v", payload, within)
		}
	}
}

// confirmed() is true only while the server has the channel subscribed: not
// after the connection was lost, replaced, or the channel unsubscribed,
// until the server confirms it again.
func TestWatcherConfirmedOnlyWhileSubscribed(t *testing.T) {
	ctx := context.Background()
	setup := func(t *testing.T) (*Session, *faultproxy.Proxy, *redis.Client, *wire.Subscription, string) {
		m, direct := newMini(t)
		p, err := faultproxy.New(m.Addr())
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close() })
		c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, ReadTimeout: 200 * time.Millisecond})
		t.Cleanup(func() { _ = c.Close() })
		s := newSession(t, c, fastOpts()...)
		ch := "redisleader:{" + t.Name() + "}:ch"
		sub, err := s.wire.Subscribe(ctx, ch, nil)
		require.NoError(t, err)
		t.Cleanup(sub.Close)
		require.True(t, sub.Confirmed())
		return s, p, direct, sub, ch
	}
	// heals ends the fault and waits until the channel is subscribed again,
	// which is reported as a gap (what was published until then is lost),
	// and a message gets through.
	heals := func(t *testing.T, p *faultproxy.Proxy, direct *redis.Client, sub *wire.Subscription, ch string) {
		sub.Take()
		p.Heal()
		deadline := time.Now().Add(3 * time.Second)
		for !sub.Confirmed() {
			require.True(t, time.Now().Before(deadline), "not subscribed again")
			runtimeYield()
		}
		_, gap := sub.Take()
		assert.True(t, gap, "no gap reported when subscribed again")
		for n := int64(0); n == 0; {
			n, _ = direct.Publish(ctx, ch, "after").Result()
			require.True(t, time.Now().Before(deadline), "no subscriber on the server")
		}
		recvMessage(t, sub, "after", 2*time.Second)
	}

	t.Run("connection lost", func(t *testing.T) {
		_, p, direct, sub, ch := setup(t)
		p.Pause(faultproxy.ServerToClient) // the new connection stays unconfirmed
		p.ResetConns()
		recvWithin(t, sub.Notify(), 2*time.Second, "a gap after the connection loss")
		_, gap := sub.Take()
		assert.True(t, gap)
		assert.False(t, sub.Confirmed(), "confirmed while the connection is down")
		heals(t, p, direct, sub, ch)
	})
	t.Run("replaced", func(t *testing.T) {
		s, p, direct, sub, ch := setup(t)
		p.Pause(faultproxy.ServerToClient)
		s.wire.ReplacePubSub(s.wire.PubSub())
		assert.False(t, sub.Confirmed(), "confirmed on a new connection before the server said so")
		heals(t, p, direct, sub, ch)
	})
	t.Run("unsubscribed", func(t *testing.T) {
		s, p, direct, sub, ch := setup(t)
		ps := s.wire.PubSub()
		// Replies come late, so the watcher's SUBSCRIBE after the
		// UNSUBSCRIBE is confirmed well after the UNSUBSCRIBE is seen.
		p.Delay(faultproxy.ServerToClient, 300*time.Millisecond, 0)
		require.NoError(t, ps.Unsubscribe(ctx, ch)) // one the watcher did not ask for
		recvWithin(t, sub.Notify(), 2*time.Second, "a gap after the unsubscribe")
		assert.False(t, sub.Confirmed(), "confirmed while unsubscribed")
		heals(t, p, direct, sub, ch)
	})
}

// The watcher's memory is bounded by the names in use, not by time: a
// session with a long TTL that waits on many names one after another keeps
// only a few idle channels subscribed, and none once they have been idle
// for min(TTL, wire.MaxIdleTime).
func TestWatcherIdleChannelsBounded(t *testing.T) {
	_, c := newMini(t)
	s := newSession(t, c, WithTTL(time.Hour))
	ctx := context.Background()
	for i := range 1000 {
		l, err := s.Lock(ctx, fmt.Sprint("name-", i))
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
	}
	kept := s.wire.Channels
	assert.LessOrEqual(t, kept(), wire.MaxIdleChannels, "channels kept by the watcher")
	waitSubscribed(t, c, wire.MaxIdleChannels)

	s.wire.PruneIdle(time.Now().Add(wire.MaxIdleTime))
	assert.Zero(t, kept(), "channels kept after wire.MaxIdleTime")
	waitSubscribed(t, c, 0)
}

// waitSubscribed waits until the server has at most n channels subscribed.
func waitSubscribed(t testing.TB, c *redis.Client, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		chans, err := c.PubSubChannels(context.Background(), "*").Result()
		require.NoError(t, err)
		if len(chans) <= n {
			return
		}
		require.True(t, time.Now().Before(deadline), "%d channels still subscribed on the server, want at most %d", len(chans), n)
		runtimeYield()
	}
}

// go-redis's PubSub sets up its reader state on the first ReceiveTimeout
// without taking its mutex, and reads that state under the mutex when a
// SUBSCRIBE meets a broken connection: a SUBSCRIBE that reaches the
// connection before the first receive races with it. The watcher's send
// goroutine therefore waits until run has read from a connection once, so
// every pub/sub connection is dialled by run's ReceiveTimeout, never by
// send's Subscribe (whose first write then fails here, as on a connection
// that broke at once). Under the old code send dialled first about half of
// the time, and the race detector flagged go-redis's state.
func TestWatcherSendWaitsForFirstReceive(t *testing.T) {
	m, _ := newMini(t)
	for i := range 20 {
		var (
			mu       sync.Mutex
			dialers  []string
			failOnce = true
		)
		c := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true,
			Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
				stack := make([]byte, 64<<10)
				stack = stack[:runtime.Stack(stack, false)]
				who := "other"
				switch {
				case bytes.Contains(stack, []byte("(*PubSub).ReceiveTimeout")):
					who = "receive"
				case bytes.Contains(stack, []byte("(*PubSub).Subscribe")):
					who = "subscribe"
				}
				conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				mu.Lock()
				defer mu.Unlock()
				dialers = append(dialers, who)
				if who == "subscribe" && failOnce {
					failOnce = false
					return &failWrite{Conn: conn}, nil
				}
				return conn, nil
			}})
		t.Cleanup(func() { _ = c.Close() })
		s := newSession(t, c)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		sub, err := s.wire.Subscribe(ctx, fmt.Sprintf("first-receive-%d", i), nil)
		cancel()
		require.NoError(t, err)
		require.Eventually(t, sub.Confirmed, 5*time.Second, time.Millisecond, "the channel is never confirmed")
		sub.Close()
		require.NoError(t, s.Close(context.Background()))
		mu.Lock()
		require.NotEmpty(t, dialers)
		assert.Equal(t, "receive", dialers[0], "round %d: the pub/sub connection was first dialled by %s", i, dialers[0])
		mu.Unlock()
	}
}

// failWrite is a connection whose first write fails, as if it broke.
type failWrite struct {
	net.Conn
	failed atomic.Bool
}

func (c *failWrite) Write(p []byte) (int, error) {
	if c.failed.CompareAndSwap(false, true) {
		_ = c.Conn.Close()
		return 0, io.ErrClosedPipe
	}
	return c.Conn.Write(p)
}

// A prune's UNSUBSCRIBE that races with a new subscriber to the same channel
// must not leave that subscriber deaf: the watcher subscribes again.
func TestWatcherResubscribesAfterRacingUnsubscribe(t *testing.T) {
	_, c := newMini(t)
	s := newSession(t, c)
	ctx := context.Background()
	const ch = "redisleader:{race}:ch"
	sub, err := s.wire.Subscribe(ctx, ch, nil)
	require.NoError(t, err)
	defer sub.Close()
	require.True(t, sub.Confirmed())

	ps := s.wire.PubSub()
	require.NoError(t, ps.Unsubscribe(ctx, ch)) // as a racing prune would
	recvWithin(t, sub.Notify(), 2*time.Second, "gap after the unsubscribe")
	_, gap := sub.Take()
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
