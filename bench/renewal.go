package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader"
)

// renewStats describes a Session's renewal rounds.
type renewStats struct {
	rtt        time.Duration // median round trip of a round's pipeline (one EVALSHA for one lock)
	round      time.Duration // mean time between round starts minus the renew interval: a whole round
	cmdsPerSec float64       // commands the server ran per second
	perLease   float64       // commands per lease per round
}

// renewal holds n locks in one Session renewing every cfg.renewEvery and
// times cfg.renewRounds consecutive rounds. Only renewals use the
// Session's client meanwhile, so a go-redis hook on it sees exactly the
// rounds; the server's counts are read between rounds.
func renewal(ctx context.Context, e *env, cfg config, prefix string, n int) (renewStats, error) {
	c := e.client()
	defer c.Close()
	hook := &roundHook{ends: make(chan struct{}, cfg.renewRounds+2)}
	c.AddHook(hook)
	s, err := redisleader.NewSession(c, redisleader.WithTTL(cfg.scaleTTL), redisleader.WithRenewInterval(cfg.renewEvery))
	if err != nil {
		return renewStats{}, err
	}
	defer s.Close(context.Background())
	if _, err := acquireMany(ctx, s, prefix, n, cfg.goroutines); err != nil {
		return renewStats{}, err
	}
	wctx, cancel := context.WithTimeout(ctx, sampleTimeout+time.Duration(cfg.renewRounds)*(cfg.renewEvery+time.Second))
	defer cancel()
	hook.arm()
	if err := hook.next(wctx); err != nil { // a whole round has run
		return renewStats{}, err
	}
	before, err := commandCalls(ctx, e.admin)
	if err != nil {
		return renewStats{}, err
	}
	t0 := time.Now()
	for range cfg.renewRounds {
		if err := hook.next(wctx); err != nil {
			return renewStats{}, err
		}
	}
	after, err := commandCalls(ctx, e.admin)
	if err != nil {
		return renewStats{}, err
	}
	elapsed := time.Since(t0)
	starts, rtts := hook.disarm()
	cmds := float64(scriptCalls(after.since(before)))
	return renewStats{
		rtt:        describe(rtts).p50,
		round:      starts[len(starts)-1].Sub(starts[0])/time.Duration(len(starts)-1) - cfg.renewEvery,
		cmdsPerSec: cmds / elapsed.Seconds(),
		perLease:   cmds / float64(n) / float64(cfg.renewRounds),
	}, nil
}

// roundHook is a go-redis hook that times every script call through the
// client while armed: a pipeline of EVALSHAs (a renewal round of several
// locks) or a single one (the round of one lock). Other calls, such as the
// HELLO pipeline of a new connection (which go-redis runs through the
// client's hooks), are not rounds.
type roundHook struct {
	ends chan struct{} // one send per call that ended while armed

	mu     sync.Mutex // protects everything below
	armed  bool
	starts []time.Time
	rtts   []time.Duration
}

func (h *roundHook) arm() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armed = true
}

// disarm stops recording and returns the start times and round trips of the
// calls that ran while armed.
func (h *roundHook) disarm() ([]time.Time, []time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armed = false
	return h.starts, h.rtts
}

// next waits for the next call to end.
func (h *roundHook) next(ctx context.Context) error {
	select {
	case <-h.ends:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for a renewal round: %w", ctx.Err())
	}
}

// timed runs call and records it if it is a round and the hook was armed
// when it started.
func (h *roundHook) timed(cmds []redis.Cmder, call func() error) error {
	h.mu.Lock()
	armed := h.armed
	h.mu.Unlock()
	for _, c := range cmds {
		if name := c.Name(); name != "evalsha" && name != "eval" {
			armed = false
		}
	}
	t := time.Now()
	err := call()
	if armed {
		d := time.Since(t)
		h.mu.Lock()
		h.starts, h.rtts = append(h.starts, t), append(h.rtts, d)
		h.mu.Unlock()
		select {
		case h.ends <- struct{}{}:
		default:
		}
	}
	return err
}

func (h *roundHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *roundHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return h.timed([]redis.Cmder{cmd}, func() error { return next(ctx, cmd) })
	}
}

func (h *roundHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return h.timed(cmds, func() error { return next(ctx, cmds) })
	}
}
