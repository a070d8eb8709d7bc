package redisleader

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFairSameSessionNeverWakesItself: two waiters of one session on one name
// share the session's wake-up channel. When the name is free and the head
// (waiter A) has not taken it yet, the waiter behind it (B) PUBLISHes "W" on
// the head's session channel (fairAcquireScript: "if not cur and head then
// PUBLISH"), which is B's own channel too: B wakes itself at once and tries
// again, and again: a busy loop against Redis for as long as the head is
// slow to take the free name (up to the head's lease, one TTL). B should
// sleep until the head's lease can have expired (queueDelay(headLeft)).
func TestFairSameSessionNeverWakesItself(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		name, h := fairHeld(t, b, "review-selfwake")

		var (
			first    sync.Once
			aBlocked = make(chan struct{})
			unblock  = make(chan struct{})
			bLocked  = make(chan struct{}, 64)
			attempts atomic.Int64
		)
		hook := withAttemptHook(func(_ string, err error) {
			isFirst := false
			first.Do(func() { isFirst = true })
			if isFirst { // waiter A: the head, slow to act (paused)
				close(aBlocked)
				<-unblock
				return
			}
			attempts.Add(1)
			if errors.Is(err, ErrLocked) {
				select {
				case bLocked <- struct{}{}:
				default:
				}
			}
		})
		s := newSession(t, b.client, WithFairness(), WithTTL(3*time.Second), hook)
		var once sync.Once
		release := func() { once.Do(func() { close(unblock) }) }
		t.Cleanup(release) // before the session's Close, which waits for A

		wctx, cancel := context.WithCancel(ctx)
		t.Cleanup(cancel)
		go func() { _, _ = s.Lock(wctx, name) }() // A
		recvWithin(t, aBlocked, 5*time.Second, "A queued")
		go func() { _, _ = s.Lock(wctx, name) }() // B
		recvWithin(t, bLocked, 5*time.Second, "B queued")

		require.NoError(t, h.Release(ctx)) // wakes the head, A (and so B)
		require.Eventually(t, func() bool { return attempts.Load() >= 2 }, 5*time.Second, time.Millisecond)
		start := attempts.Load()
		deadline := time.Now().Add(300 * time.Millisecond)
		for time.Now().Before(deadline) {
			select {
			case <-bLocked:
			case <-time.After(10 * time.Millisecond):
			}
		}
		n := attempts.Load() - start
		release()
		cancel()
		assert.LessOrEqual(t, n, int64(5),
			"waiter B made %d attempts in 300ms while the head (same session) had not yet taken the free name: it wakes itself with its own PUBLISH W", n)
	})
}

// TestFairTombstoneOutlivesShortTTLs: the sessions of a name may have
// different TTLs. A waiter of a session with a long TTL that gives up leaves
// a tombstone for its TTL (leaveScript), but the next join or renewal by a
// waiter of a short-TTL session sets PEXPIREAT on the leases to
// keepUntil(leases, now + short TTL), which only looks at the top score, a
// live lease, never at tombstones (negative scores): the tombstone dies
// with the key after the short TTL, and a late attempt of the waiter that
// left queues a ghost, which then holds the queue up for the long TTL.
func TestFairTombstoneOutlivesShortTTLs(t *testing.T) {
	m, c := newMini(t)
	ctx := context.Background()
	k := newKeys("review-tomb")
	q, ls := k.queue(), k.leases()
	// A holder, so that joins queue.
	require.NoError(t, c.Set(ctx, k.lock, "holder\n1\n", 0).Err())

	join := func(member string, ttl int) []any {
		argv := []any{nil, nil, 4, k.lock, k.fence, q, ls, "tok-" + member, ttl, "", member, "1"}
		res, err := fairAcquireScript.run(ctx, c, argv).Slice()
		require.NoError(t, err)
		return res
	}
	join("LONG.1", 30000)
	require.NoError(t, leaveScript.run(ctx, c, []any{nil, nil, 3, k.lock, q, ls, "LONG.1", 30000}).Err())
	join("SHORT.1", 1000) // a waiter of a session with a 1s TTL

	pttl, err := c.PTTL(ctx, ls).Result()
	require.NoError(t, err)
	assert.Greater(t, pttl, 20*time.Second, "the leases key (holding LONG.1's 30s tombstone) expires in %v", pttl)

	m.FastForward(2 * time.Second) // SHORT.1 died; LONG.1's tombstone should live 28s more
	m.SetTime(time.Now().Add(2 * time.Second))
	res := join("LONG.1", 30000) // LONG.1's late attempt
	assert.EqualValues(t, -2, res[3], "a late attempt of a waiter that left must find its tombstone, not queue a ghost")
}
