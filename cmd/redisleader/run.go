package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
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
//	         without --again (one stopped to yield or hand over leadership
//	         is followed by another campaign)
//	75       --try found NAME led by another, or --wait ran out: COMMAND did
//	         not run (EX_TEMPFAIL, "try again later")
//	128+n    redisleader was stopped by signal n (130 for SIGINT, 143 for
//	         SIGTERM, 129 SIGHUP, 131 SIGQUIT), whether COMMAND was running
//	         (the signal was forwarded to it and redisleader waited for it to
//	         exit) or not (the campaign ended); with or without --again. A
//	         signal during --hold only ends the hold: COMMAND's status stands
//	1        error: Redis unreachable at start, or a Redis error that
//	         retrying cannot fix
//	2        usage error: bad flag, missing --name, no COMMAND, bad --ttl or
//	         --priority, malformed Redis URL
//	126      COMMAND could not be started
//	127      COMMAND was not found
const (
	exitLost       = 3
	exitBusy       = 75
	exitCannotExec = 126
	exitNotFound   = 127
)

const (
	defaultRunTTL   = 10 * time.Second
	defaultGrace    = 10 * time.Second
	defaultFenceEnv = "REDISLEADER_FENCE"
	// Environment variables that stand in for --priority and --min-term (a
	// flag wins over its variable). Like the connection's, they are read
	// only once the flags have been parsed.
	envPriority = "REDISLEADER_PRIORITY"
	envMinTerm  = "REDISLEADER_MIN_TERM"
	// minTermInterval spaces the starts of COMMAND with --again, so that a
	// command that fails at once does not restart in a tight loop.
	minTermInterval = time.Second
	// resignTimeout bounds the release of leadership and the session's close.
	resignTimeout = 5 * time.Second
)

var runHelp = helpText{
	synopsis: "run --name NAME [--try | --wait D] [--hold D] [flags] -- COMMAND [ARGS...]\n       redisleader run --slots N [flags] NAME -- COMMAND [ARGS...]",
	about: `
Campaign for leadership of NAME and run COMMAND only while this process leads:
at most one COMMAND runs at a time across all the hosts that run this with
the same NAME and Redis. stdin, stdout and stderr are passed through. COMMAND
also gets REDISLEADER_NAME, REDISLEADER_VALUE and REDISLEADER_FENCE (the
fencing token of this term, higher for every new term; --fence-env renames
it) in its environment.

A job that cron starts on every host, to run once per tick:

  redisleader run --name nightly-report --try --hold 1m -- ./report.sh

  - --try gives up at once, with status 75 and no output, when another
    process leads; --wait D waits at most D, also for Redis's first reply
    (none within D: status 1). Without either, run waits until it leads.
  - --hold D keeps leadership (renewed) for D after COMMAND exits, so that a
    host whose timer fires a little later finds NAME led and skips the tick.
    Make it longer than the spread of the hosts' clocks and shorter than the
    schedule's period.
  - COMMAND runs in its own process group, and every signal goes to the
    whole group, as with timeout(1); what COMMAND left running in it is
    killed when COMMAND exits. --no-process-group leaves COMMAND in
    redisleader's group (for a command that reads the terminal) and signals
    COMMAND's process only.
  - SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to redisleader are forwarded to
    COMMAND, which gets --grace to exit before SIGKILL; redisleader exits
    after COMMAND does and resigns. While not leading they end the campaign.
    One sent while COMMAND is starting reaches it once it has started.
  - A signal ignored when redisleader starts stays ignored, by redisleader
    and COMMAND: SIGHUP under nohup(1), SIGINT and SIGQUIT under a script's
    "&". SIGQUIT goes with SIGINT (a Go program cannot see SIGQUIT ignored
    on its own). SIGTERM is always acted on.
  - If leadership is lost (the lease expired because Redis was unreachable,
    or the key was deleted or taken), COMMAND gets SIGTERM, then SIGKILL after
    --grace. The next leader may start meanwhile: keep --grace short, or have
    COMMAND pass its fence to what it writes to.
  - On Linux the lease bounds COMMAND even when redisleader cannot run
    (Ctrl-Z, SIGSTOP, a starved host): the supervisor (below) sends the
    group SIGTERM once the lease has min(--grace, TTL/4) left unrenewed, and
    SIGKILL at its deadline, about TTL/50 before the key can expire in Redis
    and another leader start. Ctrl-Z stops COMMAND with redisleader and fg
    continues both; a pause past the lease ends the term as a loss. What
    COMMAND left in its group dies when it exits, and COMMAND never starts
    on a lease already past. Not with --no-process-group, which has no
    supervisor.
  - When COMMAND exits, redisleader resigns at once (after --hold), so that
    another candidate takes over without waiting for the lease to expire.
    Without --again it then exits; with --again it campaigns again (starting
    COMMAND at most once a second).
  - If redisleader dies, the others take over when its lease expires (--ttl).
    On Linux COMMAND dies with it, even by SIGKILL: a small supervisor (this
    binary) leads COMMAND's process group and SIGKILLs the group when
    redisleader dies, and the kernel SIGKILLs COMMAND when the supervisor
    dies. What COMMAND started escapes only if it left the group (setsid, a
    daemon), or if redisleader and the supervisor are both SIGKILLed before
    either can act (pkill -9 -f redisleader): kill redisleader, not both.
    With --no-process-group, only COMMAND's own process dies with it.
  - --priority P (or $REDISLEADER_PRIORITY) campaigns with a priority. When
    a candidate with a higher one campaigns for NAME, the leader yields:
    COMMAND is stopped as when leadership is lost (SIGTERM, SIGKILL after
    --grace); once it has exited, that candidate takes NAME, with nobody in
    between, and run campaigns again (without --again too). --min-term D
    (or $REDISLEADER_MIN_TERM) leads at least D before yielding; never:
    never yield, but hand NAME to a better candidate when COMMAND exits.
    Equal priorities never move leadership. A rolling deploy: start each
    new instance with a higher priority than the old ones; the old leader
    yields once, to the first new one.
  - "redisleader transfer NAME --to VALUE" makes the leader hand NAME over
    to the candidate whose --value is VALUE: COMMAND is stopped the same
    way, and run campaigns again, without its priority until it leads
    again, so that a transfer to a lower priority holds. Runs with --try
    or --wait (jobs) take no transfer requests and no priority.
  - --slots N runs COMMAND while holding one of N permits of the semaphore
    NAME instead of its leadership: at most N COMMANDs run at once across
    the hosts (NAME may then come as the first argument, COMMAND after --).
    A permit is a lease like leadership: all of the above holds (signals,
    process group, supervisor, --try, --wait, --hold, --again, exit
    statuses), and a permit lost stops COMMAND as a lost leadership does.
    A dead holder's permit is free again within --ttl. N is the name's
    contract: a run with another N than the one stored fails naming both
    (Session.SetSemaphoreLimit changes it). REDISLEADER_FENCE is the
    permit's fence; --value is shown by status. No --priority or
    --min-term (their variables are ignored), and no transfers.
  - redisleader prints only errors and warnings (to stderr), like flock(1):
    --verbose adds a line per step, --quiet leaves only errors.
`,
	exit: `
Exit status:
  N        COMMAND's exit status, when it exited by itself (128+n if a signal n
           killed it); without --again
  3        leadership (with --slots: the permit) was lost while COMMAND ran
           and COMMAND was stopped; without --again (a COMMAND stopped to
           yield or hand over leadership is followed by another campaign,
           never by an exit)
  75       --try: another process leads NAME (with --slots: all N permits
           are held); --wait: it still did after D. COMMAND did not run
  128+n    redisleader was stopped by signal n (130 SIGINT, 143 SIGTERM,
           129 SIGHUP, 131 SIGQUIT), whether COMMAND was running (the signal
           is forwarded to it) or not; a signal during --hold, after COMMAND
           exited, only ends the hold (the status is COMMAND's)
  1        error: Redis unreachable at start, or a Redis error that retrying
           cannot fix
  2        usage error (a bad flag, --name, --ttl, --priority or --slots, no
           COMMAND, or a malformed Redis URL)
  126, 127 COMMAND could not be started (127: not found)
`,
}

// runFlags are run's flags.
type runFlags struct {
	conn           connFlags
	name           string
	value          string
	ttl            time.Duration
	grace          time.Duration
	takeoverDelay  time.Duration
	try            bool
	wait           time.Duration
	hold           time.Duration
	again          bool
	noProcessGroup bool
	fenceEnv       string
	quiet, verbose bool
	priority       priorityFlag
	minTerm        minTermFlag
	slots          slotsFlag // slots.go
}

func newRunFlags() (*flag.FlagSet, *runFlags) {
	fs := newFlagSet("run")
	f := &runFlags{}
	fs.StringVar(&f.name, "name", "", "election `name` (required)")
	fs.StringVar(&f.value, "value", "", "`value` published while leading, shown by status and watch (default hostname:pid)")
	f.conn.register(fs)
	fs.DurationVar(&f.ttl, "ttl", defaultRunTTL, "lease `TTL`: how long the others wait when this process dies without resigning")
	fs.DurationVar(&f.grace, "grace", defaultGrace, "time `D` that COMMAND has to exit after a SIGTERM (leadership lost) or a forwarded signal, before SIGKILL")
	fs.DurationVar(&f.takeoverDelay, "takeover-delay", 0, "after winning, wait `D` before starting COMMAND, so that a former leader that\nRedis forgot (a restart without persistence) notices its loss first; 0: off")
	fs.BoolVar(&f.try, "try", false, "do not wait: if another process leads NAME, exit 75 at once, silently")
	fs.DurationVar(&f.wait, "wait", 0, "wait at most `D` to lead, then exit 75 (at most D for Redis's first reply too); 0: wait until leading")
	fs.DurationVar(&f.hold, "hold", 0, "keep leading `D` after COMMAND exits, so that late hosts skip this tick")
	fs.BoolVar(&f.again, "again", false, "campaign again after COMMAND exits (default: exit after the first term)")
	fs.BoolVar(&f.noProcessGroup, "no-process-group", false, "run COMMAND in redisleader's process group and signal its process only (on Linux,\nonly that process is killed if redisleader dies, not what it started)")
	fs.StringVar(&f.fenceEnv, "fence-env", defaultFenceEnv, "environment `variable` that gives COMMAND the fencing token")
	fs.Var(&f.priority, "priority", "campaign with priority `P`, an integer (default: $"+envPriority+"): the leader yields to a\ncandidate with a higher one (see --min-term); equal priorities never move leadership")
	fs.Var(&f.minTerm, "min-term", "with --priority: lead at least `D` before yielding to a better candidate, or never\n(default: $"+envMinTerm+", else 0: yield at once)")
	fs.Var(&f.slots, "slots", "hold one of `N` permits of the semaphore NAME instead of leading NAME: at most N\nCOMMANDs run at once (see above)")
	fs.BoolVar(&f.quiet, "quiet", false, "print errors only, not warnings about retried Redis errors")
	fs.BoolVar(&f.verbose, "verbose", false, "also print a line for every step (campaigning, elected, exit, resigned)")
	return fs, f
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// cmdRun implements "redisleader run". It takes the stop signals, caught
// since redisleader started, instead of a context: a stop signal is
// forwarded to COMMAND while it runs, and ends the campaign (or keeps it
// from starting) while it does not.
func cmdRun(args []string, sigs <-chan os.Signal, stdout, stderr io.Writer) int {
	r := &runner{stdout: stdout, stderr: stderr, forwarded: make(chan struct{}, 1), renewed: make(chan struct{}, 1)}
	defer r.catchJobControl()()
	go func() {
		for sig := range sigs {
			r.signal(sig)
		}
	}()
	fs, f := newRunFlags()
	command, code := runArgs(fs, f, args, stdout, stderr) // slots.go
	if code >= 0 {
		return code
	}
	if msg := f.invalid(command); msg != "" {
		return usageError(stderr, "run", "%s", msg)
	}
	log, target, code := f.conn.open("run", stderr)
	if code >= 0 {
		return code
	}
	log.level = f.level()
	if f.value == "" {
		f.value = defaultValue()
	}
	opts, copts, msg := f.options()
	if msg != "" {
		return usageError(stderr, "run", "%s", msg)
	}
	if _, err := exec.LookPath(command[0]); err != nil {
		log.errorf("cannot run %s: %v", command[0], trimPrefix(err))
		return startFailure(err)
	}

	// Set before the command can start, which publishes them to r.signal
	// (under r.mu, with r.proc).
	r.log, r.f, r.command, r.display, r.copts = log, f, command, commandLine(command, target), copts
	opts = append(opts, redisleader.WithLogger(slog.New(warnHandler{log})),
		redisleader.WithHooks(redisleader.Hooks{RenewalRound: r.renewalRound}))
	return r.run(target, opts)
}

// invalid says what is wrong with the flags and command, or returns "".
func (f *runFlags) invalid(command []string) string {
	switch {
	case f.name == "":
		return "--name is required"
	case len(command) == 0:
		return "no command: give it after --, as in redisleader run --name NAME -- COMMAND [ARGS...]"
	case f.grace < 0:
		return fmt.Sprintf("invalid --grace %v: must not be negative", f.grace)
	case f.takeoverDelay < 0:
		return fmt.Sprintf("invalid --takeover-delay %v: must not be negative", f.takeoverDelay)
	case f.wait < 0:
		return fmt.Sprintf("invalid --wait %v: must not be negative", f.wait)
	case f.hold < 0:
		return fmt.Sprintf("invalid --hold %v: must not be negative", f.hold)
	case f.try && f.wait > 0:
		return "--try and --wait exclude each other"
	case f.again && (f.try || f.wait > 0 || f.hold > 0):
		return "--again excludes --try, --wait and --hold"
	case f.quiet && f.verbose:
		return "--quiet and --verbose exclude each other"
	case !envName.MatchString(f.fenceEnv):
		return fmt.Sprintf("invalid --fence-env %q: want a variable name (letters, digits, _)", printable(f.fenceEnv))
	}
	return f.slotsInvalid()
}

// level is what --quiet and --verbose ask the logger to print.
func (f *runFlags) level() logLevel {
	switch {
	case f.quiet:
		return levelError
	case f.verbose:
		return levelInfo
	}
	return levelWarn
}

// options are the library options the flags (and their environment
// variables) set, the session's and the campaign's, checked offline; msg
// says what is wrong with them or with --name.
func (f *runFlags) options() (opts []redisleader.Option, copts []redisleader.CampaignOption, msg string) {
	opts = []redisleader.Option{redisleader.WithTTL(f.ttl)}
	if f.takeoverDelay > 0 {
		opts = append(opts, redisleader.WithTakeoverDelay(f.takeoverDelay))
	}
	copts, prio, msg := f.campaignOptions()
	if msg != "" {
		return nil, nil, msg
	}
	switch what, err := checkOffline(f.name, opts, f.value); what {
	case "name":
		return nil, nil, "invalid --name: " + trimPrefix(err)
	case "campaign":
		return nil, nil, "invalid --value: " + trimPrefix(err)
	case "options":
		return nil, nil, cliOptionError(err)
	}
	if _, err := checkOffline(f.name, opts, f.value, copts...); err != nil {
		return nil, nil, "invalid " + prio + ": " + trimPrefix(err)
	}
	return opts, copts, f.slotsOffline(opts)
}

// runner is one "redisleader run": it campaigns, runs the command while
// leading, and routes signals: to the command while it runs, to the
// campaign (which they end) while it does not.
type runner struct {
	log       *logger
	f         *runFlags
	command   []string
	display   string // the command line, shortened, for messages
	stdout    io.Writer
	stderr    io.Writer
	forwarded chan struct{}                // signalled when a signal was forwarded to the command
	renewed   chan struct{}                // signalled after a renewal round (renewalRound)
	waitUntil time.Time                    // with --wait: when run gives up; zero otherwise
	copts     []redisleader.CampaignOption // --priority's; nil: none
	client    redis.UniversalClient        // for transfer requests (transfer.go)
	sem       *redisleader.Semaphore       // --slots's semaphore NAME; nil without

	mu     sync.Mutex         // protects sig, proc and cancel
	sig    syscall.Signal     // the first stop signal received; 0 before
	proc   *child             // the command while it runs, nil otherwise
	cancel context.CancelFunc // ends the current wait on Redis; nil while leading
}

// signal handles a stop signal: it is forwarded to the command (its process
// group) if it runs, and otherwise ends the wait on Redis. The first one
// received decides the exit status.
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
		r.log.infof("received %s; forwarding it to %s", signalName(s), r.display)
		r.proc.signal(s)
		select {
		case r.forwarded <- struct{}{}:
		default:
		}
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

// errBusy ends a campaign that --try or --wait gave up.
var errBusy = errors.New("another process leads")

// run connects, then campaigns and runs the command once per term, and
// returns the exit status.
func (r *runner) run(target *endpoint, opts []redisleader.Option) int {
	if r.f.wait > 0 {
		r.waitUntil = time.Now().Add(r.f.wait)
	}
	client, code := r.connect(target)
	if client == nil {
		return code
	}
	defer client.Close()
	r.client = client
	session, err := redisleader.NewSession(client, opts...)
	if err != nil { // checked by checkOffline already, but for the client's kind
		r.log.errorf("%s", cliOptionError(err))
		return exitUsage
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), resignTimeout)
		defer cancel()
		_ = session.Close(ctx)
	}()
	if r.f.slots.set {
		return r.holdSlots(session) // slots.go
	}
	election, err := session.Election(r.f.name)
	if err != nil {
		r.log.errorf("%v", trimPrefix(err))
		return exitUsage
	}
	return r.terms(election)
}

// terms campaigns and runs the command for each term: one, or with --again
// until a signal or an error ends it. A term that gave leadership up on
// purpose (to a candidate with a higher priority, or by a transfer) while
// COMMAND ran is followed by a campaign in any case. After a transfer, run
// campaigns without its priority until it leads again, as Election.Run
// does, so that a transfer to a lower priority holds.
func (r *runner) terms(e *redisleader.Election) int {
	var next time.Time // when COMMAND may start again (--again, or after a yield)
	prioritised := r.copts != nil
	for {
		ctx, cancel := context.WithCancel(context.Background())
		if !r.waiting(cancel) {
			cancel()
			return r.stoppedCampaigning(r.signalled())
		}
		out, err := r.lead(ctx, cancel, e, next, prioritised)
		r.waiting(nil)
		cancel()
		if err != nil {
			return r.campaignFailed(err)
		}
		next = out.started.Add(minTermInterval)
		prioritised = r.copts != nil && out.transferTo == ""
		if code, again := r.finish(out); !again {
			return code
		}
	}
}

// lead campaigns until this process leads (or ctx ends) and runs one term.
// With a priority (prioritised), Election.Run campaigns, and runs the term
// as its onElected, which then cancels ctx (cancel), so that Run returns
// once it has released that one term (handing the name to a better
// candidate, if one waits). Otherwise Campaign (or TryCampaign) campaigns.
func (r *runner) lead(ctx context.Context, cancel context.CancelFunc, e *redisleader.Election, notBefore time.Time, prioritised bool) (*termOutcome, error) {
	if err := r.beforeCampaign(ctx, notBefore, prioritised); err != nil {
		return nil, err
	}
	if r.sem != nil { // --slots: a permit (slots.go)
		return r.permitTerm(ctx)
	}
	if !prioritised {
		lead, err := r.campaignOnce(ctx, func(ctx context.Context) (*redisleader.Lock, error) { return e.TryCampaign(ctx, r.f.value) },
			func(ctx context.Context) (*redisleader.Lock, error) { return e.Campaign(ctx, r.f.value) })
		r.waiting(nil)
		if err != nil {
			return nil, err
		}
		return r.term(e, &tenure{lead: lead, ended: lead.Done(), cause: lead.Err}), nil
	}
	var out *termOutcome
	err := e.Run(ctx, r.f.value, func(termCtx context.Context, lead *redisleader.Lock) error {
		defer cancel()
		r.waiting(nil)
		out = r.term(e, &tenure{lead: lead, ended: termCtx.Done(), cause: func() error { return context.Cause(termCtx) }, run: true})
		return nil
	}, r.copts...)
	if out == nil {
		return nil, err
	}
	return out, nil
}

// connect connects to Redis, waiting for its first reply no longer than
// --wait, if given, allows. On failure it returns a nil client and the exit
// status.
func (r *runner) connect(target *endpoint) (redis.UniversalClient, int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if !r.waiting(cancel) {
		return nil, 128 + int(r.signalled())
	}
	quietRedis()
	client, err := connectWithin(ctx, target, r.f.wait) // the first step: all of --wait is left
	r.waiting(nil)
	if err != nil {
		if sig := r.signalled(); sig != 0 {
			r.log.infof("received %s while connecting to Redis; stopped", signalName(sig))
			return nil, 128 + int(sig)
		}
		r.log.errorf("%v", err)
		return nil, exitError
	}
	return client, exitOK
}

// campaignFailed says why the campaign ended without leading and returns
// the exit status.
func (r *runner) campaignFailed(err error) int {
	if sig := r.signalled(); sig != 0 {
		return r.stoppedCampaigning(sig)
	}
	if errors.Is(err, errBusy) {
		if r.f.try {
			r.log.infof("%s; not running %s (--try)", r.busy(""), r.display)
		} else {
			r.log.infof("%s after --wait %v; not running %s", r.busy("still "), r.f.wait, r.display)
		}
		return exitBusy
	}
	r.log.errorf("%s %s: %v", r.say("campaign for", "waiting for a permit of"), r.f.name, trimPrefix(err))
	if errors.Is(err, redisleader.ErrInvalid) {
		return exitUsage
	}
	return exitError
}

// stoppedCampaigning says that sig ended the campaign and returns the exit
// status.
func (r *runner) stoppedCampaigning(sig syscall.Signal) int {
	r.log.infof("received %s while %s %s; %s", signalName(sig), r.say("not leading", "waiting for a permit of"), r.f.name,
		r.say("stopped campaigning", "stopped waiting"))
	return 128 + int(sig)
}

// beforeCampaign waits until notBefore (the spacing of COMMAND's starts),
// unless ctx ends first.
func (r *runner) beforeCampaign(ctx context.Context, notBefore time.Time, prioritised bool) error {
	if d := time.Until(notBefore); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	prio := ""
	switch {
	case prioritised:
		prio = " with priority " + r.f.priority.String()
	case r.copts != nil:
		prio = " without its priority until it leads again (it handed leadership over)"
	}
	r.log.infof("%s as %s%s", r.seeking(), printable(r.f.value), prio)
	return nil
}

// campaignOnce campaigns (or acquires a permit) as --try, --wait or
// neither say, with try (one attempt) or block (until it holds).
func (r *runner) campaignOnce(ctx context.Context, try, block func(context.Context) (*redisleader.Lock, error)) (*redisleader.Lock, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	switch {
	case r.f.wait > 0:
		t := time.AfterFunc(time.Until(r.waitUntil), func() { cancel(errBusy) })
		defer t.Stop()
	case r.f.try:
		lead, err := try(ctx)
		if errors.Is(err, redisleader.ErrLocked) {
			return nil, errBusy
		}
		return lead, err
	}
	lead, err := block(ctx)
	if err != nil && errors.Is(context.Cause(ctx), errBusy) {
		return nil, errBusy
	}
	return lead, err
}

// A tenure is one term of leadership as run holds it.
type tenure struct {
	lead  *redisleader.Lock
	ended <-chan struct{} // closed when the term ends: lead.Done, or the context of Election.Run's onElected
	cause func() error    // why it ended: lead.Err, or that context's cause (ErrPreempted, or lead.Err)
	run   bool            // held by Election.Run, which releases it once onElected has returned
}

// termOutcome is how a term went.
type termOutcome struct {
	started    time.Time
	res        commandResult
	held       bool         // --hold was kept after COMMAND had exited by itself
	releaseErr error        // what the release of a term of Campaign returned
	transferTo string       // the value leadership was handed over to (transfer.go); "" if none
	handover   func() error // waits for that hand-over's outcome
}

// term runs the command for one term of leadership, holds it for --hold,
// and resigns, or hands leadership over if a transfer was requested. A term
// of Election.Run is released by Run once onElected has returned.
func (r *runner) term(e *redisleader.Election, t *tenure) *termOutcome {
	out := &termOutcome{started: time.Now()}
	r.log.infof("%s (fence %d); starting %s", r.won(), t.lead.Fence(), r.display)
	w := r.watchTransfers(e, t)
	out.res = r.runCommand(t, w.requests())
	res := &out.res
	to := res.transferTo
	if res.state != nil && res.lost == nil && !res.movedOn() && r.signalled() == 0 && r.f.hold > 0 {
		to = r.hold(t, w.requests()) // a signal now only ends the hold: COMMAND's status stands
		out.held = true
	}
	if w.stop(); to == "" {
		to = cmp.Or(w.pending(), requestedOf(t.cause())) // taken as COMMAND exited: honoured, though COMMAND's status stands
	}
	switch {
	case to != "" && res.lost != nil: // taken as the lease was lost: nothing left to hand over
		r.log.warnf("the transfer of %s to %s requested is not made: leadership was lost", r.f.name, printable(to))
	case to != "":
		out.transferTo, out.handover = to, r.transfer(e, t, to)
	}
	if !t.run && (out.handover == nil || t.lead.Err() == nil) { // not handed over
		ctx, cancel := context.WithTimeout(context.Background(), resignTimeout)
		out.releaseErr = t.lead.Release(ctx) // resign: the others are woken at once
		cancel()
	}
	return out
}

// finish reports how a term ended, and returns the exit status redisleader
// should end with, or again to campaign again (an exit status then applies
// only once a signal ends the campaign).
func (r *runner) finish(out *termOutcome) (code int, again bool) {
	res := out.res
	resigned, report := r.released(out)
	switch {
	case res.notStarted:
		sig := r.signalled()
		r.log.infof("received %s before %s started; %s", signalName(sig), r.display, resigned)
		return 128 + int(sig), false
	case res.startErr != nil:
		r.log.errorf("cannot start %s: %v; %s", r.display, trimPrefix(res.startErr), resigned)
		return startFailure(res.startErr), false
	case res.state == nil: // lost before it could start (leaseLeft)
		r.log.errorf("%s lost (%s) before %s started; %s", r.holding(), lossReason(res.lost), r.display, resigned)
		return exitLost, r.f.again
	}
	report("%s %s; %s", r.display, describeExit(res.state), resigned)
	switch sig := r.signalled(); {
	case sig != 0 && !out.held:
		return 128 + int(sig), false
	case res.lost != nil:
		return exitLost, r.f.again
	case res.movedOn() && !out.held:
		return exitOK, true // stopped to move leadership on purpose: a candidate still
	default:
		return exitStatus(res.state), r.f.again
	}
}

// released waits for the release or hand-over of a term and says how it
// went, with the logger function for the line that reports it.
func (r *runner) released(out *termOutcome) (string, func(string, ...any)) {
	switch err := out.releaseErr; {
	case out.res.lost != nil:
		return r.say("not leading any more", "not holding the permit any more"), r.log.errorf
	case out.handover != nil:
		return r.handedOver(out.transferTo, out.handover())
	case out.res.yielded:
		return "yielded " + r.f.name + " to a candidate with a higher priority", r.log.infof
	case err != nil && !errors.Is(err, redisleader.ErrLost) && !errors.Is(err, redisleader.ErrSessionClosed):
		return fmt.Sprintf("could not %s (%v); the lease expires within its TTL", r.say("resign", "release the permit"), trimPrefix(err)), r.log.warnf
	}
	return r.say("resigned", "released the permit"), r.log.infof
}

// hold keeps leadership for --hold after the command exited, unless it is
// lost, yielded, or a transfer or a signal ends the hold first (COMMAND has
// finished: the exit status stays its own). It returns the value to hand
// leadership over to, if a transfer was requested.
func (r *runner) hold(t *tenure, requests <-chan string) (transferTo string) {
	ctx, cancel := context.WithTimeout(context.Background(), r.f.hold)
	defer cancel()
	if !r.waiting(cancel) {
		return ""
	}
	defer r.waiting(nil)
	r.log.infof("holding %s for %v (--hold)", r.holding(), r.f.hold)
	select {
	case <-ctx.Done():
	case <-t.ended:
		if to := requestedOf(t.cause()); to != "" {
			r.log.infof("transfer of %s to %s requested during --hold", r.f.name, printable(to))
			return to
		}
		if why := t.cause(); errors.Is(why, redisleader.ErrPreempted) {
			r.log.infof("a candidate with a higher priority waits; yielding %s during --hold", r.f.name)
		} else {
			r.log.warnf("%s lost during --hold (%s)", r.holding(), lossReason(why))
		}
	case to := <-requests:
		r.log.infof("transfer of %s to %s requested during --hold", r.f.name, printable(to))
		return to
	}
	return ""
}

// defaultValue is hostname:pid.
func defaultValue() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return host + ":" + strconv.Itoa(os.Getpid())
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

// commandLine shows args as a shell would take them, with target's URL and
// password hidden (before shortening, which could cut them), shortened to 80
// characters.
func commandLine(args []string, target hider) string {
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
