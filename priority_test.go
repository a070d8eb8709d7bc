package redisleader

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader/internal/redisserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// campaignOn runs e.Campaign(ctx, value, opts...) on its own goroutine and
// delivers the leadership (nil after an error) on the returned channel.
func campaignOn(ctx context.Context, e *Election, value string, opts ...CampaignOption) <-chan *Lock {
	got := make(chan *Lock, 1)
	go func() {
		l, _ := e.Campaign(ctx, value, opts...)
		got <- l
	}()
	return got
}

// TestShortTTLCandidateStaysEnlisted (issue 35.3): a candidate whose TTL is
// much shorter than the leader's attempts only when the leader's lease can
// have expired (its PTTL, about the leader's TTL), so its entry must live
// that long. B (TTL 150 ms, priority 10) stays among the candidates for
// many of its own TTLs, and the leader's release hands the name to it, not
// to C (TTL 5 s, priority 5).
func TestShortTTLCandidateStaysEnlisted(t *testing.T) {
	c := redisserver.Start(t).Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const name = "short-ttl-candidate"
	long := []Option{WithTTL(5 * time.Second), WithRenewInterval(250 * time.Millisecond)}
	roundOpt, renewed := rounds()
	ea := mustElection(t, newSession(t, c, append(long, roundOpt)...), name)
	la, err := ea.Campaign(ctx, "A", WithPriority(1))
	require.NoError(t, err)
	gotC := campaignOn(ctx, mustElection(t, newSession(t, c, long...), name), "C", WithPriority(5))
	waitEnlisted(t, ea, "A", "C")
	gotB := campaignOn(ctx, mustElection(t, newSession(t, c, WithTTL(150*time.Millisecond)), name), "B", WithPriority(10))
	waitEnlisted(t, ea, "B")
	// Three renewal rounds of A: at least 500 ms, over three of B's TTLs,
	// while B's next attempt waits for A's lease (about 5 s).
	for range 3 {
		require.False(t, waitRound(t, renewed, 2*time.Second))
	}
	cs, err := ea.Candidates(ctx)
	require.NoError(t, err)
	assert.Equal(t, []Candidate{{"B", 10}, {"C", 5}, {"A", 1}}, cs, "B still campaigns: it must stay listed")
	require.NoError(t, la.Release(ctx))
	lb := recvWithin(t, gotB, 3*time.Second, "B leads after A's release")
	require.NotNil(t, lb, "B's Campaign failed")
	assert.Empty(t, gotC, "the name went to C, below B")
	who, err := ea.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, "B", who.Value)
}

// TestRunYieldsToShortTTLCandidate (issue 35.3): a Run leader with a long
// TTL and a minimum term of 1 s yields, once that term has passed, to a
// better candidate with a short TTL that campaigned from the term's start,
// although the candidate's own TTL passed many times in between.
func TestRunYieldsToShortTTLCandidate(t *testing.T) {
	c := redisserver.Start(t).Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const name = "short-ttl-run"
	ea := mustElection(t, newSession(t, c, WithTTL(5*time.Second), WithRenewInterval(250*time.Millisecond)), name)
	elected, causes := runTerms(ctx, ea, "A", WithPriority(1), WithMinTerm(time.Second))
	first := recvWithin(t, elected, 2*time.Second, "A elected")
	gotB := campaignOn(ctx, mustElection(t, newSession(t, c, WithTTL(150*time.Millisecond)), name), "B", WithPriority(10))
	waitEnlisted(t, ea, "B")
	// B's next attempt comes when A's lease can have expired (about 5 s):
	// only an entry that outlives B's own TTLs makes A yield before.
	assert.ErrorIs(t, recvWithin(t, causes, 3500*time.Millisecond, "A preempted by B"), ErrPreempted)
	assert.GreaterOrEqual(t, time.Since(first.at), time.Second, "yielded before its minimum term")
	require.NotNil(t, recvWithin(t, gotB, 2*time.Second, "B leads"))
}
