package redisleader

import (
	"bufio"
	"bytes"
	"context"
	"net"
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

// lateRequest holds back the first request, on any connection of a client,
// that contains marker, as a slow network path can: go-redis sees its write
// succeed, waits for the reply until its context ends and closes the
// connection; the request reaches Redis only once the test lets it go and
// go-redis has closed the connection (bytes in a socket's send buffer are
// still delivered after close), and Redis's first reply line to it is
// handed to the test.
type lateRequest struct {
	marker  []byte
	taken   atomic.Bool
	held    chan struct{} // closed when the request is held
	release chan struct{} // closed by let
	once    sync.Once
	reply   chan string // Redis's reply to the held request (or why none)
}

func newLateRequest(t *testing.T, marker string) *lateRequest {
	r := &lateRequest{marker: []byte(marker), held: make(chan struct{}),
		release: make(chan struct{}), reply: make(chan string, 1)}
	t.Cleanup(r.let)
	return r
}

// let sends the held request on its way.
func (r *lateRequest) let() { r.once.Do(func() { close(r.release) }) }

// dial is a redis.Options Dialer.
func (r *lateRequest) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &lateConn{Conn: c, r: r, closed: make(chan struct{})}, nil
}

// lateConn is a connection of a lateRequest's client.
type lateConn struct {
	net.Conn
	r       *lateRequest
	holding atomic.Bool // this connection holds the request: deliver closes it
	once    sync.Once
	closed  chan struct{} // closed by Close
}

func (c *lateConn) Write(p []byte) (int, error) {
	if bytes.Contains(p, c.r.marker) && c.r.taken.CompareAndSwap(false, true) {
		c.holding.Store(true)
		go c.deliver(bytes.Clone(p))
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *lateConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	if c.holding.Load() {
		return nil
	}
	return c.Conn.Close()
}

// deliver sends req once the test lets it go and go-redis has given the
// connection up, and reports Redis's reply.
func (c *lateConn) deliver(req []byte) {
	defer c.Conn.Close()
	close(c.r.held)
	<-c.r.release
	select {
	case <-c.closed:
	case <-time.After(5 * time.Second):
		c.r.reply <- "go-redis never closed the connection"
		return
	}
	_ = c.Conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Conn.Write(req); err != nil {
		c.r.reply <- "write: " + err.Error()
		return
	}
	line, err := bufio.NewReader(c.Conn).ReadString('\n')
	if err != nil {
		line = "read: " + err.Error()
	}
	c.r.reply <- line
}

// TestLateProclaimNeverOverwritesALaterOne (issue 27, item 9): a Proclaim
// sent at once (no batch) whose caller gave up while its request was on
// its way, then a Proclaim that succeeded: when the first request reaches
// Redis after the second, it finds a later value stored and writes
// nothing, so Redis, Leader and Lock.Value say the second value for the
// rest of the term. (Old code: the late request overwrote it, and Leader
// said "v1-late" while Lock.Value said "v2".)
func TestLateProclaimNeverOverwritesALaterOne(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		late := newLateRequest(t, "v1-late")
		c := redis.NewClient(&redis.Options{Addr: b.addr, ContextTimeoutEnabled: true, Dialer: late.dial})
		t.Cleanup(func() { _ = c.Close() })
		e := mustElection(t, newSession(t, c, WithTTL(10*time.Second)), "late-proclaim")
		ctx := context.Background()
		lead, err := e.Campaign(ctx, "v0")
		require.NoError(t, err)
		// The script is cached now, so the late EVALSHA runs when it lands.
		require.NoError(t, e.Proclaim(ctx, "v0-again"))

		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		require.Error(t, e.Proclaim(short, "v1-late"), "the Proclaim whose request is held")
		waitClosed(t, late.held, time.Second, "the request held")
		require.NoError(t, e.Proclaim(ctx, "v2"))
		assert.Equal(t, "v2", lead.Value())

		late.let()
		reply := recvWithin(t, late.reply, 10*time.Second, "Redis's reply to the late request")
		assert.Equal(t, ":2\r\n", reply, "the late request's reply: 2, a later Proclaim is stored")
		got, err := e.Leader(ctx)
		require.NoError(t, err)
		assert.Equal(t, "v2", got.Value, "the late Proclaim overwrote the later one's value")
		assert.Equal(t, lead.Fence(), got.Fence)
		assert.Equal(t, "v2", lead.Value())
		assert.True(t, lead.Held(), "leadership: %v", lead.Err())
	})
}

// seqRig runs the proclaim script for the name "seq" on miniredis, and
// reads what it publishes on the name's channel.
type seqRig struct {
	t  *testing.T
	m  *miniredis.Miniredis
	c  *redis.Client
	k  lease.Keys
	ps *redis.PubSub
}

func newSeqRig(t *testing.T) *seqRig {
	m, c := newMini(t)
	r := &seqRig{t: t, m: m, c: c, k: lease.NewKeys("seq")}
	r.ps = c.Subscribe(context.Background(), r.k.Channel)
	t.Cleanup(func() { _ = r.ps.Close() })
	_, err := r.ps.Receive(context.Background())
	require.NoError(t, err)
	return r
}

func (r *seqRig) proclaim(token string, seq int64, value string) (int64, error) {
	argv := []any{nil, nil, 2, r.k.Lock, r.k.Seq(), token, seq, value}
	return lease.ProclaimRun.Run(context.Background(), r.c, argv).Int64()
}

func (r *seqRig) get(key string) string {
	v, _ := r.m.Get(key)
	return v
}

// events returns what was published on the channel since the last call:
// up to a marker it publishes now (Redis delivers in order).
func (r *seqRig) events() (got []string) {
	r.t.Helper()
	ctx := context.Background()
	require.NoError(r.t, r.c.Publish(ctx, r.k.Channel, "marker").Err())
	for {
		msg, err := r.ps.ReceiveMessage(ctx)
		require.NoError(r.t, err)
		if msg.Payload == "marker" {
			return got
		}
		got = append(got, msg.Payload)
	}
}

// TestProclaimScriptSequence: the proclaim script stores a value only with
// a sequence number greater than the one its term stored last; a lower one
// (a late request) writes and publishes nothing and replies 2, the same one
// (a resent request) writes nothing and replies 1. The TTL stays.
func TestProclaimScriptSequence(t *testing.T) {
	r := newSeqRig(t)
	require.NoError(t, r.m.Set(r.k.Lock, "tok\n7\nv0"))
	r.m.SetTTL(r.k.Lock, time.Minute)
	steps := []struct {
		what         string
		seq          int64
		value        string
		reply        int64
		lock, seqKey string
		published    []string
	}{
		{"the first Proclaim", 2, "b", 1, "tok\n7\nb", "tok\n2", []string{"A"}},
		{"a late request", 1, "a", 2, "tok\n7\nb", "tok\n2", nil},
		{"a resent request", 2, "b", 1, "tok\n7\nb", "tok\n2", nil},
		{"the next Proclaim", 3, "c", 1, "tok\n7\nc", "tok\n3", []string{"A"}},
	}
	for _, st := range steps {
		got, err := r.proclaim("tok", st.seq, st.value)
		require.NoError(t, err, st.what)
		assert.Equal(t, st.reply, got, st.what)
		assert.Equal(t, st.lock, r.get(r.k.Lock), st.what)
		assert.Equal(t, st.seqKey, r.get(r.k.Seq()), st.what)
		assert.Equal(t, st.published, r.events(), st.what)
		assert.Equal(t, time.Minute, r.m.TTL(r.k.Lock), "%s: the TTL is kept", st.what)
		assert.Zero(t, r.m.TTL(r.k.Seq()), "%s: the seq key has no TTL", st.what)
	}
}

// TestProclaimScriptOtherTerms: another owner's Proclaim writes nothing, and
// a new term proclaims from 1 over the former term's greater sequence.
func TestProclaimScriptOtherTerms(t *testing.T) {
	r := newSeqRig(t)
	require.NoError(t, r.m.Set(r.k.Lock, "tok\n7\nv0"))
	require.NoError(t, r.m.Set(r.k.Seq(), "old\n9"))
	got, err := r.proclaim("other", 10, "x")
	require.NoError(t, err)
	assert.Zero(t, got)
	assert.Equal(t, "old\n9", r.get(r.k.Seq()), "another owner's Proclaim wrote the seq key")
	assert.Equal(t, "tok\n7\nv0", r.get(r.k.Lock))
	assert.Empty(t, r.events(), "another owner's Proclaim published")

	got, err = r.proclaim("tok", 1, "v1")
	require.NoError(t, err)
	assert.Equal(t, int64(1), got)
	assert.Equal(t, "tok\n7\nv1", r.get(r.k.Lock), "the former term's sequence held the new term back")
	assert.Equal(t, "tok\n1", r.get(r.k.Seq()))
}

// TestProclaimScriptForeignSeqKey: a seq key that someone else wrote is an
// error that leaves it and the value as they were, and publishes nothing.
func TestProclaimScriptForeignSeqKey(t *testing.T) {
	r := newSeqRig(t)
	require.NoError(t, r.m.Set(r.k.Lock, "tok\n7\nv0"))
	for _, foreign := range []string{"not a sequence", "tok\nx", "tok\n-1", "tok\n1.5", "tok\n",
		"garbage\n1e3", "x\n0x10", "x\n 7", "tok\n07"} { // the last four: read as numbers before
		require.NoError(t, r.m.Set(r.k.Seq(), foreign))
		_, err := r.proclaim("tok", 5, "v5")
		assert.ErrorContains(t, err, "does not hold a proclaim sequence", foreign)
		assert.Equal(t, foreign, r.get(r.k.Seq()))
		assert.Equal(t, "tok\n7\nv0", r.get(r.k.Lock), "a Proclaim over the seq key %q wrote the value", foreign)
		assert.Empty(t, r.events(), foreign)
	}
}

// TestProclaimSuperseded: a Proclaim that finds a later one of its term
// stored (here written behind the library's back) writes nothing and says
// so; the leadership and its Lock.Value stay as they were, and a new term
// proclaims above the former term's sequence.
func TestProclaimSuperseded(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		e := mustElection(t, newSession(t, b.client, WithTTL(10*time.Second)), "superseded")
		lead, err := e.Campaign(ctx, "v0")
		require.NoError(t, err)
		require.NoError(t, e.Proclaim(ctx, "v1"))
		seqKey := lease.NewKeys("superseded").Seq()
		b.set(seqKey, lead.lease.Token+"\n99")
		err = e.Proclaim(ctx, "v2")
		require.ErrorIs(t, err, lease.ErrSuperseded)
		assert.NotErrorIs(t, err, ErrNotLeader)
		assert.Equal(t, "v1", lead.Value())
		got, err := e.Leader(ctx)
		require.NoError(t, err)
		assert.Equal(t, "v1", got.Value)
		assert.True(t, lead.Held(), "leadership: %v", lead.Err())

		require.NoError(t, e.Resign(ctx))
		next, err := e.Campaign(ctx, "w0")
		require.NoError(t, err)
		require.NoError(t, e.Proclaim(ctx, "w1"))
		got, err = e.Leader(ctx)
		require.NoError(t, err)
		assert.Equal(t, Leader{Value: "w1", Fence: next.Fence(), TTL: got.TTL}, got)
		assert.Equal(t, next.lease.Token+"\n1", b.get(seqKey))
	})
}

// A Proclaim the script refuses before its writes (here a seq key someone
// else wrote) says what it refused, and not that the value may have
// changed: nothing was stored, and Lock.Value keeps the former one.
func TestProclaimRefusedStoresNothing(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		e := mustElection(t, newSession(t, b.client, fastOpts()...), "proclaim-refused")
		l, err := e.Campaign(ctx, "v0")
		require.NoError(t, err)
		seq := lease.NewKeys("proclaim-refused").Seq()
		b.set(seq, "not a sequence")
		err = e.Proclaim(ctx, "v1")
		assert.ErrorContains(t, err, "does not hold a proclaim sequence")
		assert.NotContains(t, err.Error(), "may be")
		assert.Equal(t, "v0", l.Value())
		assert.Equal(t, "not a sequence", b.get(seq))
		require.NoError(t, l.Release(ctx))
	})
}
