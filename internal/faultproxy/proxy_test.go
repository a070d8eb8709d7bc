package faultproxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader/internal/leak"
	"github.com/stretchr/testify/require"
)

const (
	waitFor = 5 * time.Second        // bound on waiting for an expected condition
	tick    = 2 * time.Millisecond   // poll interval of those waits
	short   = 250 * time.Millisecond // client read timeout where a timeout is expected
)

// newProxy starts a Proxy to target and, at cleanup, closes it and checks
// that none of its goroutines is left.
func newProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := New(target)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, p.Close())
		require.Empty(t, leak.Wait(waitFor, leak.Proxy...), "goroutines outlived Close")
	})
	return p
}

// newClient returns a go-redis client of addr with one connection, no
// retries and the given read timeout, closed at cleanup.
func newClient(t *testing.T, addr string, readTimeout time.Duration) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:                  addr,
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
		PoolSize:              1,
		DialTimeout:           waitFor,
		ReadTimeout:           readTimeout,
		WriteTimeout:          waitFor,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// dial opens a raw connection to addr, closed at cleanup.
func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, waitFor)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.SetDeadline(time.Now().Add(waitFor)))
	return c, bufio.NewReader(c)
}

// command encodes args as a RESP request.
func command(args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}

// readLine reads one CRLF-terminated line (a simple reply or a header).
func readLine(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	return line
}

// readBulk reads one bulk-string reply and returns its content.
func readBulk(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	header := readLine(t, r)
	require.True(t, strings.HasPrefix(header, "$"), "want a bulk reply, got %q", header)
	n, err := strconv.Atoi(strings.TrimSpace(header[1:]))
	require.NoError(t, err)
	body := make([]byte, n+2)
	_, err = io.ReadFull(r, body)
	require.NoError(t, err)
	return string(body[:n])
}

// recv waits for the result of a command run in another goroutine.
func recv(t *testing.T, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(waitFor):
		t.Fatal("command did not return")
		return nil
	}
}

// requireTimeout fails unless err is a network timeout.
func requireTimeout(t *testing.T, err error) {
	t.Helper()
	var ne net.Error
	require.True(t, errors.As(err, &ne) && ne.Timeout(), "want a timeout, got %v", err)
}

func TestPassThrough(t *testing.T) {
	mr := miniredis.RunT(t)
	p := newProxy(t, mr.Addr())
	c := newClient(t, p.Addr(), waitFor)
	ctx := context.Background()

	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	mr.CheckGet(t, "k", "v")
	got, err := c.Get(ctx, "k").Result()
	require.NoError(t, err)
	require.Equal(t, "v", got)

	big := strings.Repeat("0123456789", 100_000) // a reply of many chunks
	require.NoError(t, c.Set(ctx, "big", big, 0).Err())
	got, err = c.Get(ctx, "big").Result()
	require.NoError(t, err)
	require.Equal(t, big, got)

	require.Equal(t, Stats{Conns: 1, Open: 1}, p.Stats())
}

func TestDelay(t *testing.T) {
	mr := miniredis.RunT(t)
	p := newProxy(t, mr.Addr())
	c := newClient(t, p.Addr(), waitFor)
	ctx := context.Background()
	require.NoError(t, c.Ping(ctx).Err()) // connect before measuring

	rtt := func() time.Duration {
		start := time.Now()
		require.NoError(t, c.Ping(ctx).Err())
		return time.Since(start)
	}

	p.Delay(Both, 50*time.Millisecond, 0)
	require.GreaterOrEqual(t, rtt(), 100*time.Millisecond, "delay both ways")

	p.Delay(ServerToClient, 0, 0)
	p.Delay(ClientToServer, 80*time.Millisecond, 20*time.Millisecond)
	require.GreaterOrEqual(t, rtt(), 60*time.Millisecond, "delay with jitter, requests only")

	p.Delay(Both, 0, 0)
	require.NoError(t, c.Ping(ctx).Err())
}

// TestDelayKeepsOrder sends requests in separate writes under a jittered
// delay: requests must reach the server, and replies the client, in order.
func TestDelayKeepsOrder(t *testing.T) {
	mr := miniredis.RunT(t)
	p := newProxy(t, mr.Addr())
	p.Delay(Both, 3*time.Millisecond, 3*time.Millisecond)
	c, r := dial(t, p.Addr())

	const n = 30
	var want []string
	for i := range n {
		want = append(want, strconv.Itoa(i))
		_, err := c.Write([]byte(command("RPUSH", "l", strconv.Itoa(i))))
		require.NoError(t, err)
	}
	for i := range n {
		require.Equal(t, fmt.Sprintf(":%d\r\n", i+1), readLine(t, r))
	}
	got, err := mr.List("l")
	require.NoError(t, err)
	require.Equal(t, want, got)
}

func TestBlackhole(t *testing.T) {
	ctx := context.Background()

	t.Run("replies", func(t *testing.T) {
		mr := miniredis.RunT(t)
		p := newProxy(t, mr.Addr())
		c := newClient(t, p.Addr(), short)
		require.NoError(t, c.Ping(ctx).Err())

		p.Blackhole(ServerToClient)
		requireTimeout(t, c.Set(ctx, "k", "v", 0).Err())
		require.Eventually(t, func() bool { v, _ := mr.Get("k"); return v == "v" }, waitFor, tick,
			"the request passed, so SET ran on the server")
		require.Positive(t, p.Stats().BlackholedBytes)

		p.Heal()
		require.NoError(t, c.Ping(ctx).Err(), "later bytes pass")
	})

	t.Run("requests", func(t *testing.T) {
		mr := miniredis.RunT(t)
		p := newProxy(t, mr.Addr())
		c := newClient(t, p.Addr(), short)
		require.NoError(t, c.Ping(ctx).Err())

		p.Blackhole(ClientToServer)
		requireTimeout(t, c.Set(ctx, "k", "v", 0).Err())
		require.Eventually(t, func() bool { return p.Stats().BlackholedBytes >= int64(len(command("SET", "k", "v"))) },
			waitFor, tick)
		require.False(t, mr.Exists("k"), "the discarded SET must not run")

		p.Heal()
		require.NoError(t, c.Ping(ctx).Err(), "later bytes pass")
		require.False(t, mr.Exists("k"), "discarded bytes are not replayed")
	})
}

func TestPauseUnpause(t *testing.T) {
	mr := miniredis.RunT(t)
	p := newProxy(t, mr.Addr())
	c := newClient(t, p.Addr(), waitFor)
	ctx := context.Background()
	require.NoError(t, c.Ping(ctx).Err())

	p.Pause(ClientToServer)
	done := make(chan error, 1)
	go func() { done <- c.Set(ctx, "k", "v", 0).Err() }()
	require.Eventually(t, func() bool { return p.queuedBytes(ClientToServer) > 0 }, waitFor, tick,
		"the proxy holds the SET")
	require.False(t, mr.Exists("k"), "a held SET must not run")
	require.Empty(t, done, "SET must not return while held")

	p.Unpause(ClientToServer)
	require.NoError(t, recv(t, done))
	mr.CheckGet(t, "k", "v")
	require.Zero(t, p.queuedBytes(ClientToServer))
}

func TestPauseRepliesThenHeal(t *testing.T) {
	mr := miniredis.RunT(t)
	p := newProxy(t, mr.Addr())
	c, r := dial(t, p.Addr())

	p.Pause(ServerToClient)
	for i := range 3 {
		_, err := c.Write([]byte(command("RPUSH", "l", strconv.Itoa(i))))
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return p.queuedBytes(ServerToClient) == len(":1\r\n:2\r\n:3\r\n") },
		waitFor, tick, "the proxy holds all three replies")

	p.Heal()
	for i := range 3 {
		require.Equal(t, fmt.Sprintf(":%d\r\n", i+1), readLine(t, r), "held replies arrive in order")
	}
}

func TestDropReplies(t *testing.T) {
	ctx := context.Background()

	t.Run("raw", func(t *testing.T) {
		mr := miniredis.RunT(t)
		p := newProxy(t, mr.Addr())
		c, r := dial(t, p.Addr())

		p.DropReplies(2)
		_, err := c.Write([]byte(command("ECHO", "a") + command("ECHO", "b") + command("ECHO", "c")))
		require.NoError(t, err)
		require.Equal(t, "c", readBulk(t, r), "the first two replies are dropped")
		require.EqualValues(t, 2, p.Stats().DroppedReplies)

		_, err = c.Write([]byte(command("ECHO", "d")))
		require.NoError(t, err)
		require.Equal(t, "d", readBulk(t, r), "no drop is left")
	})

	t.Run("go-redis", func(t *testing.T) {
		mr := miniredis.RunT(t)
		p := newProxy(t, mr.Addr())
		c := newClient(t, p.Addr(), short)
		require.NoError(t, c.Ping(ctx).Err()) // connect (HELLO 3) first

		p.DropReplies(1)
		requireTimeout(t, c.Set(ctx, "k", "v", 0).Err())
		mr.CheckGet(t, "k", "v") // the request passed; only the reply vanished
		require.EqualValues(t, 1, p.Stats().DroppedReplies)

		got, err := c.Get(ctx, "k").Result()
		require.NoError(t, err, "the next command, on a fresh connection, works")
		require.Equal(t, "v", got)
		require.EqualValues(t, 2, p.Stats().Conns)
		require.EqualValues(t, 1, p.Stats().DroppedReplies)
	})

	t.Run("calls only", func(t *testing.T) {
		mr := miniredis.RunT(t)
		p := newProxy(t, mr.Addr())
		c := newClient(t, p.Addr(), short)
		sub := c.Subscribe(ctx, "ch")
		t.Cleanup(func() { _ = sub.Close() })
		_, err := sub.Receive(ctx) // the subscription's confirmation
		require.NoError(t, err)
		require.NoError(t, c.Ping(ctx).Err())

		p.DropCallReplies(1)
		require.NoError(t, newClient(t, mr.Addr(), short).Publish(ctx, "ch", "m").Err())
		rctx, cancel := context.WithTimeout(ctx, waitFor)
		defer cancel()
		msg, err := sub.ReceiveMessage(rctx)
		require.NoError(t, err, "a push is not a call's reply: it passes")
		require.Equal(t, "m", msg.Payload)
		requireTimeout(t, c.Set(ctx, "k", "v", 0).Err())
		mr.CheckGet(t, "k", "v")
		require.EqualValues(t, 1, p.Stats().DroppedReplies, "the SET's reply was dropped")
	})
}

func TestResetConns(t *testing.T) {
	mr := miniredis.RunT(t)
	p := newProxy(t, mr.Addr())
	ctx := context.Background()
	raw, r := dial(t, p.Addr())
	_, err := raw.Write([]byte(command("PING")))
	require.NoError(t, err)
	require.Equal(t, "+PONG\r\n", readLine(t, r))
	c := newClient(t, p.Addr(), waitFor)
	require.NoError(t, c.Ping(ctx).Err())
	require.EqualValues(t, 2, p.Stats().Open)

	p.ResetConns()
	_, err = r.ReadByte()
	require.ErrorIs(t, err, syscall.ECONNRESET, "the client side gets a RST")
	require.Eventually(t, func() bool { return p.Stats().Open == 0 && mr.CurrentConnectionCount() == 0 },
		waitFor, tick, "both sides of every connection are closed")

	// go-redis either fails the next command or notices the dead connection
	// in its pool; either way it must reconnect.
	if err := c.Ping(ctx).Err(); err != nil {
		require.NoError(t, c.Ping(ctx).Err(), "the command after the failed one reconnects")
	}
	require.EqualValues(t, 3, p.Stats().Conns, "go-redis reconnected")
}

func TestRefuse(t *testing.T) {
	mr := miniredis.RunT(t)
	p := newProxy(t, mr.Addr())
	ctx := context.Background()
	before := newClient(t, p.Addr(), waitFor)
	require.NoError(t, before.Ping(ctx).Err())

	p.Refuse(true)
	// The RST may reach the dialler before connect returns, or after.
	raw, err := net.DialTimeout("tcp", p.Addr(), waitFor)
	if err == nil {
		t.Cleanup(func() { _ = raw.Close() })
		require.NoError(t, raw.SetReadDeadline(time.Now().Add(waitFor)))
		_, err = raw.Read(make([]byte, 1))
	}
	require.ErrorIs(t, err, syscall.ECONNRESET, "a refused connection is reset")
	after := newClient(t, p.Addr(), waitFor)
	require.Error(t, after.Ping(ctx).Err())
	require.NoError(t, before.Ping(ctx).Err(), "open connections are untouched")
	require.EqualValues(t, 1, p.Stats().Open)

	p.Refuse(false)
	// A fresh client: when the reset reached after's dial (see above), its
	// pool of one keeps answering that dial error until a background redial
	// a second later (go-redis's lastDialError), whatever the proxy does.
	require.NoError(t, newClient(t, p.Addr(), waitFor).Ping(ctx).Err(), "new connections are served again")
	require.EqualValues(t, 2, p.Stats().Open)
}

func TestSetTarget(t *testing.T) {
	mr1, mr2 := miniredis.RunT(t), miniredis.RunT(t)
	p := newProxy(t, mr1.Addr())
	ctx := context.Background()
	old := newClient(t, p.Addr(), waitFor)
	require.NoError(t, old.Set(ctx, "a", "1", 0).Err())

	p.SetTarget(mr2.Addr())
	require.NoError(t, old.Set(ctx, "b", "2", 0).Err())
	require.NoError(t, newClient(t, p.Addr(), waitFor).Set(ctx, "c", "3", 0).Err())

	mr1.CheckGet(t, "a", "1")
	mr1.CheckGet(t, "b", "2") // the open connection keeps its server
	mr2.CheckGet(t, "c", "3")
	require.False(t, mr1.Exists("c"))
	require.False(t, mr2.Exists("b"))
}

func TestHeal(t *testing.T) {
	mr := miniredis.RunT(t)
	p := newProxy(t, mr.Addr())
	ctx := context.Background()

	p.Delay(Both, time.Hour, 0)
	p.Blackhole(Both)
	p.Pause(Both)
	p.DropReplies(5)
	p.Refuse(true)
	p.Heal()

	c := newClient(t, p.Addr(), waitFor)
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	got, err := c.Get(ctx, "k").Result()
	require.NoError(t, err)
	require.Equal(t, "v", got)
	require.Equal(t, Stats{Conns: 1, Open: 1}, p.Stats())
}

// TestClose closes a proxy whose connections are idle, paused and delayed:
// every connection must be closed and every goroutine gone.
func TestClose(t *testing.T) {
	mr := miniredis.RunT(t)
	baseline := runtime.NumGoroutine()
	p, err := New(mr.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() }) // if the test fails early

	idle, idleR := dial(t, p.Addr())
	_, err = idle.Write([]byte(command("PING")))
	require.NoError(t, err)
	require.Equal(t, "+PONG\r\n", readLine(t, idleR))

	p.Delay(ServerToClient, time.Hour, 0)
	delayed, delayedR := dial(t, p.Addr())
	_, err = delayed.Write([]byte(command("PING")))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return p.queuedBytes(ServerToClient) > 0 }, waitFor, tick)

	p.Pause(ClientToServer)
	paused, pausedR := dial(t, p.Addr())
	_, err = paused.Write([]byte(command("PING")))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return p.queuedBytes(ClientToServer) > 0 }, waitFor, tick)
	require.EqualValues(t, 3, p.Stats().Open)

	require.NoError(t, p.Close())
	require.Empty(t, leak.Wait(waitFor, leak.Proxy...), "goroutines outlived Close")
	require.Zero(t, p.Stats().Open)
	for _, r := range []*bufio.Reader{idleR, pausedR, delayedR} {
		_, err := r.ReadByte()
		require.Error(t, err, "Close closes the client side")
		requireNotTimeout(t, err)
	}
	// Not require.Eventually: it runs the condition on a goroutine of its own.
	for deadline := time.Now().Add(waitFor); runtime.NumGoroutine() > baseline && time.Now().Before(deadline); {
		<-time.After(tick) // polling interval of a deadline-bounded wait
	}
	require.LessOrEqual(t, runtime.NumGoroutine(), baseline, "goroutines (of the proxy or the server's connections) left")

	_, err = net.DialTimeout("tcp", p.Addr(), waitFor)
	require.Error(t, err, "Close stops accepting")
	require.NoError(t, p.Close(), "Close again")
}

// requireNotTimeout fails if err is a network timeout.
func requireNotTimeout(t *testing.T, err error) {
	t.Helper()
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "want a closed connection, got a timeout: %v", err)
}
