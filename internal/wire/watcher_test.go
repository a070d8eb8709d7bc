package wire

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader/internal/faultproxy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pace is a session's TTL, call timeout and retry delay, as the root
// package's options set them: fast as its tests' fastOpts, or its defaults.
type pace struct{ ttl, callTimeout, retry time.Duration }

var (
	fast     = pace{600 * time.Millisecond, 100 * time.Millisecond, 20 * time.Millisecond}
	defaults = pace{15 * time.Second, time.Second, 100 * time.Millisecond}
)

// startTransport starts a transport on c at pace p; stop ends it as
// Session.Close does: Done closes, then the watcher stops.
func startTransport(c Client, p pace) (t *Transport, stop func()) {
	done := make(chan struct{})
	t = new(Transport)
	t.Init(Config{Client: c, CallTimeout: p.callTimeout, TTL: p.ttl,
		RetryDelay: func() time.Duration { return p.retry }, Logger: slog.New(slog.DiscardHandler), Done: done})
	return t, func() { close(done); t.StopWatcher() }
}

// newTransport is startTransport, stopped when the test ends.
func newTransport(tb testing.TB, c Client, p pace) *Transport {
	t, stop := startTransport(c, p)
	tb.Cleanup(stop)
	return t
}

// recvWithin waits up to d for ch to receive.
func recvWithin(t testing.TB, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("%s: nothing within %v", what, d)
	}
}

// runtimeYield lets other goroutines run while a test polls.
func runtimeYield() { <-time.After(time.Millisecond) }

// recvMessage waits until a message (the one published as payload: the
// tests publish nothing else meanwhile) arrives on sub, past any gaps.
func recvMessage(t testing.TB, sub *Subscription, payload string, within time.Duration) {
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
	setup := func(t *testing.T) (*Transport, *faultproxy.Proxy, *redis.Client, *Subscription, string) {
		m := miniredis.RunT(t)
		direct := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = direct.Close() })
		p, err := faultproxy.New(m.Addr())
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close() })
		c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, ReadTimeout: 200 * time.Millisecond})
		t.Cleanup(func() { _ = c.Close() })
		s := newTransport(t, c, fast)
		ch := "redisleader:{" + t.Name() + "}:ch"
		sub, err := s.Subscribe(ctx, ch, nil)
		require.NoError(t, err)
		t.Cleanup(sub.Close)
		require.True(t, sub.Confirmed())
		return s, p, direct, sub, ch
	}
	// heals ends the fault and waits until the channel is subscribed again,
	// which is reported as a gap (what was published until then is lost),
	// and a message gets through.
	heals := func(t *testing.T, p *faultproxy.Proxy, direct *redis.Client, sub *Subscription, ch string) {
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
		s.watch.replace(s.PubSub())
		assert.False(t, sub.Confirmed(), "confirmed on a new connection before the server said so")
		heals(t, p, direct, sub, ch)
	})
	t.Run("unsubscribed", func(t *testing.T) {
		s, p, direct, sub, ch := setup(t)
		ps := s.PubSub()
		// Replies come late, so the watcher's SUBSCRIBE after the
		// UNSUBSCRIBE is confirmed well after the UNSUBSCRIBE is seen.
		p.Delay(faultproxy.ServerToClient, 300*time.Millisecond, 0)
		require.NoError(t, ps.Unsubscribe(ctx, ch)) // one the watcher did not ask for
		recvWithin(t, sub.Notify(), 2*time.Second, "a gap after the unsubscribe")
		assert.False(t, sub.Confirmed(), "confirmed while unsubscribed")
		heals(t, p, direct, sub, ch)
	})
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
	m := miniredis.RunT(t)
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
		s, stop := startTransport(c, defaults)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		sub, err := s.Subscribe(ctx, fmt.Sprintf("first-receive-%d", i), nil)
		cancel()
		require.NoError(t, err)
		require.Eventually(t, sub.Confirmed, 5*time.Second, time.Millisecond, "the channel is never confirmed")
		sub.Close()
		stop()
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
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	s := newTransport(t, c, defaults)
	ctx := context.Background()
	const ch = "redisleader:{race}:ch"
	sub, err := s.Subscribe(ctx, ch, nil)
	require.NoError(t, err)
	defer sub.Close()
	require.True(t, sub.Confirmed())

	ps := s.PubSub()
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
