//go:build linux

package scenario

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader"
	"github.com/redisleader/redisleader/internal/history"
)

// TestScenarioSemaphore (M1): 8 sessions contend for a semaphore of N=3
// for 6 s, each holding a permit for 50–300 ms; up to 4 holders crash
// (their traffic blackholed, nothing released: the permit stays until its
// lease ends) and come back with a fresh session, and Redis is killed and
// restarted a TTL later without persistence (every permit vanishes; the
// holders' leases have run out meanwhile: the documented mitigation, as in
// S12-delayed-restart). The checker (history.CheckShared) wants at most 3 holders believed
// at any moment and fences strictly increasing in grant order; every
// attempt is recorded (recordTries), so that a grant confirmed by a retry
// is dated from its first attempt (M1-retried).
func TestScenarioSemaphore(t *testing.T) {
	const n, workers = 3, 8
	h := newHarness(t, "M1-semaphore-8-on-3")
	ctx, cancel := context.WithCancel(context.Background())
	crash := newCrashes(0.15, 4)
	var wg sync.WaitGroup
	for i := range workers {
		c := h.candidate(fmt.Sprintf("w%d", i), nil).recordTries(h.key+":sem", 3)
		wgGo(&wg, func() { c.holdPermits(ctx, h.name, n, crash) })
	}
	<-time.After(3 * time.Second)
	h.fault("restart-redis", true)
	h.srv.Kill(t)
	<-time.After(ttl) // Redis down for a TTL: the fault itself
	h.srv.Restart(t)
	h.fault("restart-redis", false)
	<-time.After(3 * time.Second)
	cancel()
	wg.Wait()
	h.note("crashes", "%d", 4-max(crash.left.Load(), 0))
	h.finishShared(n)
}

// TestScenarioSemaphoreRetriedAcquire (M1-retried): a's acquire is granted
// but its reply is lost (loseReply); b takes the other permit, with a
// higher fence, before a's retry (same token) confirms a's permit with its
// first, lower fence. The grants came in that order, so the history is
// safe; it reads so only because a's first attempt is recorded
// (recordTries): dated from the retry's send alone, a's fence would look
// like a regression (M1's false failure in CI on 9725852).
func TestScenarioSemaphoreRetriedAcquire(t *testing.T) {
	h := newHarness(t, "M1-retried")
	ctx := context.Background()
	set := h.key + ":sem"
	a := h.candidate("a", nil, redisleader.WithCallTimeout(ttl/5)).recordTries(set, 3)
	b := h.candidate("b", nil).recordTries(set, 3)
	lose := &loseReply{match: triedHook{set: set}, granted: make(chan struct{}), resume: make(chan struct{})}
	defer lose.release()
	a.client.AddHook(lose) // after recordTries: the attempt is recorded with the error a sees
	ma, err := a.session().Semaphore(h.name, 2, redisleader.WithPermitValue("a"))
	if err != nil {
		t.Fatal(err)
	}
	mb, err := b.session().Semaphore(h.name, 2, redisleader.WithPermitValue("b"))
	if err != nil {
		t.Fatal(err)
	}
	warm, err := mb.TryAcquire(ctx) // b's script loaded: its take below is one round trip
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *redisleader.Lock
		err error
	}
	got := make(chan result, 1)
	go func() { l, err := ma.Acquire(ctx); got <- result{l, err} }()
	select {
	case <-lose.granted:
	case <-time.After(5 * time.Second):
		t.Fatal("a's acquire never reached Redis")
	}
	lb, err := mb.TryAcquire(ctx)
	lose.release()
	if err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	h.note("fence_a", "%d", r.l.Fence())
	h.note("fence_b", "%d", lb.Fence())
	h.check(r.l.Fence() < lb.Fence(), "a's retry got fence %d, not below b's %d: its first grant was not confirmed", r.l.Fence(), lb.Fence())
	_ = r.l.Release(ctx)
	_ = lb.Release(ctx)
	var untried []history.Event
	for _, e := range h.rec.Events() {
		if e.Kind != history.Tried {
			untried = append(untried, e)
		}
	}
	h.check(!history.CheckShared(untried, 2).Safe(), "without a's first attempt the history still reads as safe: b did not begin before a's retry")
	h.finishShared(2)
}

// loseReply runs the first acquire attempt match matches that is granted,
// closes granted,
// waits for resume (at most 5 s) and fails it as a read timeout would: the
// attempt took effect in Redis, its reply was lost.
type loseReply struct {
	match   triedHook
	granted chan struct{}
	resume  chan struct{}
	once    sync.Once
	done    atomic.Bool
}

func (l *loseReply) release() { l.once.Do(func() { close(l.resume) }) }

func (l *loseReply) lost(cmd redis.Cmder) bool {
	if c, ok := cmd.(*redis.Cmd); !ok || !l.match.attempt(cmd) || cmd.Err() != nil {
		return false // not an attempt, or one that did not run (NOSCRIPT)
	} else if r, err := c.Slice(); err != nil || len(r) == 0 || r[0] != int64(1) || !l.done.CompareAndSwap(false, true) {
		return false // denied, or not the first grant
	}
	close(l.granted)
	select {
	case <-l.resume:
	case <-time.After(5 * time.Second):
	}
	cmd.SetErr(&net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded})
	return true
}

func (l *loseReply) DialHook(next redis.DialHook) redis.DialHook { return next }
func (l *loseReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if l.lost(cmd) {
			return cmd.Err()
		}
		return err
	}
}
func (l *loseReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if l.lost(cmd) {
				err = cmd.Err()
			}
		}
		return err
	}
}

// holdPermits takes a permit of name (limit n) in a loop until ctx ends,
// holds it for 50–300 ms and releases it (or, when crash says so,
// abandons its session).
func (c *candidate) holdPermits(ctx context.Context, name string, n int, crash *crashes) {
	for ctx.Err() == nil {
		m, err := c.session().Semaphore(name, n, redisleader.WithPermitValue(c.who))
		if err != nil {
			c.h.t.Error(err)
			return
		}
		l, err := m.Acquire(ctx)
		if err != nil {
			continue // ctx ended, or the session was abandoned meanwhile
		}
		hold := time.NewTimer(50*time.Millisecond + rand.N(250*time.Millisecond))
		select {
		case <-hold.C:
		case <-l.Done():
		case <-ctx.Done():
		}
		hold.Stop()
		if ctx.Err() == nil && crash.next() {
			c.abandon()
			continue
		}
		_ = l.Release(context.Background())
	}
}

// finishShared is finish for a name shared by up to n holders: the
// history is judged by history.CheckShared.
func (h *harness) finishShared(n int) history.SharedReport {
	h.t.Helper()
	rep := history.CheckShared(h.rec.Events(), n)
	h.check(rep.Safe(), "unsafe history:\n%s", strings.Join(rep.Problems, "\n"))
	h.check(rep.MaxHolders == n, "never %d holders at once (at most %d): the scenario did not contend", n, rep.MaxHolders)
	h.summarize(func(pass bool) string { return rep.Line(h.id, pass) })
	return rep
}
