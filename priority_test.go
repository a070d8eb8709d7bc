package redisleader

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader/internal/faultproxy"
	"github.com/redisleader/redisleader/internal/redisserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisleader/redisleader/internal/lease"
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
	require.Equal(t, int64(1), src.Do(t, "EXISTS", lease.NewKeys("split-slot").Candidates), "the candidate keys stay behind")
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
			k := lease.NewKeys("foreign-" + which)
			key := k.Candidates
			if which == "candlease" {
				key = k.CandidateLeases
			}
			roundOpt, renewed := rounds()
			e := mustElection(t, newSession(t, c, fastOpts(roundOpt)...), k.Name)
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
			peer := mustElection(t, newSession(t, c, fastOpts()...), k.Name)
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
				if w != k.Lock+" expire" && !strings.HasSuffix(w, " expired") { // the leader's renewals; expiry
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

// runTerms runs e.Run(ctx, value, …, opts...) on its own goroutine; each
// term sends its Lock and the time it started on elected, waits for its
// context and sends the context's cause on causes.
func runTerms(ctx context.Context, e *Election, value string, opts ...CampaignOption) (elected <-chan wonTerm, causes <-chan error) {
	el, ca := make(chan wonTerm, 8), make(chan error, 8)
	go func() {
		_ = e.Run(ctx, value, func(ctx context.Context, l *Lock) error {
			el <- wonTerm{l: l, value: value, at: time.Now()}
			<-ctx.Done()
			ca <- context.Cause(ctx)
			return nil
		}, opts...)
	}()
	return el, ca
}

// wonTerm is one term of runTerms.
type wonTerm struct {
	l     *Lock
	value string
	at    time.Time
}

// TestEqualLargePrioritiesDoNotPreempt: WithPriority accepts any
// value within ±(2^53-1), and "equal priorities never move leadership".
// Found reviewing issue 30: the scripts built the exclusive bound of best()
// as '(' .. tonumber(p), and Lua 5.1 (Redis) turns a number into a string
// with %.14g: a priority of 15 digits or more was rounded (1125899906842625
// → "1.1258999068426e+15" = 1125899906842600), so a candidate with the same
// priority (or a lower one within the rounding) counted as better and the
// leader was preempted.
func TestEqualLargePrioritiesDoNotPreempt(t *testing.T) {
	const p = 1<<50 + 1 // 1125899906842625: within the documented range
	forBackends(t, func(t *testing.T, b *backend) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		roundOpt, renewed := rounds()
		e := mustElection(t, newSession(t, b.client, fastOpts(roundOpt)...), "bigprio")
		elected, causes := runTerms(ctx, e, "a", WithPriority(p))
		first := recvWithin(t, elected, 2*time.Second, "a elected").l
		peer := mustElection(t, newSession(t, b.client, fastOpts()...), "bigprio")
		go func() { _, _ = peer.Campaign(ctx, "b", WithPriority(p)) }()
		waitEnlisted(t, e, "a", "b")
		for range 4 { // renewals that each look for a better candidate
			select {
			case cause := <-causes:
				t.Fatalf("leader with priority %d ended (cause %v) for a candidate of the same priority", int64(p), cause)
			case <-renewed:
			case <-time.After(time.Second):
				t.Fatal("no renewal round within 1s")
			}
		}
		assert.True(t, first.Held(), "equal priorities must not move leadership")
	})
}

// TestForgedCandidateLeaseCostsNoMoreThanAHandover: the doc promises
// that a forged entry costs at most one reservation's TTL. Found reviewing
// issue 30: a member of :candlease with score +inf (anyone with write
// access to the slot can ZADD it) made enlist() compute PEXPIREAT "inf",
// which Redis refuses after the script's earlier writes: every renewal of a
// leader with a priority failed (though its PEXPIRE ran), so the leader
// lost its lease at its local deadline, term after term, and no entry ever
// expired.
func TestForgedCandidateLeaseCostsNoMoreThanAHandover(t *testing.T) {
	onRedisServer(t, func(t *testing.T, b *backend) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		k := lease.NewKeys("forgedlease")
		require.NoError(t, b.client.Do(ctx, "ZADD", k.CandidateLeases, "+inf", "ghost").Err())
		roundOpt, renewed := rounds()
		e := mustElection(t, newSession(t, b.client, fastOpts(roundOpt)...), "forgedlease")
		cctx, ccancel := context.WithTimeout(ctx, 3*time.Second)
		defer ccancel()
		l, err := e.Campaign(cctx, "a", WithPriority(1))
		require.NoError(t, err, "a candidate with a priority cannot even campaign")
		assert.False(t, waitRound(t, renewed, time.Second), "a renewal round failed because of one forged entry")
		select {
		case <-l.Done():
			t.Fatalf("the leader lost its lease to one forged entry: %v", l.Err())
		case <-time.After(3 * 600 * time.Millisecond): // three TTLs
		}
	})
}

// TestCrashedTopCandidateDoesNotPreemptItsSuccessor: the leader with
// the highest priority dies (no release), and the next leader, with a lower
// priority, keeps the name. Found reviewing issue 30: the dead leader's
// candidate entry, renewed by its own renewals, lived two TTLs, beyond its
// lease (one TTL); the next leader's first renewal found it "better", so it
// was preempted and its release reserved the name for the dead candidate
// for one more TTL: two leadership changes and about TTL + renew interval +
// TTL of vacancy instead of one TTL ("liveness within TTL + margin").
func TestCrashedTopCandidateDoesNotPreemptItsSuccessor(t *testing.T) {
	onRedisServer(t, func(t *testing.T, b *backend) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s1 := newSession(t, b.client, fastOpts()...)
		top, err := mustElection(t, s1, "crashtop").Campaign(ctx, "top", WithPriority(5))
		require.NoError(t, err)
		e := mustElection(t, newSession(t, b.client, fastOpts()...), "crashtop")
		elected, causes := runTerms(ctx, e, "low", WithPriority(1))
		waitEnlisted(t, e, "top", "low")
		crashed := time.Now()
		crash(s1)
		require.ErrorIs(t, top.Err(), errCrashed)
		at := recvWithin(t, elected, 2*time.Second, "low elected after the crash").at
		t.Logf("low elected %v after the crash", at.Sub(crashed).Round(time.Millisecond))
		select {
		case cause := <-causes:
			after := time.Since(at).Round(time.Millisecond)
			again := recvWithin(t, elected, 3*time.Second, "low elected again").at
			t.Fatalf("low preempted (%v) %v after its election, for a candidate that crashed; elected again %v after the crash",
				cause, after, again.Sub(crashed).Round(time.Millisecond))
		case <-time.After(2 * 600 * time.Millisecond): // past the dead entry's two TTLs
		}
	})
}

// TestWrongTypeCandidateKeysWriteNothing: a string in :cand or :candlease
// makes a candidate's Campaign fail with a permanent error that names the
// key (it was a bare WRONGTYPE before issue 35.8) and no write at all, and
// a leader with a priority that releases leaves its key as it was (the
// heartbeat's retries change nothing either).
func TestWrongTypeCandidateKeysWriteNothing(t *testing.T) {
	c, ks := notifying(t)
	ctx := context.Background()
	for _, which := range []string{"cand", "candlease"} {
		t.Run(which, func(t *testing.T) {
			k := lease.NewKeys("wrongtype-" + which)
			key := k.Candidates
			if which == "candlease" {
				key = k.CandidateLeases
			}
			e := mustElection(t, newSession(t, c, fastOpts()...), k.Name)
			// A leader that enlisted before the foreign value arrived.
			l, err := e.Campaign(ctx, "leader", WithPriority(1), WithMinTerm(NeverYield))
			require.NoError(t, err)
			require.NoError(t, c.Del(ctx, key).Err())
			require.NoError(t, c.Set(ctx, key, "foreign", time.Minute).Err())
			ks.writes("")
			peer := mustElection(t, newSession(t, c, fastOpts()...), k.Name)
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			_, err = peer.Campaign(cctx, "peer", WithPriority(2))
			require.Error(t, err)
			assert.True(t, permanent(err), "a foreign value is permanent: %v", err)
			assert.ErrorContains(t, err, key)
			before, err := c.Get(ctx, k.Lock).Result()
			require.NoError(t, err)
			assert.Error(t, l.Release(ctx), "the release reads the candidates and fails")
			after, err := c.Get(ctx, k.Lock).Result()
			require.NoError(t, err)
			assert.Equal(t, before, after, "the lock key is untouched")
			for _, w := range ks.writes("redisleader:") {
				// The leader's renewals fail before their first write
				// too, and renew the lease alone (issue 35.8).
				if w != k.Lock+" expire" {
					t.Errorf("a write despite the foreign key: %s", w)
				}
			}
			v, err := c.Get(ctx, key).Result()
			require.NoError(t, err)
			assert.Equal(t, "foreign", v)
		})
	}
}

// TestEmptyValueCandidateHidesTheBest: Campaign refuses the value "" with
// a priority, and a forged entry for "" on top of the candidates does not
// hide the best real one. Found reviewing issue 30: Campaign enlisted "",
// and best() returned the best live entry without looking further, so the
// renewal reported "" as the better candidate, which lease.DecodeRenew read as
// none: the leader never yielded to "x" (priority 5, above the leader's 1),
// and its release deleted the key instead of handing it to "x".
func TestEmptyValueCandidateHidesTheBest(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		roundOpt, renewed := rounds()
		e := mustElection(t, newSession(t, b.client, fastOpts(roundOpt)...), "emptyvalue")
		elected, causes := runTerms(ctx, e, "L", WithPriority(1))
		recvWithin(t, elected, 2*time.Second, "L elected")
		// "" cannot campaign with a priority; a forged entry for it is
		// skipped.
		_, err := e.Campaign(ctx, "", WithPriority(9))
		require.ErrorIs(t, err, ErrInvalid)
		k := lease.NewKeys("emptyvalue")
		require.NoError(t, b.client.ZAdd(ctx, k.Candidates, redis.Z{Score: 9, Member: ""}).Err())
		require.NoError(t, b.client.ZAdd(ctx, k.CandidateLeases, redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: ""}).Err())
		peer := mustElection(t, newSession(t, b.client, fastOpts()...), "emptyvalue")
		go func() { _, _ = peer.Campaign(ctx, "x", WithPriority(5)) }()
		waitEnlisted(t, e, "L", "x")
		for range 5 {
			select {
			case cause := <-causes:
				require.ErrorIs(t, cause, ErrPreempted)
				return // L yielded: x (or "") waits above it
			case <-renewed:
			case <-time.After(time.Second):
				t.Fatal("no renewal round within 1s")
			}
		}
		t.Fatal("L never yielded although x (priority 5 > 1) waits: the candidate \"\" (priority 9) hides it")
	})
}

// TestUnacknowledgedRenewalWithBetterCandidateDoesNotCount: with
// WithReplicaAcks an unacknowledged renewal must not extend the local
// deadline (a failover could lose it: the replica's shorter TTL lets
// another candidate take the name while this leader still believes), also
// when a better candidate waits. Found reviewing issue 30: node.renew (now lease.Node.Renew)
// applied WAIT's error only to a zero renewal; preferRenewScript's {1,
// value} (a better candidate waits) decoded as renewal{better: value}, so
// the ack error was dropped and the renewal counted: with NeverYield the
// leader kept extending its lease with replication cut, for as long as a
// better candidate waited.
func TestUnacknowledgedRenewalWithBetterCandidateDoesNotCount(t *testing.T) {
	primary, _, link := replicated(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := primary.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	round, roundDone := rounds()
	const ttl = 3 * time.Second
	s := newSession(t, c, WithTTL(ttl), WithReplicaAcks(1, 200*time.Millisecond), round)
	e := mustElection(t, s, "acked-prio")
	l, err := e.Campaign(ctx, "a", WithPriority(1), WithMinTerm(NeverYield))
	require.NoError(t, err)
	peer := mustElection(t, newSession(t, c, WithTTL(ttl)), "acked-prio")
	go func() { _, _ = peer.Campaign(ctx, "b", WithPriority(2)) }()
	waitEnlisted(t, e, "a", "b")
	require.False(t, waitRound(t, roundDone, 3*time.Second), "an acknowledged renewal")

	link.Blackhole(faultproxy.Both)
	d := l.Deadline()
	select {
	case <-l.Done():
		assert.ErrorIs(t, l.Err(), ErrExpired)
		assert.False(t, time.Now().Before(d), "not before the deadline")
	case <-time.After(2 * ttl):
		t.Fatalf("replication cut for two TTLs, yet the leader still holds (deadline moved from %v to %v): unacknowledged renewals counted",
			d.Format("15:04:05.000"), l.Deadline().Format("15:04:05.000"))
	}
}

// TestCampaignOptionsValidatedOnce: Campaign validates the combined
// campaign options in one place, before any I/O (the client here has no
// server): a priority out of range, a negative minimum term (-1ns
// included: NeverYield is no negative magic value), WithMinTerm without
// WithPriority, a nil option and an empty value with a priority are
// refused; NeverYield and the last of repeated options are accepted.
func TestCampaignOptionsValidatedOnce(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	t.Cleanup(func() { _ = client.Close() })
	s, err := NewSession(client)
	require.NoError(t, err)
	require.NoError(t, s.Close(context.Background())) // Campaign checks, then returns ErrSessionClosed
	e := mustElection(t, s, "opts")
	for _, c := range []struct {
		value string
		opts  []CampaignOption
		want  string // "" when only ErrSessionClosed is expected
	}{
		{"v", []CampaignOption{WithPriority(lease.MaxPriority + 1)}, "out of range"},
		{"v", []CampaignOption{WithPriority(-lease.MaxPriority - 1)}, "out of range"},
		{"v", []CampaignOption{WithPriority(1), WithMinTerm(-time.Nanosecond)}, "must not be negative"},
		{"v", []CampaignOption{WithMinTerm(NeverYield)}, "WithMinTerm needs WithPriority"},
		{"v", []CampaignOption{WithPriority(1), nil}, "must not be nil"},
		{"", []CampaignOption{WithPriority(1)}, "needs a value"},
		{"v", []CampaignOption{WithPriority(lease.MaxPriority), WithMinTerm(NeverYield)}, ""},
		{"v", []CampaignOption{WithPriority(1 << 60), WithPriority(-lease.MaxPriority)}, ""},
		{"", []CampaignOption{WithMinTerm(-1), WithMinTerm(0), WithPriority(0), WithPriority(2)}, "needs a value"},
	} {
		_, err := e.Campaign(context.Background(), c.value, c.opts...)
		if c.want == "" {
			assert.ErrorIs(t, err, ErrSessionClosed, "%q %v", c.value, c.opts)
			continue
		}
		assert.ErrorIs(t, err, ErrInvalid, "%q %v", c.value, c.opts)
		assert.ErrorContains(t, err, c.want)
	}
}

// forgeCandidates enlists, with live leases, two candidates this package
// cannot have written in k's election: one with a priority of 1e300, one
// with a value over 64 KiB.
func forgeCandidates(t *testing.T, c *redis.Client, k lease.Keys) {
	t.Helper()
	ctx := context.Background()
	until := float64(time.Now().Add(time.Minute).UnixMilli())
	for _, z := range []redis.Z{{Score: 1e300, Member: "huge"}, {Score: 7, Member: strings.Repeat("v", 65<<10)}} {
		require.NoError(t, c.ZAdd(ctx, k.Candidates, z).Err())
		require.NoError(t, c.ZAdd(ctx, k.CandidateLeases, redis.Z{Score: until, Member: z.Member}).Err())
	}
}

// Candidates leaves out entries this package cannot have written: a
// priority beyond ±(2^53−1) (a score of 1e300 was reported as priority
// 9223372036854775807) or a value over 64 KiB.
func TestCandidatesLeaveOutForged(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		e := mustElection(t, newSession(t, b.client, fastOpts()...), "forged-cands")
		l, err := e.Campaign(ctx, "real", WithPriority(5))
		require.NoError(t, err)
		k := lease.NewKeys("forged-cands")
		forgeCandidates(t, b.client.(*redis.Client), k)
		got, err := e.Candidates(ctx)
		require.NoError(t, err)
		assert.Equal(t, []Candidate{{Value: "real", Priority: 5}}, got)
		require.NoError(t, l.Release(ctx))
	})
}

// A Run leader does not yield to such a forged candidate (it yielded, and
// handed the name over to it: nobody led for a TTL).
func TestForgedCandidateDoesNotPreempt(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		roundOpt, renewed := rounds()
		e := mustElection(t, newSession(t, b.client, fastOpts(roundOpt)...), "forged-preempt")
		elected, causes := runTerms(ctx, e, "real", WithPriority(1))
		recvWithin(t, elected, 2*time.Second, "elected")
		k := lease.NewKeys("forged-preempt")
		forgeCandidates(t, b.client.(*redis.Client), k)
		for range 4 { // the first report may be of a round before the forgery
			require.False(t, waitRound(t, renewed, 2*time.Second))
		}
		assert.Empty(t, causes, "the leader yielded to a forged candidate")
	})
}
