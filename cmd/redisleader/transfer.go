package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader"
)

// Transfer requests: "redisleader transfer NAME --to VALUE" asks the run
// that leads NAME to hand leadership over to the candidate campaigning with
// VALUE. Election.Transfer must be called by the leader's own session, so
// the request goes through Redis. The whole protocol is in this file: the
// format (transferRequest.stored), one script (requestScript), its callers.
//
//   - A request is "<id> <fence>\n<VALUE>" at redisleader:{NAME}:transfer:
//     a random id, and the fence of the term it addresses (the one transfer
//     read from the lock key). It lives --wait plus requestMargin.
//   - transfer stores it, publishes a hint on the channel of the key's name,
//     and watches the leader (Observe) until VALUE leads. When another term
//     starts and the request is still there (the term it addressed ended
//     without taking it), transfer addresses it to that term, and hints
//     again. The request ends with transfer: whatever ends it (VALUE leads,
//     another does after a hand-over, --wait, a signal, an error), transfer
//     withdraws the request if it is still its own. Only a transfer that is
//     SIGKILLed (or cannot reach Redis as it exits) leaves it, to expire.
//   - transfer knows its request by its id, whatever term it addresses: a
//     readdress or withdrawal whose reply was lost (go-redis then runs the
//     script again) or whose ctx ended mid-call leaves the key holding the
//     request under the old fence or the new one, and either way the next
//     step finds it, and a repeated readdress finds it moved already.
//   - A run that leads NAME, and campaigns until it leads (no --try or
//     --wait), subscribes to that channel during its term, and takes the
//     request (reads and deletes it, in one script) if it names its own
//     term's fence: when its term starts, on every message and once per
//     --ttl (a lost message delays it by at most that), until the term
//     ends: a term whose lease is lost or yielded takes none (it could not
//     hand over). A request for another term it leaves as it is. It stops COMMAND as on any end of
//     leadership and, once COMMAND has exited, calls Election.Transfer,
//     which hands the name over.
//
// Why the fence, and not a creation time: the fence names exactly one term.
// It is issued by Redis and compared for equality, so no clock is involved.
// A time read from Redis TIME would have to be compared with the start of
// the term on the same clock, which the leader does not know (its fence
// may run ahead of the clock), and which a failover to a replica whose
// clock is behind moves back. A fence repeats only where the lock itself
// fails (a failover that lost the fence key); a stale request then costs at
// most one hand-over, as below. The fence transfer reads (Election.Leader)
// is the one the leader holds (Lock.Fence): they differ only on Redlock
// before its first renewal, and run does not use Redlock.
//
// Versions: a run from before fences reads "<id> <fence>" as an id, and
// hands over to VALUE as before; this run leaves an older transfer's
// request ("<id>\n<VALUE>", no fence) as it is, and that transfer exits 5.
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

The request is a Redis key that names the leader's term (its fence): only
that term's leader acts on it, and if that term ends without taking it,
transfer addresses it to the next term. It ends with transfer: transfer
deletes it as it exits, whatever its status; only a transfer that is killed
(SIGKILL) leaves it behind, and it expires 5s after --wait.
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
	q.fence = from.Fence
	if err := q.send(ctx, c.client); err != nil {
		q.withdraw(ctx, c) // it may have been stored all the same
		return c.failed(ctx, "cannot ask for the transfer of "+c.name, err)
	}
	return q.await(ctx, c, changes, stdout)
}

// requestKey is the key, and the channel, of NAME's transfer requests: in
// the election's hash slot, and under the ACL rule's redisleader:* patterns.
func requestKey(name string) string { return "redisleader:{" + name + "}:transfer" }

// transferRequest is one request of the transfer command, addressed to the
// term whose fence is fence.
type transferRequest struct {
	key, id, to string
	fence       int64
	wait        time.Duration
}

// stored is the request as stored: "<id> <fence>\n<VALUE>" (requestScript
// reads the fence).
func (q *transferRequest) stored() string {
	return q.id + " " + strconv.FormatInt(q.fence, 10) + "\n" + q.to
}

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
// after the request was taken, and returns the exit status. The request is
// withdrawn on the way out, if it is still there.
func (q *transferRequest) await(ctx context.Context, c *nameCommand, changes <-chan redisleader.Leader, stdout io.Writer) int {
	for l := range changes {
		switch {
		case l.Fence != 0 && l.Value == q.to:
			q.withdraw(ctx, c) // if not taken, its term has ended: nobody would take it, but it ends here
			return q.done(stdout, l)
		case l.Fence == 0 || l.Fence == q.fence:
			continue // the hand-over under way, or the same term
		}
		// Another term: the one addressed has ended, and took the request
		// (then it handed over to another than VALUE) or not (then it goes
		// to this term).
		switch moved, err := q.readdress(ctx, c.client, l.Fence); {
		case err != nil && ctx.Err() == nil:
			c.log.warnf("cannot address the request to transfer %s to the term of %s (fence %d): %v", c.name, printable(l.Value), l.Fence, trimPrefix(err))
		case err == nil && !moved:
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

// readdress addresses the request to the term with fence, if the key still
// holds this transfer's request (for any term: also one readdressed by a
// call whose reply was lost), and hints the leader; moved is false if it
// does not (a leader took it, or another request replaced it).
func (q *transferRequest) readdress(ctx context.Context, c redis.UniversalClient, fence int64) (moved bool, err error) {
	next := *q
	next.fence = fence
	switch moved, _, err = takeRequest(ctx, c, q.key, q.id, "", next.stored()); {
	case errors.Is(err, redis.Nil):
		return false, nil
	case !moved || err != nil:
		return false, err
	}
	q.fence = fence
	_ = c.Publish(ctx, q.key, "T").Err() // a hint: without it, the leader reads it within its --ttl
	return true, nil
}

// withdraw deletes the request if the key still holds this transfer's
// request, whatever term it addresses (also once ctx has ended), and
// reports whether it did not (taken: a leader took it, or another request
// replaced it). If Redis could not be
// asked, it says so and returns ok false.
func (q *transferRequest) withdraw(ctx context.Context, c *nameCommand) (taken, ok bool) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pingTimeout)
	defer cancel()
	took, _, err := takeRequest(wctx, c.client, q.key, q.id, "", "")
	if err != nil && !errors.Is(err, redis.Nil) {
		c.log.errorf("cannot withdraw the request to transfer %s (it expires %v after --wait): %v", c.name, requestMargin, trimPrefix(err))
		return false, false
	}
	return !took, true
}

// giveUp withdraws the request unless a leader has taken it, once ctx has
// ended (--wait, or a signal), and returns the exit status.
func (q *transferRequest) giveUp(ctx context.Context, c *nameCommand) int {
	taken, ok := q.withdraw(ctx, c)
	if !ok {
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

// requestScript takes a transfer request. The request it takes is the
// one stored, if its id is ARGV[1] (transfer's own, for any term), or, if
// ARGV[1] is "", if its fence is ARGV[2] (run's take: a request addressed
// to its term). It deletes it, or replaces it with ARGV[3] if that is not
// "" (transfer's readdress; run again, it finds ARGV[3] and moves it
// again), keeping its TTL. It returns {1 if it took it else 0, what the
// key held}, or nil if the key does not exist. Anything else, a request of
// another transfer or for another term or a value that is no request, is
// left as it is.
//
//	KEYS[1] the request key; ARGV[1] an id, ARGV[2] a fence, ARGV[3] the replacement
var requestScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v then return false end
local id, fence = string.match(v, '^(%S+) (%d+)\n')
local mine = id ~= nil and (id == ARGV[1] or ARGV[1] == '' and fence == ARGV[2])
if mine and ARGV[3] ~= '' then
  redis.call('SET', KEYS[1], ARGV[3], 'KEEPTTL')
elseif mine then
  redis.call('DEL', KEYS[1])
end
return {mine and 1 or 0, v}
`)

// takeRequest runs requestScript on key, and returns whether it took the
// request and what the key held; the error is redis.Nil if there was none.
func takeRequest(ctx context.Context, c redis.Scripter, key, id, fence, replacement string) (took bool, held string, err error) {
	res, err := requestScript.Run(ctx, c, []string{key}, id, fence, replacement).Slice()
	if err != nil {
		return false, "", err
	}
	if len(res) == 2 {
		n, ok := res[0].(int64)
		if held, isString := res[1].(string); ok && isString {
			return n == 1, held, nil
		}
	}
	return false, "", fmt.Errorf("unexpected reply to the transfer request script: %d elements", len(res))
}

// transferWatch takes the transfer requests for NAME during one term of a
// run that leads it: at most one per term, addressed to that term.
type transferWatch struct {
	fence   string      // the term's fence, as requests name it
	taken   chan string // receives the value of the request taken
	cancel  context.CancelFunc
	done    chan struct{} // closed when the watch has ended
	warned  bool          // a key that is no request was reported
	ignored bool          // a request for another term was reported
}

// watchTransfers starts watching for transfer requests addressed to the
// term t, if this run takes them (it campaigns until it leads); otherwise
// it returns nil, which takes none. It takes none once t has ended. stop
// ends it.
func (r *runner) watchTransfers(t *tenure) *transferWatch {
	if r.f.try || r.f.wait > 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &transferWatch{fence: strconv.FormatInt(t.lead.Fence(), 10), taken: make(chan string, 1), cancel: cancel, done: make(chan struct{})}
	go w.run(ctx, r, t)
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
// and once per --ttl, until it has taken one, t has ended or ctx ends.
func (w *transferWatch) run(ctx context.Context, r *runner, t *tenure) {
	defer close(w.done)
	key := requestKey(r.f.name)
	hints := subscribeHints(ctx, r.client, key, r.log)
	poll := time.NewTimer(0)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.ended:
			return
		case <-hints:
		case <-poll.C:
		}
		if t.over() {
			return // chosen at random among ready cases, or lost by the clock only
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

// take takes the pending request addressed to this term, if any, and
// returns its value, or "" if there is none to act on (none, one for
// another term, one for this run's own value, or an error, reported).
func (w *transferWatch) take(ctx context.Context, r *runner, key string) string {
	cctx, cancel := context.WithTimeout(ctx, r.f.ttl/3)
	defer cancel()
	took, v, err := takeRequest(cctx, r.client, key, "", w.fence, "")
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
	case !ok:
	case !took && !w.ignored:
		w.ignored = true
		r.log.infof("ignoring a request to transfer %s made for another term (not for fence %s); left as it is", r.f.name, w.fence)
	case !took:
	case to == r.f.value:
		r.log.infof("transfer of %s to %s requested: it leads already", r.f.name, printable(to))
	case to != "":
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
