package redisleader

import (
	"context"
	"errors"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader/internal/leak"
	"github.com/redisleader/redisleader/internal/redisserver"
)

// TestMain fails the run if any goroutine of this package is still running
// after all tests: every test closes its sessions, and Close must leave none.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := waitNoLeaks(5 * time.Second); leaked != "" {
			println("goroutines of redisleader outlived the tests:\n" + leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// waitNoLeaks gives the package's goroutines up to d to return and reports
// those still running then.
func waitNoLeaks(d time.Duration) string { return leak.Wait(d, leak.Library...) }

// checkNoLeaks fails t if goroutines of this package are still running.
func checkNoLeaks(t testing.TB) {
	t.Helper()
	if g := waitNoLeaks(2 * time.Second); g != "" {
		t.Fatalf("goroutines outlived Close:\n%s", g)
	}
}

// newMini starts a miniredis and a client for it.
func newMini(t testing.TB) (*miniredis.Miniredis, *redis.Client) {
	t.Helper()
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return m, c
}

// newSession creates a session that is closed when the test ends.
func newSession(t testing.TB, c Client, opts ...Option) *Session {
	t.Helper()
	s, err := NewSession(c, opts...)
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// backend is a Redis for a test: miniredis or a private redis-server.
type backend struct {
	name   string
	addr   string
	client redis.UniversalClient
	// get reads a key directly ("" when missing).
	get func(key string) string
	// del and set steal the key behind the library's back.
	del func(key string)
	set func(key, value string)
	// expire makes a key expire now on the server.
	expire func(key string)
}

// forBackends runs f against miniredis and against a real redis-server (which
// skips locally, and fails under CI=true, when redis-server is missing).
func forBackends(t *testing.T, f func(t *testing.T, b *backend)) {
	t.Run("miniredis", func(t *testing.T) {
		m, c := newMini(t)
		f(t, &backend{
			name: "miniredis", addr: m.Addr(), client: c,
			get:    func(k string) string { v, _ := m.Get(k); return v },
			del:    func(k string) { m.Del(k) },
			set:    func(k, v string) { _ = m.Set(k, v) },
			expire: func(k string) { m.FastForward(m.TTL(k)) },
		})
	})
	t.Run("redis-server", func(t *testing.T) {
		srv := redisserver.Start(t)
		c := srv.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
		ctx := context.Background()
		f(t, &backend{
			name: "redis-server", addr: srv.Addr(), client: c,
			get:    func(k string) string { v, _ := c.Get(ctx, k).Result(); return v },
			del:    func(k string) { c.Del(ctx, k) },
			set:    func(k, v string) { c.Set(ctx, k, v, 0) },
			expire: func(k string) { c.PExpireAt(ctx, k, time.Unix(1, 0)) },
		})
	})
}

// rounds returns a session option that reports every renewal round, and the
// channel the reports arrive on (most recent wins; never blocks the session).
func rounds() (Option, <-chan bool) {
	ch := make(chan bool, 1)
	return withRoundHook(func(_ int, failed bool) {
		select {
		case ch <- failed:
		default:
		}
	}), ch
}

// waitRound waits for a renewal round to finish and returns whether it failed.
func waitRound(t testing.TB, ch <-chan bool, within time.Duration) bool {
	t.Helper()
	select {
	case failed := <-ch:
		return failed
	case <-time.After(within):
		t.Fatalf("no renewal round within %v", within)
		return false
	}
}

// campaign runs e.Campaign(ctx, value) on its own goroutine and delivers the
// leadership (nil after an error, which fails t) on the returned channel.
func campaign(t testing.TB, ctx context.Context, e *Election, value string) <-chan *Lock {
	got := make(chan *Lock, 1)
	go func() {
		l, err := e.Campaign(ctx, value)
		if err != nil {
			t.Errorf("Campaign(%q): %v", value, err)
		}
		got <- l
	}()
	return got
}

// waitClosed waits for ch to be closed and returns how long it took.
func waitClosed(t testing.TB, ch <-chan struct{}, within time.Duration, what string) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case <-ch:
		return time.Since(start)
	case <-time.After(within):
		t.Fatalf("%s: not closed within %v", what, within)
		return 0
	}
}

// dropConn wraps a connection so the test can lose exactly the next reply:
// the bytes of the reply are read and thrown away, so the client waits for its
// read deadline as it would for a reply lost in the network.
type dropConn struct {
	net.Conn
	drop *atomic.Int32 // replies still to drop, shared by all connections
}

func (c *dropConn) Read(p []byte) (int, error) {
	for {
		n, err := c.Conn.Read(p)
		if n > 0 && c.drop.Load() > 0 && c.drop.Add(-1) >= 0 {
			continue // reply lost; keep reading until the deadline
		}
		return n, err
	}
}

// dropClient returns a client whose next `drop` replies (counter shared by
// all its connections) are lost on the way back.
func dropClient(t testing.TB, addr string, drop *atomic.Int32, configure func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{
		Addr:        addr,
		ReadTimeout: 150 * time.Millisecond,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &dropConn{Conn: c, drop: drop}, nil
		},
	}
	if configure != nil {
		configure(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

var errCrashed = errors.New("crashed (test)")

// crash stops a session as if its process had died: the heartbeat, pub/sub
// and observers stop and its locks end locally with errCrashed, but nothing
// is released in Redis, so the keys stay until their TTL runs out.
func crash(s *Session) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = errCrashed
	close(s.done)
	var held []*Lock
	for l := range s.locks {
		held = append(held, l)
	}
	s.mu.Unlock()
	for _, l := range held {
		l.end(errCrashed)
	}
	s.cancel()
	<-s.hbDone
	s.work.Wait()
	s.watch.close()
	close(s.closed)
}

// runtimeYield lets other goroutines run while a test polls, with a
// deadline, for Redis state that it cannot be told about.
func runtimeYield() { <-time.After(time.Millisecond) }

// lockAndRelease runs s.Lock(ctx, name) on its own goroutine and releases
// the lock at once; the returned channel delivers the first error, or nil.
func lockAndRelease(ctx context.Context, s *Session, name string) <-chan error {
	done := make(chan error, 1)
	go func() {
		l, err := s.Lock(ctx, name)
		if err == nil {
			err = l.Release(ctx)
		}
		done <- err
	}()
	return done
}

// isCall reports whether cmd runs sc (as EVALSHA or EVAL).
func isCall(cmd redis.Cmder, sc *script) bool {
	args := cmd.Args()
	if len(args) < 2 {
		return false
	}
	switch cmd.Name() {
	case "evalsha":
		return args[1] == sc.sha
	case "eval":
		return args[1] == sc.src
	}
	return false
}

// cmdHook is a client hook that calls itself with each command before it
// is sent, single or pipelined; an error it returns fails the command (in a
// pipeline, the whole pipeline) without sending it.
type cmdHook func(cmd redis.Cmder) error

func (f cmdHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (f cmdHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := f(cmd); err != nil {
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}
func (f cmdHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if err := f(cmd); err != nil {
				for _, c := range cmds {
					c.SetErr(err)
				}
				return err
			}
		}
		return next(ctx, cmds)
	}
}
