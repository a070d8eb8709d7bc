//go:build linux

package scenario

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader"
	"github.com/redisleader/redisleader/internal/history"
	"github.com/redisleader/redisleader/internal/probe"
)

// A Run child is a candidate in a child process that campaigns with
// Election.Run, as a service does, under commands from the parent: the
// candidate of the succession scenarios (succession_test.go). It reports
// the library's lease events and its own (the kinds below) on stdout.
const (
	envRun      = "SCENARIO_RUN"         // "1": the child is a Run child (runChildMain)
	envPriority = "SCENARIO_PRIORITY"    // its WithPriority; empty: none
	envMinTerm  = "SCENARIO_MIN_TERM_MS" // its WithMinTerm in ms; empty: none
	envIdle     = "SCENARIO_IDLE"        // "1": it waits for "join" before it campaigns
)

// Kinds of a Run child's events beyond the library's.
const (
	kindAttempt       = "attempt"        // the first acquire attempt since it (re)joined was answered
	kindPreempted     = "preempted"      // onElected ended with cause ErrPreempted; Fence: the term's
	kindLeft          = "left"           // "leave" is done: Run has returned
	kindTransferStart = "transfer_start" // Transfer is called; Reason: the successor
	kindTransferDone  = "transfer_done"  // Transfer returned; Reason: "ok" or its error
	kindClosed        = "closed"         // Session.Close returned; Reason: "ok" or its error
)

// runChild is the state of a Run child; only its main loop uses it.
type runChild struct {
	who   string
	out   *history.Writer
	s     *redisleader.Session
	el    *redisleader.Election
	opts  []redisleader.CampaignOption
	armed atomic.Bool // report the next acquire attempt's reply (kindAttempt)

	cancel context.CancelFunc // of the running Run; nil while it does not campaign
	done   chan struct{}      // closed when that Run has returned
}

// runChildMain runs a Run child: it campaigns at once (unless idle), then
// obeys the lines on stdin until SIGTERM, when it stops as a service does
// (Run returns, which releases or hands over its leadership; the session
// closes), or until stdin ends. Commands: "join" (campaign), "leave" (stop
// campaigning), "resign" (leave, wait until another candidate leads, join),
// "transfer VALUE" (Election.Transfer, reported).
func runChildMain() int {
	rc, err := newRunChild()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	lines := make(chan string)
	go func() {
		for in := bufio.NewScanner(os.Stdin); in.Scan(); {
			lines <- in.Text()
		}
		close(lines)
	}()
	if os.Getenv(envIdle) != "1" {
		rc.join(ctx)
	}
	for open := true; open && ctx.Err() == nil; {
		select {
		case <-ctx.Done():
		case line, ok := <-lines:
			open = ok
			rc.do(ctx, line)
		}
	}
	rc.leave()
	closeCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	outcome := "ok"
	if err := rc.s.Close(closeCtx); err != nil {
		outcome = err.Error() // a release that failed (its key expires): reported, not fatal
	}
	rc.emit(kindClosed, 0, outcome)
	return 0
}

// newRunChild builds the child's session from its environment, with a
// client hook that reports its first acquire attempt after each join.
func newRunChild() (*runChild, error) {
	rc := &runChild{who: os.Getenv(envChild), out: history.NewWriter(os.Stdout)}
	probe.Set(func(e probe.Event) { rc.out.Add(fromProbe(e)) })
	ttlMs, _ := strconv.Atoi(os.Getenv(envTTL))
	client := redis.NewClient(&redis.Options{Addr: os.Getenv(envAddr), ContextTimeoutEnabled: true,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second})
	name := os.Getenv(envName)
	client.AddHook(attemptHook{rc: rc, lockKey: "redisleader:{" + name + "}"})
	var extra []redisleader.Option
	if os.Getenv(envFair) == "1" {
		extra = append(extra, redisleader.WithFairness())
	}
	s, err := redisleader.NewSession(client, leaseOpts(time.Duration(ttlMs)*time.Millisecond, extra...)...)
	if err != nil {
		return nil, err
	}
	rc.s = s
	if rc.el, err = s.Election(name); err != nil {
		return nil, err
	}
	if p := os.Getenv(envPriority); p != "" {
		n, _ := strconv.ParseInt(p, 10, 64)
		rc.opts = append(rc.opts, redisleader.WithPriority(n))
	}
	if m := os.Getenv(envMinTerm); m != "" {
		n, _ := strconv.Atoi(m)
		rc.opts = append(rc.opts, redisleader.WithMinTerm(time.Duration(n)*time.Millisecond))
	}
	return rc, nil
}

func (rc *runChild) emit(kind string, fence int64, reason string) {
	rc.out.Add(history.Event{Mono: history.Now(), Who: rc.who, Kind: kind, Fence: fence, Reason: reason})
}

// do runs one command line.
func (rc *runChild) do(ctx context.Context, line string) {
	cmd, arg, _ := strings.Cut(line, " ")
	switch cmd {
	case "join":
		rc.join(ctx)
	case "leave":
		rc.leave()
	case "resign":
		rc.leave()
		rc.untilOtherLeads(ctx)
		rc.join(ctx)
	case "transfer":
		rc.emit(kindTransferStart, 0, arg)
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := rc.el.Transfer(tctx, arg)
		cancel()
		outcome := "ok"
		if err != nil {
			outcome = err.Error()
		}
		rc.emit(kindTransferDone, 0, outcome)
	}
}

// join starts campaigning with Run, unless it does already.
func (rc *runChild) join(ctx context.Context) {
	if rc.cancel != nil {
		return
	}
	rc.armed.Store(true)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	rc.cancel, rc.done = cancel, done
	go func() {
		defer close(done)
		err := rc.el.Run(runCtx, rc.who, rc.lead, rc.opts...)
		if runCtx.Err() == nil {
			fmt.Fprintln(os.Stderr, "run:", err)
		}
	}()
}

// leave stops campaigning: Run's context ends and Run returns, once it has
// released (or handed over) a leadership it held.
func (rc *runChild) leave() {
	if rc.cancel == nil {
		return
	}
	rc.cancel()
	<-rc.done
	rc.cancel, rc.done = nil, nil
	rc.emit(kindLeft, 0, "")
}

// untilOtherLeads returns once another candidate leads, as Observe reports,
// or after 5s.
func (rc *runChild) untilOtherLeads(ctx context.Context) {
	octx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for l := range rc.el.Observe(octx) {
		if l.Fence != 0 && l.Value != rc.who {
			return
		}
	}
}

// lead is onElected: it asks the parent's fenced resource to write every
// 50ms while the term holds, and reports a preemption.
func (rc *runChild) lead(ctx context.Context, l *redisleader.Lock) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if l.Held() {
			rc.emit(kindWriteReq, l.Fence(), "")
		}
		select {
		case <-ctx.Done():
			if errors.Is(context.Cause(ctx), redisleader.ErrPreempted) {
				rc.emit(kindPreempted, l.Fence(), "")
			}
			return nil
		case <-tick.C:
		}
	}
}

// attemptHook reports, once per join, the reply to the child's first acquire
// attempt: the first script call on the lock key with more than one key
// (inspect and renew have one; a candidate that just joined does not lead,
// so neither renews with a priority nor hands over) that succeeded.
type attemptHook struct {
	rc      *runChild
	lockKey string
}

func (a attemptHook) seen(cmd redis.Cmder) {
	args := cmd.Args()
	if (cmd.Name() == "evalsha" || cmd.Name() == "eval") && len(args) > 3 && cmd.Err() == nil &&
		fmt.Sprint(args[2]) != "1" && args[3] == a.lockKey && a.rc.armed.CompareAndSwap(true, false) {
		a.rc.emit(kindAttempt, 0, "")
	}
}

func (a attemptHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (a attemptHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		a.seen(cmd)
		return err
	}
}
func (a attemptHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			a.seen(cmd)
		}
		return err
	}
}
