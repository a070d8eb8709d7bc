package redisleader

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisleader/redisleader/internal/lease"
)

// A Transfer has one outcome: with concurrent calls on one leadership
// (Transfer, Resign, Release, Close) and to the leader's own value.

// subscribeGate holds every write of a SUBSCRIBE to a name's channel on the
// connections of the client it dials for, once armed and until open: a Transfer then waits in
// its subscribe, after it has found that its session leads and before it
// hands over, so that a test can end the leadership in between.
type subscribeGate struct {
	armed         atomic.Bool
	held, opening sync.Once
	reached       chan struct{} // closed at the first SUBSCRIBE held
	opened        chan struct{}
}

func newSubscribeGate() *subscribeGate {
	return &subscribeGate{reached: make(chan struct{}), opened: make(chan struct{})}
}

func (g *subscribeGate) open() { g.opening.Do(func() { close(g.opened) }) }

func (g *subscribeGate) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &gatedConn{Conn: conn, g: g}, nil
}

type gatedConn struct {
	net.Conn
	g *subscribeGate
}

func (c *gatedConn) Write(p []byte) (int, error) {
	// Only a SUBSCRIBE to a name's channel, Transfer's: a Run term also
	// subscribes to its transfer requests' channel as it starts.
	if c.g.armed.Load() && bytes.Contains(bytes.ToLower(p), []byte("\r\nsubscribe\r\n")) && bytes.Contains(p, []byte(":ch\r\n")) {
		c.g.held.Do(func() { close(c.g.reached) })
		<-c.g.opened
	}
	return c.Conn.Write(p)
}

// raceLeader returns the election name on b led by "a" in a session of its
// own client, whose SUBSCRIBE writes g holds (armed once "a" leads) and
// whose commands h holds; call timeout 2s, so that a Transfer waits for the
// gate rather than for the timeout. A leader by Campaign takes the name with
// TryCampaign, which does not subscribe; a Run term campaigns in fair mode,
// on its own wake-up channel: either way Transfer's subscription to the
// name's channel is new.
func raceLeader(t *testing.T, b *backend, name string, run bool) (e *Election, lead *Lock, g *subscribeGate, h *holdHook) {
	t.Helper()
	g, h = newSubscribeGate(), &holdHook{}
	c := redis.NewClient(&redis.Options{Addr: b.addr, ContextTimeoutEnabled: true, Dialer: g.dial})
	t.Cleanup(func() { _ = c.Close() })
	c.AddHook(h.hook())
	opts := []Option{WithCallTimeout(2 * time.Second)}
	if run {
		opts = append(opts, WithFairness())
	}
	e = mustElection(t, newSession(t, c, opts...), name)
	t.Cleanup(g.open) // cleanups run last first: this one before the session's Close
	if run {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		elected, _ := runTerms(ctx, e, "a")
		lead = recvWithin(t, elected, 5*time.Second, "a elected").l
	} else {
		var err error
		lead, err = e.TryCampaign(context.Background(), "a")
		require.NoError(t, err)
	}
	g.armed.Store(true)
	return e, lead, g, h
}

// releaseSHA is the script that deletes the key of a leadership without a
// succession: in fair mode, the one that also wakes the head waiter.
func releaseSHA(fair bool) string {
	if fair {
		return lease.FairReleaseRun.SHA()
	}
	return lease.ReleaseRun.SHA()
}

// waitWatchers waits until n subscriptions of e's session watch its name's
// channel (calls waiting in subscribe, say).
func waitWatchers(t *testing.T, e *Election, n int) {
	t.Helper()
	w, ch := &e.s.wire, e.keys.Channel
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, _ := w.Watchers(ch)
		if got >= n {
			return
		}
		require.True(t, time.Now().Before(deadline), "%d of %d calls subscribed", got, n)
		runtimeYield()
	}
}

// transferAsync runs e.Transfer(ctx, to) on its own goroutine.
func transferAsync(ctx context.Context, e *Election, to string) <-chan error {
	res := make(chan error, 1)
	go func() { res <- e.Transfer(ctx, to) }()
	return res
}

// TestTransferRacingTransfer: two Transfers of one leadership (by
// Campaign, or a Run term), to "b" and "c", both past the check that their
// session leads. One hands over; the other, while that hand-over is still
// on the wire, must say that the leadership moved and to whom (ErrNotLeader,
// naming the winner's successor), never ErrNoSuccessor naming "a", the
// leadership it ended. Two Transfers to the same value both return nil
// once it leads.
func TestTransferRacingTransfer(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  bool
		to   [2]string
	}{
		{"Campaign", false, [2]string{"b", "c"}},
		{"Run", true, [2]string{"b", "c"}},
		{"same value", false, [2]string{"b", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forBackends(t, func(t *testing.T, b *backend) { transferRacingTransfer(t, b, tc.run, tc.to) })
		})
	}
}

// transferRacingTransfer: Transfers to to[0] and to[1] of one leadership.
func transferRacingTransfer(t *testing.T, b *backend, run bool, to [2]string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	name := fmt.Sprintf("race-transfer-%v-%s", run, to[1])
	e, lead, g, h := raceLeader(t, b, name, run)
	got := candidates(t, ctx, b, name, run, "b", "c")
	enlistAll(t, ctx, b, name, run, got)
	res := [2]<-chan error{transferAsync(ctx, e, to[0])}
	waitClosed(t, g.reached, 5*time.Second, "Transfer("+to[0]+") subscribing")
	res[1] = transferAsync(ctx, e, to[1])
	waitWatchers(t, e, 2)
	handOff := h.rule(lease.HandOffRun.SHA(), true)
	send := freeing(t, handOff)
	g.open()
	waitClosed(t, handOff.reached, 5*time.Second, "the hand-over on the wire")
	if to[0] != to[1] {
		var loser int
		select {
		case err := <-res[0]:
			res[0] = errAgain(err)
		case err := <-res[1]:
			loser, res[1] = 1, errAgain(err)
		case <-time.After(5 * time.Second):
			t.Fatal("neither Transfer returned while one hand-over was on the wire")
		}
		err := <-res[loser]
		require.Error(t, err)
		assert.ErrorIs(t, err, ErrNotLeader, "Transfer(%s): %v", to[loser], err)
		assert.ErrorIs(t, err, ErrReleased)
		assert.NotErrorIs(t, err, ErrNoSuccessor, "the loser blames a successor: %v", err)
		assert.Contains(t, err.Error(), fmt.Sprintf("%q", to[1-loser]), "the loser names where the leadership went")
		assert.NotContains(t, err.Error(), `"a" leads`)
		to[0], res[0] = to[1-loser], res[1-loser] // the winner
		res[1] = nil
	}
	send()
	for _, r := range res {
		if r != nil {
			require.NoError(t, recvWithin(t, r, 5*time.Second, "Transfer("+to[0]+")"))
		}
	}
	assert.ErrorIs(t, lead.Err(), ErrReleased)
	now, err := e.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, to[0], now.Value)
	assert.Greater(t, now.Fence, lead.Fence())
}

// errAgain returns a channel that yields err.
func errAgain(err error) <-chan error {
	ch := make(chan error, 1)
	ch <- err
	return ch
}

// TestTransferRacingResign: a Transfer past the check that its session
// leads, and a Resign (or the Campaign lock's Release) that ends the
// leadership first and whose delete is still on the wire (for a Run term,
// Run's delete). The Transfer must say that the leadership was released
// (ErrNotLeader and ErrReleased), and must not report "a" (the leadership
// it found ended) as a rival; the release deletes the key: nobody is
// handed the name.
func TestTransferRacingResign(t *testing.T) {
	for _, tc := range []struct {
		how string
		run bool
	}{{"Resign", false}, {"Release", false}, {"Resign", true}} {
		t.Run(fmt.Sprintf("%s/run=%v", tc.how, tc.run), func(t *testing.T) {
			forBackends(t, func(t *testing.T, b *backend) { transferRacingRelease(t, b, tc.how, tc.run) })
		})
	}
}

func transferRacingRelease(t *testing.T, b *backend, how string, run bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	name := fmt.Sprintf("race-%s-%v", how, run)
	e, lead, g, h := raceLeader(t, b, name, run)
	res := transferAsync(ctx, e, "b")
	waitClosed(t, g.reached, 5*time.Second, "Transfer(b) subscribing")
	del := h.rule(releaseSHA(run), true)
	send := freeing(t, del)
	released := make(chan error, 1)
	go func() {
		if how == "Resign" {
			released <- e.Resign(ctx)
		} else {
			released <- lead.Release(ctx)
		}
	}()
	waitClosed(t, del.reached, 5*time.Second, how+"'s delete on the wire")
	g.open()
	err := recvWithin(t, res, 5*time.Second, "Transfer(b) while "+how+"'s delete is on the wire")
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrNotLeader, "%v", err)
	assert.ErrorIs(t, err, ErrReleased)
	assert.NotErrorIs(t, err, ErrNoSuccessor, "Transfer blames a successor: %v", err)
	assert.NotContains(t, err.Error(), `"a" leads`)
	assert.Contains(t, err.Error(), "released first")
	send()
	require.NoError(t, recvWithin(t, released, 5*time.Second, how))
	assert.False(t, strings.HasSuffix(b.get(lead.Key()), "\nb"), "the release reserved the name for b")
	if !run { // Run campaigns again
		_, err = e.Leader(ctx)
		assert.ErrorIs(t, err, ErrNoLeader, "the release deleted the key: no reservation for b")
	}
}

// TestTransferConcurrentCallsOneOutcome: Transfer(b), Transfer(c) and
// Resign of one leadership, let loose at once, round after round, with no
// step held: one of them ends it; a Transfer returns nil only if its
// successor then leads, and otherwise ErrNotLeader (never ErrNoSuccessor:
// b and c campaign), naming the other Transfer's successor only if that
// one returned nil.
func TestTransferConcurrentCallsOneOutcome(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		for round := range 10 {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			name := fmt.Sprintf("free-race-%d", round)
			e := mustElection(t, newSession(t, b.client, fastOpts()...), name)
			_, err := e.TryCampaign(ctx, "a")
			require.NoError(t, err)
			enlistAll(t, ctx, b, name, false, candidates(t, ctx, b, name, false, "b", "c"))
			start := make(chan struct{})
			calls := map[string]func() error{
				"b":      func() error { return e.Transfer(ctx, "b") },
				"c":      func() error { return e.Transfer(ctx, "c") },
				"Resign": func() error { return e.Resign(ctx) },
			}
			res := map[string]chan error{}
			for who, call := range calls {
				res[who] = make(chan error, 1)
				go func() { <-start; res[who] <- call() }()
			}
			close(start)
			got := map[string]error{}
			for who := range calls {
				got[who] = recvWithin(t, res[who], 5*time.Second, who)
			}
			require.NoError(t, got["Resign"])
			for to, other := range map[string]string{"b": "c", "c": "b"} {
				err := got[to]
				if err == nil {
					who, lerr := e.Leader(ctx)
					require.NoError(t, lerr)
					assert.Equal(t, to, who.Value, "round %d: Transfer(%s) returned nil", round, to)
					continue
				}
				assert.ErrorIs(t, err, ErrNotLeader, "round %d: Transfer(%s): %v", round, to, err)
				assert.NotErrorIs(t, err, ErrNoSuccessor, "round %d", round)
				if strings.Contains(err.Error(), fmt.Sprintf("hands it to %q", other)) {
					assert.NoError(t, got[other], "round %d: Transfer(%s) names %s as the successor", round, to, other)
				}
			}
			assert.False(t, got["b"] == nil && got["c"] == nil, "round %d: both Transfers returned nil", round)
			cancel()
		}
	})
}

// TestTransferToOwnValue: a Transfer to the value this leader campaigned
// with, or last proclaimed, asks for what holds already (that value leads):
// it returns nil at once, with no command on the name and no subscription,
// and the leadership goes on, as the CLI's transfer exits 0 when VALUE
// leads. Not leading, it is ErrNotLeader.
func TestTransferToOwnValue(t *testing.T) {
	m, c := newMini(t)
	onKey := &countingHook{match: lease.NewKeys("own").Lock}
	c.AddHook(onKey.hook())
	ctx := context.Background()
	e := mustElection(t, newSession(t, c, WithTTL(time.Minute)), "own") // no renewal during the test
	require.ErrorIs(t, e.Transfer(ctx, "me"), ErrNotLeader)
	l, err := e.TryCampaign(ctx, "me")
	require.NoError(t, err)
	require.NoError(t, e.Proclaim(ctx, "me-too"))
	stored, _ := m.Get(l.Key())
	for _, v := range []string{"me", "me-too"} {
		n := onKey.n.Load()
		require.NoError(t, e.Transfer(ctx, v), "Transfer to the leader's own value %q", v)
		assert.Equal(t, n, onKey.n.Load(), "Transfer(%q): a command on the name", v)
		_, known := e.s.wire.Watchers(e.keys.Channel)
		assert.False(t, known, "Transfer(%q) subscribed", v)
		now, _ := m.Get(l.Key())
		assert.Equal(t, stored, now, "nothing written")
		assert.True(t, l.Held())
	}
	who, err := e.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, "me-too", who.Value)
	assert.Equal(t, l.Fence(), who.Fence)
	require.NoError(t, l.Release(ctx))
	assert.ErrorIs(t, e.Transfer(ctx, "me"), ErrNotLeader)
}
