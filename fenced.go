package redisleader

import (
	"context"

	"github.com/redisleader/redisleader/internal/lease"
)

// Fenced writes: the resource side of fencing, for data kept in Redis.
//
// A fenced key is a hash with two fields: "value", the data, and "fence", the
// highest fence the key has accepted. The fence record is therefore the key
// itself: it lives in the same Redis Cluster slot, is persisted, replicated,
// expired and evicted with the data, and can never be lost while the data
// stays. Any key name works (no hash tag needed). Readers use HGET key value.

// ErrStaleFence is matched by the error FencedSet and FencedDel return when
// the key has already accepted a higher fence: a later owner has written, so
// this write was refused and nothing was written. The error's message gives
// the fence that was refused and the highest the key has accepted (never
// the key's value).
var ErrStaleFence = lease.ErrStaleFence

// FencedSet stores value in key if, and only if, fence is at least the
// highest fence key has accepted, and records fence as the new highest, in
// one atomic script. Pass the fence of the lock under which the write is
// made (Lock.Fence): a former owner that resumes after a pause writes with
// a lower fence than its successor's and is refused. key is a hash; read the
// data with HGET key value. FencedSet needs no Session, keeps no state and
// is safe for concurrent use, on any Client but a *redis.Ring.
//
// A stale fence returns an error matching ErrStaleFence; bad input, one
// matching ErrInvalid; neither writes. After another error the write may or
// may not have happened: repeat it with the same fence. The call ends with
// ctx or within one second. docs/fencing.md has the rules.
func FencedSet(ctx context.Context, c Client, key, value string, fence int64) error {
	return lease.FencedWrite(ctx, c, key, fence, lease.FencedSetArgs(key, fence, value))
}

// FencedDel removes the value of key if, and only if, fence is at least the
// highest fence key has accepted. The fence record stays (the key becomes a
// hash with only the "fence" field), so a write with a lower fence is still
// refused afterwards; HGET key value then returns nil. Its rules and errors
// are FencedSet's. Deleting a key that has no value is not an error: the
// fence is recorded all the same.
func FencedDel(ctx context.Context, c Client, key string, fence int64) error {
	return lease.FencedWrite(ctx, c, key, fence, lease.FencedDelArgs(key, fence))
}
