//go:build linux

package scenario

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader"
	"github.com/redisleader/redisleader/internal/faultproxy"
)

// S25: every byte between the candidates and Redis is blackholed by their
// proxies, which still accept connections: a server that accepts and never
// replies. For a candidate whose connections (pool and pub/sub) were open
// and one that never connected and has go-redis's default timeouts, each
// blocking call with a 200ms context returns within it (an attempt whose
// outcome is unknown leaves its token's delete to the background); Observe's
// channel closes within it; Close(ctx) returns within about a call timeout
// (the release of the abandoned tokens, while the watcher's connection
// setup in progress runs out), once every goroutine of the session has
// stopped; and nothing is left in Redis.
func s25Hung(t *testing.T) {
	h := newHarness(t, "S25")
	warm := h.candidate("warm", nil)
	if err := warm.mustLead(5 * time.Second).Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	// go-redis's default socket timeouts (dial 5s, read 3s), which bound
	// nothing here: the library's own bounds must.
	fresh := h.candidate("fresh", func(o *redis.Options) { o.DialTimeout, o.ReadTimeout, o.WriteTimeout = 0, 0, 0 })
	const (
		wait  = 200 * time.Millisecond
		call  = ttl * 15 / 100 // leaseOpts' call timeout
		slack = 100 * time.Millisecond
	)
	h.fault("blackhole-both", true)
	for _, c := range []*candidate{warm, fresh} {
		c.proxy.Blackhole(faultproxy.Both)
	}
	// bounded runs f with a context that ends after wait and returns how
	// long f took.
	bounded := func(f func(ctx context.Context) error) (time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		start := time.Now()
		err := f(ctx)
		return time.Since(start), err
	}
	var lockD, tryD, campD, obsD, closeD time.Duration
	for _, c := range []*candidate{warm, fresh} {
		s, el := c.session(), c.election()
		d, err := bounded(func(ctx context.Context) error { _, err := s.Lock(ctx, h.name); return err })
		h.check(errors.Is(err, context.DeadlineExceeded), "%s: Lock: %v", c.who, err)
		lockD = max(lockD, d)
		d, err = bounded(func(ctx context.Context) error { _, err := s.TryLock(ctx, h.name); return err })
		h.check(err != nil && !errors.Is(err, redisleader.ErrLocked), "%s: TryLock: %v", c.who, err)
		tryD = max(tryD, d)
		d, err = bounded(func(ctx context.Context) error { _, err := el.Campaign(ctx, c.who); return err })
		h.check(errors.Is(err, context.DeadlineExceeded), "%s: Campaign: %v", c.who, err)
		campD = max(campD, d)
		d, _ = bounded(func(ctx context.Context) error {
			for l := range el.Observe(ctx) {
				h.check(false, "%s: Observe reported %+v from a server that never answers", c.who, l)
			}
			return nil
		})
		obsD = max(obsD, d)
	}
	for _, c := range []*candidate{warm, fresh} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		start := time.Now()
		_ = c.session().Close(ctx)
		closeD = max(closeD, time.Since(start))
		h.check(ctx.Err() == nil, "%s: Close's goroutines outlived its ctx", c.who)
		cancel()
	}
	leaked := waitNoLibLeaks(slack)
	for _, c := range []*candidate{warm, fresh} {
		c.proxy.Heal()
	}
	h.fault("blackhole-both", false)

	h.check(lockD < wait+slack, "Lock returned after %v", lockD)
	h.check(tryD < wait+slack, "TryLock returned after %v", tryD)
	h.check(campD < wait+slack, "Campaign returned after %v", campD)
	h.check(obsD < wait+slack, "Observe's channel closed after %v", obsD)
	h.check(closeD < call+slack, "Close returned after %v", closeD)
	h.check(leaked == "", "goroutines outlived Close:\n%s", leaked)
	n, err := h.admin.Exists(context.Background(), h.key).Result()
	h.check(err == nil && n == 0, "lock key left in Redis: %d, %v", n, err)
	h.note("ctx_ms", "%.0f", ms(wait))
	h.note("call_timeout_ms", "%.0f", ms(call))
	h.note("lock_return_ms", "%.0f", ms(lockD))
	h.note("trylock_return_ms", "%.0f", ms(tryD))
	h.note("campaign_return_ms", "%.0f", ms(campD))
	h.note("observe_close_ms", "%.0f", ms(obsD))
	h.note("close_ms", "%.0f", ms(closeD))
	h.finish(false)
}
