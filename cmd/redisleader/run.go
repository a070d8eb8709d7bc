package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader"
)

// Exit status of "redisleader run", besides exitOK, exitError and exitUsage:
//
//	N        COMMAND's own exit status when it exited by itself (128+n when a
//	         signal n it did not get from redisleader killed it); without --again
//	3        leadership was lost while COMMAND ran, and COMMAND was stopped;
//	         without --again
//	128+n    redisleader was stopped by signal n (130 for SIGINT, 143 for
//	         SIGTERM), whether COMMAND was running (the signal was forwarded to
//	         it and redisleader waited for it to exit) or not (the campaign
//	         ended); with or without --again
//	1        error: Redis unreachable at start, or a Redis error that
//	         retrying cannot fix
//	2        usage error: bad flag, missing --name, no COMMAND, bad --ttl,
//	         malformed Redis URL
//	126      COMMAND could not be started
//	127      COMMAND was not found
const (
	exitLost       = 3
	exitCannotExec = 126
	exitNotFound   = 127
)

const (
	defaultRunTTL = 10 * time.Second
	defaultGrace  = 10 * time.Second
	// minTermInterval spaces the starts of COMMAND with --again, so that a
	// command that fails at once does not restart in a tight loop.
	minTermInterval = time.Second
	// resignTimeout bounds the release of leadership and the session's close.
	resignTimeout = 5 * time.Second
)

const runSynopsis = "run --name NAME [--value V] [--redis URL] [--ttl D] [--grace D] [--again] -- COMMAND [ARGS...]"

const runHelp = `
Campaign for leadership of NAME and run COMMAND only while this process leads:
at most one COMMAND runs at a time across all the hosts that run this with
the same NAME and Redis. stdin, stdout and stderr are passed through. COMMAND
also gets REDISLEADER_NAME, REDISLEADER_VALUE and REDISLEADER_FENCE (the
fencing token of this term, higher for every new term) in its environment.

  - SIGINT and SIGTERM sent to redisleader are forwarded to COMMAND, and
    redisleader exits after COMMAND does; while not leading they end the
    campaign.
  - If leadership is lost (the lease expired because Redis was unreachable,
    or the key was deleted or taken), COMMAND gets SIGTERM, then SIGKILL after
    --grace. The next leader may start meanwhile: keep --grace short, or have
    COMMAND pass its fence to what it writes to.
  - When COMMAND exits, redisleader resigns at once, so that another
    candidate takes over without waiting for the lease to expire. Without
    --again it then exits; with --again it campaigns again (starting COMMAND
    at most once a second).
  - If redisleader dies, the others take over when its lease expires (--ttl);
    on Linux COMMAND is killed with it, even when it is killed with SIGKILL.
    Signals reach COMMAND's process only: a shell script should exec the
    program that does the work.
`

const runExitHelp = `
Exit status:
  N        COMMAND's exit status, when it exited by itself (128+n if a signal n
           killed it); without --again
  3        leadership was lost while COMMAND ran and COMMAND was stopped;
           without --again
  128+n    redisleader was stopped by signal n (130 SIGINT, 143 SIGTERM),
           whether COMMAND was running (the signal is forwarded to it) or not
  1        error: Redis unreachable at start, or a Redis error that retrying
           cannot fix
  2        usage error (a bad flag, --name or --ttl, no COMMAND, or a
           malformed Redis URL)
  126, 127 COMMAND could not be started (127: not found)
`

// cmdRun implements "redisleader run". It does not take main's context: a
// SIGINT or SIGTERM is forwarded to COMMAND while it runs, and ends the
// campaign while it does not.
func cmdRun(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("run", runSynopsis, stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: redisleader %s\n%s\nFlags:\n", runSynopsis, runHelp)
		fs.PrintDefaults()
		fmt.Fprint(stderr, runExitHelp)
	}
	name := fs.String("name", "", "election `name` (required)")
	value := fs.String("value", "", "`value` published while leading, shown by status and watch (default hostname:pid)")
	redisURL := redisURLFlag(fs)
	ttl := fs.Duration("ttl", defaultRunTTL, "lease `TTL`: how long the others wait when this process dies without resigning")
	grace := fs.Duration("grace", defaultGrace, "after leadership is lost, how long COMMAND has between SIGTERM and SIGKILL")
	again := fs.Bool("again", false, "campaign again after COMMAND exits (default: exit after the first term)")
	if code := parseFlags(fs, args); code >= 0 {
		return code
	}
	command := fs.Args()
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "redisleader run: %s (see redisleader run --help)\n", fmt.Sprintf(format, a...))
		return exitUsage
	}
	switch {
	case *name == "":
		return usageErr("--name is required")
	case len(command) == 0:
		return usageErr("no command: give it after --, as in redisleader run --name NAME -- COMMAND [ARGS...]")
	case *grace < 0:
		return usageErr("--grace %v must not be negative", *grace)
	}
	log, target, code := openTarget(*redisURL, stderr)
	if code >= 0 {
		return code
	}
	opts := []redisleader.Option{redisleader.WithTTL(*ttl)}
	if what, err := checkOffline(*name, opts...); err != nil {
		if what == "options" {
			what = "--ttl " + ttl.String()
		} else {
			what = "--name"
		}
		return usageErr("invalid %s: %s", what, trimPrefix(err))
	}
	if *value == "" {
		*value = defaultValue()
	}
	if _, err := exec.LookPath(command[0]); err != nil {
		log.printf("cannot run %s: %v", command[0], trimPrefix(err))
		return startFailure(err)
	}

	r := &runner{
		log:     log,
		name:    *name,
		value:   *value,
		command: command,
		display: commandLine(command, target),
		grace:   *grace,
		stdout:  stdout,
		stderr:  stderr,
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		for sig := range sigs {
			r.signal(sig)
		}
	}()
	opts = append(opts, redisleader.WithLogger(slog.New(warnHandler{log})))
	return r.run(target, *again, opts)
}

// runner is one "redisleader run": it campaigns, runs the command while
// leading, and routes signals: to the command while it runs, to the
// campaign (which they end) while it does not.
type runner struct {
	log     *logger
	name    string
	value   string
	command []string
	display string // the command line, shortened, for messages
	grace   time.Duration
	stdout  io.Writer
	stderr  io.Writer

	mu     sync.Mutex         // protects sig, proc and cancel
	sig    syscall.Signal     // the first SIGINT or SIGTERM received; 0 before
	proc   *os.Process        // the command while it runs, nil otherwise
	cancel context.CancelFunc // ends the current wait on Redis; nil while leading
}

// signal handles a SIGINT or SIGTERM: it is forwarded to the command if it
// runs, and otherwise ends the wait on Redis. The first one received decides
// the exit status.
func (r *runner) signal(sig os.Signal) {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sig == 0 {
		r.sig = s
	}
	switch {
	case r.proc != nil:
		r.log.printf("received %s; forwarding it to %s", signalName(s), r.display)
		_ = r.proc.Signal(s)
	case r.cancel != nil:
		r.cancel()
	}
}

// waiting registers cancel as the way to end the current wait on Redis (nil
// when there is none). It reports false, and does not register it, if a
// signal has already been received.
func (r *runner) waiting(cancel context.CancelFunc) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cancel != nil && r.sig != 0 {
		return false
	}
	r.cancel = cancel
	return true
}

// signalled returns the first signal received, or 0.
func (r *runner) signalled() syscall.Signal {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sig
}

// run connects, then campaigns and runs the command once per term, and
// returns the exit status.
func (r *runner) run(target *redisTarget, again bool, opts []redisleader.Option) int {
	ctx, cancel := context.WithCancel(context.Background())
	if !r.waiting(cancel) {
		cancel()
		return 128 + int(r.signalled())
	}
	quietRedis()
	client, err := connect(ctx, target)
	r.waiting(nil)
	cancel()
	if err != nil {
		if sig := r.signalled(); sig != 0 {
			r.log.printf("received %s while connecting to Redis; stopped", signalName(sig))
			return 128 + int(sig)
		}
		r.log.printf("%v", err)
		return exitError
	}
	defer client.Close()
	session, err := redisleader.NewSession(client, opts...)
	if err != nil { // checked by checkOffline already
		r.log.printf("%v", trimPrefix(err))
		return exitUsage
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), resignTimeout)
		defer cancel()
		_ = session.Close(ctx)
	}()
	election, err := session.Election(r.name)
	if err != nil {
		r.log.printf("%v", trimPrefix(err))
		return exitUsage
	}

	var next time.Time // with --again: when COMMAND may start again
	for {
		ctx, cancel := context.WithCancel(context.Background())
		if !r.waiting(cancel) {
			cancel()
			sig := r.signalled()
			r.log.printf("received %s while not leading %s; stopped campaigning", signalName(sig), r.name)
			return 128 + int(sig)
		}
		lead, err := r.campaign(ctx, election, next)
		r.waiting(nil)
		cancel()
		if err != nil {
			if sig := r.signalled(); sig != 0 {
				r.log.printf("received %s while not leading %s; stopped campaigning", signalName(sig), r.name)
				return 128 + int(sig)
			}
			r.log.printf("campaign for %s: %v", r.name, trimPrefix(err))
			if errors.Is(err, redisleader.ErrInvalid) {
				return exitUsage
			}
			return exitError
		}
		next = time.Now().Add(minTermInterval)
		code, done := r.term(lead)
		if done || !again {
			return code
		}
	}
}

// campaign waits until notBefore (--again spacing), then campaigns until
// this process leads or ctx ends.
func (r *runner) campaign(ctx context.Context, e *redisleader.Election, notBefore time.Time) (*redisleader.Lock, error) {
	if d := time.Until(notBefore); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
	r.log.printf("campaigning for leadership of %s as %s", r.name, printable(r.value))
	return e.Campaign(ctx, r.value)
}

// term runs the command for one term of leadership, then resigns. It returns
// the exit status redisleader should end with and whether it must end now
// (even with --again); otherwise code applies only without --again.
func (r *runner) term(lead *redisleader.Lock) (code int, done bool) {
	r.log.printf("elected leader of %s (fence %d); starting %s", r.name, lead.Fence(), r.display)
	res := r.runCommand(lead)

	ctx, cancel := context.WithTimeout(context.Background(), resignTimeout)
	err := lead.Release(ctx) // resign: the others are woken at once
	cancel()
	resigned := "resigned"
	switch {
	case res.lost != nil:
		resigned = "not leading any more"
	case err != nil && !errors.Is(err, redisleader.ErrLost) && !errors.Is(err, redisleader.ErrSessionClosed):
		resigned = fmt.Sprintf("could not resign (%v); the lease expires within its TTL", trimPrefix(err))
	}

	switch {
	case res.notStarted:
		sig := r.signalled()
		r.log.printf("received %s before %s started; %s", signalName(sig), r.display, resigned)
		return 128 + int(sig), true
	case res.startErr != nil:
		r.log.printf("cannot start %s: %v; %s", r.display, trimPrefix(res.startErr), resigned)
		return startFailure(res.startErr), true
	}
	r.log.printf("%s %s; %s", r.display, describeExit(res.state), resigned)
	switch sig := r.signalled(); {
	case sig != 0:
		return 128 + int(sig), true
	case res.lost != nil:
		return exitLost, false
	default:
		return exitStatus(res.state), false
	}
}

// commandResult is how one run of the command ended.
type commandResult struct {
	state      *os.ProcessState // nil if it did not start
	startErr   error            // why it did not start
	notStarted bool             // a signal arrived before it could start
	lost       error            // why leadership ended while it ran; nil if it did not
}

// runCommand starts the command and waits for it to exit. If leadership is
// lost meanwhile, the command gets SIGTERM, then SIGKILL after the grace
// period.
func (r *runner) runCommand(lead *redisleader.Lock) commandResult {
	cmd := exec.Command(r.command[0], r.command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, r.stdout, r.stderr
	cmd.Env = append(os.Environ(),
		"REDISLEADER_NAME="+r.name,
		"REDISLEADER_VALUE="+r.value,
		"REDISLEADER_FENCE="+strconv.FormatInt(lead.Fence(), 10))
	cmd.SysProcAttr = childProcAttr()
	cmd.WaitDelay = time.Second // when stdout or stderr is not a file: don't hang on pipes held by grandchildren

	var res commandResult
	started := make(chan error, 1)
	exited := make(chan struct{})
	go func() {
		// Pdeathsig fires when the OS thread that started the child exits:
		// keep this goroutine on its thread until the child has exited.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		r.mu.Lock()
		if r.sig != 0 {
			r.mu.Unlock()
			started <- errNotStarted
			return
		}
		err := cmd.Start()
		if err == nil {
			r.proc = cmd.Process
		}
		r.mu.Unlock()
		started <- err
		if err != nil {
			return
		}
		_ = cmd.Wait() // the exit status is in cmd.ProcessState
		r.mu.Lock()
		r.proc = nil
		r.mu.Unlock()
		close(exited)
	}()
	if err := <-started; err != nil {
		if err == errNotStarted {
			res.notStarted = true
		} else {
			res.startErr = err
		}
		return res
	}

	lost := lead.Done()
	var kill <-chan time.Time
	for {
		select {
		case <-exited:
			res.state = cmd.ProcessState
			return res
		case <-lost:
			lost = nil
			res.lost = lead.Err()
			r.log.printf("leadership of %s lost (%s); stopping %s (SIGTERM, SIGKILL after %v)",
				r.name, lossReason(res.lost), r.display, r.grace)
			_ = cmd.Process.Signal(syscall.SIGTERM)
			t := time.NewTimer(r.grace)
			defer t.Stop()
			kill = t.C
		case <-kill:
			kill = nil
			r.log.printf("%s still runs %v after SIGTERM; sending SIGKILL", r.display, r.grace)
			_ = cmd.Process.Kill()
		}
	}
}

var errNotStarted = errors.New("a signal arrived before the command started")

// checkOffline reports what NewSession and Session.Election would reject,
// without any I/O (neither does any, nor does closing a session that holds
// nothing), so that a bad name or TTL is a usage error even when Redis is
// unreachable. what is "options" or "name".
func checkOffline(name string, opts ...redisleader.Option) (what string, err error) {
	client := redis.NewClient(&redis.Options{}) // never used: nothing below does I/O
	defer client.Close()
	s, err := redisleader.NewSession(client, opts...)
	if err != nil {
		return "options", err
	}
	defer s.Close(context.Background())
	if _, err := s.Election(name); err != nil {
		return "name", err
	}
	return "", nil
}

// defaultValue is hostname:pid.
func defaultValue() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return host + ":" + strconv.Itoa(os.Getpid())
}

// startFailure maps an error starting the command to the shell's exit
// status: 127 for not found, 126 otherwise.
func startFailure(err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		return exitNotFound
	}
	return exitCannotExec
}

// exitStatus is the command's exit status as a shell reports it: 128+n when
// signal n killed it.
func exitStatus(state *os.ProcessState) int {
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	if code := state.ExitCode(); code >= 0 {
		return code
	}
	return exitError
}

// describeExit says how the command ended: "exited with status N" or
// "was killed by SIGTERM".
func describeExit(state *os.ProcessState) string {
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "was killed by " + signalName(ws.Signal())
	}
	return fmt.Sprintf("exited with status %d", state.ExitCode())
}

// lossReason explains why leadership ended.
func lossReason(err error) string {
	switch {
	case errors.Is(err, redisleader.ErrExpired):
		return "the lease expired before it could be renewed: Redis unreachable or too slow"
	case errors.Is(err, redisleader.ErrNotOwner):
		return "the key was deleted, expired on the server, or taken by another owner"
	case errors.Is(err, redisleader.ErrSessionClosed):
		return "session closed"
	case err == nil:
		return "unknown reason"
	}
	return trimPrefix(err)
}

func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGQUIT:
		return "SIGQUIT"
	}
	return "signal " + strconv.Itoa(int(s))
}

// commandLine shows args as a shell would take them, with target's URL and
// password hidden (before shortening, which could cut them), shortened to 80
// characters.
func commandLine(args []string, target *redisTarget) string {
	const maxLen = 80
	var b strings.Builder
	for i, a := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		a = target.hide(a)
		if a == "" || strings.ContainsAny(a, " \t\n\r'\"\\$`;&|<>()*?[]#~!{}") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		b.WriteString(a)
	}
	s := printable(b.String())
	if utf8.RuneCountInString(s) > maxLen {
		s = string([]rune(s)[:maxLen-3]) + "..."
	}
	return s
}

// trimPrefix is err's message without this package's "redisleader: " prefix,
// which the messages printed here carry already.
func trimPrefix(err error) string {
	return strings.TrimPrefix(err.Error(), "redisleader: ")
}

// logger writes "redisleader: " status lines, one whole line at a time,
// with the Redis URL and its password hidden (a library warning, an error
// or the command line might hold them).
type logger struct {
	mu     sync.Mutex
	w      io.Writer
	target *redisTarget
}

func (l *logger) printf(format string, a ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, "redisleader: %s\n", l.target.hide(fmt.Sprintf(format, a...)))
}

// warnHandler prints the library's warnings (Redis errors while campaigning
// or renewing, retried meanwhile) as status lines. "lock lost" is left out:
// run says so itself, with what it does about it.
type warnHandler struct{ log *logger }

func (h warnHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h warnHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "redisleader: lock lost" {
		return nil
	}
	var b strings.Builder
	b.WriteString(strings.TrimPrefix(r.Message, "redisleader: "))
	sep := " ("
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, "%s%s=%v", sep, a.Key, a.Value)
		sep = ", "
		return true
	})
	if sep == ", " {
		b.WriteByte(')')
	}
	h.log.printf("%s", b.String())
	return nil
}

func (h warnHandler) WithAttrs([]slog.Attr) slog.Handler { return h } // the library uses none
func (h warnHandler) WithGroup(string) slog.Handler      { return h }
