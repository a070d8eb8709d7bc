//go:build linux

package scenario

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader"
	"github.com/redisleader/redisleader/internal/history"
)

// S26: the leader's client has a pool of one connection (PoolTimeout 3s),
// which the application takes, as a blocking BLPOP on the same client would.
// First for 0.4 T: the leader keeps leading (its renewal goes through once
// the connection is back) and a Leader() call made meanwhile returns at the
// call timeout. Then for 1.5 T: the leader steps down at its local deadline,
// the other candidate takes over once the key has expired, and the leader's
// calls keep returning within their bounds (TryLock: its acquire, then the
// release of its token, one call timeout each), not at PoolTimeout. Once
// the connection is back, the former leader leads again.
func s26PoolExhausted(t *testing.T) {
	const (
		callTimeout = ttl * 15 / 100
		slack       = 100 * time.Millisecond
	)
	h := newHarness(t, "S26")
	c0 := h.candidate("g0", func(o *redis.Options) { o.PoolSize, o.PoolTimeout = 1, 3*time.Second })
	c1 := h.candidate("g1", nil)
	l := c0.mustLead(5 * time.Second)
	var wg sync.WaitGroup
	defer wg.Wait()
	wgGo(&wg, func() { c0.work(context.Background(), l, time.Hour) })
	stop := h.lead(c1)
	defer stop()

	// exhaust takes c0's only connection for d, timing c0's calls
	// meanwhile: Leader() once, then TryLock on another name until d has
	// passed.
	var leaderMax, tryLockMax time.Duration
	exhaust := func(d time.Duration) {
		conn := c0.client.Conn()
		if err := conn.Ping(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		h.fault("pool-exhausted", true)
		end := time.Now().Add(d)
		ctx := context.Background()
		start := time.Now()
		_, err := c0.election().Leader(ctx)
		leaderMax = max(leaderMax, time.Since(start))
		h.check(errors.Is(err, context.DeadlineExceeded), "Leader() with the pool exhausted: %v", err)
		for time.Until(end) > 2*callTimeout+slack {
			start := time.Now()
			_, err := c0.session().TryLock(ctx, "s26-other")
			tryLockMax = max(tryLockMax, time.Since(start))
			h.check(errors.Is(err, context.DeadlineExceeded), "TryLock with the pool exhausted: %v", err)
		}
		<-time.After(time.Until(end)) // the fault's duration
		_ = conn.Close()
		h.fault("pool-exhausted", false)
	}

	exhaust(4 * ttl / 10)
	renewed := h.expect(func(e history.Event) bool { return e.Kind == history.Renewed && e.Who == "g0" })
	h.wait(renewed, ttl/2, "a renewal once the connection is back")
	h.check(l.Held(), "lost after a 0.4 T exhaustion: %v", l.Err())

	lost := h.expect(endedBy("g0"))
	next := h.expect(acquiredBy("g1"))
	exhaust(3 * ttl / 2)
	e := h.wait(lost, ttl, "the leader's step-down")
	h.wait(next, 3*g8(ttl), "takeover")
	stop()
	h.check(e.Reason == "expired", "loss reason %q", e.Reason)
	h.check(errors.Is(l.Err(), redisleader.ErrExpired), "Err() = %v", l.Err())

	// Once the connection is back, the leader's session leads again.
	_ = c0.mustLead(5 * time.Second).Release(context.Background())

	rep := history.Check(h.rec.Events())
	h.note("leader_return_ms", "%.0f", ms(leaderMax))
	h.note("trylock_return_ms", "%.0f", ms(tryLockMax))
	h.note("call_timeout_ms", "%.0f", ms(callTimeout))
	h.note("pool_timeout_ms", "3000")
	h.note("signal_late_ms", "%.2f", rep.MaxSignalLateMs)
	h.check(leaderMax < callTimeout+slack, "Leader() took %v (call timeout %v)", leaderMax, callTimeout)
	h.check(tryLockMax < 2*callTimeout+slack, "TryLock took %v (2 × call timeout %v)", tryLockMax, callTimeout)
	h.check(rep.MaxSignalLateMs < 50, "loss signalled %.1fms after D", rep.MaxSignalLateMs)
	h.finish(false)
}
