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
	backend := "an embedded Redis (miniredis)"
	if target == nil {
		mr := miniredis.NewMiniRedis()
		if err := mr.Start(); err != nil {
			return fmt.Errorf("starting the embedded Redis: %w", err)
		}
		defer mr.Close()
		stopClock := runClock(mr)
		defer stopClock()
		target = &redisTarget{opt: &redis.Options{Addr: mr.Addr()}}
	} else {
		backend = "Redis at " + target.shown
	}
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

	// An observer, as an operator's dashboard would be: it sees every change.
	obsSession, err := redisleader.NewSession(probe, redisleader.WithTTL(d.ttl))
	if err != nil {
		return err
	}
	defer obsSession.Close(context.Background())
	obsElection, err := obsSession.Election(election)
	if err != nil {
		return err
	}
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	changes := obsElection.Observe(octx)
	var seen []string
	record := func(l redisleader.Leader) {
		if l.Fence == 0 {
			seen = append(seen, "(none)")
		} else {
			seen = append(seen, l.Value)
		}
	}
	// The observer's first state (nobody leads yet) before anyone campaigns.
	select {
	case l := <-changes:
		record(l)
	case <-ctx.Done():
		return ctx.Err()
	}
	seenDone := make(chan struct{})
	go func() {
		defer close(seenDone)
		for l := range changes {
			record(l)
		}
	}()

	cands := make(map[string]*candidate, n)
	for _, name := range demoNames[:n] {
		c, err := d.startCandidate(ctx, target.opt, election, name)
		if err != nil {
			return err
		}
		cands[name] = c
		defer c.shutdown()
	}

	first, err := d.next(ctx, true)
	if err != nil {
		return err
	}
	hold := min(300*time.Millisecond, d.ttl/2)

	// 1. Graceful handover: the leader resigns; a follower, woken by pub/sub,
	// takes over within a few round trips.
	wait(ctx, hold)
	d.say(first.who, "%s", d.p.bold("resigns (graceful handover)"))
	resignAt := time.Now()
	cands[first.who].stop()
	if _, err := d.next(ctx, false); err != nil { // its step-down
		return err
	}
	second, err := d.next(ctx, true)
	if err != nil {
		return err
	}
	handover := second.at.Sub(resignAt)
	d.say(second.who, "took over %s after the resignation", d.p.green(ms(handover)))

	// 2. Crash: the leader's connections are cut; it never resigns. It steps
	// down at its local deadline; the others take over once its lease has
	// expired in Redis, which is later.
	wait(ctx, hold)
	d.say(second.who, "%s", d.p.red("crashes: its connections to Redis are cut, it never resigns"))
	crashAt := time.Now()
	cands[second.who].cut.cutAll()
	down, err := d.next(ctx, false)
	if err != nil {
		return err
	}
	third, err := d.next(ctx, true)
	if err != nil {
		return err
	}
	takeover := third.at.Sub(crashAt)
	d.say(third.who, "took over %s after the crash (the dead leader's lease had to expire)", d.p.green(ms(takeover)))
	cands[second.who].stop()

	wait(ctx, hold)
	for _, name := range demoNames[:n] {
		cands[name].shutdown()
	}
	ocancel()
	<-seenDone

	gap := third.at.Sub(down.at)
	fmt.Fprintf(d.out, "\n%s\n", d.p.bold("Summary"))
	fmt.Fprintf(d.out, "  fences:            %d < %d < %d (strictly increasing across leaders)\n", first.fence, second.fence, third.fence)
	fmt.Fprintf(d.out, "  graceful handover: %s after the resignation\n", ms(handover))
	fmt.Fprintf(d.out, "  crash takeover:    %s after the crash (lease TTL %v)\n", ms(takeover), d.ttl)
	fmt.Fprintf(d.out, "  safety:            the crashed leader stepped down %s before the next one was elected\n", ms(gap))
	fmt.Fprintf(d.out, "  an observer saw:   %s\n", strings.Join(seen, " → "))
	return nil
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
