package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader"
)

var demoHelp = helpText{
	synopsis: "demo [--redis URL] [--ttl D] [--candidates N]",
	about: `
Run a few candidates in this process and narrate what happens: an election,
a graceful handover, and a crash followed by a takeover after the lease
expires, with the measured times. With no --redis it uses an embedded Redis.
`,
	exit: `
Exit status: 0 when the demo ran, 1 on a Redis error, 2 on a usage error.
`,
}

type demoFlags struct {
	url string
	ttl time.Duration
	n   int
}

func newDemoFlags() (*flag.FlagSet, *demoFlags) {
	fs := newFlagSet("demo")
	f := &demoFlags{}
	fs.StringVar(&f.url, "redis", "", "Redis `URL` (as for the other commands; REDIS_URL is not read); empty: an embedded Redis (miniredis) in this process")
	fs.DurationVar(&f.ttl, "ttl", time.Second, "lease TTL of the candidates (a crashed leader is replaced after it)")
	fs.IntVar(&f.n, "candidates", 3, "number of candidates, 2 to 10")
	return fs, f
}

// cmdDemo runs a few candidates in this process and narrates what happens:
// an election, a graceful handover, and a crash followed by a takeover after
// the lease expires. With no --redis it uses an embedded Redis (miniredis).
func cmdDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, f := newDemoFlags()
	if code := parseFlags(fs, demoHelp, args, stdout, stderr); code >= 0 {
		return code
	}
	url, ttl, n := &f.url, &f.ttl, &f.n
	if fs.NArg() > 0 {
		return usageError(stderr, "demo", "unexpected argument %q", printable(fs.Arg(0)))
	}
	if *n < 2 || *n > 10 {
		return usageError(stderr, "demo", "invalid --candidates %d: must be from 2 to 10", *n)
	}
	var target *redisTarget // nil: the embedded Redis
	if *url != "" {
		var err error
		if target, err = parseRedisURL(*url, "--redis URL"); err != nil {
			fmt.Fprintf(stderr, "redisleader demo: %v\n", err)
			return exitUsage
		}
	}
	d := &demo{out: stdout, p: colour(stdout), ttl: *ttl}
	if err := d.run(ctx, target, *n); err != nil {
		fmt.Fprintf(stderr, "redisleader demo: %s\n", target.hide(err.Error()))
		return exitError
	}
	return exitOK
}

var demoNames = []string{"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"}

type demo struct {
	out   io.Writer
	p     painter
	ttl   time.Duration
	start time.Time
	cands []*candidate // in the order they started

	mu     sync.Mutex // protects the fields below and writes to out
	events chan term  // elections and step-downs, in order
}

// term is one candidate's leadership event.
type term struct {
	who     string
	elected bool // elected; otherwise stepped down
	fence   int64
	cause   error
	at      time.Time
}

func (d *demo) say(who, format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	el := time.Since(d.start).Seconds()
	fmt.Fprintf(d.out, "%s  %-9s %s\n", d.p.dim(fmt.Sprintf("%7.3fs", el)), who, fmt.Sprintf(format, args...))
}

// candidate is one in-process participant with its own connections, which
// the demo can cut to simulate a crash.
type candidate struct {
	name    string
	client  *redis.Client
	session *redisleader.Session
	cut     *cutter
	stop    context.CancelFunc
	done    chan struct{}
}

// run runs the demo on target, or on an embedded Redis if target is nil.
func (d *demo) run(ctx context.Context, target *redisTarget, n int) error {
	target, backend, stop, err := startBackend(target)
	if err != nil {
		return err
	}
	defer stop()
	// The crashed candidate's client keeps failing to dial; go-redis would
	// log each failure to stderr in the middle of the narration.
	quietRedis()
	probe, err := connect(ctx, &endpoint{targets: []*redisTarget{target}})
	if err != nil {
		return err
	}
	defer probe.Close()

	const election = "demo-leader"
	d.start = time.Now()
	d.events = make(chan term, 64)
	fmt.Fprintf(d.out, "%s %d candidates campaign for %q on %s; lease TTL %v.\n\n",
		d.p.bold("redisleader demo:"), n, election, backend, d.ttl)
	obs, closeObs, err := d.observe(ctx, probe, election)
	if err != nil {
		return err
	}
	defer closeObs()
	defer d.shutdown(true)
	for _, name := range demoNames[:n] {
		c, err := d.startCandidate(ctx, target.opt, election, name)
		if err != nil {
			return err
		}
		d.cands = append(d.cands, c)
	}
	return d.scenes(ctx, obs)
}

// startBackend starts an embedded Redis if target is nil, and names where
// the demo runs.
func startBackend(target *redisTarget) (t *redisTarget, backend string, stop func(), err error) {
	if target != nil {
		return target, "Redis at " + target.shown, func() {}, nil
	}
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		return nil, "", nil, fmt.Errorf("starting the embedded Redis: %w", err)
	}
	stopClock := runClock(mr)
	stop = func() {
		stopClock()
		mr.Close()
	}
	return &redisTarget{opt: &redis.Options{Addr: mr.Addr()}}, "an embedded Redis (miniredis)", stop, nil
}

// observer records every leader change it sees, as an operator's dashboard
// would.
type observer struct {
	seen   []string
	cancel context.CancelFunc
	done   chan struct{}
}

// observe starts an observer once it has seen the first state (nobody leads
// yet), before anyone campaigns. closeObs ends it and its session.
func (d *demo) observe(ctx context.Context, probe redis.UniversalClient, election string) (o *observer, closeObs func(), err error) {
	s, err := redisleader.NewSession(probe, redisleader.WithTTL(d.ttl))
	if err != nil {
		return nil, nil, err
	}
	octx, cancel := context.WithCancel(ctx)
	o = &observer{cancel: cancel, done: make(chan struct{})}
	closeObs = func() {
		cancel()
		_ = s.Close(context.Background())
	}
	e, err := s.Election(election)
	if err != nil {
		closeObs()
		return nil, nil, err
	}
	changes := e.Observe(octx)
	select {
	case l := <-changes:
		o.record(l)
	case <-ctx.Done():
		closeObs()
		return nil, nil, ctx.Err()
	}
	go func() {
		defer close(o.done)
		for l := range changes {
			o.record(l)
		}
	}()
	return o, closeObs, nil
}

func (o *observer) record(l redisleader.Leader) {
	if l.Fence == 0 {
		o.seen = append(o.seen, "(none)")
	} else {
		o.seen = append(o.seen, l.Value)
	}
}

// stop ends the observer and returns what it saw.
func (o *observer) stop() []string {
	o.cancel()
	<-o.done
	return o.seen
}

// timeline is what the scenes measured, for the summary.
type timeline struct {
	first, second, third term // the three elections
	down                 term // the crashed leader's step-down
	handover, takeover   time.Duration
}

// scenes plays the election, the handover and the crash, then sums up.
func (d *demo) scenes(ctx context.Context, obs *observer) error {
	var tl timeline
	var err error
	if tl.first, err = d.next(ctx, true); err != nil {
		return err
	}
	if err := d.handover(ctx, &tl); err != nil {
		return err
	}
	if err := d.crash(ctx, &tl); err != nil {
		return err
	}
	d.pause(ctx)
	d.shutdown(false)
	d.summary(&tl, obs.stop())
	return nil
}

// handover: the leader resigns; a follower, woken by pub/sub, takes over
// within a few round trips.
func (d *demo) handover(ctx context.Context, tl *timeline) error {
	d.pause(ctx)
	d.say(tl.first.who, "%s", d.p.bold("resigns (graceful handover)"))
	resignAt := time.Now()
	d.candidate(tl.first.who).stop()
	if _, err := d.next(ctx, false); err != nil { // its step-down
		return err
	}
	var err error
	if tl.second, err = d.next(ctx, true); err != nil {
		return err
	}
	tl.handover = tl.second.at.Sub(resignAt)
	d.say(tl.second.who, "took over %s after the resignation", d.p.green(ms(tl.handover)))
	return nil
}

// crash: the leader's connections are cut; it never resigns. It steps down
// at its local deadline; the others take over once its lease has expired
// in Redis, which is later.
func (d *demo) crash(ctx context.Context, tl *timeline) error {
	d.pause(ctx)
	d.say(tl.second.who, "%s", d.p.red("crashes: its connections to Redis are cut, it never resigns"))
	crashAt := time.Now()
	crashed := d.candidate(tl.second.who)
	crashed.cut.cutAll()
	var err error
	if tl.down, err = d.next(ctx, false); err != nil {
		return err
	}
	if tl.third, err = d.next(ctx, true); err != nil {
		return err
	}
	tl.takeover = tl.third.at.Sub(crashAt)
	d.say(tl.third.who, "took over %s after the crash (the dead leader's lease had to expire)", d.p.green(ms(tl.takeover)))
	crashed.stop()
	return nil
}

func (d *demo) summary(tl *timeline, seen []string) {
	gap := tl.third.at.Sub(tl.down.at)
	fmt.Fprintf(d.out, "\n%s\n", d.p.bold("Summary"))
	fmt.Fprintf(d.out, "  fences:            %d < %d < %d (strictly increasing across leaders)\n", tl.first.fence, tl.second.fence, tl.third.fence)
	fmt.Fprintf(d.out, "  graceful handover: %s after the resignation\n", ms(tl.handover))
	fmt.Fprintf(d.out, "  crash takeover:    %s after the crash (lease TTL %v)\n", ms(tl.takeover), d.ttl)
	fmt.Fprintf(d.out, "  safety:            the crashed leader stepped down %s before the next one was elected\n", ms(gap))
	fmt.Fprintf(d.out, "  an observer saw:   %s\n", strings.Join(seen, " → "))
}

// pause holds the narration between scenes.
func (d *demo) pause(ctx context.Context) { wait(ctx, min(300*time.Millisecond, d.ttl/2)) }

func (d *demo) candidate(name string) *candidate {
	for _, c := range d.cands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// shutdown shuts the candidates down: the last started first when reverse.
func (d *demo) shutdown(reverse bool) {
	for i := range d.cands {
		if reverse {
			i = len(d.cands) - 1 - i
		}
		d.cands[i].shutdown()
	}
}

// startCandidate starts one candidate's Run loop.
func (d *demo) startCandidate(ctx context.Context, opt *redis.Options, election, name string) (*candidate, error) {
	c := &candidate{name: name, cut: &cutter{}, done: make(chan struct{})}
	o := *opt
	o.ContextTimeoutEnabled = true
	o.MaxRetries = -1 // a cut connection fails at once instead of being retried
	o.Dialer = c.cut.dial
	c.client = redis.NewClient(&o)
	s, err := redisleader.NewSession(c.client, redisleader.WithTTL(d.ttl))
	if err != nil {
		return nil, err
	}
	c.session = s
	e, err := s.Election(election)
	if err != nil {
		return nil, err
	}
	rctx, stop := context.WithCancel(ctx)
	c.stop = stop
	d.say(name, "campaigns")
	go func() {
		defer close(c.done)
		_ = e.Run(rctx, name+"@demo", func(leaderCtx context.Context, l *redisleader.Lock) error {
			at := time.Now()
			d.say(name, "%s (fence %d)", d.p.green("elected leader"), l.Fence())
			d.events <- term{who: name, elected: true, fence: l.Fence(), at: at}
			<-leaderCtx.Done()
			cause := context.Cause(leaderCtx)
			at = time.Now()
			why := "resigned"
			if errors.Is(cause, redisleader.ErrExpired) {
				why = d.p.red("stepped down at its local deadline") + " (no renewal succeeded), before its lease ran out in Redis"
			}
			d.say(name, "%s", why)
			d.events <- term{who: name, cause: cause, at: at}
			return nil
		})
	}()
	return c, nil
}

// next waits for the next election (or step-down) event.
func (d *demo) next(ctx context.Context, elected bool) (term, error) {
	limit := time.After(10*d.ttl + 5*time.Second)
	for {
		select {
		case t := <-d.events:
			if t.elected == elected {
				return t, nil
			}
		case <-limit:
			return term{}, errors.New("timed out waiting for the election; is Redis healthy?")
		case <-ctx.Done():
			return term{}, ctx.Err()
		}
	}
}

func (c *candidate) shutdown() {
	c.stop()
	<-c.done
	_ = c.session.Close(context.Background())
	_ = c.client.Close()
}

// cutter dials connections that the demo can cut all at once, as a crash or
// a partition would.
type cutter struct {
	mu    sync.Mutex
	conns []net.Conn
	cut   bool
}

var errCut = errors.New("connection cut by the demo")

func (c *cutter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cut {
		return nil, errCut
	}
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, network, addr)
	if err == nil {
		c.conns = append(c.conns, conn)
	}
	return conn, err
}

func (c *cutter) cutAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cut = true
	for _, conn := range c.conns {
		_ = conn.Close()
	}
}

// runClock makes the embedded Redis's TTLs run with real time (miniredis
// only moves them when told), and returns a function that stops it.
func runClock(mr *miniredis.Miniredis) func() {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-stop:
				return
			case now := <-t.C:
				mr.FastForward(now.Sub(last))
				last = now
			}
		}
	}()
	return func() { close(stop); <-done }
}

// wait pauses the narration (pacing for the reader, not synchronisation).
func wait(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

func ms(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000)
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}
