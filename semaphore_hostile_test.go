package redisleader

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisleader/redisleader/internal/redisserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// semaphore_hostile_test.go: a semaphore against a server clock that
// jumps and members it did not write but that pass for its own. A
// redis-server's TIME cannot be moved from a test (no DEBUG command
// sets it), so a jump is played on the scores, which are all that the
// scripts compare TIME with: a backward jump of J is every lease ending J
// later, a forward jump every lease ending J earlier.

// shiftSem adds d to every score of name's set (a server clock jump of
// -d), and returns the members.
func shiftSem(t *testing.T, c *redis.Client, name string, d time.Duration) []string {
	t.Helper()
	ctx := context.Background()
	zs, err := c.ZRangeWithScores(ctx, semKey(name), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var members []string
	for _, z := range zs {
		c.ZAdd(ctx, semKey(name), redis.Z{Score: z.Score + float64(d.Milliseconds()), Member: z.Member})
		members = append(members, z.Member.(string))
	}
	return members
}

// A backward jump of the server's clock (here 5 s, leases now end that
// much later) never admits a permit too many: the set stays full; and a
// fence key left ahead by the clock's earlier reading (an hour) does not
// make fences go back: the next permit's fence is above it.
func TestSemaphoreServerClockBackward(t *testing.T) {
	ctx := context.Background()
	c := redisserver.Start(t).Client(t)
	s := newSession(t, c, fastOpts()...)
	m := mustSemaphore(t, s, "back", 2)
	a, errA := m.TryAcquire(ctx)
	_, errB := m.TryAcquire(ctx)
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	shiftSem(t, c, "back", 5*time.Second)
	other := mustSemaphore(t, newSession(t, c, fastOpts()...), "back", 2)
	if _, err := other.TryAcquire(ctx); !errors.Is(err, ErrLocked) {
		t.Fatalf("TryAcquire after a backward jump: %v, want ErrLocked (the set is full)", err)
	}
	ahead := time.Now().Add(time.Hour).UnixMicro()
	c.Set(ctx, "redisleader:{back}:fence", strconv.FormatInt(ahead, 10), 0)
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := other.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire after a release: %v", err)
	}
	if l.Fence() <= ahead {
		t.Fatalf("fence %d not above the stored %d: it went back with the clock", l.Fence(), ahead)
	}
	if n := c.ZCard(ctx, semKey("back")).Val(); n != 2 {
		t.Fatalf("%d permits in the set, want 2", n)
	}
}

// A member that passes for one of ours (our form, a score within the
// longest lease: an hour ahead) holds a permit like any other: N=2 admits
// one more, never two; acquires and releases around it leave it exactly
// as it was, and Holders shows it.
func TestSemaphoreForgedLiveMember(t *testing.T) {
	ctx := context.Background()
	c := redisserver.Start(t).Client(t)
	s := newSession(t, c, fastOpts()...)
	m := mustSemaphore(t, s, "forged", 2)
	forged := redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: "forged-token\n7\nintruder"}
	c.ZAdd(ctx, semKey("forged"), forged)
	l, err := m.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire beside the forged member: %v", err)
	}
	if _, err := m.TryAcquire(ctx); !errors.Is(err, ErrLocked) {
		t.Fatalf("second TryAcquire: %v, want ErrLocked (the forged member holds a permit)", err)
	}
	hs, _, err := m.Holders(ctx)
	if err != nil || len(hs) != 2 {
		t.Fatalf("Holders: %v, %v; want ours and the forged one", hs, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := c.ZScore(ctx, semKey("forged"), forged.Member.(string)).Result(); err != nil || got != forged.Score {
		t.Fatalf("the forged member's score: %v, %v; want it unchanged (%v)", got, err, forged.Score)
	}
}

// A member forged into the set after a permit was taken, with a lease end
// of +inf, does not stop the permit's renewals: the set expires at the
// latest live end. (The renewal wrote its ZADD, then failed on PEXPIREAT
// "inf", round after round, until the permit was lost at its deadline.)
func TestSemaphoreRenewalPastForgedInf(t *testing.T) {
	ctx := context.Background()
	c := redisserver.Start(t).Client(t)
	roundOpt, renewed := rounds()
	s := newSession(t, c, fastOpts(roundOpt)...)
	m := mustSemaphore(t, s, "forged-inf", 2)
	l, err := m.TryAcquire(ctx)
	require.NoError(t, err)
	require.NoError(t, c.Do(ctx, "ZADD", semKey("forged-inf"), "+inf", "forged-token\n7\nintruder").Err())
	for range 4 { // the first report may be of a round before the forgery
		require.False(t, waitRound(t, renewed, 2*time.Second), "a renewal failed")
	}
	require.True(t, l.Held(), "%v", l.Err())
	ttl, err := c.PTTL(ctx, semKey("forged-inf")).Result()
	require.NoError(t, err)
	assert.True(t, ttl > 0 && ttl <= time.Minute, "the set expires with the live leases: %v", ttl)
	require.NoError(t, l.Release(ctx))
}

// A forward jump of the server's clock past a holder's lease end (here:
// its score set to the past) frees the permit for another while the
// holder still believes, until its next renewal: the server clock's
// fault, documented as for a lock (RELIABILITY.md, S14). The newcomer's
// fence is above the holder's, and the holder learns of its loss at its
// next renewal, never silently.
func TestSemaphoreServerClockForward(t *testing.T) {
	ctx := context.Background()
	c := redisserver.Start(t).Client(t)
	a, err := mustSemaphore(t, newSession(t, c, fastOpts()...), "fwd", 1).TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	shiftSem(t, c, "fwd", -time.Hour)
	b, err := mustSemaphore(t, newSession(t, c, fastOpts()...), "fwd", 1).TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire after the jump: %v, want the permit (its lease has passed on the server's clock)", err)
	}
	if b.Fence() <= a.Fence() {
		t.Fatalf("fence %d after %d", b.Fence(), a.Fence())
	}
	select {
	case <-a.Done():
		if !errors.Is(a.Err(), ErrNotOwner) && !errors.Is(a.Err(), ErrExpired) {
			t.Fatalf("the holder's loss: %v, want ErrNotOwner or ErrExpired", a.Err())
		}
	case <-time.After(100*time.Millisecond + 2*fastCallTimeout + slack): // a renew interval and a renewal
		t.Fatal("the holder was not told of its loss at its next renewal")
	}
}
