package redisleader

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// acquired is what one node answered to an acquire.
type acquired struct {
	fence int64         // ours when err is nil, else the holder's (ErrLocked)
	left  time.Duration // ErrLocked: the holder's PTTL (-1: no TTL)
	err   error         // nil: acquired; ErrLocked wrapped; or the Redis error
}

// acquireReply decodes the acquire script's reply.
func (l *Lock) acquireReply(res []any, err error) acquired {
	if err != nil {
		return acquired{err: fmt.Errorf("redisleader: acquire %q: %w", l.keys.name, err)}
	}
	if len(res) < 2 {
		return acquired{err: fmt.Errorf("redisleader: acquire %q: unexpected reply %v", l.keys.name, res)}
	}
	if ok, _ := res[0].(int64); ok == 1 {
		fence, _ := res[1].(int64)
		return acquired{fence: fence}
	}
	var r acquired
	if stored, ok := res[1].(string); ok {
		h, _ := parseHolder(stored)
		r.fence = h.fence
	}
	if len(res) > 2 {
		if ms, ok := res[2].(int64); ok && ms >= 0 {
			r.left = time.Duration(ms) * time.Millisecond
		} else {
			r.left = -1 // no TTL: nothing to align with
		}
	}
	r.err = fmt.Errorf("%w (fence %d)", ErrLocked, r.fence)
	return r
}

// deleted is the outcome of one lock's compare-and-delete: on how many
// nodes it failed, and the first error.
type deleted struct {
	failed int
	err    error
}

// deleteTokens runs the compare-and-delete for every lock's token in one
// pipelined round trip (per node, all nodes at once) and returns each
// lock's outcome. A node where the key no longer held the token counts as
// deleted.
func (s *Session) deleteTokens(ctx context.Context, locks []*Lock) []deleted {
	if len(locks) == 0 {
		return nil
	}
	out := make([]deleted, len(locks))
	// run deletes every lock's token on one node; record adds its errors.
	run := func(ctx context.Context, c Client) []error {
		argvs := make([][]any, len(locks))
		for i, l := range locks {
			argvs[i] = []any{nil, nil, 1, l.keys.lock, l.tokenArg}
		}
		errs := make([]error, len(locks))
		for i, cmd := range releaseScript.runAll(ctx, c, argvs) {
			errs[i] = cmd.Err()
		}
		return errs
	}
	record := func(errs []error) {
		for i, err := range errs {
			if err != nil {
				out[i].failed++
				if out[i].err == nil {
					out[i].err = err
				}
			}
		}
	}
	if s.quorum == 1 {
		callCtx := s.bound(ctx, time.Time{})
		errs := run(callCtx, s.client)
		unbind(callCtx)
		record(errs)
		return out
	}
	// Redlock: every node, at once, and wait for every one (up to the call
	// timeout): unlike an acquire or a renewal, a delete cut short leaves
	// the token on a healthy node, where it keeps the next owner from a
	// quorum while another node is down.
	callCtx, cancel := s.boundNodes(ctx, time.Time{})
	defer cancel()
	var mu sync.Mutex
	s.onNodes(func(_ int, c Client) {
		errs := run(callCtx, c)
		mu.Lock()
		defer mu.Unlock()
		record(errs)
	})
	return out
}
