package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/redisleader/redisleader"
)

// Transfer requests: "redisleader transfer NAME --to VALUE" asks the run
// that leads NAME to hand leadership over to the candidate campaigning with
// VALUE, with Election.RequestTransfer; a run that campaigns until it leads
// takes the requests addressed to its term (Election.Run does for a run
// with a priority, Election.TransferRequested for one without), stops
// COMMAND as on any end of leadership and, once COMMAND has exited, calls
// Election.Transfer. The protocol is the library's: docs/elections.md,
// section Transfer requests.

// Exit statuses of "redisleader transfer", besides exitOK (VALUE leads),
// exitError, exitUsage, exitNoLeader (3: nobody leads, nothing was written),
// exitBusy (75) and 128+n.
const (
	exitNoSuccessor = 4 // the leader handed over, and another candidate than VALUE leads
	exitNotTaken    = 5 // no leader took the request within --wait
)

const defaultTransferWait = time.Minute

var transferHelp = helpText{
	synopsis: "transfer [--wait D] [flags] NAME --to VALUE",
	about: `
Ask the "redisleader run" that leads NAME to hand leadership over to the
candidate that campaigns for NAME with VALUE (its --value: give candidates
distinct values), and wait until VALUE leads. The leader stops COMMAND as
when leadership ends (SIGTERM, SIGKILL after its --grace), hands NAME over,
and campaigns again; nobody else can lead in between. If VALUE does not take
leadership within the leader's --ttl, anyone may. Only a run that campaigns
until it leads (no --try or --wait) takes requests. Flags may also come
after NAME. It prints the new leader as status does:

  leader host-b:4321 (fence 1795000000000001)

The request is a Redis key that names the leader's term (its fence): only
that term's leader acts on it, and if that term ends without taking it,
transfer addresses it to the next term. It ends with transfer: transfer
deletes it as it exits, whatever its status; only a transfer that is killed
(SIGKILL) leaves it behind, and it expires within 15s (it lives one TTL of
transfer's session, renewed while transfer waits).
`,
	exit: `
Exit status:
  0    VALUE leads NAME (it may have led already)
  3    nobody leads NAME: there is no leadership to hand over (nothing is written)
  4    the leader handed over, and another candidate leads: VALUE does not
       campaign for NAME, or it died
  5    no leader took the request within --wait: the leader is not a
       redisleader run that campaigns until it leads (a job with --try or
       --wait, an older version, another program); the request is withdrawn
  75   the leader took the request, and VALUE did not lead within --wait
       (COMMAND still stopping: make --wait longer than the leader's --grace
       and --ttl)
  1    error: Redis unreachable, or a Redis error
  2    usage error (a bad flag, NAME or --to, or a malformed Redis URL)
  128+n stopped by signal n; a request not yet taken is withdrawn
`,
}

// transferFlags are transfer's own flags, besides the connection's.
type transferFlags struct {
	to   string
	wait time.Duration
}

func newTransferFlags() (*flag.FlagSet, *nameFlags) {
	fs := newFlagSet("transfer")
	f := &nameFlags{transfer: &transferFlags{}}
	fs.StringVar(&f.transfer.to, "to", "", "`value` of the candidate to hand leadership over to (its --value; required)")
	fs.DurationVar(&f.transfer.wait, "wait", defaultTransferWait, "wait at most `D` for VALUE to lead")
	f.conn.register(fs)
	return fs, f
}

// invalid says what is wrong with the flags for NAME, or returns "".
func (f *transferFlags) invalid(name string) string {
	switch {
	case f.to == "":
		return "--to is required"
	case f.wait <= 0:
		return fmt.Sprintf("invalid --wait %v: must be positive", f.wait)
	}
	if _, err := checkOffline(name, nil, f.to); err != nil {
		return "invalid --to: " + trimPrefix(err)
	}
	return ""
}

// cmdTransfer implements "redisleader transfer" with
// Election.RequestTransfer, which holds the protocol.
func cmdTransfer(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, f := newTransferFlags()
	c, code := f.start(ctx, fs, transferHelp, args, stdout, stderr, false)
	if code >= 0 {
		return code
	}
	defer c.close()
	ctx, cancel := context.WithTimeout(ctx, f.transfer.wait)
	defer cancel()
	to := f.transfer.to
	l, err := c.election.RequestTransfer(ctx, to)
	switch {
	case err == nil:
		p := colour(stdout)
		fmt.Fprintf(stdout, "leader %s (fence %d)\n", p.bold(p.green(printable(l.Value))), l.Fence)
		return exitOK
	case errors.Is(err, redisleader.ErrNoLeader):
		c.log.errorf("nobody leads %s: there is no leadership to hand over", c.name)
		return exitNoLeader
	case errors.Is(err, redisleader.ErrNoSuccessor):
		c.log.errorf("%s did not take leadership of %s: %s leads (fence %d)", to, c.name, l.Value, l.Fence)
		return exitNoSuccessor
	case ctx.Err() == nil || !isContextErr(err):
		return c.failed(ctx, "cannot ask for the transfer of "+c.name, err)
	}
	return notTransferred(ctx, c, f.transfer, err)
}

// isContextErr reports whether err says that a context ended.
func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// notTransferred returns the exit status of a transfer whose --wait ended,
// or that a signal stopped, after RequestTransfer withdrew the request
// (ErrNotTaken) or found it taken.
func notTransferred(ctx context.Context, c *nameCommand, f *transferFlags, err error) int {
	taken := !errors.Is(err, redisleader.ErrNotTaken)
	switch code := interrupted(ctx); {
	case code >= 0 && taken:
		c.log.errorf("stopped waiting; the leader took the request: the hand-over of %s to %s goes on", c.name, f.to)
		return code
	case code >= 0:
		return code // withdrawn
	case !taken:
		c.log.errorf("the leader of %s did not take the request within --wait %v: only a redisleader run that campaigns until it leads (no --try or --wait) takes them; withdrawn", c.name, f.wait)
		return exitNotTaken
	}
	c.log.errorf("%s does not lead %s after --wait %v; the leader took the request, and the hand-over may still complete", f.to, c.name, f.wait)
	return exitBusy
}

// transferWatch takes the transfer requests addressed to one term of a run
// that campaigns with Election.Campaign (Election.TransferRequested; a
// term of Election.Run learns of them from its context: requestedOf).
type transferWatch struct {
	taken  chan string // receives the value of the request taken
	cancel context.CancelFunc
	done   chan struct{} // closed when the watch has ended
}

// watchTransfers starts watching for transfer requests addressed to the
// term t, if this run takes them (it campaigns until it leads) and
// Election.Run does not take them for it; otherwise it returns nil, which
// takes none. stop ends it.
func (r *runner) watchTransfers(e *redisleader.Election, t *tenure) *transferWatch {
	if r.f.try || r.f.wait > 0 || t.run || e == nil { // e nil: a permit (--slots), which takes none
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &transferWatch{taken: make(chan string, 1), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		if to, err := e.TransferRequested(ctx, t.lead); err == nil {
			w.taken <- to
		}
	}()
	return w
}

// requests is the channel on which the request taken arrives (nil, which
// never delivers, for a nil watch).
func (w *transferWatch) requests() <-chan string {
	if w == nil {
		return nil
	}
	return w.taken
}

// stop ends the watch and waits for it.
func (w *transferWatch) stop() {
	if w != nil {
		w.cancel()
		<-w.done
	}
}

// pending returns, once the watch has stopped, the value of a request it
// took that nobody received, or "".
func (w *transferWatch) pending() string {
	if w == nil {
		return ""
	}
	select {
	case to := <-w.taken:
		return to
	default:
		return ""
	}
}

// requestedOf returns the successor's value if why, the cause of a term of
// Election.Run, is a transfer request that Run took, or "".
func requestedOf(why error) string {
	var req *redisleader.TransferRequest
	if errors.As(why, &req) {
		return req.To
	}
	return ""
}

// transfer hands the leadership of t over to the candidate campaigning with
// value to, once COMMAND has exited. Election.Transfer ends the term at
// once, but returns only once to leads (or after the bound it documents),
// and for a term of Election.Run only after Run has handed the name over,
// which it does once onElected has returned. So Transfer runs on its own
// goroutine: transfer returns once the term has ended (or Transfer failed
// first), and the function it returns waits for Transfer's result; a
// signal ends that wait, not the hand-over.
func (r *runner) transfer(e *redisleader.Election, t *tenure, to string) (wait func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() { res <- e.Transfer(ctx, to) }()
	select {
	case <-t.lead.Done():
	case err := <-res:
		res <- err
	}
	return func() error {
		defer cancel()
		if r.waiting(cancel) {
			defer r.waiting(nil)
		} else {
			cancel()
		}
		return <-res
	}
}

// handedOver says how a hand-over went, with the logger function for the
// line that reports it.
func (r *runner) handedOver(to string, err error) (string, func(string, ...any)) {
	switch {
	case err == nil:
		return "handed " + r.f.name + " over to " + printable(to), r.log.infof
	case errors.Is(err, context.Canceled) && r.signalled() != 0:
		return "handing " + r.f.name + " over to " + printable(to) + " (not waiting for it to lead)", r.log.infof
	}
	// The library's error wraps its sentinel's, each with the prefix.
	return fmt.Sprintf("hand-over of %s to %s: %s", r.f.name, printable(to), strings.ReplaceAll(err.Error(), "redisleader: ", "")), r.log.warnf
}
