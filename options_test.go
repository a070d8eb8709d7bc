package redisleader

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNewSessionRejectsBadOptions(t *testing.T) {
	m, c := newMini(t)
	tests := []struct {
		name string
		opts []Option
		want string
	}{
		{"zero TTL", []Option{WithTTL(0)}, "WithTTL(0s) must be at least 10ms"},
		{"TTL too long", []Option{WithTTL(48 * time.Hour)}, "WithTTL(48h0m0s) must be at most 24h0m0s"},
		{"TTL below 20 default margins", []Option{WithTTL(15 * time.Millisecond)}, "WithTTL(15ms) must be at least 20 × margin"},
		{"TTL fraction of a ms", []Option{WithTTL(time.Second + time.Microsecond)}, "WithTTL(1.000001s) must be a whole number of milliseconds"},
		{"retry delay leaves no room", []Option{WithTTL(time.Second), WithRetryInterval(320 * time.Millisecond), WithRetryJitter(0)}, "the default call timeout (166.666666ms) must leave room for a retried renewal"},
		{"negative TTL", []Option{WithTTL(-time.Second)}, "WithTTL(-1s) must be at least 10ms"},
		{"TTL below 20 margins", []Option{WithTTL(time.Second), WithMargin(100 * time.Millisecond)}, "WithTTL(1s) must be at least 20 × margin (2s)"},
		{"zero renew", []Option{WithRenewInterval(0)}, "WithRenewInterval(0s) must be at least 1ms"},
		{"renew above TTL/3", []Option{WithTTL(15 * time.Second), WithRenewInterval(8 * time.Second)}, "WithRenewInterval(8s) must be at most TTL/3 (5s)"},
		{"zero call timeout", []Option{WithCallTimeout(0)}, "WithCallTimeout(0s) must be at least 1ms"},
		{"call timeout beyond the TTL", []Option{WithCallTimeout(math.MaxInt64)}, "must be at most the TTL (15s)"},
		{"call timeout too long", []Option{WithTTL(time.Second), WithCallTimeout(400 * time.Millisecond)}, "WithCallTimeout(400ms) must leave room for a retried renewal"},
		{"drift too small", []Option{WithDriftFactor(0)}, "WithDriftFactor(0) must be within [0.001, 0.1]"},
		{"drift too large", []Option{WithDriftFactor(0.5)}, "WithDriftFactor(0.5) must be within [0.001, 0.1]"},
		{"drift NaN", []Option{WithDriftFactor(nan())}, "WithDriftFactor(NaN) must be within"},
		{"margin too small", []Option{WithMargin(time.Millisecond)}, "WithMargin(1ms) must be at least 2ms"},
		{"zero retry", []Option{WithRetryInterval(0)}, "WithRetryInterval(0s) must be at least 1ms"},
		{"retry above TTL", []Option{WithTTL(time.Second), WithRetryInterval(2 * time.Second)}, "WithRetryInterval(2s) must be at most the TTL (1s)"},
		{"negative jitter", []Option{WithRetryJitter(-time.Millisecond)}, "WithRetryJitter(-1ms) must be 0 (no jitter) or at least 1ms"},
		{"jitter above TTL", []Option{WithTTL(time.Second), WithRetryJitter(2 * time.Second)}, "WithRetryJitter(2s) must be at most the TTL (1s)"},
		{"negative takeover delay", []Option{WithTakeoverDelay(-time.Second)}, "WithTakeoverDelay(-1s) must be 0 (off) or at least 1ms"},
		{"takeover delay too long", []Option{WithTakeoverDelay(25 * time.Hour)}, "WithTakeoverDelay(25h0m0s) must be at most 24h0m0s"},
		{"nil logger", []Option{WithLogger(nil)}, "WithLogger(nil)"},
		{"nil option", []Option{nil}, "Option must not be nil"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := NewSession(c, tt.opts...)
			require.Error(t, err)
			assert.Nil(t, s)
			assert.ErrorIs(t, err, ErrInvalid)
			assert.True(t, strings.HasPrefix(err.Error(), "redisleader: "), err.Error())
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	assert.Zero(t, m.CommandCount(), "bad options must not reach Redis")
}

func TestNewSessionRejectsNilClient(t *testing.T) {
	var typedNil *redis.Client
	for _, c := range []Client{nil, typedNil, (*redis.ClusterClient)(nil), (*redis.Ring)(nil)} {
		s, err := NewSession(c)
		assert.Nil(t, s)
		assert.ErrorIs(t, err, ErrInvalid)
		assert.EqualError(t, err, "redisleader: NewSession: client must not be nil")
	}
}

func TestDefaults(t *testing.T) {
	cfg, err := buildConfig(nil)
	require.NoError(t, err)
	assert.Equal(t, 15*time.Second, cfg.TTL)
	assert.Equal(t, 5*time.Second, cfg.RenewInterval)
	assert.Equal(t, time.Second, cfg.CallTimeout)
	assert.Equal(t, 150*time.Millisecond, cfg.Margin)
	assert.Equal(t, 0.01, cfg.Drift)
	assert.Equal(t, 100*time.Millisecond, cfg.RetryInterval)
	assert.Equal(t, 50*time.Millisecond, cfg.RetryJitter)
	// D = s + 15s·0.99 − 150ms
	assert.Equal(t, 14700*time.Millisecond, cfg.Validity)

	for _, ttl := range []time.Duration{100 * time.Millisecond, 150 * time.Millisecond, 200 * time.Millisecond, 450 * time.Millisecond, time.Second, time.Minute, 24 * time.Hour} {
		_, err := buildConfig([]Option{WithTTL(ttl)})
		assert.NoError(t, err, "the defaults derived from WithTTL(%v) must be valid", ttl)
	}
	_, err = buildConfig([]Option{WithTTL(99 * time.Millisecond)})
	assert.ErrorContains(t, err, "WithTTL(99ms) must be at least 20 × margin (100ms)")

	short, err := buildConfig([]Option{WithTTL(time.Second)})
	require.NoError(t, err, "a 1s TTL must be valid with derived defaults")
	assert.Equal(t, 333333333*time.Nanosecond, short.RenewInterval)
	assert.Equal(t, 166666666*time.Nanosecond, short.CallTimeout)
	assert.Equal(t, 10*time.Millisecond, short.Margin)

	fast, err := buildConfig([]Option{WithRetryInterval(time.Millisecond)})
	require.NoError(t, err)
	assert.Equal(t, time.Millisecond, fast.RetryJitter, "the default jitter is at least 1ms")
}

func nan() float64 { zero := 0.0; return zero / zero }

// TestDurationOptionBounds: every duration option rejects 1ns and 999µs (a
// bare number is nanoseconds: WithRenewInterval(5) meant as 5s) with an error
// that names the option, the value and the rule, and accepts the bound.
func TestDurationOptionBounds(t *testing.T) {
	c := unreachableClient(t)
	tests := []struct {
		opt   func(time.Duration) Option
		want  string // format of the error message for the value
		bound time.Duration
	}{
		{WithRenewInterval, "WithRenewInterval(%v) must be at least 1ms", time.Millisecond},
		{WithCallTimeout, "WithCallTimeout(%v) must be at least 1ms", time.Millisecond},
		{WithRetryInterval, "WithRetryInterval(%v) must be at least 1ms", time.Millisecond},
		{WithRetryJitter, "WithRetryJitter(%v) must be 0 (no jitter) or at least 1ms", time.Millisecond},
		{WithTakeoverDelay, "WithTakeoverDelay(%v) must be 0 (off) or at least 1ms", time.Millisecond},
		{func(d time.Duration) Option { return WithReplicaAcks(1, d) },
			"WithReplicaAcks(1, %v): the timeout must be a positive whole number of milliseconds", time.Millisecond},
	}
	for _, tt := range tests {
		name, _, _ := strings.Cut(tt.want, "(")
		t.Run(name, func(t *testing.T) {
			for _, d := range []time.Duration{time.Nanosecond, 999 * time.Microsecond} {
				s, err := NewSession(c, tt.opt(d))
				assertRejected(t, s, err, fmt.Sprintf(tt.want, d))
			}
			s, err := NewSession(c, tt.opt(tt.bound))
			assertAccepted(t, s, err)
		})
	}
	// The report of issue 11: meant as 5s and 1s, given in nanoseconds.
	s, err := NewSession(c, WithRenewInterval(5), WithRetryInterval(1))
	assertRejected(t, s, err, "WithRenewInterval(5ns) must be at least 1ms")
	// Zero turns jitter and the takeover delay off.
	s, err = NewSession(c, WithRetryJitter(0), WithTakeoverDelay(0))
	assertAccepted(t, s, err)
}

// assertRejected checks that a constructor returned no session (closing one
// it returned anyway) and an error matching ErrInvalid with exactly msg.
func assertRejected(t *testing.T, s *Session, err error, msg string) {
	t.Helper()
	if !assert.Nil(t, s) {
		require.NoError(t, s.Close(context.Background()))
	}
	assert.ErrorIs(t, err, ErrInvalid)
	assert.EqualError(t, err, "redisleader: "+msg)
}

// assertAccepted checks that a constructor returned a session, and closes it.
func assertAccepted(t *testing.T, s *Session, err error) {
	t.Helper()
	require.NoError(t, err)
	require.NoError(t, s.Close(context.Background()))
}

// unreachableClient returns a client for a port nothing listens on, for
// tests that must not reach Redis; it is closed when the test ends.
func unreachableClient(t *testing.T) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Wrappers as users write them (to add metrics or inject faults): embedding
// promotes the go-redis client's methods, or hides them behind an interface.
type (
	wrappedClient  struct{ *redis.Client }
	wrappedCluster struct{ *redis.ClusterClient }
	wrappedRing    struct{ *redis.Ring }
	wrappedIface   struct{ Client }
	// testDouble embeds a nil interface and implements Client itself.
	testDouble struct{ redis.UniversalClient }
)

// unreachableNodes returns a cluster client and a ring for a port nothing
// listens on, and two plain clients to stand beside them as Redlock nodes;
// all are closed when the test ends.
func unreachableNodes(t *testing.T) (*redis.ClusterClient, *redis.Ring, [2]Client) {
	const addr = "127.0.0.1:1"
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}})
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": addr}})
	t.Cleanup(func() { _ = cluster.Close(); _ = ring.Close() })
	return cluster, ring, [2]Client{unreachableClient(t), unreachableClient(t)}
}

// TestRingIsRejected: a *redis.Ring, bare or wrapped, cannot hold a name
// safely, so NewSession and NewRedlockSession reject it and say why.
func TestRingIsRejected(t *testing.T) {
	_, ring, cs := unreachableNodes(t)
	const why = "is or wraps a *redis.Ring: each Ring client decides on its own when a shard is down and moves its keys, so two clients can hold one name on different shards"
	for _, r := range []Client{ring, wrappedRing{ring}, &wrappedRing{ring}, wrappedIface{ring}, &wrappedIface{wrappedRing{ring}}} {
		t.Run(fmt.Sprintf("%T", r), func(t *testing.T) {
			s, err := NewSession(r)
			assertRejected(t, s, err, fmt.Sprintf("NewSession: the client (%T) %s", r, why))
			s, err = NewRedlockSession([]Client{cs[0], cs[1], r})
			assertRejected(t, s, err, fmt.Sprintf("NewRedlockSession: client 2 (%T) %s", r, why))
		})
	}
}

// TestWrappedClusterClient: a wrapper around a *redis.ClusterClient is a
// cluster client too: no WithReplicaAcks, and not a Redlock node. A wrapped
// *redis.Client is a plain client.
func TestWrappedClusterClient(t *testing.T) {
	cluster, _, cs := unreachableNodes(t)
	for _, cc := range []Client{cluster, wrappedCluster{cluster}, &wrappedCluster{cluster}, wrappedIface{cluster}} {
		t.Run(fmt.Sprintf("%T", cc), func(t *testing.T) { assertClusterKind(t, cc, cs) })
	}
	c := unreachableClient(t)
	for _, w := range []Client{wrappedClient{c}, &wrappedClient{c}, wrappedIface{c}} {
		assertPlainKind(t, w, cs)
	}
}

// assertClusterKind checks that NewSession and NewRedlockSession treat cc
// as a cluster client: no WithReplicaAcks, and not a Redlock node (beside
// the two plain clients cs).
func assertClusterKind(t *testing.T, cc Client, cs [2]Client) {
	t.Helper()
	s, err := NewSession(cc, WithReplicaAcks(1, 10*time.Millisecond))
	assertRejected(t, s, err, fmt.Sprintf("WithReplicaAcks(1, 10ms) needs WAIT on the connection that wrote, which a cluster client (%T is or wraps a *redis.ClusterClient) does not give; use it with a *redis.Client (also from redis.NewFailoverClient)", cc))
	s, err = NewSession(cc)
	assertAccepted(t, s, err)
	s, err = NewRedlockSession([]Client{cs[0], cc, cs[1]})
	assertRejected(t, s, err, fmt.Sprintf("NewRedlockSession: client 1 is a ClusterClient or wraps one (%T); Redlock nodes must be independent servers", cc))
}

// assertPlainKind checks that NewSession and NewRedlockSession treat c as
// a client of one server: WithReplicaAcks is accepted, and so is c as a
// Redlock node (beside the two plain clients cs).
func assertPlainKind(t *testing.T, c Client, cs [2]Client) {
	t.Helper()
	s, err := NewSession(c, WithReplicaAcks(1, 10*time.Millisecond))
	assertAccepted(t, s, err)
	s, err = NewRedlockSession([]Client{cs[0], c, cs[1]})
	assertAccepted(t, s, err)
}

// TestWrappedNilClient: a nil pointer to a wrapper, or a wrapper around a
// nil client, is a nil client: an error, not a panic at first use.
func TestWrappedNilClient(t *testing.T) {
	_, _, cs := unreachableNodes(t)
	for _, n := range []Client{(*wrappedCluster)(nil), wrappedCluster{}, &wrappedCluster{}, (*wrappedRing)(nil), wrappedRing{},
		(*wrappedClient)(nil), wrappedClient{}, &wrappedIface{wrappedClient{}}} {
		t.Run(fmt.Sprintf("%T", n), func(t *testing.T) {
			for _, opts := range [][]Option{nil, {WithReplicaAcks(1, 10*time.Millisecond)}} {
				s, err := NewSession(n, opts...)
				assertRejected(t, s, err, "NewSession: client must not be nil")
			}
			s, err := NewRedlockSession([]Client{cs[0], n, cs[1]})
			assertRejected(t, s, err, "NewRedlockSession: client 1 is nil")
		})
	}
}

func (testDouble) Process(context.Context, redis.Cmder) error { return nil }

func (testDouble) Pipeline() redis.Pipeliner { return nil }

func (testDouble) Subscribe(context.Context, ...string) *redis.PubSub { return nil }

// A test double that embeds a nil interface but implements every method of
// Client itself is a working client, not a nil one.
func TestTestDoubleWithNilEmbeddedInterface(t *testing.T) {
	s, err := NewSession(testDouble{})
	require.NoError(t, err)
	require.NoError(t, s.Close(context.Background()))
}
