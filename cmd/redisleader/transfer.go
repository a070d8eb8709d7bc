package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader"
)

// Transfer requests: "redisleader transfer NAME --to VALUE" asks the run
// that leads NAME to hand leadership over to the candidate campaigning with
// VALUE. Election.Transfer must be called by the leader's own session, so
// the request goes through Redis:
//
//   - transfer stores "<id>\n<VALUE>" at redisleader:{NAME}:transfer, with a
//     TTL, and publishes a hint on the channel of the same name; then it
//     watches the leader (Observe) until VALUE leads, and withdraws the
//     request if no leader has taken it when it gives up.
//   - A run that leads NAME, and campaigns until it leads (no --try or
//     --wait), subscribes to that channel during its term, and takes the
//     request (reads and deletes it, in one script) when its term starts, on
//     every message and once per --ttl: a lost message delays it by at most
//     that. It stops COMMAND as on any end of leadership and, once COMMAND
//     has exited, calls Election.Transfer, which hands the name over.
//
// A message is only a hint: run acts on the key, and transfer reports what
// it reads from the lock key. Anyone who may write redisleader:* keys or
// publish on redisleader:* channels can ask a transfer, as they can end a
// term by deleting the lock key: a request costs at most one hand-over (and,
// to a candidate with a lower priority than another's, the yield to that
// one), and a vacancy of one TTL when nobody campaigns with VALUE, never two
// leaders.

// Exit statuses of "redisleader transfer", besides exitOK (VALUE leads),
// exitError, exitUsage, exitNoLeader (3: nobody leads, nothing was written),
// exitBusy (75) and 128+n.
const (
	exitNoSuccessor = 4 // the leader handed over, and another candidate than VALUE leads
	exitNotTaken    = 5 // no leader took the request within --wait
)

const (
	defaultTransferWait = time.Minute
	requestMargin       = pingTimeout // a request lives --wait plus this
)

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

The request is a Redis key that transfer deletes when it gives up; if
transfer dies, the key expires 5s after --wait.
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

// cmdTransfer implements "redisleader transfer".
func cmdTransfer(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, f := newTransferFlags()
	c, code := f.start(ctx, fs, transferHelp, args, stdout, stderr, false)
	if code >= 0 {
		return code
	}
	defer c.close()
	ctx, cancel := context.WithTimeout(ctx, f.transfer.wait)
	defer cancel()
	q := &transferRequest{key: requestKey(c.name), id: rand.Text(), to: f.transfer.to, wait: f.transfer.wait}
	changes := c.election.Observe(ctx) // before the request: no change after it goes unseen
	from, err := c.election.Leader(ctx)
	switch {
	case errors.Is(err, redisleader.ErrNoLeader):
		c.log.errorf("nobody leads %s: there is no leadership to hand over", c.name)
		return exitNoLeader
	case err != nil:
		return c.failed(ctx, "", err)
	case from.Value == q.to:
		return q.done(stdout, from)
	}
	if err := q.send(ctx, c.client); err != nil {
		return c.failed(ctx, "cannot ask for the transfer of "+c.name, err)
	}
	return q.await(ctx, c, from, changes, stdout)
}

// requestKey is the key, and the channel, of NAME's transfer requests: in
// the election's hash slot, and under the ACL rule's redisleader:* patterns.
func requestKey(name string) string { return "redisleader:{" + name + "}:transfer" }

// transferRequest is one request of the transfer command.
type transferRequest struct {
	key, id, to string
	wait        time.Duration
}

func (q *transferRequest) stored() string { return q.id + "\n" + q.to }

// send stores the request and publishes the hint. A request of another
// transfer, if any, is replaced. The request outlives --wait by
// requestMargin, so that giveUp can tell a request taken from one expired:
// it withdraws it then, and a request of a transfer that died expires.
func (q *transferRequest) send(ctx context.Context, c redis.UniversalClient) error {
	if err := c.Set(ctx, q.key, q.stored(), q.wait+requestMargin).Err(); err != nil {
		return err
	}
	return c.Publish(ctx, q.key, "T").Err()
}

// await waits for the leader changes until VALUE leads, or another does
// after the request was taken, and returns the exit status.
func (q *transferRequest) await(ctx context.Context, c *nameCommand, from redisleader.Leader, changes <-chan redisleader.Leader, stdout io.Writer) int {
	for l := range changes {
		switch {
		case l.Fence != 0 && l.Value == q.to:
			return q.done(stdout, l)
		case l.Fence == 0 || l.Fence == from.Fence:
			continue // the hand-over under way, or the same term
		}
		// A new leader; it may still take the request if the last did not.
		if taken, err := q.taken(ctx, c.client); err == nil && taken {
			c.log.errorf("%s did not take leadership of %s: %s leads (fence %d)", q.to, c.name, l.Value, l.Fence)
			return exitNoSuccessor
		}
	}
	return q.giveUp(ctx, c)
}

// done prints the new leader as status does, and returns exitOK.
func (q *transferRequest) done(stdout io.Writer, l redisleader.Leader) int {
	p := colour(stdout)
	fmt.Fprintf(stdout, "leader %s (fence %d)\n", p.bold(p.green(printable(l.Value))), l.Fence)
	return exitOK
}

// taken reports whether a leader has taken the request (it is not stored
// any more, or another request replaced it).
func (q *transferRequest) taken(ctx context.Context, c redis.UniversalClient) (bool, error) {
	v, err := c.Get(ctx, q.key).Result()
	if errors.Is(err, redis.Nil) {
		return true, nil
	}
	return v != q.stored(), err
}

// giveUp withdraws the request unless a leader has taken it, once ctx has
// ended (--wait, or a signal), and returns the exit status.
func (q *transferRequest) giveUp(ctx context.Context, c *nameCommand) int {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pingTimeout)
	defer cancel()
	v, err := takeScript.Run(wctx, c.client, []string{q.key}, q.stored()).Text()
	taken := errors.Is(err, redis.Nil) || err == nil && v != q.stored()
	if err != nil && !errors.Is(err, redis.Nil) {
		c.log.errorf("cannot withdraw the request to transfer %s (it expires %v after --wait): %v", c.name, requestMargin, err)
		return exitError
	}
	switch code := interrupted(ctx); {
	case code >= 0 && taken:
		c.log.errorf("stopped waiting; the leader took the request: the hand-over of %s to %s goes on", c.name, q.to)
		return code
	case code >= 0:
		return code // withdrawn
	case ctx.Err() == nil:
		c.log.errorf("watch of %s ended: the session closed", c.name)
		return exitError
	case !taken:
		c.log.errorf("the leader of %s did not take the request within --wait %v: only a redisleader run that campaigns until it leads (no --try or --wait) takes them; withdrawn", c.name, q.wait)
		return exitNotTaken
	}
	c.log.errorf("%s does not lead %s after --wait %v; the leader took the request, and the hand-over may still complete", q.to, c.name, q.wait)
	return exitBusy
}

// takeScript takes a transfer request: it deletes the key if it holds one
// ("<id>\n<value>") and ARGV[1] is "" (run's take) or the request itself
// (transfer's withdrawal), and returns what the key held (nil: nothing). A
// value that is no request is left as it is.
//
//	KEYS[1] the request key; ARGV[1] the request to take, or "" for any
var takeScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v and string.find(v, '\n', 1, true) and (ARGV[1] == '' or v == ARGV[1]) then
  redis.call('DEL', KEYS[1])
end
return v
`)

// transferWatch takes the transfer requests for NAME during one term of a
// run that leads it: at most one per term.
type transferWatch struct {
	taken  chan string // receives the value of the request taken
	cancel context.CancelFunc
	done   chan struct{} // closed when the watch has ended
	warned bool          // a key that is no request was reported
}

// watchTransfers starts watching for transfer requests, if this run takes
// them (it campaigns until it leads); otherwise it returns nil, which takes
// none. stop ends it.
func (r *runner) watchTransfers() *transferWatch {
	if r.f.try || r.f.wait > 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &transferWatch{taken: make(chan string, 1), cancel: cancel, done: make(chan struct{})}
	go w.run(ctx, r)
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

// run takes a request at once, then on every message on the request channel
// and once per --ttl, until it has taken one or ctx ends.
func (w *transferWatch) run(ctx context.Context, r *runner) {
	defer close(w.done)
	key := requestKey(r.f.name)
	hints := subscribeHints(ctx, r.client, key, r.log)
	poll := time.NewTimer(0)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hints:
		case <-poll.C:
		}
		if to := w.take(ctx, r, key); to != "" {
			w.taken <- to
			return
		}
		poll.Reset(r.f.ttl)
	}
}

// subscribeHints subscribes to the request channel, and returns its
// messages (hints to read the key: their content is not used), or nil,
// after a warning, if it could not subscribe: requests are then read once
// per --ttl only. The subscription ends with ctx.
func subscribeHints(ctx context.Context, c redis.UniversalClient, channel string, log *logger) <-chan *redis.Message {
	sub := c.Subscribe(ctx, channel)
	context.AfterFunc(ctx, func() { _ = sub.Close() }) // also ends a Receive that Redis does not answer
	if _, err := sub.Receive(ctx); err != nil {        // the confirmation: subscribed before the first read
		if ctx.Err() == nil {
			log.warnf("cannot subscribe to %s; transfer requests are read once per --ttl: %v", channel, err)
		}
		return nil
	}
	return sub.Channel()
}

// take takes the pending request, if any, and returns its value, or "" if
// there is none to act on (none, one for this run's own value, or an
// error, reported).
func (w *transferWatch) take(ctx context.Context, r *runner, key string) string {
	cctx, cancel := context.WithTimeout(ctx, r.f.ttl/3)
	defer cancel()
	v, err := takeScript.Run(cctx, r.client, []string{key}, "").Text()
	switch {
	case errors.Is(err, redis.Nil) || ctx.Err() != nil:
		return ""
	case err != nil:
		r.log.warnf("reading transfer requests of %s: %v", r.f.name, err)
		return ""
	}
	_, to, ok := strings.Cut(v, "\n")
	switch {
	case !ok && !w.warned:
		w.warned = true
		r.log.warnf("%s holds %d bytes that are no transfer request; left as they are", key, len(v))
	case to == r.f.value:
		r.log.infof("transfer of %s to %s requested: it leads already", r.f.name, printable(to))
	case ok && to != "":
		return to
	}
	return ""
}

// handOver hands the leadership of t to the candidate campaigning with
// value to, once COMMAND has exited. Election.Transfer ends the term at
// once, but returns only once to leads (or after the bound it documents),
// and for a term of Election.Run only after Run has handed the name over,
// which it does once onElected has returned. So Transfer runs on its own
// goroutine: handOver returns once the term has ended (or Transfer failed
// first), and the function it returns waits for Transfer's result; a
// signal ends that wait, not the hand-over.
func (r *runner) handOver(e *redisleader.Election, t *tenure, to string) (wait func() error) {
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
