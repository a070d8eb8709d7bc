//go:build linux

package scenario

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader"
	"github.com/redisleader/redisleader/internal/faultproxy"
	"github.com/redisleader/redisleader/internal/history"
)

// TestScenario runs the fast tier: each subtest is one scenario of
// RELIABILITY.md against its own redis-server, judged by the history
// checker, and prints its SCENARIO line.
func TestScenario(t *testing.T) {
	for _, s := range []struct {
		id string
		f  func(t *testing.T)
	}{
		{"S1", s1Contention},
		{"S2", s2Crash},
		{"S3", s3Pause},
		{"S4", s4FrozenHeartbeat},
		{"S5", s5RedisStalled},
		{"S5b", s5bShortStall},
		{"S6", s6InBandStall},
		{"S6b", s6bDebugSleep},
		{"S7", s7Partition},
		{"S8", s8AmbiguousAcquire},
		{"S9", s9AmbiguousRenewRelease},
		{"S10", s10Latency},
		{"S11", s11DelayedDelivery},
		{"S12", s12Restart},
		{"S14", s14ClockStep},
		{"S15", s15WallClock},
		{"S16", s16ScriptFlush},
		{"S17b", s17bOOM},
		{"S19", s19Herd("S19")},
		{"S19-fair", s19Herd("S19-fair", redisleader.WithFairness())},
		{"S20", s20CancelCloseForeign},
		{"S30", s30SlowLeader},
	} {
		t.Run(s.id, s.f)
	}
}

// contendAll runs contend on every candidate until d has passed.
func contendAll(d, holdMin, holdMax time.Duration, crash *crashes, cs ...*candidate) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	for _, c := range cs {
		wgGo(&wg, func() { c.contend(ctx, holdMin, holdMax, crash) })
	}
	wg.Wait()
}

// lostEvents counts acquisitions that ended by loss (not released, not
// closed) in the history.
func lostEvents(h *harness) int {
	n := 0
	for _, e := range h.rec.Events() {
		if e.Kind == history.Ended && (e.Reason == "expired" || e.Reason == "not_owner") {
			n++
		}
	}
	return n
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// S1: 8 in-process and 2 child-process candidates contend; leaders hold
// 50–300ms and resign, or (5%, at most twice in the run) abandon their
// session as a crash would. Each crash leaves the key until it expires
// (≈ T), so the cap keeps the count of leaderships, a liveness floor, from
// depending on luck: three crashes in a slow run once left 8.
func s1Contention(t *testing.T) {
	h := newHarness(t, "S1")
	var cs []*candidate
	for i := range 8 {
		cs = append(cs, h.candidate(fmt.Sprintf("g%d", i), nil))
	}
	h.child("p0", "50,300")
	h.child("p1", "50,300")
	const d = 5 * time.Second
	contendAll(d, 50*time.Millisecond, 300*time.Millisecond, newCrashes(0.05, 2), cs...)
	rep := history.Check(h.rec.Events())
	h.note("handovers_per_s", "%.1f", float64(rep.Intervals)/d.Seconds())
	h.note("gap_p50_ms", "%.2f", rep.P50GapMs)
	h.note("gap_p99_ms", "%.1f", rep.P99GapMs)
	h.check(rep.Intervals >= 10, "only %d leaderships in %v", rep.Intervals, d)
	h.check(rep.MaxGapMs < ms(3*g8(ttl)), "leaderless gap %.0fms above 3 × the G8 bound", rep.MaxGapMs)
	h.check(rep.WritesOK > 0, "no writes accepted")
	h.finish(false)
}

// S2: SIGKILL the leading child process; another candidate leads within
// the G8 bound (T + retry + jitter + call timeout).
func s2Crash(t *testing.T) {
	h := newHarness(t, "S2")
	p0 := h.leadingChild("p0")
	c0, c1 := h.candidate("g0", nil), h.candidate("g1", nil)
	stop := h.lead(c0, c1)
	defer stop()
	next := h.expect(acquiredByOther("p0"))
	killed := history.Now()
	h.fault("sigkill-leader", true)
	p0.signal(syscall.SIGKILL)
	e := h.wait(next, 3*g8(ttl), "takeover after the crash")
	takeover := time.Duration(e.Mono - killed)
	stop()
	h.note("takeover_ms", "%.0f", ms(takeover))
	h.note("bound_ms", "%.0f", ms(g8(ttl)))
	h.check(takeover <= g8(ttl), "takeover %v above the G8 bound %v", takeover, g8(ttl))
	h.finish(false)
}

// S3: the leading child checks it leads and prepares a write, then is
// stopped (SIGSTOP, a GC-like pause) past its lease; another candidate
// leads and writes; the child resumes and sends its queued write, which
// the fenced resource rejects; the child's Held() is false at once.
func s3Pause(t *testing.T) {
	h := newHarness(t, "S3")
	p0 := h.leadingChild("p0")
	ready := h.expect(kind(kindWriteReady))
	p0.send("prepare")
	fence := h.wait(ready, 5*time.Second, "write ready").Fence

	c0 := h.candidate("g0", nil)
	successorWrote := h.expect(func(e history.Event) bool { return e.Kind == history.WriteOK && e.Who == "g0" })
	p0.signal(syscall.SIGSTOP)
	h.fault("sigstop-leader", true)
	stopped := time.Now()
	stop := h.lead(c0)
	defer stop()
	h.wait(successorWrote, 3*g8(ttl), "the successor's write")
	<-time.After(3*ttl/2 - time.Since(stopped)) // stopped for 1.5 T in all: the fault's length
	pause := time.Since(stopped)

	rejected := h.expect(func(e history.Event) bool { return e.Kind == history.WriteRej && e.Who == "p0" })
	heldAfter := h.expect(kind(kindHeldAfter))
	p0.signal(syscall.SIGCONT)
	h.fault("sigstop-leader", false)
	p0.send("go")
	rej := h.wait(rejected, 5*time.Second, "the stale write rejected")
	ha := h.wait(heldAfter, 5*time.Second, "held after resume")
	stop()
	h.check(rej.Fence == fence, "rejected fence %d, prepared %d", rej.Fence, fence)
	h.check(ha.Reason == "false", "Held() right after resume = %s", ha.Reason)
	h.note("pause_ms", "%.0f", ms(pause))
	h.note("stale_rejected", "1")
	h.finish(false)
}

// S4: the leader's requests are held back by its proxy (a heartbeat that
// cannot get through); Done must close within ε of the local deadline.
func s4FrozenHeartbeat(t *testing.T) {
	h := newHarness(t, "S4")
	c0, c1 := h.candidate("g0", nil), h.candidate("g1", nil)
	l := c0.mustLead(5 * time.Second)
	stop := h.lead(c1)
	defer stop()
	lost := h.expect(endedBy("g0"))
	next := h.expect(acquiredBy("g1"))
	c0.proxy.Pause(faultproxy.ClientToServer)
	h.fault("pause-leader-requests", true)
	e := h.wait(lost, 3*ttl, "the leader's loss")
	h.wait(next, 3*g8(ttl), "takeover")
	c0.proxy.Heal()
	h.fault("pause-leader-requests", false)
	stop()
	h.check(e.Reason == "expired", "loss reason %q", e.Reason)
	h.check(errors.Is(l.Err(), redisleader.ErrExpired), "Err() = %v", l.Err())
	rep := history.Check(h.rec.Events())
	h.note("signal_late_ms", "%.2f", rep.MaxSignalLateMs)
	h.check(rep.MaxSignalLateMs < 50, "loss signalled %.1fms after D", rep.MaxSignalLateMs)
	h.finish(false)
}

// stallScenario holds leadership on c0 while stall() stops Redis for longer
// than the lease: the leader must step down at D, calls stay bounded, and
// nobody leads during the stall.
// stall runs the fault: it closes begun once the fault is in effect, and
// resumed once it is over.
func stallScenario(t *testing.T, id string, stall func(h *harness, begun, resumed chan<- struct{})) {
	h := newHarness(t, id)
	c0, c1 := h.candidate("g0", nil), h.candidate("g1", nil)
	l := c0.mustLead(5 * time.Second)
	lost := h.expect(endedBy("g0"))
	begun, resumed := make(chan struct{}), make(chan struct{})
	h.fault(id, true)
	start := history.Now()
	go stall(h, begun, resumed)
	<-begun
	// A call during the stall returns within the call timeout.
	callStart := time.Now()
	_, err := c1.election().Leader(context.Background())
	call := time.Since(callStart)
	e := h.wait(lost, 3*ttl, "step-down at D")
	<-resumed
	end := history.Now()
	h.fault(id, false)
	h.check(err != nil, "Leader() during the stall returned no error")
	h.check(call < 150*time.Millisecond+100*time.Millisecond, "Leader() took %v (call timeout 150ms)", call)
	h.check(e.Reason == "expired", "loss reason %q", e.Reason)
	h.check(!l.Held(), "still held after the stall")
	// Takeover once Redis is back.
	next := h.expect(kind(history.Acquired))
	stop := h.lead(c1)
	n := h.wait(next, 3*g8(ttl), "takeover after the stall")
	stop()
	h.check(n.Mono > start, "acquired before the stall began")
	for _, ev := range h.rec.Events() {
		h.check(!(ev.Kind == history.Acquired && ev.Mono > start+int64(10*time.Millisecond) && ev.Mono < end-int64(10*time.Millisecond)),
			"%s acquired during the stall", ev.Who)
	}
	rep := history.Check(h.rec.Events())
	h.note("call_during_stall_ms", "%.0f", ms(call))
	h.check(rep.MaxSignalLateMs < 50, "loss signalled %.1fms after D", rep.MaxSignalLateMs)
	h.finish(false)
}

// S5: redis-server stopped (SIGSTOP) for 1.5 T.
func s5RedisStalled(t *testing.T) {
	stallScenario(t, "S5", func(h *harness, begun, resumed chan<- struct{}) {
		h.srv.Pause(h.t)
		close(begun)
		<-time.After(3 * ttl / 2) // the fault's duration, not synchronisation
		h.srv.Resume(h.t)
		close(resumed)
	})
}

// S5b: a stall shorter than the slack (0.3 T) costs no leadership.
func s5bShortStall(t *testing.T) {
	h := newHarness(t, "S5b")
	c0 := h.candidate("g0", nil)
	l := c0.mustLead(5 * time.Second)
	h.fault("sigstop-redis", true)
	h.srv.Pause(t)
	<-time.After(3 * ttl / 10) // the fault's duration
	h.srv.Resume(t)
	h.fault("sigstop-redis", false)
	// Two renewal intervals later the leader still holds.
	select {
	case <-l.Done():
	case <-time.After(2 * ttl / 3): // the observation window
	}
	h.check(l.Held(), "lost after a 0.3 T stall: %v", l.Err())
	h.check(lostEvents(h) == 0, "%d spurious losses", lostEvents(h))
	h.note("spurious_losses", "%d", lostEvents(h))
	_ = l.Release(context.Background())
	h.finish(false)
}

// S6: an in-band stall, CLIENT PAUSE 1500 WRITE: writes (and scripts) wait
// while readers see the expired key as missing; nobody may take that for a
// handover.
func s6InBandStall(t *testing.T) {
	stallScenario(t, "S6", func(h *harness, begun, resumed chan<- struct{}) {
		h.srv.Do(h.t, "CLIENT", "PAUSE", 1500, "WRITE")
		close(begun)
		<-time.After(1500 * time.Millisecond) // the pause's length
		close(resumed)
	})
}

// S6b: the other in-band stall, DEBUG SLEEP 1.5 (the whole server sleeps).
func s6bDebugSleep(t *testing.T) {
	stallScenario(t, "S6b", func(h *harness, begun, resumed chan<- struct{}) {
		slept := make(chan struct{})
		go func() {
			h.srv.Do(h.t, "DEBUG", "SLEEP", "1.5")
			close(slept)
		}()
		h.untilUnresponsive()
		close(begun)
		<-slept
		close(resumed)
	})
}

// untilUnresponsive returns once a PING to the harness's server goes
// unanswered for 20ms: the server is asleep.
func (h *harness) untilUnresponsive() {
	c := redis.NewClient(&redis.Options{Addr: h.srv.Addr(), MaxRetries: -1, PoolSize: 1, ReadTimeout: 20 * time.Millisecond})
	defer c.Close()
	for c.Ping(context.Background()).Err() == nil {
	}
}

// S7: the leader is partitioned both ways: it steps down at D, before
// anyone else acquires (closest approach > 0).
func s7Partition(t *testing.T) {
	h := newHarness(t, "S7")
	c0 := h.candidate("g0", nil)
	l := c0.mustLead(5 * time.Second)
	c1, c2 := h.candidate("g1", nil), h.candidate("g2", nil)
	stop := h.lead(c1, c2)
	lost := h.expect(endedBy("g0"))
	next := h.expect(acquiredByOther("g0"))
	c0.proxy.Blackhole(faultproxy.Both)
	h.fault("blackhole-leader", true)
	end := h.wait(lost, 3*ttl, "the leader's step-down")
	succ := h.wait(next, 3*g8(ttl), "takeover")
	c0.proxy.Heal()
	h.fault("blackhole-leader", false)
	stop()
	leaderEnd := min(end.Mono, history.Mono(l.Deadline()))
	approach := time.Duration(succ.Mono - leaderEnd)
	h.note("closest_approach_ms", "%.1f", ms(approach))
	h.check(approach > 0, "successor acquired %v before the leader stepped down", -approach)
	h.finish(false)
}

// checkedHook closes done once a pipeline that reads INFO (the session's
// check of the server's settings) has returned.
type checkedHook struct {
	once *sync.Once
	done chan struct{}
}

func (k checkedHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (k checkedHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (k checkedHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if cmd.Name() == "info" {
				k.once.Do(func() { close(k.done) })
			}
		}
		return err
	}
}

// S8: the acquire's reply is lost. With go-redis retries (MaxRetries 3) or
// without (-1), the outcome is never "held by someone else" while the key
// holds our token, and a failed TryLock leaves no phantom key. The
// candidates run as the documented least-privilege user, as deployments
// do, and the server denies it nothing: a retry that finds the key its own
// refreshes the TTL with what that rule allows (before the fix, PEXPIREAT:
// the retry failed with a permission error while our key blocked the name
// for a TTL).
func s8AmbiguousAcquire(t *testing.T) {
	h := newHarness(t, "S8")
	admin, key, ctx := h.admin, h.key, context.Background()
	h.setUser("redisleader", aclRule)
	misclassified := 0
	for _, retries := range []int{3, -1} {
		c := h.candidate(fmt.Sprintf("r%d", retries), func(o *redis.Options) {
			o.Username, o.Password, o.MaxRetries = "redisleader", "secret", retries
			o.DisableIdentity = true // no CLIENT SETINFO, which the rule denies on Redis 7.2+ and Valkey
		})
		// Warm the pool and the pub/sub subscription, and let the session
		// check the server's settings (at its first lock, in the
		// background), so that the next reply to a call through the proxy
		// is the acquire's (its pushes pass).
		checked := make(chan struct{})
		c.client.AddHook(checkedHook{once: new(sync.Once), done: checked})
		l := c.mustLead(5 * time.Second)
		_ = l.Release(ctx)
		select {
		case <-checked:
		case <-time.After(5 * time.Second):
			t.Fatal("the session did not check the server's settings")
		}

		c.proxy.DropCallReplies(1)
		h.fault("drop-acquire-reply", true)
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		l, err := c.campaign(cctx)
		cancel()
		h.fault("drop-acquire-reply", false)
		h.check(err == nil, "MaxRetries %d: blocking campaign after a lost reply: %v", retries, err)
		if err == nil {
			stored, _ := admin.Get(ctx, key).Result()
			h.check(strings.Contains(stored, fmt.Sprintf("\n%d\n", l.Fence())), "MaxRetries %d: key %q does not hold our fence %d", retries, stored, l.Fence())
			_ = l.Release(ctx)
		}

		c.proxy.DropCallReplies(1)
		h.fault("drop-trylock-reply", true)
		tl, err := c.session().TryLock(ctx, h.name)
		h.fault("drop-trylock-reply", false)
		if errors.Is(err, redisleader.ErrLocked) {
			misclassified++
		}
		if err == nil {
			_ = tl.Release(ctx)
		} else {
			n, _ := admin.Exists(ctx, key).Result()
			h.check(n == 0, "MaxRetries %d: a failed TryLock left its key behind", retries)
		}
	}
	h.check(misclassified == 0, "%d lost replies reported as ErrLocked", misclassified)
	h.note("misclassified", "%d", misclassified)
	log, err := admin.Do(ctx, "acl", "log").Slice()
	var denied []any
	for _, e := range log {
		if m, ok := e.(map[any]any); ok && (m["object"] == "delifeq" || m["object"] == "delex") {
			continue // the native release's probe, which a rule without the command refuses once per session (docs/operations.md, ACL)
		}
		denied = append(denied, e)
	}
	h.check(err == nil && len(denied) == 0, "the server denied the documented user %d times (%v): %v", len(denied), err, denied)
	h.note("denied", "%d", len(denied))
	h.finish(false)
}

// S9: a renewal's reply is lost (no false loss: retried before D), then a
// release's reply is lost (no key left behind).
func s9AmbiguousRenewRelease(t *testing.T) {
	h := newHarness(t, "S9")
	admin, key, ctx := h.admin, h.key, context.Background()
	c0 := h.candidate("g0", nil)
	l := c0.mustLead(5 * time.Second)
	c0.proxy.DropReplies(1) // the next reply on this path is a renewal's
	h.fault("drop-renew-reply", true)
	select {
	case <-l.Done():
	case <-time.After(ttl): // three renewal intervals
	}
	h.fault("drop-renew-reply", false)
	h.check(l.Held(), "lost after one dropped renewal reply: %v", l.Err())
	h.check(c0.proxy.Stats().DroppedReplies == 1, "dropped %d replies", c0.proxy.Stats().DroppedReplies)

	c0.proxy.DropReplies(1)
	h.fault("drop-release-reply", true)
	relErr := l.Release(ctx)
	h.fault("drop-release-reply", false)
	// The lost reply may be the release's NOSCRIPT, so the delete may not
	// have run: the session retries it in the background within about a
	// renewal interval.
	released := time.Now()
	gone := func() bool { n, _ := admin.Exists(ctx, key).Result(); return n == 0 }
	for !gone() && time.Since(released) < 2*ttl {
		<-time.After(5 * time.Millisecond)
	}
	lingering := time.Since(released)
	h.check(gone(), "key left behind after a release whose reply was lost (Release: %v)", relErr)
	h.note("release_err", "%t", relErr != nil)
	h.note("lingering_ms", "%.0f", ms(lingering))
	h.note("spurious_losses", "%d", lostEvents(h))
	h.check(lostEvents(h) == 0, "spurious loss")
	h.finish(false)
}

// S10: latency on every path, at levels up to and past the call timeout:
// slow paths cost leaderships, never safety.
func s10Latency(t *testing.T) {
	h := newHarness(t, "S10")
	// Idle connections kept warm: under latency a new connection costs two
	// more round trips (HELLO, CLIENT SETINFO) inside a call's timeout.
	warm := func(o *redis.Options) { o.MinIdleConns = 4 }
	cs := []*candidate{h.candidate("g0", warm), h.candidate("g1", warm), h.candidate("g2", warm)}
	contendAll(500*time.Millisecond, 50*time.Millisecond, 100*time.Millisecond, nil, cs...)
	var per []string
	for _, d := range []time.Duration{ttl / 40, ttl / 20, ttl * 7 / 100, ttl * 9 / 10} {
		for _, c := range cs {
			c.proxy.Delay(faultproxy.Both, d, d/5)
		}
		h.fault(fmt.Sprintf("delay-%v", d), true)
		before := len(h.rec.Events())
		contendAll(2*time.Second, 100*time.Millisecond, 300*time.Millisecond, nil, cs...)
		h.fault(fmt.Sprintf("delay-%v", d), false)
		acq := 0
		for _, e := range h.rec.Events()[before:] {
			if e.Kind == history.Acquired {
				acq++
			}
		}
		per = append(per, fmt.Sprintf("%dms:%d", d.Milliseconds(), acq))
	}
	for _, c := range cs {
		c.proxy.Heal()
	}
	h.note("acquisitions_by_one_way_delay", "%s", strings.Join(per, ","))
	h.note("losses", "%d", lostEvents(h))
	h.finish(false)
}

// S30: every request of the leader is delayed 5ms each way (a slow link).
// Its renewals still land on their schedule, so each candidate waiting
// behind it tries once per TTL: it sleeps until the lease it saw can have
// expired, and the renewal due then has landed. On a schedule that drifted
// by each round's duration the candidates arrived just before it and tried
// half as often again (bench/'s 200 candidates: 1.34 attempts per waiting
// candidate per TTL).
func s30SlowLeader(t *testing.T) {
	h := newHarness(t, "S30")
	c0 := h.candidate("g0", nil)
	l := c0.mustLead(5 * time.Second)
	c0.proxy.Delay(faultproxy.Both, 5*time.Millisecond, 0)
	h.fault("delay-leader-5ms", true)
	waiters := []*candidate{h.candidate("g1", nil), h.candidate("g2", nil), h.candidate("g3", nil)}
	stop := h.lead(waiters...)
	defer stop()
	attempts := func() int64 { // acquire scripts: every script but the leader's renewals (one PEXPIRE each)
		info, err := h.admin.Info(context.Background(), "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		return calls(info, "evalsha") + calls(info, "eval") - calls(info, "pexpire")
	}
	const skip, window = 2, 8 // TTLs: the waiters' subscriptions are confirmed after skip
	<-time.After(skip * ttl)
	before := attempts()
	<-time.After(window * ttl)
	per := float64(attempts()-before) / float64(len(waiters)*window)
	stop()
	h.fault("delay-leader-5ms", false)
	h.note("attempts_per_waiter_per_ttl", "%.2f", per)
	h.check(l.Held(), "the leader lost its lease: %v", l.Err())
	h.check(per <= 1.2, "%.2f attempts per waiting candidate per TTL, want about 1", per)
	h.finish(false)
}

// calls is the number of calls of cmd in an INFO commandstats reply.
func calls(info, cmd string) int64 {
	_, rest, ok := strings.Cut(info, "cmdstat_"+cmd+":calls=")
	if !ok {
		return 0
	}
	n, _, _ := strings.Cut(rest, ",")
	v, _ := strconv.ParseInt(n, 10, 64)
	return v
}

// S11: the leader's requests are held for 1.5 T and then delivered: the
// late renewal finds another owner (or is ignored), nothing resurrects.
func s11DelayedDelivery(t *testing.T) {
	h := newHarness(t, "S11")
	c0 := h.candidate("g0", nil)
	l := c0.mustLead(5 * time.Second)
	c1 := h.candidate("g1", nil)
	stop := h.lead(c1)
	defer stop()
	next := h.expect(acquiredBy("g1"))
	c0.proxy.Pause(faultproxy.ClientToServer)
	h.fault("hold-leader-requests", true)
	held := time.Now()
	h.wait(next, 3*g8(ttl), "takeover")
	<-time.After(3*ttl/2 - time.Since(held)) // hold for 1.5 T in all
	c0.proxy.Unpause(faultproxy.ClientToServer)
	h.fault("hold-leader-requests", false)
	// The flushed renewals reach Redis now; the successor keeps leading.
	select {
	case <-time.After(ttl / 2): // the observation window
	case <-l.Done():
	}
	stop()
	h.check(!l.Held(), "the old leader holds again")
	h.check(errors.Is(l.Err(), redisleader.ErrExpired), "old leader: %v", l.Err())
	ignored := 0
	for _, e := range h.rec.Events() {
		if e.Kind == "ignored" && e.Who == "g0" {
			ignored++
		}
	}
	h.note("late_replies_ignored", "%d", ignored)
	h.finish(false)
}

// S12: Redis is killed and restarted at once without persistence: every
// lock vanishes, a waiting candidate leads at once while the old leader
// believes until its next renewal. Documented limit; the mitigations
// (restart only after a TTL; WithTakeoverDelay) remove the overlap.
func s12Restart(t *testing.T) {
	t.Run("plain", func(t *testing.T) { restartScenario(t, "S12", 0, false) })
	t.Run("delayed-restart", func(t *testing.T) { restartScenario(t, "S12-delayed-restart", 0, true) })
	t.Run("takeover-delay", func(t *testing.T) { restartScenario(t, "S12-takeover-delay", ttl, false) })
}

func restartScenario(t *testing.T, id string, takeoverDelay time.Duration, delayed bool) {
	h := newHarness(t, id)
	var extra []redisleader.Option
	if takeoverDelay > 0 {
		extra = append(extra, redisleader.WithTakeoverDelay(takeoverDelay))
	}
	const trials = 3
	for trial := range trials {
		c0 := h.candidate(fmt.Sprintf("old%d", trial), nil, extra...)
		l := c0.mustLead(5 * time.Second)
		cs := []*candidate{h.candidate(fmt.Sprintf("a%d", trial), nil, extra...), h.candidate(fmt.Sprintf("b%d", trial), nil, extra...)}
		stop := h.lead(cs...)
		next := h.expect(acquiredByOther(c0.who))
		h.fault("restart-redis", true)
		if delayed {
			lost := h.expect(endedBy(c0.who))
			h.srv.Kill(t)
			h.wait(lost, 3*ttl, "the old leader's step-down")
			<-time.After(ttl) // restart only after a TTL: the mitigation itself
			h.srv.Restart(t)
		} else {
			h.srv.Restart(t)
		}
		h.fault("restart-redis", false)
		h.wait(next, 3*g8(ttl)+takeoverDelay, "takeover after the restart")
		select { // let the successor lead until the old leader has stepped down
		case <-l.Done():
		case <-time.After(3 * ttl):
		}
		stop()
		_ = l.Release(context.Background())
		if !delayed && takeoverDelay == 0 && !history.Check(h.rec.Events()).Safe() {
			break // detected; one trial is enough
		}
	}
	h.finish(!delayed && takeoverDelay == 0)
}

// ttlShift emulates a forward step of J on the Redis host's wall clock for
// the given keys: every TTL shrinks by J (a key whose TTL is shorter goes).
const ttlShift = `
for _, k in ipairs(KEYS) do
  local p = redis.call('PTTL', k)
  if p > 0 then
    local n = p - tonumber(ARGV[1])
    if n <= 0 then redis.call('DEL', k) else redis.call('PEXPIRE', k, n) end
  end
end
return 1`

// S14: the Redis host's clock steps forward by J = T while a leader holds:
// its key expires early and a new candidate leads while the old leader
// still believes, until its next renewal (documented limit). With
// WithTakeoverDelay(J) the newcomer starts only after the old leader has
// stepped down.
func s14ClockStep(t *testing.T) {
	t.Run("plain", func(t *testing.T) { clockStepScenario(t, "S14", 0) })
	t.Run("takeover-delay", func(t *testing.T) { clockStepScenario(t, "S14-takeover-delay", ttl) })
}

func clockStepScenario(t *testing.T, id string, takeoverDelay time.Duration) {
	h := newHarness(t, id)
	admin, key := h.admin, h.key
	const jump = ttl
	var extra []redisleader.Option
	if takeoverDelay > 0 {
		extra = append(extra, redisleader.WithTakeoverDelay(takeoverDelay))
	}
	for trial := range 3 {
		c0 := h.candidate(fmt.Sprintf("old%d", trial), nil, extra...)
		l := c0.mustLead(5*time.Second + takeoverDelay)
		c1 := h.candidate(fmt.Sprintf("new%d", trial), nil, extra...)
		h.fault("clock-step", true)
		if err := admin.Eval(context.Background(), ttlShift, []string{key}, jump.Milliseconds()).Err(); err != nil {
			t.Fatal(err)
		}
		h.fault("clock-step", false)
		nl := c1.mustLead(3*g8(ttl) + takeoverDelay)
		select { // the newcomer leads until the old leader has stepped down
		case <-l.Done():
		case <-time.After(3 * ttl):
		}
		_ = nl.Release(context.Background())
		_ = l.Release(context.Background())
		if takeoverDelay == 0 && !history.Check(h.rec.Events()).Safe() {
			break
		}
	}
	h.note("step_ms", "%d", jump.Milliseconds())
	h.finish(takeoverDelay == 0)
}

// S15: deadlines live on the monotonic clock only, so a step of the
// client's wall clock cannot move them: the library never strips the
// monotonic reading (Round(0), UTC, Unix round trips) from a time it
// compares, and every Lock deadline carries one. A short contention run
// gives the line its figures.
func s15WallClock(t *testing.T) {
	h := newHarness(t, "S15")
	files, err := filepath.Glob("../../*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("library sources: %v", err)
	}
	stripping := 0
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			zeroArg := false
			if len(call.Args) == 1 {
				lit, ok := call.Args[0].(*ast.BasicLit)
				zeroArg = ok && lit.Value == "0"
			}
			switch name := sel.Sel.Name; {
			case name == "UTC" || name == "Local" || name == "In",
				(name == "Round" || name == "Truncate") && zeroArg,
				strings.HasPrefix(name, "Unix"):
				stripping++
				h.check(false, "%s: .%s drops or bypasses the monotonic reading", fset.Position(sel.Pos()), name)
			}
			return true
		})
	}
	c0, c1 := h.candidate("g0", nil), h.candidate("g1", nil)
	l := c0.mustLead(5 * time.Second)
	h.check(strings.Contains(l.Deadline().String(), " m=+"), "Deadline() %v has no monotonic reading", l.Deadline())
	_ = l.Release(context.Background())
	contendAll(1500*time.Millisecond, 50*time.Millisecond, 200*time.Millisecond, nil, c0, c1)
	h.note("wall_clock_reads_in_deadlines", "%d", stripping)
	h.finish(false)
}

// S16: SCRIPT FLUSH every 100ms under contention: NOSCRIPT is retried as
// EVAL, never mistaken for a loss.
func s16ScriptFlush(t *testing.T) {
	h := newHarness(t, "S16")
	admin := h.admin
	cs := []*candidate{h.candidate("g0", nil), h.candidate("g1", nil), h.candidate("g2", nil), h.candidate("g3", nil)}
	ctx, cancel := context.WithCancel(context.Background())
	flushes := 0
	var wg sync.WaitGroup
	wgGo(&wg, func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if admin.ScriptFlush(ctx).Err() == nil {
					flushes++
					h.faults.Add(1)
				}
			}
		}
	})
	contendAll(3*time.Second, 100*time.Millisecond, 700*time.Millisecond, nil, cs...)
	cancel()
	wg.Wait()
	h.note("script_flushes", "%d", flushes)
	h.note("spurious_losses", "%d", lostEvents(h))
	h.check(lostEvents(h) == 0, "%d spurious losses", lostEvents(h))
	h.finish(false)
}

// S17b: Redis at maxmemory with noeviction: a new acquire fails with the
// OOM error (not "held by someone else"); renewals and the release of a
// held lock still work (PEXPIRE and DEL are allowed at OOM).
func s17bOOM(t *testing.T) {
	h := newHarness(t, "S17b")
	admin := h.admin
	ctx := context.Background()
	c0, c1 := h.candidate("g0", nil), h.candidate("g1", nil)
	l := c0.mustLead(5 * time.Second)
	h.fault("oom", true)
	if err := admin.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	_, err := c1.session().TryLock(ctx, "other-"+h.name)
	h.check(err != nil && strings.Contains(err.Error(), "OOM") && !errors.Is(err, redisleader.ErrLocked), "TryLock at OOM: %v", err)
	select {
	case <-l.Done():
	case <-time.After(ttl): // three renewal intervals at OOM
	}
	h.check(l.Held(), "lost at OOM: %v", l.Err())
	h.check(l.Release(ctx) == nil, "release at OOM failed")
	n, _ := admin.Exists(ctx, "redisleader:{"+h.name+"}").Result()
	h.check(n == 0, "release at OOM left the key")
	_ = admin.ConfigSet(ctx, "maxmemory", "0").Err()
	h.fault("oom", false)
	h.note("oom_error_classified", "%t", err != nil && !errors.Is(err, redisleader.ErrLocked))
	h.finish(false)
}

// S19: 200 candidates in one election for 5s: one leader at a time, no
// goroutine left after Close, Redis load reported (per second and per
// handover), and how many candidates led. S19-fair: the same in fair mode,
// where a release wakes one waiter instead of 199.
func s19Herd(id string, extra ...redisleader.Option) func(t *testing.T) {
	return func(t *testing.T) { s19(t, id, extra...) }
}

func s19(t *testing.T, id string, extra ...redisleader.Option) {
	h := newHarness(t, id)
	admin := h.admin
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: h.srv.Addr(), ContextTimeoutEnabled: true, PoolSize: 64})
	defer client.Close()
	before := goroutines()
	cmds := func() int64 {
		info, _ := admin.Info(ctx, "stats").Result()
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "total_commands_processed:"); ok {
				var n int64
				fmt.Sscan(v, &n)
				return n
			}
		}
		return 0
	}
	const n, d = 200, 5 * time.Second
	var sessions []*redisleader.Session
	for range n {
		s, err := redisleader.NewSession(client, leaseOpts(ttl, extra...)...)
		if err != nil {
			t.Fatal(err)
		}
		sessions = append(sessions, s)
	}
	var (
		ledMu sync.Mutex
		led   = map[string]bool{}
	)
	start, c0 := time.Now(), cmds()
	runCtx, cancel := context.WithTimeout(ctx, d)
	var wg sync.WaitGroup
	for i, s := range sessions {
		el, _ := s.Election(h.name)
		who := fmt.Sprintf("h%d", i)
		wgGo(&wg, func() {
			for runCtx.Err() == nil {
				l, err := el.Campaign(runCtx, who)
				if err != nil {
					continue
				}
				select {
				case <-time.After(50 * time.Millisecond): // the leader's work
				case <-runCtx.Done():
				}
				if l.Held() {
					h.res.write(who, l.Fence())
				}
				ledMu.Lock()
				led[who] = true
				ledMu.Unlock()
				_ = l.Release(ctx)
			}
		})
	}
	wg.Wait()
	cancel()
	ops := cmds() - c0
	opsPerS := float64(ops) / time.Since(start).Seconds()
	for _, s := range sessions {
		_ = s.Close(ctx)
	}
	leaked := ""
	if waitNoLibLeaks(5*time.Second) != "" {
		leaked = "yes"
	}
	after := goroutines()
	rep := history.Check(h.rec.Events())
	h.check(leaked == "", "goroutines left after Close: %d (before %d)", after, before)
	h.check(rep.Intervals >= 10, "only %d leaderships", rep.Intervals)
	h.note("candidates", "%d", n)
	h.note("redis_ops_per_s", "%.0f", opsPerS)
	h.note("ops_per_handover", "%.0f", float64(ops)/float64(max(rep.Intervals, 1)))
	h.note("distinct_leaders", "%d", len(led))
	h.note("goroutines_after_close", "%d", after)
	h.finish(false)
}

// S20: a lock that expired while partitioned is released late: the new
// owner's key is untouched; a campaign cancelled while waiting leaves no
// key; Close twice is fine and leaves no goroutine.
func s20CancelCloseForeign(t *testing.T) {
	h := newHarness(t, "S20")
	admin, key, ctx := h.admin, h.key, context.Background()
	a, b, c := h.candidate("A", nil), h.candidate("B", nil), h.candidate("C", nil)
	la := a.mustLead(5 * time.Second)
	lost := h.expect(endedBy("A"))
	a.proxy.Blackhole(faultproxy.Both)
	h.fault("blackhole-A", true)
	h.wait(lost, 3*ttl, "A's step-down")
	lb := b.mustLead(3 * g8(ttl))
	a.proxy.Heal()
	a.proxy.ResetConns()
	h.fault("blackhole-A", false)
	relErr := la.Release(ctx)
	h.check(errors.Is(relErr, redisleader.ErrExpired), "A's late Release: %v", relErr)
	leader, err := b.election().Leader(ctx)
	h.check(err == nil && leader.Value == "B" && leader.Fence == lb.Fence(), "B's key after A's release: %+v, %v", leader, err)

	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = c.campaign(cctx)
	cancel()
	h.check(errors.Is(err, context.DeadlineExceeded), "cancelled campaign: %v", err)
	keys, _ := admin.Keys(ctx, "redisleader:*").Result()
	h.check(len(keys) == 2, "keys after the cancelled campaign: %v (want B's lock and the fence)", keys)

	for _, x := range []*candidate{a, b, c} {
		h.check(x.session().Close(ctx) == nil, "%s: first Close", x.who)
		h.check(x.session().Close(ctx) == nil, "%s: second Close", x.who)
	}
	n, _ := admin.Exists(ctx, key).Result()
	h.check(n == 0, "B's key left after Close")
	h.check(waitNoLibLeaks(5*time.Second) == "", "goroutines outlived Close")
	h.finish(false)
}
