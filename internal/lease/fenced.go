package lease

import (
	"errors"
	"fmt"
)

// fenced.go: the fenced script's reply (lua/fenced.lua), for the root's
// FencedSet and FencedDel.

// ErrStaleFence is a fenced write refused for a fence below the highest the
// key has accepted (the root package exports it as
// redisleader.ErrStaleFence).
var ErrStaleFence = errors.New("redisleader: stale fence")

// MaxFence bounds the fences a fenced key accepts: Lua compares them as
// doubles, exact up to 2^53. Lock fences (server time in µs) stay below it
// for centuries, and never exceed it.
const MaxFence = 1<<53 - 1

// A StaleFenceError is a refused fenced write; it matches ErrStaleFence.
// Its message gives the fence refused and the highest the key has accepted
// (never the key's value).
type StaleFenceError struct {
	Key            string
	Fence, Highest int64
}

func (e *StaleFenceError) Error() string {
	return fmt.Sprintf("%s: fence %d for key %q is below %d, the highest fence it has accepted; nothing was written",
		ErrStaleFence, e.Fence, e.Key, e.Highest)
}

// Is reports whether target is ErrStaleFence.
func (e *StaleFenceError) Is(target error) bool { return target == ErrStaleFence }

// FencedReply decodes the fenced script's reply res to a write to key with
// fence: nil when accepted, a *StaleFenceError when refused, and otherwise
// an error that quotes nothing of the reply but its type.
func FencedReply(key string, fence int64, res any) error {
	if ok, _ := res.(int64); ok == 1 {
		return nil
	}
	if r, _ := res.([]any); len(r) == 2 {
		stale, _ := r[0].(int64)
		if highest, ok := r[1].(int64); stale == 0 && ok && highest > fence {
			return &StaleFenceError{Key: key, Fence: fence, Highest: highest}
		}
	}
	return fmt.Errorf("redisleader: fenced write to %q: unexpected reply of type %T", key, res)
}
