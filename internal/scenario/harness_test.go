//go:build linux

package scenario

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader"
	"github.com/redisleader/redisleader/internal/faultproxy"
	"github.com/redisleader/redisleader/internal/history"
	"github.com/redisleader/redisleader/internal/leak"
	"github.com/redisleader/redisleader/internal/probe"
	"github.com/redisleader/redisleader/internal/redisserver"
)

// Timing of the fast tier (RELIABILITY.md): T = 1s, renewal every T/3, call
// timeout 150ms, drift 0.01, margin 10ms, retry 100ms + up to 50ms jitter.
const ttl = time.Second

// leaseOpts are the session options of every candidate for a TTL.
func leaseOpts(ttl time.Duration, extra ...redisleader.Option) []redisleader.Option {
	return append([]redisleader.Option{
		redisleader.WithTTL(ttl),
		redisleader.WithCallTimeout(ttl * 15 / 100),
		redisleader.WithMargin(ttl / 100),
		redisleader.WithRetryInterval(ttl / 10),
		redisleader.WithRetryJitter(ttl / 20),
	}, extra...)
}

// g8 is the takeover bound after a crash: T + retry + jitter + call timeout.
func g8(ttl time.Duration) time.Duration { return ttl + ttl/10 + ttl/20 + ttl*15/100 }

// Child-process candidates: the test binary re-executed with these
// variables set runs childMain instead of the tests.
const (
	envChild = "SCENARIO_CHILD" // the candidate's id
	envAddr  = "SCENARIO_ADDR"
	envName  = "SCENARIO_NAME"
	envTTL   = "SCENARIO_TTL_MS"
	envHold  = "SCENARIO_HOLD_MS" // "min,max": hold then resign; empty: hold until told
	envFair  = "SCENARIO_FAIR"    // "1": the child's session uses WithFairness
)

// Kinds of harness events beyond the library's and the checker's.
const (
	kindWriteReady = "write_ready" // child: checked Held, about to write with Fence
	kindWriteReq   = "write_req"   // child: asks the parent's resource to write with Fence
	kindHeldAfter  = "held_after"  // child: Held() right after its write; Reason "true"/"false"
	kindNotLeader  = "not_leader"  // child: asked to write while not leading
)

var (
	current atomic.Pointer[harness] // the scenario receiving this process's probe events
	lines   struct {
		sync.Mutex
		all []string
	}
)

func TestMain(m *testing.M) {
	if os.Getenv(envChild) != "" {
		if main := childModes[os.Getenv(envMode)]; main != nil {
			os.Exit(main()) // semfleet_test.go
		}
		if os.Getenv(envRun) == "1" {
			os.Exit(runChildMain()) // runchild_test.go
		}
		os.Exit(childMain())
	}
	probe.Set(func(e probe.Event) {
		if h := current.Load(); h != nil {
			h.add(fromProbe(e))
		}
	})
	code := m.Run()
	lines.Lock()
	if len(lines.all) > 0 {
		fmt.Println("--- scenario summary")
		for _, l := range lines.all {
			fmt.Println(l)
		}
	}
	lines.Unlock()
	if code == 0 {
		if leaked := waitNoLeaks(10 * time.Second); leaked != "" {
			fmt.Println("goroutines of redisleader outlived the scenarios:\n" + leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// fromProbe turns a library event into a history event; the candidate's id
// is the election value.
func fromProbe(e probe.Event) history.Event { return history.FromProbe(e, reason) }

func reason(err error) string {
	switch {
	case errors.Is(err, redisleader.ErrReleased):
		return "released"
	case errors.Is(err, redisleader.ErrNotOwner):
		return "not_owner"
	case errors.Is(err, redisleader.ErrExpired):
		return "expired"
	case errors.Is(err, redisleader.ErrSessionClosed):
		return "session_closed"
	}
	return err.Error()
}

// harness is one scenario: a private redis-server, the candidates, the
// fenced resource, and the recorded history.
type harness struct {
	t     *testing.T
	id    string
	srv   *redisserver.Server
	admin *redis.Client // direct, not through a proxy
	name  string        // the election
	key   string        // its lock key
	ttl   time.Duration
	rec   history.Recorder
	res   resource

	mu      sync.Mutex
	waiters []*waiter
	extra   []string // "key=value" fields for the scenario line
	failed  []string // scenario-specific checks that failed

	faults atomic.Int64
}

// newHarness starts a redis-server for the scenario and routes this
// process's probe events to it.
func newHarness(t *testing.T, id string, srvOpts ...redisserver.Options) *harness {
	h := &harness{t: t, id: id, name: "election-" + strings.ToLower(id), ttl: ttl}
	h.res.h = h
	h.srv = redisserver.Start(t, srvOpts...)
	h.admin = h.srv.Client(t)
	h.key = "redisleader:{" + h.name + "}"
	if !current.CompareAndSwap(nil, h) {
		t.Fatal("scenarios must not run in parallel")
	}
	t.Cleanup(func() { current.CompareAndSwap(h, nil) })
	return h
}

// add records an event and wakes the waiters it satisfies.
func (h *harness) add(e history.Event) {
	if sideAdd(e) {
		return // an actor judged apart (semfleet_test.go)
	}
	h.rec.Add(e)
	h.mu.Lock()
	defer h.mu.Unlock()
	kept := h.waiters[:0]
	for _, w := range h.waiters {
		if w.pred(e) {
			w.ch <- e
			continue
		}
		kept = append(kept, w)
	}
	h.waiters = kept
}

// A waiter receives the first event that satisfies pred after it was
// registered.
type waiter struct {
	pred func(history.Event) bool
	ch   chan history.Event
}

// expect registers a waiter; register it before causing the event.
func (h *harness) expect(pred func(history.Event) bool) *waiter {
	w := &waiter{pred: pred, ch: make(chan history.Event, 1)}
	h.mu.Lock()
	h.waiters = append(h.waiters, w)
	h.mu.Unlock()
	return w
}

// wait returns the waiter's event, or fails the test after within.
func (h *harness) wait(w *waiter, within time.Duration, what string) history.Event {
	h.t.Helper()
	select {
	case e := <-w.ch:
		return e
	case <-time.After(within):
		h.t.Fatalf("%s: no such event within %v", what, within)
		return history.Event{}
	}
}

// Predicates.
func kind(k string) func(history.Event) bool {
	return func(e history.Event) bool { return e.Kind == k }
}

func acquiredBy(who string) func(history.Event) bool {
	return func(e history.Event) bool { return e.Kind == history.Acquired && e.Who == who }
}

func acquiredByOther(who string) func(history.Event) bool {
	return func(e history.Event) bool { return e.Kind == history.Acquired && e.Who != who }
}

func endedBy(who string) func(history.Event) bool {
	return func(e history.Event) bool { return e.Kind == history.Ended && e.Who == who }
}

// fault records a fault window in the history.
func (h *harness) fault(name string, on bool) {
	k := history.FaultOff
	if on {
		k = history.FaultOn
		h.faults.Add(1)
	}
	h.add(history.Event{Mono: history.Now(), Who: "nemesis", Kind: k, Reason: name})
}

// note adds a field to the scenario's line.
func (h *harness) note(key string, format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.extra = append(h.extra, key+"="+fmt.Sprintf(format, args...))
}

// check records a scenario-specific requirement; a false one fails the
// scenario (and the test) with the message.
func (h *harness) check(ok bool, format string, args ...any) {
	h.t.Helper()
	if ok {
		return
	}
	msg := fmt.Sprintf(format, args...)
	h.mu.Lock()
	h.failed = append(h.failed, msg)
	h.mu.Unlock()
	h.t.Errorf("%s: %s", h.id, msg)
}

// finish checks the history and prints the scenario's line. A promised
// scenario passes with a safe history; a documented-limit scenario
// (wantViolation) passes when the checker detects the violation.
func (h *harness) finish(wantViolation bool) history.Report {
	h.t.Helper()
	rep := history.Check(h.rec.Events())
	pass := rep.Safe() != wantViolation
	if wantViolation {
		h.check(!rep.Safe(), "the checker should have detected the documented violation")
	} else {
		h.check(rep.Safe(), "unsafe history:\n%s", strings.Join(rep.Problems, "\n"))
	}
	h.mu.Lock()
	pass = pass && len(h.failed) == 0
	line := rep.Line(h.id, pass)
	if wantViolation {
		line += " expect=violation"
	} else {
		line += " expect=safe"
	}
	if rep.Overlaps > 0 {
		line += fmt.Sprintf(" max_overlap_ms=%.1f", rep.MaxOverlapMs)
	}
	line += fmt.Sprintf(" faults=%d", h.faults.Load())
	for _, x := range h.extra {
		line += " " + x
	}
	h.mu.Unlock()
	h.t.Log(line)
	lines.Lock()
	lines.all = append(lines.all, line)
	lines.Unlock()
	if wantViolation && len(rep.Problems) > 0 {
		h.t.Logf("detected (documented limit): %s", rep.Problems[0])
	}
	return rep
}

// resource is the fenced resource: it accepts a write only if its fence is
// at least the highest it has accepted.
type resource struct {
	h   *harness
	mu  sync.Mutex
	max int64
}

func (r *resource) write(who string, fence int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	ok := fence >= r.max
	k := history.WriteRej
	if ok {
		r.max, k = fence, history.WriteOK
	}
	r.h.add(history.Event{Mono: history.Now(), Who: who, Kind: k, Fence: fence})
	return ok
}

// candidate is an in-process candidate: its own proxy, client and session
// (for Redlock, one proxy and client per node).
type candidate struct {
	h       *harness
	who     string
	proxy   *faultproxy.Proxy // proxies[0]
	client  *redis.Client     // clients[0]
	proxies []*faultproxy.Proxy
	clients []*redis.Client
	opts    []redisleader.Option
	cfg     func(*redis.Options)

	mu   sync.Mutex
	sess *redisleader.Session
	el   *redisleader.Election
}

// candidate starts an in-process candidate on the scenario's server with
// the fast-tier options plus extra; cfg, if not nil, adjusts its go-redis
// options.
func (h *harness) candidate(who string, cfg func(*redis.Options), extra ...redisleader.Option) *candidate {
	h.t.Helper()
	return h.candidateOn([]*redisserver.Server{h.srv}, who, cfg, extra...)
}

// candidateOn starts an in-process candidate on the given servers: a plain
// session on one, a Redlock session on several, each through its own proxy.
func (h *harness) candidateOn(srvs []*redisserver.Server, who string, cfg func(*redis.Options), extra ...redisleader.Option) *candidate {
	h.t.Helper()
	c := &candidate{h: h, who: who, opts: leaseOpts(h.ttl, extra...), cfg: cfg}
	for _, srv := range srvs {
		p, err := faultproxy.New(srv.Addr())
		if err != nil {
			h.t.Fatal(err)
		}
		h.t.Cleanup(func() { _ = p.Close() })
		client := redis.NewClient(c.redisOptions(p.Addr()))
		h.t.Cleanup(func() { _ = client.Close() })
		c.proxies, c.clients = append(c.proxies, p), append(c.clients, client)
	}
	c.proxy, c.client = c.proxies[0], c.clients[0]
	c.newSession()
	h.t.Cleanup(func() { _ = c.session().Close(context.Background()) })
	return c
}

// recordTries reports, as history.Tried, c's acquire attempts on set (a
// script of keys keys: triedHook): the lower bound of a grant whose reply
// was lost and whose retry, with the same token, confirmed it with the
// fence of that first grant.
func (c *candidate) recordTries(set string, keys int) *candidate {
	c.client.AddHook(triedHook{who: c.who, set: set, keys: keys, emit: c.h.add})
	return c
}

func (c *candidate) redisOptions(addr string) *redis.Options {
	o := &redis.Options{
		Addr: addr, ContextTimeoutEnabled: true,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second,
	}
	if c.cfg != nil {
		c.cfg(o)
	}
	return o
}

func (c *candidate) newSession() {
	var (
		s   *redisleader.Session
		err error
	)
	if len(c.clients) == 1 {
		s, err = redisleader.NewSession(c.client, c.opts...)
	} else {
		nodes := make([]redisleader.Client, len(c.clients))
		for i, cl := range c.clients {
			nodes[i] = cl
		}
		s, err = redisleader.NewRedlockSession(nodes, c.opts...)
	}
	if err != nil {
		c.h.t.Fatal(err)
	}
	el, err := s.Election(c.h.name)
	if err != nil {
		c.h.t.Fatal(err)
	}
	c.mu.Lock()
	c.sess, c.el = s, el
	c.mu.Unlock()
}

func (c *candidate) session() *redisleader.Session {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sess
}

func (c *candidate) election() *redisleader.Election {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.el
}

// campaign blocks until c leads (or ctx ends).
func (c *candidate) campaign(ctx context.Context) (*redisleader.Lock, error) {
	return c.election().Campaign(ctx, c.who)
}

// mustLead campaigns with a deadline and fails the test if c does not lead.
func (c *candidate) mustLead(within time.Duration) *redisleader.Lock {
	c.h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	l, err := c.campaign(ctx)
	if err != nil {
		c.h.t.Fatalf("%s: campaign: %v", c.who, err)
	}
	return l
}

// work writes to the resource every 10ms while l is held, until hold has
// passed, l ends or ctx ends.
func (c *candidate) work(ctx context.Context, l *redisleader.Lock, hold time.Duration) {
	t := time.NewTimer(hold)
	defer t.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if l.Held() {
			c.h.res.write(c.who, l.Fence())
		}
		select {
		case <-t.C:
			return
		case <-l.Done():
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// wgGo is sync.WaitGroup.Go, which needs Go 1.25 (the module's go line is
// 1.24).
func wgGo(wg *sync.WaitGroup, f func()) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		f()
	}()
}

// lead makes the candidates campaign, each holding leadership until stop
// is called, which waits for them.
func (h *harness) lead(cs ...*candidate) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, c := range cs {
		wgGo(&wg, func() { c.contend(ctx, time.Hour, time.Hour+1, nil) })
	}
	return func() { cancel(); wg.Wait() }
}

// abandon ends c's session as a crash would: its traffic is blackholed, so
// the release does not reach Redis and the key stays until it expires; then
// the path heals and c starts a fresh session.
func (c *candidate) abandon() {
	for _, p := range c.proxies {
		p.Blackhole(faultproxy.Both)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_ = c.session().Close(ctx)
	cancel()
	for _, p := range c.proxies {
		p.Heal()
		p.ResetConns()
	}
	c.newSession()
}

// crashes decides which leaderships end as a crash would: each with
// probability p, at most left of them in the run. A nil *crashes crashes
// none.
type crashes struct {
	p    float64
	left atomic.Int64
}

func newCrashes(p float64, most int64) *crashes {
	c := &crashes{p: p}
	c.left.Store(most)
	return c
}

// next reports whether the leadership that just ended crashes; it is safe
// for concurrent use.
func (c *crashes) next() bool {
	if c == nil || rand.Float64() >= c.p {
		return false
	}
	return c.left.Add(-1) >= 0
}

// contend campaigns in a loop until ctx ends: lead for a random hold in
// [holdMin, holdMax), writing to the resource, then resign (or, when crash
// says so, abandon).
func (c *candidate) contend(ctx context.Context, holdMin, holdMax time.Duration, crash *crashes) {
	for ctx.Err() == nil {
		l, err := c.campaign(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			continue // the session was abandoned meanwhile, or a permanent error
		}
		c.work(ctx, l, holdMin+rand.N(holdMax-holdMin))
		if ctx.Err() == nil && crash.next() {
			c.abandon()
			continue
		}
		_ = l.Release(context.Background())
	}
}

// child is a candidate in a child process (the test binary re-executed),
// which streams its events as JSON lines on stdout.
type child struct {
	h     *harness
	who   string
	proxy *faultproxy.Proxy
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{} // closed when its stdout ended
	errs  strings.Builder
}

// child starts a child-process candidate. With hold "min,max" (ms) it
// resigns after a random hold; empty, it leads until killed or told.
func (h *harness) child(who, hold string, env ...string) *child {
	h.t.Helper()
	p, err := faultproxy.New(h.srv.Addr())
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = p.Close() })
	c := &child{h: h, who: who, proxy: p, done: make(chan struct{})}
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	c.cmd.Env = append(os.Environ(), envChild+"="+who, envAddr+"="+p.Addr(), envName+"="+h.name,
		envTTL+"="+strconv.FormatInt(h.ttl.Milliseconds(), 10), envHold+"="+hold)
	c.cmd.Env = append(c.cmd.Env, env...)
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	c.cmd.Stderr = &c.errs
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		h.t.Fatal(err)
	}
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		h.t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	go func() {
		defer close(c.done)
		_ = history.Decode(out, func(e history.Event) {
			if e.Kind == kindWriteReq {
				h.res.write(e.Who, e.Fence)
			}
			h.add(e)
		})
	}()
	h.t.Cleanup(c.kill)
	return c
}

// leadingChild starts a child-process candidate that leads until killed,
// and waits until it leads.
func (h *harness) leadingChild(who string) *child {
	h.t.Helper()
	w := h.expect(acquiredBy(who))
	c := h.child(who, "")
	h.wait(w, 10*time.Second, who+" leads")
	return c
}

// send writes one command line to the child.
func (c *child) send(cmd string) {
	_, _ = io.WriteString(c.stdin, cmd+"\n")
}

func (c *child) signal(sig syscall.Signal) {
	if err := c.cmd.Process.Signal(sig); err != nil {
		c.h.t.Fatalf("%s: %v: %v", c.who, sig, err)
	}
}

// kill ends the child with SIGKILL and reaps it.
func (c *child) kill() {
	if c.cmd.ProcessState != nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGCONT)
	_ = c.cmd.Process.Kill()
	<-c.done
	_ = c.cmd.Wait()
	if s := c.errs.String(); strings.Contains(s, "panic") || strings.Contains(s, "DATA RACE") {
		c.h.t.Errorf("child %s stderr:\n%s", c.who, s)
	}
}

// childMain is a child-process candidate: it campaigns for the election in
// a loop and reports every lease event (through the probe) on stdout.
// Commands on stdin: "prepare" checks leadership and reports write_ready
// with the fence, then waits for "go" and asks for the write with that
// fence (a write queued before a pause); "exit" ends the process.
func childMain() int {
	who := os.Getenv(envChild)
	out := history.NewWriter(os.Stdout)
	probe.Set(func(e probe.Event) { out.Add(fromProbe(e)) })
	ttlMs, _ := strconv.Atoi(os.Getenv(envTTL))
	ttl := time.Duration(ttlMs) * time.Millisecond
	client := redis.NewClient(&redis.Options{Addr: os.Getenv(envAddr), ContextTimeoutEnabled: true,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second})
	var extra []redisleader.Option
	if os.Getenv(envFair) == "1" {
		extra = append(extra, redisleader.WithFairness())
	}
	s, err := redisleader.NewSession(client, leaseOpts(ttl, extra...)...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	el, err := s.Election(os.Getenv(envName))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var holdMin, holdMax time.Duration
	if h := os.Getenv(envHold); h != "" {
		a, b, _ := strings.Cut(h, ",")
		lo, _ := strconv.Atoi(a)
		hi, _ := strconv.Atoi(b)
		holdMin, holdMax = time.Duration(lo)*time.Millisecond, time.Duration(hi)*time.Millisecond
	}
	var cur atomic.Pointer[redisleader.Lock]
	go func() {
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() {
			switch in.Text() {
			case "prepare":
				// The parent saw "acquired", which comes just before
				// Campaign returns: give the loop a moment to store it.
				l := cur.Load()
				for deadline := time.Now().Add(time.Second); (l == nil || !l.Held()) && time.Now().Before(deadline); l = cur.Load() {
					<-time.After(time.Millisecond)
				}
				if l == nil || !l.Held() {
					out.Add(history.Event{Mono: history.Now(), Who: who, Kind: kindNotLeader})
					continue
				}
				fence := l.Fence()
				out.Add(history.Event{Mono: history.Now(), Who: who, Kind: kindWriteReady, Fence: fence})
				if !in.Scan() {
					return
				}
				out.Add(history.Event{Mono: history.Now(), Who: who, Kind: kindWriteReq, Fence: fence})
				out.Add(history.Event{Mono: history.Now(), Who: who, Kind: kindHeldAfter, Fence: fence, Reason: strconv.FormatBool(l.Held())})
			case "exit":
				os.Exit(0)
			}
		}
		os.Exit(0) // the parent went away
	}()
	ctx := context.Background()
	for {
		l, err := el.Campaign(ctx, who)
		if err != nil {
			fmt.Fprintln(os.Stderr, "campaign:", err)
			continue
		}
		cur.Store(l)
		if holdMax == 0 {
			<-l.Done()
			continue
		}
		t := time.NewTimer(holdMin + rand.N(holdMax-holdMin+1))
		select {
		case <-t.C:
			_ = l.Release(ctx)
		case <-l.Done():
			t.Stop()
		}
	}
}

// waitNoLeaks waits up to d for every library and proxy goroutine to end.
func waitNoLeaks(d time.Duration) string {
	return leak.Wait(d, append(slices.Clone(leak.Library), leak.Proxy...)...)
}

// waitNoLibLeaks waits up to d for every library goroutine to end.
func waitNoLibLeaks(d time.Duration) string { return leak.Wait(d, leak.Library...) }

// goroutines counts this process's goroutines of the library.
func goroutines() int { return len(leak.Goroutines(leak.Library...)) }
