package redisleader

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader/internal/faultproxy"
	"github.com/redisleader/redisleader/internal/lease"
	"github.com/redisleader/redisleader/internal/redisserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests below pin Election.RequestTransfer, TransferRequested and Run's
// honouring of requests (request.go); the CLI's transfer and run use them
// (cmd/redisleader/transfer*_test.go, with real processes).

// requestHeld is what b holds at the request key of name ("": nothing).
func requestHeld(b *backend, name string) string { return b.get(lease.RequestKey(name)) }

// A Run leader takes a request addressed to its term: onElected's context
// ends with a TransferRequest, Run transfers once onElected has returned,
// and RequestTransfer, from another session, returns once the candidate
// leads. The request is gone.
func TestRequestTransferToCandidate(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		e := mustElection(t, newSession(t, b.client, fastOpts()...), "req")
		causes := make(chan error, 4)
		ran := make(chan error, 1)
		go func() {
			ran <- e.Run(ctx, "a", func(ctx context.Context, _ *Lock) error {
				<-ctx.Done()
				causes <- context.Cause(ctx)
				return nil
			})
		}()
		o := observe(ctx, e)
		o.waitFor(t, "a leads", func(l Leader) bool { return l.Value == "a" })
		got := candidates(t, ctx, b, "req", false, "b")["b"]
		enlistAll(t, ctx, b, "req", false, map[string]<-chan *Lock{"b": got})

		asker := mustElection(t, newSession(t, b.client, fastOpts()...), "req")
		l, err := asker.RequestTransfer(ctx, "b")
		require.NoError(t, err)
		assert.Equal(t, "b", l.Value)
		var req *TransferRequest
		require.ErrorAs(t, recvWithin(t, causes, time.Second, "a's term to end"), &req)
		assert.Equal(t, "b", req.To)
		lb := recvWithin(t, got, time.Second, "b leads")
		require.NotNil(t, lb)
		assert.Equal(t, l.Fence, lb.Fence())
		assert.Empty(t, requestHeld(b, "req"), "the request outlived its transfer")
		for _, x := range o.snapshot() {
			assert.Contains(t, []string{"a", "b", ""}, x.Value, "only a, the vacancy and b: %v", o.snapshot())
		}
		cancel()
		<-ran
	})
}

// A Campaign leader takes requests with TransferRequested, and Transfers.
// Requests for its own value are taken and dropped (it leads already:
// RequestTransfer returns at once without writing).
func TestTransferRequestedByCampaign(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := t.Context()
		e := mustElection(t, newSession(t, b.client, fastOpts()...), "req")
		lead, err := e.Campaign(ctx, "a")
		require.NoError(t, err)
		got := candidates(t, ctx, b, "req", false, "b")["b"]
		asker := mustElection(t, newSession(t, b.client, fastOpts()...), "req")
		l, err := asker.RequestTransfer(ctx, "a")
		require.NoError(t, err)
		assert.Equal(t, Leader{Value: "a", Fence: lead.Fence()}, Leader{Value: l.Value, Fence: l.Fence})
		assert.Empty(t, requestHeld(b, "req"))

		asked := make(chan error, 1)
		go func() { _, err := asker.RequestTransfer(ctx, "b"); asked <- err }()
		to, err := e.TransferRequested(ctx, lead)
		require.NoError(t, err)
		require.Equal(t, "b", to)
		assert.True(t, lead.Held(), "taking a request ends nothing")
		require.NoError(t, e.Transfer(ctx, to))
		require.NoError(t, recvWithin(t, asked, 2*time.Second, "RequestTransfer"))
		require.NotNil(t, recvWithin(t, got, time.Second, "b leads"))

		_, err = e.TransferRequested(ctx, lead)
		assert.ErrorIs(t, err, ErrNotLeader, "a leadership that ended takes no request")
		assert.ErrorIs(t, err, ErrReleased)
	})
}

// Bad input and nobody leading: a clear error, nothing written.
func TestRequestTransferRefused(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := t.Context()
		e := mustElection(t, newSession(t, b.client, fastOpts()...), "req")
		for _, to := range []string{"", strings.Repeat("v", maxValueLen+1)} {
			_, err := e.RequestTransfer(ctx, to)
			assert.ErrorIs(t, err, ErrInvalid, "%.10q", to)
		}
		_, err := e.RequestTransfer(ctx, "b")
		assert.ErrorIs(t, err, ErrNoLeader)
		assert.Empty(t, requestHeld(b, "req"))

		lead, err := e.Campaign(ctx, "a")
		require.NoError(t, err)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err = e.RequestTransfer(cctx, "b")
		assert.ErrorIs(t, err, ErrNotTaken, "ctx ended first")
		assert.ErrorIs(t, err, context.Canceled)
		assert.Empty(t, requestHeld(b, "req"))
		other := mustElection(t, newSession(t, b.client, fastOpts()...), "other")
		_, err = other.TransferRequested(ctx, lead)
		assert.ErrorIs(t, err, ErrInvalid, "a leadership of another election")
	})
	_, cs := redlockNodes(t, 3)
	e := mustElection(t, newRedlock(t, cs), "req")
	_, err := e.RequestTransfer(t.Context(), "b")
	assert.ErrorIs(t, err, ErrInvalid)
}

// A leader that takes no requests: RequestTransfer waits until ctx ends,
// and withdraws its request (ErrNotTaken). Meanwhile the request lives one
// TTL of the asker's session, renewed.
func TestRequestTransferWithdrawnWhenCtxEnds(t *testing.T) {
	onRedisServer(t, func(t *testing.T, b *backend) {
		e := mustElection(t, newSession(t, b.client, fastOpts()...), "req")
		lead, err := e.Campaign(t.Context(), "a")
		require.NoError(t, err)
		asker := mustElection(t, newSession(t, b.client, fastOpts()...), "req")
		ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond) // two and a half TTLs
		defer cancel()
		asked := make(chan error, 1)
		go func() { _, err := asker.RequestTransfer(ctx, "b"); asked <- err }()
		key := lease.RequestKey("req")
		for requestHeld(b, "req") == "" {
			runtimeYield()
		}
		held := requestHeld(b, "req")
		assert.True(t, strings.HasSuffix(held, " "+strconv.FormatInt(lead.Fence(), 10)+"\nb"), "addressed to a's term: %q", held)
		ttl := b.client.(*redis.Client).PTTL(t.Context(), key).Val()
		assert.True(t, ttl > 0 && ttl <= 600*time.Millisecond, "lives one TTL: %v", ttl)

		err = recvWithin(t, asked, 2*time.Second, "RequestTransfer")
		assert.ErrorIs(t, err, ErrNotTaken)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Empty(t, requestHeld(b, "req"), "not withdrawn")
		assert.True(t, lead.Held())
	})
}

// A request addressed to another term (left by a requester that died while
// another leader led) is never taken: the key is left as it is, and
// TransferRequested waits on.
func TestTransferRequestedIgnoresStale(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		e := mustElection(t, newSession(t, b.client, fastOpts()...), "req")
		lead, err := e.Campaign(t.Context(), "a")
		require.NoError(t, err)
		stale := lease.Request{ID: "ID", Fence: lead.Fence() - 1, To: "b"}.String()
		b.set(lease.RequestKey("req"), stale)
		ctx, cancel := context.WithTimeout(t.Context(), 700*time.Millisecond) // more than one TTL: read again
		defer cancel()
		_, err = e.TransferRequested(ctx, lead)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, stale, requestHeld(b, "req"))
	})
}

// requestOf returns a requester of job on a fresh redis-server, its
// election, the server, and a function that stores v as the request of job
// for a minute.
func requestOf(t *testing.T, id string, fence int64, to string) (*lease.Requester, *Election, *redisserver.Server, func(v string)) {
	srv := redisserver.Start(t)
	c := srv.Client(t)
	e := mustElection(t, newSession(t, c, WithTTL(time.Minute)), "job")
	q := e.request(lease.Request{ID: id, Fence: fence, To: to})
	return q, e, srv, func(v string) { require.NoError(t, c.Set(t.Context(), lease.RequestKey("job"), v, time.Minute).Err()) }
}

// The take script, the one place that decides which request a leader takes
// and which a requester withdraws or addresses anew. (Moved from the CLI's
// transfer_request_test.go with the protocol.)
func TestRequestScript(t *testing.T) {
	t.Parallel()
	q, e, srv, store := requestOf(t, "ID", 5, "B x\ny") // VALUE may hold spaces and newlines
	ctx, key := t.Context(), lease.RequestKey("job")
	stored := func() any { return srv.Do(t, "GET", key) }
	take := func(fence string) (lease.Taken, error) { // by the term whose token is TOK
		argv := []any{nil, nil, 2, key, e.keys.Lock, "", fence, "", "", "TOK"}
		return lease.TakeReply(e.s.wire.Combiner().Call(ctx, time.Time{}, lease.RequestTakeRun, argv).Slice())
	}
	srv.Do(t, "SET", e.keys.Lock, "TOK\n5\na")
	got, err := take("5")
	require.NoError(t, err)
	assert.False(t, got.Present, "no request")

	require.Equal(t, "ID 5\nB x\ny", q.String())
	for _, v := range []string{q.String(), "ID\nB", "ID 05\nB", "ID 5", "no request"} {
		store(v)
		for _, fence := range []string{"", "4", "50"} { // another term's, or none
			got, err := take(fence)
			require.NoError(t, err)
			assert.False(t, got.Took, "%q taken for fence %q", v, fence)
			assert.Equal(t, v, got.Held)
		}
		got, err := take("5")
		require.NoError(t, err)
		assert.Equal(t, v == q.String(), got.Took, "%q for fence 5", v)
		if got.Took {
			assert.Nil(t, stored(), "taken, not deleted")
		} else {
			assert.Equal(t, v, stored(), "left as it was")
		}
	}

	// A term that has ended in Redis (the lock key gone, or another
	// owner's) consumes nothing: its requester addresses the request to
	// the next term. On 4987083 the take consumed it, and the requester
	// read it as honoured (ErrNoSuccessor).
	store(q.String())
	for _, lock := range []string{"", "OTHER\n6\nc", "\n6\nc", "TOKX\n5\na"} {
		if lock == "" {
			srv.Do(t, "DEL", e.keys.Lock)
		} else {
			srv.Do(t, "SET", e.keys.Lock, lock)
		}
		got, err := take("5")
		require.NoError(t, err)
		assert.False(t, got.Took, "taken with the lock key holding %q", lock)
		assert.Equal(t, q.String(), stored())
	}

	// A readdress and a withdrawal act only on the requester's own request;
	// a readdress renews it for one TTL.
	store(q.String())
	other := e.request(lease.Request{ID: "OTHER", Fence: 5, To: "B x\ny"})
	moved, err := other.Readdress(ctx, 6)
	require.NoError(t, err)
	assert.False(t, moved, "another requester's request was addressed anew")
	moved, err = q.Readdress(ctx, 6)
	require.NoError(t, err)
	require.True(t, moved)
	assert.Equal(t, "ID 6\nB x\ny", stored())
	assert.Greater(t, srv.Do(t, "PTTL", key), int64(50000), "not renewed for the TTL")
	taken, err := other.Withdraw(ctx)
	require.NoError(t, err)
	assert.True(t, taken, "another requester's request was withdrawn")
	taken, err = q.Withdraw(ctx)
	require.NoError(t, err)
	assert.False(t, taken)
	assert.Nil(t, stored())
}

// A step of a requester whose outcome it did not learn (the reply lost, or
// its ctx ended mid-call) leaves the request under the old fence or the
// new one: the step run again, and the next step, find it by its id. On
// 478d07d they compared the whole request, fence included, and read one
// readdressed already as taken. (Moved from the CLI with the protocol.)
func TestRequestScriptUnknownOutcome(t *testing.T) {
	t.Parallel()
	q, _, srv, store := requestOf(t, "ID", 5, "B")
	ctx, key := t.Context(), lease.RequestKey("job")
	store("ID 6\nB") // readdressed to 6; the requester did not hear so

	moved, err := q.Readdress(ctx, 6) // the same readdress, run again
	require.NoError(t, err)
	assert.True(t, moved, "a request readdressed already was read as taken")
	assert.Equal(t, "ID 6\nB", srv.Do(t, "GET", key))
	q.Fence = 5 // as if that reply was lost too: the next term's readdress
	moved, err = q.Readdress(ctx, 7)
	require.NoError(t, err)
	assert.True(t, moved)
	assert.Equal(t, "ID 7\nB", srv.Do(t, "GET", key))

	q.Fence = 5 // the withdrawal knows the fence 5 only
	for _, v := range []string{"ID 7\nB", "ID 5\nB"} {
		store(v)
		taken, err := q.Withdraw(ctx)
		require.NoError(t, err)
		assert.False(t, taken, "%q", v)
		assert.Nil(t, srv.Do(t, "GET", key), "%q was not withdrawn", v)
	}
	for _, v := range []string{"OTHER 7\nB", "IDX 7\nB", "ID\nB", "ID 7"} { // not this requester's
		store(v)
		moved, err := q.Readdress(ctx, 8)
		require.NoError(t, err)
		assert.False(t, moved, "%q", v)
		assert.Equal(t, v, srv.Do(t, "GET", key), "%q changed", v)
	}
}

// A term that has ended in Redis, though its leader does not know it yet,
// consumes no request: TransferRequested takes nothing, and the requester
// addresses the request to the next term, where it waits until its ctx
// ends (ErrNotTaken). On 4987083 the ended term took it, and the requester
// read the next term as the outcome of a transfer (ErrNoSuccessor).
func TestRequestNotConsumedByEndedTerm(t *testing.T) {
	onRedisServer(t, func(t *testing.T, b *backend) {
		e := mustElection(t, newSession(t, b.client, fastOpts()...), "req")
		lead, err := e.Campaign(t.Context(), "a")
		require.NoError(t, err)
		asker := mustElection(t, newSession(t, b.client, fastOpts()...), "req")
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		asked := make(chan error, 1)
		go func() { _, err := asker.RequestTransfer(ctx, "b"); asked <- err }()
		for requestHeld(b, "req") == "" {
			runtimeYield()
		}
		b.del(lead.lease.Keys.Lock) // the term ends in Redis; a's heartbeat learns it later

		tctx, tcancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer tcancel()
		to, err := e.TransferRequested(tctx, lead)
		assert.Empty(t, to, "an ended term took the request")
		assert.ErrorIs(t, err, ErrNotLeader)

		c := mustElection(t, newSession(t, b.client, fastOpts()...), "req")
		next, err := c.Campaign(t.Context(), "c")
		require.NoError(t, err)
		want := " " + strconv.FormatInt(next.Fence(), 10) + "\nb"
		for !strings.HasSuffix(requestHeld(b, "req"), want) {
			select {
			case err := <-asked:
				t.Fatalf("RequestTransfer returned before it addressed the next term: %v", err)
			default:
				runtimeYield()
			}
		}
		cancel()
		err = recvWithin(t, asked, 2*time.Second, "RequestTransfer")
		assert.ErrorIs(t, err, ErrNotTaken)
		assert.NotErrorIs(t, err, ErrNoSuccessor)
	})
}

// takeHold is a client hook that, once armed, holds the first take of a
// transfer request that took one: the take has run in Redis, and its
// reply waits until release is closed (a server that answers late).
type takeHold struct {
	armed   atomic.Bool
	held    chan struct{} // closed when the take is held
	release chan struct{}
}

func (h *takeHold) hook() testHook {
	return eachCall(func(ctx context.Context, cmds []redis.Cmder, send sendFunc) error {
		err := send(ctx, cmds)
		for _, cmd := range cmds {
			c, ok := cmd.(*redis.Cmd)
			if !ok || len(c.Args()) < 2 || c.Args()[1] != lease.RequestTakeRun.SHA() && c.Args()[1] != lease.RequestTakeRun.Src() {
				continue // EVALSHA, or EVAL after NOSCRIPT
			}
			if res, _ := c.Slice(); len(res) == 2 && res[0] == int64(1) && h.armed.CompareAndSwap(true, false) {
				close(h.held)
				<-h.release
			}
		}
		return err
	})
}

// Run's return does not wait for a take of its watch that is still on the
// wire (on 4987083 it waited up to a call timeout, on a hung server, before
// its release), and a request that take consumed after the term stopped
// honouring requests is put back, for its requester to address to the next
// term.
func TestRunDoesNotWaitForRequestTake(t *testing.T) {
	srv := redisserver.Start(t)
	admin := srv.Client(t)
	h := &takeHold{held: make(chan struct{}), release: make(chan struct{})}
	c := srv.Client(t)
	c.AddHook(h.hook())
	release := sync.OnceFunc(func() { close(h.release) })
	s := newSession(t, c, fastOpts()...)
	t.Cleanup(release) // before the session's Close, which waits for the take
	e := mustElection(t, s, "req")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	fences := make(chan int64, 1)
	ran := make(chan error, 1)
	go func() {
		ran <- e.Run(ctx, "a", func(ctx context.Context, l *Lock) error {
			fences <- l.Fence()
			<-ctx.Done()
			return nil
		})
	}()
	fence := recvWithin(t, fences, 2*time.Second, "a leads")
	key := lease.RequestKey("req")
	stored := "ID " + strconv.FormatInt(fence, 10) + "\nb"
	h.armed.Store(true)
	require.NoError(t, admin.Set(t.Context(), key, stored, time.Minute).Err())
	require.NoError(t, admin.Publish(t.Context(), key, "T").Err())
	recvWithin(t, h.held, 2*time.Second, "the take to be held")

	cancel() // onElected returns while the take's reply is held
	start := time.Now()
	err := recvWithin(t, ran, 500*time.Millisecond, "Run to return")
	t.Logf("Run returned after %v: %v", time.Since(start), err)
	assert.ErrorIs(t, err, context.Canceled)
	release()
	require.NoError(t, s.Close(t.Context())) // waits for the watch
	assert.Equal(t, stored, admin.Get(t.Context(), key).Val(), "the request was not put back")
}

// An ACL that denies the request key: Run's term says so once, naming
// the key, not once per TTL (as on 4987083), and its lock is unaffected.
// One that denies the request's channel fails RequestTransfer in the
// prelude's wording, which names the command and the channel (on 4987083
// the scripts had no guard, and the denial read as one of the keys).
func TestRequestDeniedSaidOnce(t *testing.T) {
	srv := redisserver.Start(t)
	admin := srv.Client(t)
	setUser(t, admin, "notransfer", aclRule, identityRule(t, srv), "resetkeys",
		"~redisleader:{req}", "~redisleader:{req}:fence", "~redisleader:{req}:ch")
	logOpt, buf := warnLog()
	e := mustElection(t, newSession(t, userClient(t, srv, "notransfer"), fastOpts(logOpt)...), "req")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ran := make(chan error, 1)
	held := make(chan *Lock, 1)
	go func() {
		ran <- e.Run(ctx, "a", func(ctx context.Context, l *Lock) error {
			held <- l
			<-ctx.Done()
			return nil
		})
	}()
	l := recvWithin(t, held, 2*time.Second, "a leads")
	key := lease.RequestKey("req")
	denials := func() (n int64) { // the server's count of the reads denied
		for _, entry := range aclLog(t, admin) {
			if m, _ := entry.(map[any]any); m["object"] == key {
				c, _ := m["count"].(int64)
				n += c
			}
		}
		return n
	}
	for end := time.Now().Add(5 * time.Second); denials() < 4; runtimeYield() { // over two TTLs
		require.True(t, time.Now().Before(end), "the term stopped reading its requests: %v\n%s", aclLog(t, admin), buf.String())
	}
	assert.True(t, l.Held())
	log := buf.String()
	assert.Equal(t, 1, strings.Count(log, "transfer requests"), "said once: %s", log)
	assert.Contains(t, log, "permission denied running EVALSHA on keys "+key)
	cancel()
	assert.ErrorIs(t, recvWithin(t, ran, 2*time.Second, "Run"), context.Canceled)

	setUser(t, admin, "nochannel", aclRule, identityRule(t, srv), "resetchannels", "&redisleader:{req}:ch")
	lead, err := mustElection(t, newSession(t, admin, fastOpts()...), "req").Campaign(t.Context(), "a")
	require.NoError(t, err)
	asker := mustElection(t, newSession(t, userClient(t, srv, "nochannel"), fastOpts()...), "req")
	_, err = asker.RequestTransfer(t.Context(), "b")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "permission denied for PUBLISH "+key+" (ACL)")
	assert.True(t, lead.Held())
}

// A RequestTransfer whose ctx is cancelled while Redis hangs cannot
// withdraw its request (it expires within its TTL), and says so, and why it
// ended: the ctx's error. (While it waited, it returned the withdraw's
// timeout alone, so a caller checking for its own cancellation got it
// wrong; while it sent, it said "withdrawn" of a request still stored.)
func TestRequestTransferCancelledWhileRedisHangs(t *testing.T) {
	srv := redisserver.Start(t)
	proxy, err := faultproxy.New(srv.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	via := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = via.Close() })
	direct := srv.Client(t)
	_, err = mustElection(t, newSession(t, direct, fastOpts()...), "req-hung").Campaign(t.Context(), "a")
	require.NoError(t, err)
	asker := mustElection(t, newSession(t, via, fastOpts()...), "req-hung")
	ctx, cancel := context.WithCancel(t.Context())
	asked := make(chan error, 1)
	go func() { _, err := asker.RequestTransfer(ctx, "b"); asked <- err }()
	// Stored: the request's reply may still be on its way, so the ctx ends
	// either while RequestTransfer waits or while it sends; both withdraw.
	for deadline := time.Now().Add(5 * time.Second); direct.Exists(t.Context(), lease.RequestKey("req-hung")).Val() == 0; {
		require.False(t, time.Now().After(deadline), "the request was not stored")
		runtimeYield()
	}
	proxy.Blackhole(faultproxy.Both)
	cancel()
	err = recvWithin(t, asked, 2*time.Second, "RequestTransfer")
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorContains(t, err, "cannot withdraw it")
	proxy.Heal()
}

// A request key that holds what this package did not write (a string that
// is no request, or another type, each with a TTL) makes RequestTransfer
// fail at once with an error naming the key, and is left as it was, TTL
// included. (It was overwritten by the request, then deleted by its
// withdrawal.)
func TestRequestTransferLeavesForeignKey(t *testing.T) {
	onRedisServer(t, func(t *testing.T, b *backend) {
		ctx := t.Context()
		_, err := mustElection(t, newSession(t, b.client, fastOpts()...), "req-foreign").Campaign(ctx, "a")
		require.NoError(t, err)
		asker := mustElection(t, newSession(t, b.client, fastOpts()...), "req-foreign")
		key := lease.RequestKey("req-foreign")
		c := b.client.(*redis.Client)
		for _, f := range foreignFences {
			require.NoError(t, c.Del(ctx, key).Err())
			require.NoError(t, f.write(c, key))
			want, err := f.read(c, key)
			require.NoError(t, err)
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second) // nobody takes a request here
			_, err = asker.RequestTransfer(rctx, "b")
			cancel()
			assert.ErrorContains(t, err, "key "+key+" holds a value this package did not write", f.name)
			untouched(t, c, key, f.read, want)
		}
	})
}
