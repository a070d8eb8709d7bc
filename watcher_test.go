package redisleader

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hungServer listens on loopback and accepts connections but never writes
// a byte: a Redis that is stuck (or a proxy in front of one). It returns the
// address; everything is closed when the test ends.
func hungServer(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(io.Discard, c) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// hungSession returns a session (with fastOpts) on a hungServer.
func hungSession(t testing.TB) *Session {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: hungServer(t), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return newSession(t, c, fastOpts()...)
}

const (
	// fastCallTimeout is fastOpts' call timeout.
	fastCallTimeout = 100 * time.Millisecond
	// slack is what a call may take past its bound on a busy machine.
	slack = 100 * time.Millisecond
)

// timed runs f and returns how long it took.
func timed(f func()) time.Duration {
	start := time.Now()
	f()
	return time.Since(start)
}

// Against a server that accepts connections and never answers, every
// blocking call returns when its context ends, and Close stops the session's
// goroutines within about a call timeout, not after go-redis's own socket
// timeouts (seconds).
func TestWatcherHungServer(t *testing.T) {
	s := hungSession(t)
	const wait = 200 * time.Millisecond
	// An acquisition whose last attempt timed out deletes its token before
	// it returns (Lock.abandon), bounded by the call timeout.
	acquire := wait + fastCallTimeout + slack
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
	// session has stopped: within about two call timeouts (the release of
	// the abandoned tokens, then the watcher's connection setup in
	// progress).
	d := timed(func() { _ = s.Close(context.Background()) })
	t.Logf("Close returned after %v", d)
	assert.Less(t, d, 2*fastCallTimeout+slack)
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
	sub, err := s.watch.subscribe(context.Background(), "redisleader:{other}:ch")
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
