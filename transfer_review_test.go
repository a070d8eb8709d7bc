package redisleader

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader/internal/faultproxy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// transfer_review_test.go: defects found reviewing issue 30 (Transfer and
// priorities). Each test fails on the code under review.

// runTerms runs e.Run(ctx, value, …, opts...) on its own goroutine; each
// term sends its Lock and the time it started on elected, waits for its
// context and sends the context's cause on causes.
func runTerms(ctx context.Context, e *Election, value string, opts ...CampaignOption) (elected <-chan term30, causes <-chan error) {
	el, ca := make(chan term30, 8), make(chan error, 8)
	go func() {
		_ = e.Run(ctx, value, func(ctx context.Context, l *Lock) error {
			el <- term30{l: l, value: value, at: time.Now()}
			<-ctx.Done()
			ca <- context.Cause(ctx)
			return nil
		}, opts...)
	}()
	return el, ca
}

// term30 is one term of runTerms.
type term30 struct {
	l     *Lock
	value string
	at    time.Time
}

// TestReviewEqualLargePrioritiesDoNotPreempt: WithPriority accepts any
// value within ±(2^53-1), and "equal priorities never move leadership".
// The scripts build the exclusive bound of best() as '(' .. tonumber(p),
// and Lua 5.1 (Redis) turns a number into a string with %.14g: a priority
// of 15 digits or more is rounded (1125899906842625 → "1.1258999068426e+15"
// = 1125899906842600), so a candidate with the same priority (or a lower
// one within the rounding) counts as better and the leader is preempted.
func TestReviewEqualLargePrioritiesDoNotPreempt(t *testing.T) {
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

// TestReviewForgedCandidateLeaseCostsNoMoreThanAHandover: the doc promises
// that a forged entry costs at most one reservation's TTL. A member of
// :candlease with score +inf (anyone with write access to the slot can
// ZADD it) makes enlist() compute PEXPIREAT "inf", which Redis refuses
// after the script's earlier writes: every renewal of a leader with a
// priority fails (though its PEXPIRE ran), so the leader loses its lease at
// its local deadline, term after term, and no entry ever expires.
func TestReviewForgedCandidateLeaseCostsNoMoreThanAHandover(t *testing.T) {
	onRedisServer(t, func(t *testing.T, b *backend) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		k := newKeys("forgedlease")
		require.NoError(t, b.client.Do(ctx, "ZADD", k.candidateLeases(), "+inf", "ghost").Err())
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

// TestReviewCrashedTopCandidateDoesNotPreemptItsSuccessor: the leader with
// the highest priority dies (no release). Its candidate entry, renewed by
// its own renewals, lives two TTLs, beyond its lease (one TTL). The next
// leader, with a lower priority, takes the name after one TTL and its first
// renewal finds the dead leader "better": it is preempted, and its release
// reserves the name for the dead candidate for one more TTL. A crash then
// costs two leadership changes and about TTL + renew interval + TTL of
// vacancy instead of one TTL (issue 30: "liveness within TTL + margin").
func TestReviewCrashedTopCandidateDoesNotPreemptItsSuccessor(t *testing.T) {
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

// TestReviewTransferToLowerPriorityHolds: the issue's "planned
// maintenance: move leadership to host-b now". With priorities on, a
// Transfer to a candidate of lower priority returns nil (it leads), and
// the old leader's Run campaigns again, enlisting its higher priority: the
// successor's first renewal finds it and yields, so leadership is back
// where it was within a renew interval.
func TestReviewTransferToLowerPriorityHolds(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		hi := mustElection(t, newSession(t, b.client, fastOpts()...), "xferlow")
		hiTerms, _ := runTerms(ctx, hi, "hi", WithPriority(5))
		recvWithin(t, hiTerms, 2*time.Second, "hi elected")
		lo := mustElection(t, newSession(t, b.client, fastOpts()...), "xferlow")
		loTerms, loCauses := runTerms(ctx, lo, "lo", WithPriority(1))
		waitEnlisted(t, hi, "hi", "lo")
		require.NoError(t, hi.Transfer(ctx, "lo"))
		recvWithin(t, loTerms, 2*time.Second, "lo elected")
		select {
		case cause := <-loCauses:
			again := recvWithin(t, hiTerms, 2*time.Second, "hi elected again")
			t.Fatalf("the transfer to lo was undone (lo's term ended: %v): %s leads again", cause, again.value)
		case <-time.After(600 * time.Millisecond): // six renewals of lo
		}
	})
}

// TestReviewWrongTypeCandidateKeysWriteNothing (holds on the code under
// review; kept as a check): a string in :cand or :candlease makes a
// candidate's Campaign fail with a permanent error that names the key (it
// was a bare WRONGTYPE before issue 35.8) and no write at all, and a leader
// with a priority that releases leaves its key as it was (the heartbeat's
// retries change nothing either).
func TestReviewWrongTypeCandidateKeysWriteNothing(t *testing.T) {
	c, ks := notifying(t)
	ctx := context.Background()
	for _, which := range []string{"cand", "candlease"} {
		t.Run(which, func(t *testing.T) {
			k := newKeys("wrongtype-" + which)
			key := k.candidates()
			if which == "candlease" {
				key = k.candidateLeases()
			}
			e := mustElection(t, newSession(t, c, fastOpts()...), k.name)
			// A leader that enlisted before the foreign value arrived.
			l, err := e.Campaign(ctx, "leader", WithPriority(1), WithMinTerm(NeverYield))
			require.NoError(t, err)
			require.NoError(t, c.Del(ctx, key).Err())
			require.NoError(t, c.Set(ctx, key, "foreign", time.Minute).Err())
			ks.writes("")
			peer := mustElection(t, newSession(t, c, fastOpts()...), k.name)
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			_, err = peer.Campaign(cctx, "peer", WithPriority(2))
			require.Error(t, err)
			assert.True(t, permanent(err), "a foreign value is permanent: %v", err)
			assert.ErrorContains(t, err, key)
			before, err := c.Get(ctx, k.lock).Result()
			require.NoError(t, err)
			assert.Error(t, l.Release(ctx), "the release reads the candidates and fails")
			after, err := c.Get(ctx, k.lock).Result()
			require.NoError(t, err)
			assert.Equal(t, before, after, "the lock key is untouched")
			for _, w := range ks.writes("redisleader:") {
				// The leader's renewals fail before their first write
				// too, and renew the lease alone (issue 35.8).
				if w != k.lock+" expire" {
					t.Errorf("a write despite the foreign key: %s", w)
				}
			}
			v, err := c.Get(ctx, key).Result()
			require.NoError(t, err)
			assert.Equal(t, "foreign", v)
		})
	}
}

// TestReviewEmptyValueCandidateHidesTheBest: Campaign accepts the value ""
// with a priority, and enlists it. best() returns the best live entry
// without looking further, so when "" is on top the renewal reports "" as
// the better candidate, which renewReply reads as none: the leader never
// yields to "x" (priority 5, above the leader's 1), and its release deletes
// the key instead of handing it to "x" (heir("") is false, too).
func TestReviewEmptyValueCandidateHidesTheBest(t *testing.T) {
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
		k := newKeys("emptyvalue")
		require.NoError(t, b.client.ZAdd(ctx, k.candidates(), redis.Z{Score: 9, Member: ""}).Err())
		require.NoError(t, b.client.ZAdd(ctx, k.candidateLeases(), redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: ""}).Err())
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

// TestReviewUnacknowledgedRenewalWithBetterCandidateDoesNotCount: with
// WithReplicaAcks an unacknowledged renewal must not extend the local
// deadline (a failover could lose it: the replica's shorter TTL lets
// another candidate take the name while this leader still believes). But
// node.renew applies WAIT's error only to a zero renewal; preferRenewScript's
// {1, value} (a better candidate waits) decodes as renewal{better: value},
// so the ack error is dropped and the renewal counts. With NeverYield the
// leader then keeps extending its lease with replication cut, for as long
// as a better candidate waits.
func TestReviewUnacknowledgedRenewalWithBetterCandidateDoesNotCount(t *testing.T) {
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

// TestReviewReservationWithNewlinesIsExact (holds on the code under review;
// kept as a check): a reservation for a value with newlines is taken only
// by that value, not by a candidate whose value is a suffix or a prefix of
// it, nor by one that looks like "<fence>\n<value>".
func TestReviewReservationWithNewlinesIsExact(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		e := mustElection(t, newSession(t, b.client, fastOpts()...), "newlines")
		lead, err := e.Campaign(ctx, "a")
		require.NoError(t, err)
		fence := fmt.Sprint(lead.Fence())
		got := candidates(t, ctx, b, "newlines", false, "y", "x", "\ny", fence+"\nx\ny", "x\ny")
		enlistAll(t, ctx, b, "newlines", false, got)
		require.NoError(t, e.Transfer(ctx, "x\ny"))
		l := recvWithin(t, got["x\ny"], 2*time.Second, "x\\ny leads")
		require.NotNil(t, l)
		assert.Greater(t, l.Fence(), lead.Fence())
		for _, v := range []string{"y", "x", "\ny", fence + "\nx\ny"} {
			select {
			case other := <-got[v]:
				t.Fatalf("%q led: %v", v, other)
			default:
			}
		}
	})
}
