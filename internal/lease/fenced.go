package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redisleader/redisleader/internal/wire"
)

// fenced.go: the fenced script's call and reply (lua/fenced.lua), for the
// root's FencedSet and FencedDel.

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

// fencedCallTimeout bounds a fenced write, which has no Session.
const fencedCallTimeout = time.Second

// FencedWrite validates the input of a fenced write to key with fence
// (CheckFenced) and runs lua/fenced.lua with argv (FencedSetArgs,
// FencedDelArgs) on c, within ctx and one second.
func FencedWrite(ctx context.Context, c wire.Client, key string, fence int64, argv []any) error {
	if err := CheckFenced(c, key, fence); err != nil {
		return err
	}
	callCtx, cancel := context.WithTimeout(ctx, fencedCallTimeout)
	defer cancel()
	res, err := wire.UntilDone(callCtx, func() (any, error) { return FencedRun.Run(callCtx, c, argv).Result() })
	if err != nil {
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			err = errors.Join(cerr, err)
		}
		return fmt.Errorf("redisleader: fenced write to %q: %w", key, err)
	}
	return FencedReply(key, fence, res)
}

// CheckFenced is the input rule of a fenced write: a client that is no
// Ring, a key, a fence within [1, MaxFence].
func CheckFenced(c wire.Client, key string, fence int64) error {
	switch wire.KindOf(c) { // reflection: once
	case wire.KindNil:
		return Invalidf("fenced write: nil Client")
	case wire.KindRing:
		// On another shard, the key has no fence record: a stale write would be accepted.
		return Invalidf(wire.RingRejectf, "fenced write: the client", c)
	}
	switch {
	case key == "":
		return Invalidf("fenced write: key must not be empty")
	case fence < 1 || fence > MaxFence:
		return Invalidf("fenced write to %q: fence %d must be within [1, 2^53-1] (Lock.Fence is)", key, fence)
	}
	return nil
}
