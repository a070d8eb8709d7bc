//go:build linux

package scenario

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader"
	"github.com/redisleader/redisleader/internal/faultproxy"
	"github.com/redisleader/redisleader/internal/history"
)

// TestScenarioFair runs the wedge scenarios of fair mode (issue 16): a queue
// whose head waiter dies, pauses past its lease, or gives up with hundreds
// of others, and a queue that loses its scripts or its data. After each, the
// queue must drain, the name must be usable within one TTL, no queue key
// may outlive its last waiter's lease, and nothing may overlap.
func TestScenarioFair(t *testing.T) {
	t.Run("F1-head-killed", func(t *testing.T) { fairHeadGone(t, "F1-head-killed", false) })
	t.Run("F2-head-paused", func(t *testing.T) { fairHeadGone(t, "F2-head-paused", true) })
	t.Run("F3-500-cancelled", fairMassCancel)
	t.Run("F4-script-flush-50", func(t *testing.T) { fairFifty(t, "F4-script-flush-50", false) })
	t.Run("F5-restart-50", func(t *testing.T) { fairFifty(t, "F5-restart-50", true) })
	t.Run("F6-short-waits", fairShortWaits)
	t.Run("F7-crashed-among-100", fairCrashedAmong)
	t.Run("F8-own-head-gone", fairOwnHeadGone)
	t.Run("F9-head-error", fairHeadError)
}

// fair is the option of every candidate in these scenarios.
var fair = redisleader.WithFairness()

// fairHeld starts scenario id with a fair candidate c0 that leads.
func fairHeld(t *testing.T, id string) (*harness, *candidate, *redisleader.Lock) {
	h := newHarness(t, id)
	c0 := h.candidate("c0", nil, fair)
	return h, c0, c0.mustLead(5 * time.Second)
}

// turns runs candidates that each campaign once, hold for a short while
// and resign, and counts them.
type turns struct {
	t      *testing.T
	ctx    context.Context
	cancel context.CancelFunc
	hold   time.Duration
	wg     sync.WaitGroup
	once   sync.Once
	first  chan struct{} // closed when the first one leads
	mu     sync.Mutex
	served int // how many led and resigned
}

func newTurns(t *testing.T, hold time.Duration) *turns {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return &turns{t: t, ctx: ctx, cancel: cancel, hold: hold, first: make(chan struct{})}
}

// take makes c campaign in the background; a doomed one (to be crashed)
// is not counted, whatever its campaign returns.
func (q *turns) take(c *candidate, doomed bool) {
	wgGo(&q.wg, func() {
		l, err := c.campaign(q.ctx)
		switch {
		case doomed:
			return
		case err != nil:
			q.t.Errorf("%s: campaign: %v", c.who, err)
			return
		}
		q.once.Do(func() { close(q.first) })
		c.work(q.ctx, l, q.hold)
		_ = l.Release(context.Background())
		q.mu.Lock()
		q.served++
		q.mu.Unlock()
	})
}

// wait waits for every campaign and returns how many led.
func (q *turns) wait() int {
	q.wg.Wait()
	q.cancel()
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.served
}

// fairSlack is what a takeover past a dead head may add to the TTL: the
// waiter behind polls 1–2ms after the head's lease can have ended, plus a
// round trip and scheduling on a loaded machine.
const fairSlack = 150 * time.Millisecond

// queueLen is how many waiters the name's queue holds, live or not.
func (h *harness) queueLen() int64 {
	n, err := h.admin.ZCard(context.Background(), h.key+":queue").Result()
	if err != nil {
		h.t.Fatalf("ZCARD: %v", err)
	}
	return n
}

// until polls cond every 2ms (a state in Redis, which notifies nobody)
// and fails the test if it does not hold within d.
func (h *harness) until(cond func() bool, d time.Duration, what string) time.Duration {
	h.t.Helper()
	start := time.Now()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Since(start) > d {
			h.t.Fatalf("%s: not within %v", what, d)
		}
		<-tick.C
	}
	return time.Since(start)
}

// queueKeys checks the queue keys: drained, the queue is gone and the
// leases hold only tombstones (negative scores) of waiters that gave up;
// and each existing key expires within one TTL (the latest lease).
func (h *harness) queueKeys(drained bool) {
	h.t.Helper()
	ctx := context.Background()
	if drained {
		n, err := h.admin.Exists(ctx, h.key+":queue").Result()
		if err != nil {
			h.t.Fatalf("EXISTS: %v", err)
		}
		h.check(n == 0, "the queue exists with no waiter left")
		// Live leases only: a waiter whose leave failed (its call timed out
		// under load, say) drops out when its lease passes, and the passed
		// entry stays in the key until the next script prunes it or the key
		// expires.
		now, err := h.admin.Time(ctx).Result()
		if err != nil {
			h.t.Fatalf("TIME: %v", err)
		}
		live, err := h.admin.ZCount(ctx, h.key+":leases", fmt.Sprint(now.UnixMilli()), "+inf").Result()
		if err != nil {
			h.t.Fatalf("ZCOUNT: %v", err)
		}
		h.check(live == 0, "%d live leases left with no waiter", live)
	}
	for _, k := range []string{h.key + ":queue", h.key + ":leases"} {
		if n, _ := h.admin.Exists(ctx, k).Result(); n == 0 {
			continue
		}
		pttl, err := h.admin.PTTL(ctx, k).Result()
		if err != nil {
			h.t.Fatalf("PTTL %s: %v", k, err)
		}
		h.check(pttl > 0 && pttl <= h.ttl, "%s has PTTL %v; want within (0, TTL]", k, pttl)
	}
}

// campaignAsync campaigns on e with value and delivers the outcome.
func campaignAsync(ctx context.Context, e *redisleader.Election, value string) <-chan error {
	ch := make(chan error, 1)
	go func() {
		l, err := e.Campaign(ctx, value)
		if err == nil {
			<-l.Done() // held until the test releases it or the session ends
		}
		ch <- err
	}()
	return ch
}

// fairHeadGone: c0 leads; a child process k queues first, c2 behind it.
// Then k is SIGKILLed (or SIGSTOPped, paused past its lease) and c0
// resigns: c2 must lead within one TTL (+ slack) of k's end, past k's
// stale place, and the queue keys must be gone. A paused k is then
// resumed: it joins again, at the back, and leads after c2.
func fairHeadGone(t *testing.T, id string, pause bool) {
	h, _, l0 := fairHeld(t, id)

	k := h.child("k", "", envFair+"=1")
	h.until(func() bool { return h.queueLen() == 1 }, 10*time.Second, "k queued")
	c2 := h.candidate("c2", nil, fair)
	got2 := h.expect(acquiredBy("c2"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res2 := make(chan *redisleader.Lock, 1)
	go func() {
		l, err := c2.campaign(ctx)
		if err != nil && ctx.Err() == nil {
			t.Errorf("c2: campaign: %v", err)
		}
		res2 <- l
	}()
	h.until(func() bool { return h.queueLen() == 2 }, 5*time.Second, "c2 queued")
	h.queueKeys(false)

	h.fault("head-"+map[bool]string{false: "killed", true: "paused"}[pause], true)
	gone := time.Now()
	if pause {
		k.signal(syscall.SIGSTOP)
	} else {
		k.kill()
	}
	if err := l0.Release(context.Background()); err != nil {
		t.Fatalf("c0: release: %v", err)
	}
	h.wait(got2, 3*h.ttl, "c2 leads past the dead head")
	took := time.Since(gone)
	h.note("takeover_ms", "%d", took.Milliseconds())
	h.check(took <= h.ttl+fairSlack, "c2 led %v after the head went; want within TTL + %v", took, fairSlack)
	h.queueKeys(true)
	l2 := <-res2

	if pause {
		gotK := h.expect(acquiredBy("k"))
		k.signal(syscall.SIGCONT)
		h.fault("head-paused", false)
		h.until(func() bool { return h.queueLen() == 1 }, 3*h.ttl, "k queued again after its pause")
		if err := l2.Release(context.Background()); err != nil {
			t.Fatalf("c2: release: %v", err)
		}
		h.wait(gotK, 3*h.ttl, "k leads after c2")
		h.queueKeys(true)
	} else {
		h.fault("head-killed", false)
		if err := l2.Release(context.Background()); err != nil {
			t.Fatalf("c2: release: %v", err)
		}
	}
	h.finish(false)
}

// fairMassCancel: c0 leads and 500 waiters (10 sessions × 50) queue; their
// contexts all end at once. Each takes its place out of the queue (its
// lease would in one TTL anyway): the queue must drain within one TTL, and
// after c0 resigns a newcomer leads at once.
func fairMassCancel(t *testing.T) {
	const sessions, each = 10, 50
	h, _, l0 := fairHeld(t, "F3-500-cancelled")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var outs []<-chan error
	for i := range sessions {
		c := h.candidate(fmt.Sprintf("w%d", i), nil, fair)
		for j := range each {
			outs = append(outs, campaignAsync(ctx, c.election(), fmt.Sprintf("w%d.%d", i, j)))
		}
	}
	h.until(func() bool { return h.queueLen() == sessions*each }, 30*time.Second, "500 waiters queued")
	h.queueKeys(false)
	h.fault("cancel-500", true)
	cancelled := time.Now()
	cancel()
	for _, out := range outs {
		if err := <-out; !errors.Is(err, context.Canceled) {
			t.Errorf("a cancelled waiter returned %v", err)
		}
	}
	h.until(func() bool { return h.queueLen() == 0 }, h.ttl+fairSlack, "the queue drains")
	drained := time.Since(cancelled)
	h.fault("cancel-500", false)
	h.note("drained_ms", "%d", drained.Milliseconds())
	h.queueKeys(true)

	if err := l0.Release(context.Background()); err != nil {
		t.Fatalf("c0: release: %v", err)
	}
	n := h.candidate("n", nil, fair)
	start := time.Now()
	ln := n.mustLead(h.ttl)
	h.note("usable_ms", "%d", time.Since(start).Milliseconds())
	_ = ln.Release(context.Background())
	h.finish(false)
}

// fairFifty: c0 leads and 50 waiters (50 sessions: a session never waits
// for a name it holds) queue; then the
// server's script cache is flushed and c0 resigns, or c0 crashes (its
// lease ends locally, its key stays) and the server restarts without
// persistence, losing the lock and the queue. (A holder that still
// believes across such a restart is the documented limit that
// WithTakeoverDelay covers; it is not fair mode's to test.) Every waiter must lead, one
// at a time, each releasing after a short hold; after a restart the first
// one leads within one TTL (+ slack) of the server being back: waiters join again on their next
// attempt, and nobody wedges.
func fairFifty(t *testing.T, id string, restart bool) {
	const sessions = 50
	h, c0, l0 := fairHeld(t, id)

	q := newTurns(t, 5*time.Millisecond)
	for i := range sessions {
		q.take(h.candidate(fmt.Sprintf("w%d", i), nil, fair), false)
	}
	h.until(func() bool { return h.queueLen() == sessions }, 30*time.Second, "50 waiters queued")

	fault := "script-flush"
	if restart {
		fault = "restart"
	}
	h.fault(fault, true)
	start := time.Now()
	if restart {
		c0.abandon()
		h.srv.Restart(t)
		// From when Redis is back: a loaded host can take longer than a
		// TTL to start it, which no client can shorten.
		h.note("restart_ms", "%d", time.Since(start).Milliseconds())
		start = time.Now()
	} else if err := h.admin.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatalf("SCRIPT FLUSH: %v", err)
	}
	if !restart {
		if err := l0.Release(context.Background()); err != nil {
			t.Fatalf("c0: release: %v", err)
		}
	}
	select {
	case <-q.first:
		took := time.Since(start)
		h.note("first_ms", "%d", took.Milliseconds())
		h.check(took <= h.ttl+fairSlack, "first waiter led %v after the %s; want within TTL + %v", took, fault, fairSlack)
	case <-time.After(5 * h.ttl):
		t.Fatalf("no waiter led within %v of the %s", 5*h.ttl, fault)
	}
	h.fault(fault, false)
	served := q.wait()
	h.note("served", "%d", served)
	h.check(served == sessions, "%d of %d waiters led", served, sessions)
	h.queueKeys(true)
	h.finish(false)
}

// fairShortWaits is Redisson's wedge (redisson#2883, #3004): candidates
// loop on campaigns with short waits (5–35ms, far below the holder's
// holds), so most give up while queued, for 3s, while others hold for a
// while now and then. Then a newcomer must lead within one TTL of the last
// holder's release, and the queue keys must be gone. On a machine so loaded
// that the head's few milliseconds run out before its wake-up is acted on,
// nobody leads in 3s: the loop goes on, up to 10s, until someone has led.
// If still nobody has (a starvation the README states for waits shorter
// than a handover, which ends with the load), that is reported, not failed:
// the wedge checks that follow are the scenario's point.
func fairShortWaits(t *testing.T) {
	h := newHarness(t, "F6-short-waits")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var (
		wg          sync.WaitGroup
		mu          sync.Mutex
		led, gaveUp int
	)
	start := time.Now()
	more := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return ctx.Err() == nil && (time.Since(start) < 3*time.Second || led == 0)
	}
	for i := range 20 {
		c := h.candidate(fmt.Sprintf("s%d", i), nil, fair)
		wgGo(&wg, func() {
			for more() {
				wait := 5*time.Millisecond + time.Duration(i)*time.Millisecond + rand.N(10*time.Millisecond)
				cctx, ccancel := context.WithTimeout(ctx, wait)
				l, err := c.campaign(cctx)
				ccancel()
				mu.Lock()
				if err == nil {
					led++
				} else {
					gaveUp++
				}
				mu.Unlock()
				if err == nil {
					c.work(ctx, l, 20*time.Millisecond)
					_ = l.Release(context.Background())
				}
			}
		})
	}
	wg.Wait()
	h.note("led", "%d", led)
	h.note("gave_up", "%d", gaveUp)
	h.note("loop_ms", "%d", time.Since(start).Milliseconds())
	h.check(gaveUp > 0, "nobody gave up (led %d): the scenario needs waiters that give up", led)
	if led == 0 {
		h.t.Logf("F6: nobody led in %v of 5–35 ms waits (a starved, loaded machine); the wedge checks still apply", time.Since(start).Round(time.Millisecond))
	}
	n := h.candidate("n", nil, fair)
	newcomer := time.Now()
	ln := n.mustLead(h.ttl + fairSlack)
	h.note("usable_ms", "%d", time.Since(newcomer).Milliseconds())
	h.queueKeys(true)
	_ = ln.Release(context.Background())
	drained := h.until(func() bool { return h.queueLen() == 0 }, h.ttl+fairSlack, "the queue drains")
	h.note("drained_ms", "%d", drained.Milliseconds())
	h.finish(false)
}

// fairCrashedAmong: c0 leads and 100 waiters (one session each) queue;
// then 20 of them, spread through the queue, crash (their traffic is
// blackholed and their sessions end without a word to Redis). c0 resigns:
// the 80 others must all lead, one at a time, and every crashed place must
// be skipped, so the whole queue drains in about 80 short holds plus at
// most one TTL for the crashed ones' leases.
func fairCrashedAmong(t *testing.T) {
	const waiters, crashed = 100, 20
	h, _, l0 := fairHeld(t, "F7-crashed-among-100")
	q := newTurns(t, 2*time.Millisecond)
	var cs []*candidate
	for i := range waiters {
		c := h.candidate(fmt.Sprintf("w%d", i), nil, fair)
		cs = append(cs, c)
		q.take(c, i%(waiters/crashed) == 0)
		h.until(func() bool { return h.queueLen() == int64(i+1) }, 10*time.Second, c.who+" queued")
	}
	h.fault("crash-20", true)
	for i := 0; i < waiters; i += waiters / crashed {
		for _, p := range cs[i].proxies {
			p.Blackhole(faultproxy.Both)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_ = cs[i].session().Close(ctx)
		cancel()
	}
	start := time.Now()
	if err := l0.Release(context.Background()); err != nil {
		t.Fatalf("c0: release: %v", err)
	}
	served := q.wait()
	took := time.Since(start)
	h.fault("crash-20", false)
	h.note("served", "%d", served)
	h.note("drain_ms", "%d", took.Milliseconds())
	h.check(served == waiters-crashed, "%d of %d live waiters led", served, waiters-crashed)
	h.check(took <= h.ttl+fairSlack+time.Duration(waiters-crashed)*20*time.Millisecond,
		"the queue took %v to drain; want within TTL + %v + 80 × 20ms", took, fairSlack)
	h.queueKeys(true)
	h.finish(false)
}

// scriptHook counts a client's script calls and, once armed, fails the next
// one with numKeys keys (without sending it), as a lost connection would.
type scriptHook struct {
	calls   atomic.Int64
	numKeys atomic.Int64 // armed while > 0
	fired   chan struct{}
}

func newScriptHook() *scriptHook { return &scriptHook{fired: make(chan struct{})} }

var errInjected = &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}

func (f *scriptHook) check(cmd redis.Cmder) error {
	args := cmd.Args()
	if (cmd.Name() != "evalsha" && cmd.Name() != "eval") || len(args) < 3 {
		return nil
	}
	f.calls.Add(1)
	if n := f.numKeys.Load(); n > 0 && fmt.Sprint(args[2]) == fmt.Sprint(n) && f.numKeys.CompareAndSwap(n, 0) {
		close(f.fired)
		return errInjected
	}
	return nil
}

// waitFired waits for the armed fault, or fails the test after within.
func (f *scriptHook) waitFired(t *testing.T, within time.Duration, what string) {
	t.Helper()
	select {
	case <-f.fired:
	case <-time.After(within):
		t.Fatal(what)
	}
}

func (f *scriptHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (f *scriptHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := f.check(cmd); err != nil {
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}
func (f *scriptHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if err := f.check(cmd); err != nil {
				for _, c := range cmds {
					c.SetErr(err)
				}
				return err
			}
		}
		return next(ctx, cmds)
	}
}

// unserved records how long the name stayed free after the holder's
// release, and the waiter's script calls per TTL meanwhile.
func (h *harness) unserved(since time.Time, calls int64) {
	h.t.Helper()
	took := time.Since(since)
	h.note("unserved_ms", "%d", took.Milliseconds())
	perTTL := float64(calls) / max(took.Seconds()/h.ttl.Seconds(), 1)
	h.note("scripts_per_waiter_per_ttl", "%.1f", perTTL)
	h.check(took <= h.ttl+fairSlack, "the name stayed free and unserved %v; want within TTL + %v", took, fairSlack)
	h.check(perTTL <= 10, "the waiter sent %.0f scripts per TTL while the name was free: it spins", perTTL)
}

// fairOwnHeadGone: c0 leads; session s queues a head waiter, then a second
// waiter behind it. The head's caller gives up and its leave fails, so its
// place lasts up to a TTL. c0 resigns: the second waiter must lead within
// that TTL, sending a few scripts, not one per wake-up of its own (a
// wake-up is addressed to one waiter, not to its session).
func fairOwnHeadGone(t *testing.T) {
	h, _, l0 := fairHeld(t, "F8-own-head-gone")
	s := h.candidate("s", nil, fair)
	hook := newScriptHook()
	s.clients[0].AddHook(hook)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	headCtx, giveUp := context.WithCancel(ctx)
	go func() { _, _ = s.campaign(headCtx) }()
	h.until(func() bool { return h.queueLen() == 1 }, 5*time.Second, "s's head queued")
	got := h.expect(acquiredBy("s"))
	res := make(chan *redisleader.Lock, 1)
	go func() {
		l, _ := s.campaign(ctx)
		res <- l
	}()
	h.until(func() bool { return h.queueLen() == 2 }, 5*time.Second, "s's second waiter queued")

	h.fault("head-gave-up-leave-lost", true)
	hook.numKeys.Store(3) // the leave
	giveUp()
	hook.waitFired(t, 5*time.Second, "the head's leave was never sent")
	before, released := hook.calls.Load(), time.Now()
	if err := l0.Release(context.Background()); err != nil {
		t.Fatalf("c0: release: %v", err)
	}
	h.wait(got, 3*h.ttl, "s's second waiter leads")
	h.unserved(released, hook.calls.Load()-before)
	h.fault("head-gave-up-leave-lost", false)
	if l := <-res; l != nil {
		_ = l.Release(context.Background())
	}
	h.finish(false)
}

// fairHeadError: c0 leads; a (retry interval and jitter a TTL each, so an
// error costs it 1–2 TTL) queues at the head, b behind it. a's next attempt
// fails with a network error; c0 resigns while a is in its retry delay: a
// must still lead, at once (it listens for its wake-up while it waits), and
// before b.
func fairHeadError(t *testing.T) {
	h, _, l0 := fairHeld(t, "F9-head-error")
	a := h.candidate("a", nil, fair, redisleader.WithRetryInterval(h.ttl), redisleader.WithRetryJitter(h.ttl),
		redisleader.WithCallTimeout(50*time.Millisecond))
	hook := newScriptHook()
	a.clients[0].AddHook(hook)
	b := h.candidate("b", nil, fair)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := h.expect(kind(history.Acquired))
	res := make(chan *redisleader.Lock, 2)
	for i, c := range []*candidate{a, b} {
		go func() {
			l, _ := c.campaign(ctx)
			res <- l
		}()
		h.until(func() bool { return h.queueLen() == int64(i+1) }, 5*time.Second, c.who+" queued")
	}

	h.fault("head-attempt-failed", true)
	hook.numKeys.Store(4) // a's next fair acquire
	hook.waitFired(t, 3*h.ttl, "a made no attempt")
	before, released := hook.calls.Load(), time.Now()
	if err := l0.Release(context.Background()); err != nil {
		t.Fatalf("c0: release: %v", err)
	}
	first := h.wait(got, 3*h.ttl, "a waiter leads")
	h.unserved(released, hook.calls.Load()-before)
	h.check(first.Who == "a", "%s led first; a was the head", first.Who)
	h.fault("head-attempt-failed", false)
	for range 2 {
		if l := <-res; l != nil {
			_ = l.Release(context.Background())
		}
	}
	h.finish(false)
}
