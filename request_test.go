package redisleader

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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

// requestOf returns a request of job on a fresh redis-server, the server,
// and a function that stores v as the request of job for a minute.
func requestOf(t *testing.T, id string, fence int64, to string) (*request, *redisserver.Server, func(v string)) {
	srv := redisserver.Start(t)
	c := srv.Client(t)
	e := mustElection(t, newSession(t, c, WithTTL(time.Minute)), "job")
	q := &request{e: e, key: lease.RequestKey("job"), Request: lease.Request{ID: id, Fence: fence, To: to}}
	return q, srv, func(v string) { require.NoError(t, c.Set(t.Context(), q.key, v, time.Minute).Err()) }
}

// The take script, the one place that decides which request a leader takes
// and which a requester withdraws or addresses anew. (Moved from the CLI's
// transfer_request_test.go with the protocol.)
func TestRequestScript(t *testing.T) {
	t.Parallel()
	q, srv, store := requestOf(t, "ID", 5, "B x\ny") // VALUE may hold spaces and newlines
	ctx, e, key := t.Context(), q.e, q.key
	stored := func() any { return srv.Do(t, "GET", key) }
	take := func(fence string) (lease.Taken, error) {
		return e.takeRequest(ctx, []any{nil, nil, 1, key, "", fence, "", ""})
	}
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

	// A readdress and a withdrawal act only on the requester's own request;
	// a readdress renews it for one TTL.
	store(q.String())
	other := &request{e: e, key: key, Request: lease.Request{ID: "OTHER", Fence: 5, To: "B x\ny"}}
	moved, err := other.readdress(ctx, 6)
	require.NoError(t, err)
	assert.False(t, moved, "another requester's request was addressed anew")
	moved, err = q.readdress(ctx, 6)
	require.NoError(t, err)
	require.True(t, moved)
	assert.Equal(t, "ID 6\nB x\ny", stored())
	assert.Greater(t, srv.Do(t, "PTTL", key), int64(50000), "not renewed for the TTL")
	taken, err := other.withdraw(ctx)
	require.NoError(t, err)
	assert.True(t, taken, "another requester's request was withdrawn")
	taken, err = q.withdraw(ctx)
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
	q, srv, store := requestOf(t, "ID", 5, "B")
	ctx, key := t.Context(), q.key
	store("ID 6\nB") // readdressed to 6; the requester did not hear so

	moved, err := q.readdress(ctx, 6) // the same readdress, run again
	require.NoError(t, err)
	assert.True(t, moved, "a request readdressed already was read as taken")
	assert.Equal(t, "ID 6\nB", srv.Do(t, "GET", key))
	q.Fence = 5 // as if that reply was lost too: the next term's readdress
	moved, err = q.readdress(ctx, 7)
	require.NoError(t, err)
	assert.True(t, moved)
	assert.Equal(t, "ID 7\nB", srv.Do(t, "GET", key))

	q.Fence = 5 // the withdrawal knows the fence 5 only
	for _, v := range []string{"ID 7\nB", "ID 5\nB"} {
		store(v)
		taken, err := q.withdraw(ctx)
		require.NoError(t, err)
		assert.False(t, taken, "%q", v)
		assert.Nil(t, srv.Do(t, "GET", key), "%q was not withdrawn", v)
	}
	for _, v := range []string{"OTHER 7\nB", "IDX 7\nB", "ID\nB", "ID 7"} { // not this requester's
		store(v)
		moved, err := q.readdress(ctx, 8)
		require.NoError(t, err)
		assert.False(t, moved, "%q", v)
		assert.Equal(t, v, srv.Do(t, "GET", key), "%q changed", v)
	}
}
