package redisleader

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
