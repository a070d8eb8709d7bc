package redisleader

import (
	"context"
	"strings"
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

// slotOf returns key's slot, the master that serves it and another one.
func slotOf(cluster *redisserver.Cluster, key string) (slot int, src, other *redisserver.Server) {
	slot = redisserver.Slot(key)
	src = cluster.Owner(slot)
	for _, n := range cluster.Nodes() {
		if n != src {
			return slot, src, n
		}
	}
	return slot, src, nil
}

// TestClusterPriorityLeaderKeepsLeaseInSplitSlot (issue 35.4): while the
// slot of an election migrates and only its lock key has moved, a renewal
// naming the lock and the candidate keys gets TRYAGAIN from both nodes; a
// leader with a priority must keep its lease as a plain leader does
// (renewing the lock key alone, through ASK), and Candidates lists it again
// once the migration is over.
func TestClusterPriorityLeaderKeepsLeaseInSplitSlot(t *testing.T) {
	cluster := redisserver.StartCluster(t, 3)
	ctx := context.Background()
	roundOpt, renewed := rounds()
	s := newSession(t, clusterClient(t, cluster), WithTTL(time.Second), roundOpt)
	e := mustElection(t, s, "split-slot")
	l, err := e.Campaign(ctx, "a", WithPriority(1))
	require.NoError(t, err)
	slot, src, dst := slotOf(cluster, l.Key())
	dst.Do(t, "CLUSTER", "SETSLOT", slot, "IMPORTING", cluster.NodeID(src))
	src.Do(t, "CLUSTER", "SETSLOT", slot, "MIGRATING", cluster.NodeID(dst))
	src.Do(t, "MIGRATE", "127.0.0.1", dst.Port(), "", 0, 5000, "KEYS", l.Key())
	require.Equal(t, int64(1), src.Do(t, "EXISTS", newKeys("split-slot").candidates()), "the candidate keys stay behind")
	// Four rounds (the renew interval is TTL/3): past the local deadline of
	// a leader whose renewals all fail.
	for range 4 {
		assert.False(t, waitRound(t, renewed, 2*time.Second), "a renewal failed during the migration")
	}
	require.True(t, l.Held(), "the lease was lost during the migration: %v", l.Err())
	cluster.MigrateSlot(t, slot, dst)
	waitEnlisted(t, e, "a")
	require.True(t, l.Held(), "the lease was lost finishing the migration: %v", l.Err())
	require.NoError(t, l.Release(ctx))
}

// TestForeignCandidateKeyIsNamed (issue 35.8): a value someone else wrote
// at either candidate key is left as it was (type, value, TTL), every call
// that needs the candidates fails with an error that names the key and
// says what to do, and a leader with a priority keeps its lease (the
// candidate bookkeeping is a hint; the lease is the fact).
func TestForeignCandidateKeyIsNamed(t *testing.T) {
	c, ks := notifying(t)
	ctx := context.Background()
	for _, which := range []string{"cand", "candlease"} {
		t.Run(which, func(t *testing.T) {
			k := newKeys("foreign-" + which)
			key := k.candidates()
			if which == "candlease" {
				key = k.candidateLeases()
			}
			roundOpt, renewed := rounds()
			e := mustElection(t, newSession(t, c, fastOpts(roundOpt)...), k.name)
			l, err := e.Campaign(ctx, "leader", WithPriority(1))
			require.NoError(t, err)
			require.NoError(t, c.Del(ctx, key).Err())
			require.NoError(t, c.Set(ctx, key, "foreign", time.Minute).Err())
			ks.writes("")
			named := func(err error) {
				t.Helper()
				require.Error(t, err)
				assert.ErrorContains(t, err, key)
				assert.ErrorContains(t, err, "delete it")
				assert.True(t, permanent(err), "%v", err)
			}
			peer := mustElection(t, newSession(t, c, fastOpts()...), k.name)
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			_, err = peer.Campaign(cctx, "peer", WithPriority(2))
			named(err)
			named(peer.Run(cctx, "peer", func(context.Context, *Lock) error { return nil }, WithPriority(2)))
			_, err = peer.Candidates(cctx)
			named(err)
			for range 8 { // 800 ms: past the lease (600 ms) of failing renewals
				assert.False(t, waitRound(t, renewed, time.Second), "a renewal failed")
			}
			assert.True(t, l.Held(), "the leader lost its lease: %v", l.Err())

			for _, w := range ks.writes("redisleader:") {
				if w != k.lock+" expire" && !strings.HasSuffix(w, " expired") { // the leader's renewals; expiry
					t.Errorf("a write despite the foreign key: %s", w)
				}
			}
			typ, err := c.Type(ctx, key).Result()
			require.NoError(t, err)
			v, err := c.Get(ctx, key).Result()
			require.NoError(t, err)
			ttl, err := c.PTTL(ctx, key).Result()
			require.NoError(t, err)
			assert.Equal(t, "string", typ)
			assert.Equal(t, "foreign", v)
			assert.Greater(t, ttl, 50*time.Second, "its TTL was changed")
		})
	}
}

// TestACLDeniedCandidateRead: the candidate keys' check (a ZSCORE under its
// own pcall, which makes WRONGTYPE a named error) leaves an ACL denial as
// every other denial inside a script: an error naming ZSCORE and the key.
func TestACLDeniedCandidateRead(t *testing.T) {
	srv := redisserver.Start(t)
	admin := srv.Client(t)
	setUser(t, admin, "no-zscore", aclRule, aclSuccession, "-zscore")
	e := mustElection(t, newSession(t, userClient(t, srv, "no-zscore"), WithTTL(time.Second)), "no-zscore")
	_, err := e.Campaign(context.Background(), "a", WithPriority(1))
	assertDenied(t, err, "permission denied for ZSCORE redisleader:{no-zscore}:cand (ACL): ",
		aclWordings.script(deniedCommand, "no-zscore", "zscore"))
}
