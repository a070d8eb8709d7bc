package redisleader

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader/internal/faultproxy"
	"github.com/redisleader/redisleader/internal/leak"
	"github.com/redisleader/redisleader/internal/redisserver"
	"github.com/redisleader/redisleader/internal/wire"
	"github.com/stretchr/testify/require"

	"github.com/redisleader/redisleader/internal/lease"
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
	drop     *atomic.Int32 // replies still to drop, shared by all connections
	dropping bool          // a reply was lost: so is the rest of this connection's, until its read deadline
}

// Read loses a reply as a network does: what the server sends after it on
// the connection is lost too (a pipeline's later replies, which may come
// in other reads), until the read deadline ends the connection.
func (c *dropConn) Read(p []byte) (int, error) {
	for {
		n, err := c.Conn.Read(p)
		if n > 0 && (c.dropping || c.drop.Load() > 0 && c.drop.Add(-1) >= 0) {
			c.dropping = true
			if err != nil {
				return 0, err
			}
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

// serverChecked returns a channel closed once a session on c has run its
// background check of the server's settings (the pipeline that reads INFO
// replication), whatever the server answered.
func serverChecked(c *redis.Client) <-chan struct{} {
	done := make(chan struct{})
	var once sync.Once
	c.AddHook(testHook{pipeline: func(ctx context.Context, cmds []redis.Cmder, send sendFunc) error {
		err := send(ctx, cmds)
		for _, cmd := range cmds {
			if cmd.Name() == "info" {
				once.Do(func() { close(done) })
			}
		}
		return err
	}})
	return done
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
	for l := range s.reg.locks {
		held = append(held, l)
	}
	s.mu.Unlock()
	for _, l := range held {
		l.end(errCrashed)
	}
	s.hb.cancel()
	<-s.hb.done
	s.work.Wait()
	s.wire.StopWatcher()
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

// Options and waiting.

// fastOpts are the timings most tests use: a short lease renewed often.
func fastOpts(extra ...Option) []Option {
	return append([]Option{
		WithTTL(600 * time.Millisecond),
		WithRenewInterval(100 * time.Millisecond),
		WithCallTimeout(100 * time.Millisecond),
		WithRetryInterval(20 * time.Millisecond),
	}, extra...)
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

// queued returns a session option that reports, on the returned channel,
// every acquire attempt that found the name taken (the waiter is queued
// after it in fair mode).
func queued() (Option, <-chan string) {
	ch := make(chan string, 64)
	return withAttemptHook(func(name string, err error) {
		if errors.Is(err, ErrLocked) {
			select {
			case ch <- name:
			default:
			}
		}
	}), ch
}

// Elections, Observe and Redlock.

func mustElection(t testing.TB, s *Session, name string) *Election {
	t.Helper()
	e, err := s.Election(name)
	require.NoError(t, err)
	return e
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

func fenceList(ls []Leader) []int64 {
	out := make([]int64, len(ls))
	for i, l := range ls {
		out[i] = l.Fence
	}
	return out
}

// redlockNodes starts n miniredis nodes and a client for each.
func redlockNodes(t *testing.T, n int) ([]*miniredis.Miniredis, []Client) {
	var ms []*miniredis.Miniredis
	var cs []Client
	for range n {
		m, c := newMini(t)
		ms = append(ms, m)
		cs = append(cs, c)
	}
	return ms, cs
}

func newRedlock(t *testing.T, cs []Client, opts ...Option) *Session {
	t.Helper()
	s, err := NewRedlockSession(cs, append(fastOpts(), opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// Servers.

// hungServer listens on loopback and never answers a command: a Redis that
// is stuck (or a proxy in front of one). With handshake, it answers the
// connection handshake first (HELLO, refused, so go-redis falls back to
// RESP2); without, it never writes a byte. It returns the address and a
// channel that gets a value for each EVALSHA or EVAL it has read, i.e. once
// a script call is on the wire; everything is closed when the test ends.
func hungServer(t testing.TB, handshake bool) (addr string, received <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ch := make(chan struct{}, 16)
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wire.Go(&wg, func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wire.Go(&wg, func() {
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					switch strings.ToLower(strings.TrimSpace(line)) {
					case "hello":
						if handshake {
							_, _ = c.Write([]byte("-ERR unknown command 'hello'\r\n"))
						}
					case "evalsha", "eval":
						select {
						case ch <- struct{}{}:
						default:
						}
					}
				}
			})
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
	return ln.Addr().String(), ch
}

// replicated starts a primary and a replica that replicates through a fault
// proxy, so a test can cut replication.
func replicated(t *testing.T) (primary *redisserver.Server, replica *redisserver.Server, link *faultproxy.Proxy) {
	primary = redisserver.Start(t)
	link, err := faultproxy.New(primary.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = link.Close() })
	host, port, _ := strings.Cut(link.Addr(), ":")
	replica = redisserver.Start(t, redisserver.Options{Args: []string{"--replicaof", host, port}})
	// Wait until the replica acknowledges a write. WAIT counts a replica for
	// a client that wrote nothing as soon as its full sync ends, but after a
	// diskless sync Redis 7.0 starts the replica's command stream only with
	// its first ACK, up to a second later: until then a write's WAIT times
	// out with 0 (WithReplicaAcks' first acquire did, one run in ten).
	c := primary.Client(t)
	ctx := context.Background()
	require.Eventually(t, func() bool {
		if err := c.Set(ctx, "replicated-probe", "1", time.Minute).Err(); err != nil {
			return false
		}
		n, err := c.Wait(ctx, 1, 100*time.Millisecond).Result()
		return err == nil && n == 1
	}, 10*time.Second, 10*time.Millisecond, "the replica never acknowledged a write")
	require.NoError(t, c.Del(ctx, "replicated-probe").Err())
	return primary, replica, link
}

// clusterClient returns a ClusterClient for c with the settings the
// library wants.
func clusterClient(t *testing.T, c *redisserver.Cluster) *redis.ClusterClient {
	return c.Client(t, func(o *redis.ClusterOptions) { o.ContextTimeoutEnabled = true })
}

// keyspace reports the writes Redis notifies (notify-keyspace-events KEA)
// to keys with a prefix.
type keyspace struct {
	t      *testing.T
	c      *redis.Client
	msgs   <-chan *redis.Message
	marker atomic.Int64
}

// watchKeyspace subscribes to every keyspace notification of the server c
// talks to, which must run with notify-keyspace-events KEA.
func watchKeyspace(t *testing.T, c *redis.Client) *keyspace {
	t.Helper()
	ctx := context.Background()
	ps := c.PSubscribe(ctx, "__keyspace@0__:*")
	t.Cleanup(func() { _ = ps.Close() })
	_, err := ps.Receive(ctx) // the subscription's confirmation
	require.NoError(t, err)
	return &keyspace{t: t, c: c, msgs: ps.Channel()}
}

// writes returns the notifications, "key event", for keys starting with
// prefix since the last call. It publishes a marker on a keyspace channel
// (writing nothing) and reads up to it: Redis delivers notifications and
// messages in the order of the commands, so every earlier one has arrived
// by then.
func (k *keyspace) writes(prefix string) []string {
	k.t.Helper()
	marker := fmt.Sprintf("marker:%d", k.marker.Add(1))
	require.NoError(k.t, k.c.Publish(context.Background(), "__keyspace@0__:"+marker, "marker").Err())
	var got []string
	timeout := time.After(5 * time.Second)
	for {
		select {
		case m := <-k.msgs:
			key := strings.TrimPrefix(m.Channel, "__keyspace@0__:")
			if key == marker {
				return got
			}
			if strings.HasPrefix(key, prefix) {
				got = append(got, key+" "+m.Payload)
			}
		case <-timeout:
			k.t.Fatalf("no notification for the marker key %s within 5s", marker)
		}
	}
}

// notifying starts a redis-server that publishes keyspace notifications.
func notifying(t *testing.T) (*redis.Client, *keyspace) {
	srv := redisserver.Start(t, redisserver.Options{Args: []string{"--notify-keyspace-events", "KEA"}})
	c := srv.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	return c, watchKeyspace(t, c)
}

// The wire: calls queued for a batch, and calls held on the wire.

// maxOnWire is how many calls or batches of one session may be on the
// wire at once (wire.MaxOnWire).
const maxOnWire = wire.MaxOnWire

// queued reports how many calls of the session's own client wait for a
// batch.
func (s *Session) queued() int { return s.wire.Combiner().Queued() }

// wireGate holds script calls sent on their own (every one while armed) on
// the wire until released, so that calls arriving meanwhile queue up, and
// records the keys of every pipeline's acquires; holdBatch, when set, also
// holds the next pipeline of scripts after recording it.
type wireGate struct {
	mu        sync.Mutex
	armed     bool
	onWire    int           // single calls held
	release   chan struct{} // closed: let the single calls through
	holdBatch chan struct{} // non-nil: the next pipeline waits for it to close
	batchSent chan struct{} // closed when a held pipeline was recorded
	batches   [][]string    // each pipeline's first keys
}

func newWireGate() *wireGate {
	return &wireGate{armed: true, release: make(chan struct{}), batchSent: make(chan struct{})}
}

// hook returns the hook that applies g.
func (g *wireGate) hook() testHook {
	return testHook{single: g.single, pipeline: g.pipeline}
}

func (g *wireGate) single(ctx context.Context, cmds []redis.Cmder, send sendFunc) error {
	if isScript(cmds[0]) {
		g.mu.Lock()
		armed := g.armed
		if armed {
			g.onWire++
		}
		g.mu.Unlock()
		if armed {
			<-g.release
		}
	}
	return send(ctx, cmds)
}

func (g *wireGate) pipeline(ctx context.Context, cmds []redis.Cmder, send sendFunc) error {
	var keys []string
	for _, cmd := range cmds {
		if isScript(cmd) && cmd.Args()[2] == 2 { // acquires only
			keys = append(keys, fmt.Sprint(cmd.Args()[3]))
		}
	}
	g.mu.Lock()
	if len(keys) > 0 {
		g.batches = append(g.batches, keys)
	}
	hold := g.holdBatch
	if len(keys) > 0 {
		g.holdBatch = nil
	}
	g.mu.Unlock()
	if hold != nil && len(keys) > 0 {
		close(g.batchSent)
		<-hold
	}
	return send(ctx, cmds)
}

func isScript(cmd redis.Cmder) bool {
	name := cmd.Name()
	return (name == "evalsha" || name == "eval") && len(cmd.Args()) > 3
}

// heldOnWire waits until n single calls are held.
func (g *wireGate) heldOnWire(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		g.mu.Lock()
		got := g.onWire
		g.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls on the wire, want %d", got, n)
		}
		runtimeYield()
	}
}

// sendHeld opens the gate and holds the next batch once it was sent; the
// batch goes on when the returned channel is closed.
func (g *wireGate) sendHeld(t *testing.T) chan struct{} {
	t.Helper()
	hold := g.holdNext()
	g.open()
	waitClosed(t, g.batchSent, 5*time.Second, "the batch was sent")
	return hold
}

// holdNext makes the next batch wait, once sent, until the returned channel
// is closed.
func (g *wireGate) holdNext() chan struct{} {
	hold := make(chan struct{})
	g.mu.Lock()
	g.holdBatch = hold
	g.mu.Unlock()
	return hold
}

// open disarms the gate and lets the held calls through.
func (g *wireGate) open() {
	g.mu.Lock()
	g.armed = false
	g.mu.Unlock()
	close(g.release)
}

func (g *wireGate) recorded() [][]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.batches)
}

// waitQueued waits until n calls of s wait for a batch.
func waitQueued(t *testing.T, s *Session, n int) {
	t.Helper()
	waitQueuedOn(t, s.wire.Combiner(), n)
}

// waitQueuedOn waits until n calls wait for a batch in c.
func waitQueuedOn(t *testing.T, c *wire.Combiner, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for c.Queued() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued, want %d", c.Queued(), n)
		}
		runtimeYield()
	}
}

// fillWire starts maxOnWire TryLocks that the gate holds on the wire, so
// that the session's next calls queue; their results arrive on the
// returned channel.
func fillWire(t *testing.T, s *Session, g *wireGate) <-chan error {
	t.Helper()
	errc := make(chan error, maxOnWire)
	for i := range maxOnWire {
		go func() {
			l, err := s.TryLock(context.Background(), fmt.Sprintf("on-wire-%d", i))
			if err == nil {
				err = l.Release(context.Background())
			}
			errc <- err
		}()
	}
	g.heldOnWire(t, maxOnWire)
	return errc
}

type tryResult struct {
	l   *Lock
	err error
}

// tryAll starts a TryLock for each name, each with its own context.
func tryAll(ctxs []context.Context, s *Session, names []string) []chan tryResult {
	out := make([]chan tryResult, len(names))
	for i, name := range names {
		out[i] = make(chan tryResult, 1)
		go func() {
			l, err := s.TryLock(ctxs[i], name)
			out[i] <- tryResult{l, err}
		}()
	}
	return out
}

func background(n int) []context.Context {
	ctxs := make([]context.Context, n)
	for i := range ctxs {
		ctxs[i] = context.Background()
	}
	return ctxs
}

// closeStillWaiting starts s.Close and checks that it has not returned
// 200ms later (what names what it must wait for); Close's result arrives on
// the returned channel.
func closeStillWaiting(t *testing.T, s *Session, what string) <-chan error {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- s.Close(context.Background()) }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) %s", err, what)
	case <-time.After(200 * time.Millisecond): // a negative check: Close must still be waiting
	}
	return closed
}

// fullWire returns a session on b (call timeout 2s) with a holdHook, the
// locks of names, held by it, its wire filled by two calls held there, and
// the result of a Leader read of names[0] queued behind them; freeWire lets
// the two through and waits for them to return.
func fullWire(t *testing.T, b *backend, names ...string) (s *Session, h *holdHook, locks []*Lock, read <-chan error, freeWire func()) {
	t.Helper()
	s, h = holdSession(t, b)
	for _, name := range names {
		l, err := s.TryLock(context.Background(), name)
		require.NoError(t, err)
		locks = append(locks, l)
	}
	slots, wired := holdWire(t, s, h, names[0])
	free := freeing(t, slots[:]...)
	read = leaderAll(t, s, names[0])[0]
	waitQueued(t, s, 1)
	return s, h, locks, read, func() {
		free()
		for range maxOnWire {
			require.NoError(t, recvWithin(t, wired, 5*time.Second, "a call held on the wire"))
		}
	}
}

// holdSession returns a session on b (call timeout 2s) whose client has a
// holdHook.
func holdSession(t *testing.T, b *backend) (*Session, *holdHook) {
	h := &holdHook{}
	b.client.AddHook(h.hook())
	return newSession(t, b.client, WithCallTimeout(2*time.Second)), h
}

// leaderAll starts a Leader read of each name's election on s.
func leaderAll(t *testing.T, s *Session, names ...string) []chan error {
	t.Helper()
	out := make([]chan error, len(names))
	for i, name := range names {
		e, err := s.Election(name)
		require.NoError(t, err)
		out[i] = make(chan error, 1)
		go func() {
			_, err := e.Leader(context.Background())
			out[i] <- err
		}()
	}
	return out
}

// sentTogether asserts that one pipeline held the names' acquires.
func sentTogether(t *testing.T, g *wireGate, names ...string) {
	t.Helper()
	want := prefixed(names...)
	for _, batch := range g.recorded() {
		if !slices.ContainsFunc(want, func(k string) bool { return !slices.Contains(batch, k) }) {
			return
		}
	}
	t.Errorf("no pipeline held all of %v; pipelines: %v", want, g.recorded())
}

// holdRule holds the commands (single or pipelined) that carry an argument
// equal to match, until release is closed; reached is closed at the first.
// With once, only the first matching command or pipeline is held.
type holdRule struct {
	match   string
	once    bool
	reached chan struct{}
	release chan struct{}
	hits    int
}

// holdHook applies holdRules to every command the client sends.
type holdHook struct {
	mu    sync.Mutex
	rules []*holdRule
	// panicOn: a script call or pipeline carrying one of these arguments
	// panics in the hook (a user hook that panics, recovered by the caller).
	panicOn map[string]bool
}

// panicking makes h panic on any call or pipeline carrying one of args (with
// none, on nothing).
func (h *holdHook) panicking(args ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.panicOn = nil
	for _, a := range args {
		if h.panicOn == nil {
			h.panicOn = map[string]bool{}
		}
		h.panicOn[a] = true
	}
}

// waitFreed waits up to 10s for get(key) to return "" (what says what
// stayed otherwise).
func waitFreed(t *testing.T, get func(key string) string, key, what string) {
	t.Helper()
	start := time.Now()
	for get(key) != "" {
		require.Less(t, time.Since(start), 10*time.Second, what)
		runtimeYield()
	}
}

// boom panics if a command of cmds carries an argument in h.panicOn.
func (h *holdHook) boom(cmds ...redis.Cmder) {
	h.mu.Lock()
	boom := false
	for _, cmd := range cmds {
		for match := range h.panicOn {
			boom = boom || carries(cmd, match)
		}
	}
	h.mu.Unlock()
	if boom {
		panic("user hook panics (test)")
	}
}

func (h *holdHook) rule(match string, once bool) *holdRule {
	r := &holdRule{match: match, once: once, reached: make(chan struct{}), release: make(chan struct{})}
	h.mu.Lock()
	h.rules = append(h.rules, r)
	h.mu.Unlock()
	return r
}

// holding returns the rule that applies to cmds, if any, counting the hit.
func (h *holdHook) holding(cmds ...redis.Cmder) *holdRule {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.rules {
		if r.once && r.hits > 0 {
			continue
		}
		for _, cmd := range cmds {
			if carries(cmd, r.match) {
				r.hits++
				if r.hits == 1 {
					close(r.reached)
				}
				return r
			}
		}
	}
	return nil
}

// hook returns the hook that applies h: it panics (panicking) on script
// calls sent alone and on any pipeline, and holds (rule) both.
func (h *holdHook) hook() testHook {
	hold := func(pipelined bool) hookFunc {
		return func(ctx context.Context, cmds []redis.Cmder, send sendFunc) error {
			if pipelined || isScript(cmds[0]) {
				h.boom(cmds...)
			}
			if r := h.holding(cmds...); r != nil {
				<-r.release
			}
			return send(ctx, cmds)
		}
	}
	return testHook{single: hold(false), pipeline: hold(true)}
}

// holdWire starts a TryLock for each of two names whose commands h holds on
// the wire, filling the session's maxOnWire slots; it returns their rules
// and a channel that gets each TryLock's result (released when the test
// ends).
func holdWire(t *testing.T, s *Session, h *holdHook, prefix string) ([maxOnWire]*holdRule, <-chan error) {
	t.Helper()
	var rules [maxOnWire]*holdRule
	errc := make(chan error, maxOnWire)
	for i := range maxOnWire {
		name := fmt.Sprintf("%s-wire-%d", prefix, i)
		rules[i] = h.rule(lease.NewKeys(name).Lock, true)
		go func() {
			_, err := s.TryLock(context.Background(), name)
			errc <- err // Close releases it
		}()
		waitClosed(t, rules[i].reached, 5*time.Second, name+" on the wire")
	}
	return rules, errc
}

// freeing returns a function that lets the calls rules hold through, once;
// it also runs when the test ends, before the session's Close (which waits
// for the wire).
func freeing(t *testing.T, rules ...*holdRule) func() {
	var once sync.Once
	free := func() {
		once.Do(func() {
			for _, r := range rules {
				close(r.release)
			}
		})
	}
	t.Cleanup(free)
	return free
}

// onWire reads the combiner's slot count.
func (s *Session) onWireNow() int {
	onWire, _ := s.wire.Combiner().OnWire()
	return onWire
}

// Hooks.

// countingHook counts the commands a client sends (with scriptsOnly, its
// script calls).
type countingHook struct {
	n           atomic.Int64
	scriptsOnly bool
	match       string // if set, only commands with an argument equal to it count
}

func (h *countingHook) count(cmds ...redis.Cmder) {
	for _, cmd := range cmds {
		if (!h.scriptsOnly || isScript(cmd)) && (h.match == "" || carries(cmd, h.match)) {
			h.n.Add(1)
		}
	}
}

// hook returns the hook that counts for h.
func (h *countingHook) hook() testHook { return beforeHook(h.count) }

// testHook is a client hook made of functions, so that a test writes only
// what its hook does: single handles each command sent alone, pipeline each
// pipeline; a nil one lets its calls through untouched.
type testHook struct{ single, pipeline hookFunc }

// hookFunc handles one call: cmds are the command sent alone, or the
// pipeline's commands; send passes commands on towards Redis (for a command
// sent alone, one).
type hookFunc func(ctx context.Context, cmds []redis.Cmder, send sendFunc) error

type sendFunc func(ctx context.Context, cmds []redis.Cmder) error

func (h testHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h testHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	if h.single == nil {
		return next
	}
	return func(ctx context.Context, cmd redis.Cmder) error {
		return h.single(ctx, []redis.Cmder{cmd}, func(ctx context.Context, cmds []redis.Cmder) error {
			return next(ctx, cmds[0])
		})
	}
}

func (h testHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	if h.pipeline == nil {
		return next
	}
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return h.pipeline(ctx, cmds, sendFunc(next))
	}
}

// eachCall is a hook that handles commands sent alone and pipelines alike,
// with f.
func eachCall(f hookFunc) testHook { return testHook{single: f, pipeline: f} }

// beforeHook is a hook that calls f with the commands of each call, single
// or pipelined, before sending them.
func beforeHook(f func(cmds ...redis.Cmder)) testHook {
	return eachCall(func(ctx context.Context, cmds []redis.Cmder, send sendFunc) error {
		f(cmds...)
		return send(ctx, cmds)
	})
}

// cmdHook is a hook that calls f with each command before it is sent,
// single or pipelined; an error f returns fails the command (in a pipeline,
// the whole pipeline) without sending it.
func cmdHook(f func(cmd redis.Cmder) error) testHook {
	return eachCall(func(ctx context.Context, cmds []redis.Cmder, send sendFunc) error {
		for _, cmd := range cmds {
			if err := f(cmd); err != nil {
				for _, c := range cmds {
					c.SetErr(err)
				}
				return err
			}
		}
		return send(ctx, cmds)
	})
}

// isCall reports whether cmd runs sc (as EVALSHA or EVAL), or is its
// native form (isNativeOf).
func isCall(cmd redis.Cmder, sc *wire.Script) bool {
	args := cmd.Args()
	if len(args) < 2 {
		return false
	}
	switch cmd.Name() {
	case "evalsha":
		return args[1] == sc.SHA()
	case "eval":
		return args[1] == sc.Src()
	}
	return isNativeOf(cmd, sc.SHA())
}
