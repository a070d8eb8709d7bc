package lease

import (
	"fmt"

	"github.com/redis/go-redis/v9"
)

// plain.go: the default protocol's calls as the lease floor sees them, in
// the order an acquisition makes them: acquire's vector and reply, renew's
// and release's (the fair and candidate variants are in args.go).

// Acquire fills buf with acquire's vector and returns it.
func (a *Args) Acquire(buf *[8]any) []any {
	*buf = [8]any{nil, nil, 2, a.Lock, a.Fence, a.Token, a.TTL, a.Value}
	return buf[:]
}

// An Acquired is one server's reply to an acquire script (acquire,
// acquire_candidate, fair_acquire).
type Acquired struct {
	Taken bool  // taken now, or already ours
	Fence int64 // taken: ours; not: the holder's (0 when free)
	At    int64 // taken: the server TIME in µs its TTL runs from (0: not told)
	// Not taken:
	Free     bool  // free, but waiters came first (fair)
	Foreign  bool  // the lock key holds a value this package did not write
	PTTL     int64 // the holder's PTTL in ms; -1: none or no TTL; 0: not told
	Ahead    int   // fair: live waiters ahead (0: the head; -2: gave up); -1: not told
	HeadLeft int64 // fair: ms left on the head waiter's lease
}

// DecodeAcquire decodes res, an acquire script's reply.
func DecodeAcquire(res []any) (Acquired, error) {
	if len(res) < 2 {
		return Acquired{}, fmt.Errorf("unexpected reply of %d elements", len(res))
	}
	if ok, _ := res[0].(int64); ok == 1 {
		r := Acquired{Taken: true}
		r.Fence, _ = res[1].(int64)
		if len(res) > 2 {
			r.At, _ = res[2].(int64)
		}
		return r, nil
	}
	r := Acquired{Ahead: -1, Free: res[1] == nil}
	if len(res) >= 5 {
		ahead, _ := res[3].(int64)
		r.Ahead = int(ahead)
		r.HeadLeft, _ = res[4].(int64)
	}
	if stored, ok := res[1].(string); ok {
		h, ok := ParseHolder(stored)
		r.Fence, r.Foreign = h.Fence, !ok
	}
	if len(res) > 2 {
		if ms, ok := res[2].(int64); ok && ms >= 0 {
			r.PTTL = ms
		} else {
			r.PTTL = -1
		}
	}
	return r, nil
}

// Renew is renew's vector.
func (a *Args) Renew() []any { return []any{nil, nil, 1, a.Lock, a.Token, a.TTL} }

// A Renewed is one server's reply to a renew script (renew, prefer_renew,
// redlock_renew).
type Renewed struct {
	Lost   bool   // the key is missing or holds another token
	Better string // prefer_renew: a live candidate with a higher priority
}

// DecodeRenew decodes cmd, a renew script's call.
func DecodeRenew(cmd *redis.Cmd) (Renewed, error) {
	if res, ok := cmd.Val().([]any); ok && len(res) == 2 && cmd.Err() == nil {
		better, _ := res[1].(string)
		return Renewed{Better: better}, nil
	}
	n, err := cmd.Int64()
	return Renewed{Lost: err == nil && n == 0}, err
}

// Release is release's vector.
func (a *Args) Release() []any { return []any{nil, nil, 1, a.Lock, a.Token} }

// DecodeRelease decodes cmd, a release script's call (release,
// fair_release, redlock_release, hand_off, whose {2, heir} is a
// reservation made): missing when the key is missing or held another
// token, so nothing was written.
func DecodeRelease(cmd *redis.Cmd) (missing bool, err error) {
	if _, reserved := cmd.Val().([]any); reserved && cmd.Err() == nil {
		return false, nil
	}
	n, err := cmd.Int64()
	return err == nil && n == 0, err
}
