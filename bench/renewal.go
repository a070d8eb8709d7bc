package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader"
)

// renewStats describes a Session's renewal rounds. A round renews every
// lock once, in slices (one pipeline each) spread over the first half of
// the renew interval; a session holding up to 100 locks sends one slice.
type renewStats struct {
	slices     float64       // slices per round
	rtt        time.Duration // median round trip of a slice (one EVALSHA for one lock)
	drift      time.Duration // mean time between a lock's renewals minus the renew interval
	cmdsPerSec float64       // commands the server ran per second
	perLease   float64       // renewals per lease per round
}

// renewal holds n locks in one Session renewing every cfg.renewEvery and
// records cfg.renewRounds rounds. Only renewals use the Session's client
// meanwhile, so a go-redis hook on it sees exactly the slices; the
// server's counts are read around them.
func renewal(ctx context.Context, e *env, cfg config, prefix string, n int) (renewStats, error) {
	c := e.client()
	defer c.Close()
	hook := &roundHook{}
	c.AddHook(hook)
	s, err := redisleader.NewSession(c, redisleader.WithTTL(cfg.scaleTTL), redisleader.WithRenewInterval(cfg.renewEvery))
	if err != nil {
		return renewStats{}, err
	}
	defer s.Close(context.Background())
	if _, err := acquireMany(ctx, s, prefix, n, cfg.goroutines); err != nil {
		return renewStats{}, err
	}
	before, err := commandCalls(ctx, e.admin)
	if err != nil {
		return renewStats{}, err
	}
	hook.arm()
	t0 := time.Now()
	<-time.After(time.Duration(cfg.renewRounds+1) * cfg.renewEvery) // the measured window: rounds run meanwhile
	calls := hook.disarm()
	after, err := commandCalls(ctx, e.admin)
	if err != nil {
		return renewStats{}, err
	}
	cmdsPerSec := float64(scriptCalls(after.since(before))) / time.Since(t0).Seconds()
	return describeRounds(calls, n, cfg.renewEvery, cmdsPerSec)
}

// describeRounds summarises the rounds of a Session holding n locks from
// its slices: those from one renewal of the first slice's first lock to its
// last renewal are whole rounds, in which every lock is renewed once.
func describeRounds(calls []sliceCall, n int, every time.Duration, cmdsPerSec float64) (renewStats, error) {
	if len(calls) == 0 {
		return renewStats{}, fmt.Errorf("no renewal in the window")
	}
	mark := calls[0].keys[0]
	var marks []time.Time
	for _, sl := range calls {
		if slices.Contains(sl.keys, mark) {
			marks = append(marks, sl.start)
		}
	}
	rounds := len(marks) - 1
	if rounds < 2 {
		return renewStats{}, fmt.Errorf("%d renewal rounds in the window (renew interval %v)", rounds, every)
	}
	first, last := marks[0], marks[rounds]
	var rtts []time.Duration
	cmds, count := 0, 0
	for _, sl := range calls {
		if !sl.start.Before(first) && sl.start.Before(last) {
			rtts = append(rtts, sl.rtt)
			cmds += len(sl.keys)
			count++
		}
	}
	return renewStats{
		slices:     float64(count) / float64(rounds),
		rtt:        describe(rtts).p50,
		drift:      last.Sub(first)/time.Duration(rounds) - every,
		cmdsPerSec: cmdsPerSec,
		perLease:   float64(cmds) / float64(n) / float64(rounds),
	}, nil
}

// sliceCall is one script call through the client: a pipeline of
// EVALSHAs (a slice of renewals) or a single one (the slice of one lock),
// and the lock keys it renewed.
type sliceCall struct {
	start time.Time
	rtt   time.Duration
	keys  []string
}

// roundHook is a go-redis hook that records every script call through the
// client while armed. Other calls, such as the HELLO pipeline of a new
// connection (which go-redis runs through the client's hooks), are not
// renewals.
type roundHook struct {
	mu    sync.Mutex // protects armed and calls
	armed bool
	calls []sliceCall
}

func (h *roundHook) arm() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armed = true
}

// disarm stops recording and returns the calls recorded.
func (h *roundHook) disarm() []sliceCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armed = false
	return h.calls
}

// timed runs call and records it if it is a renewal slice and the hook was
// armed when it started.
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
		keys := make([]string, len(cmds))
		for i, c := range cmds {
			keys[i] = fmt.Sprint(c.Args()[3]) // EVALSHA sha 1 key …
		}
		h.calls = append(h.calls, sliceCall{t, d, keys})
		h.mu.Unlock()
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
