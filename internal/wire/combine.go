package wire

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Coalescing (flat combining). A session's single script calls on one server
// (acquire attempts, inspections, proclamations, a waiter leaving its queue,
// a Redlock fence write-back) share pipelines when they overlap, in that
// server's Combiner (a Redlock session has one per node); a release or
// give-back is never queued (callNow), renewals are already one pipeline
// per round, and an acquire with WithReplicaAcks (followed by its WAIT) is
// sent alone. While fewer than MaxOnWire calls or
// batches of the session are on the wire, a caller sends its own command at
// once, on its own goroutine and context, as it would without coalescing. A
// call that arrives when MaxOnWire are on the wire joins a queue instead;
// when one of them returns, a flusher goroutine takes the slot over and
// sends what is queued as one pipeline, batch after batch, until the queue
// is empty. So a lone caller pays nothing, and concurrent callers pay one
// round trip and one read and write system call per batch instead of per
// command. A release or give-back sent while calls are queued takes them
// along (up to maxBatch in all; on a Cluster, whose other nodes could hold
// the release up, only the oldest call on its own name), right behind itself
// in one pipeline, sent at once and, like a release alone, not counted on
// the wire: the queue leaves a round trip sooner, with no slot to wait for,
// and on one name tried by many of the session's goroutines each round trip
// hands the name on (an acquisition needs the last release to have landed,
// and its holder releases only once it has learnt that it holds); without
// WithFairness, the session's own contenders so try ahead of other
// sessions' waiters, whom the release wakes. Should the
// release meet a server without its script, its re-send runs after the calls
// taken along, of which one on its name then finds the name still held, as
// it would have just before: that call was made first.
//
// What stays exactly as without coalescing:
//   - Each caller waits for its own reply until its own context or call
//     deadline (Transport.Bound) ends, and not longer. The batch is bounded by
//     the latest of its callers' deadlines, on a context no caller cancels,
//     so one caller's cancellation or timeout never fails another caller's
//     command.
//   - A caller that gives up before its command was sent takes it out of
//     the queue: it never reaches Redis. One that gives up after gets its
//     context's error, which for an acquire is "unknown outcome", never
//     "held by another": the attempt's token is given back as always. Its
//     command may still reach Redis, surely until the batch ends, so until
//     then it holds its key (unsettled): every later call of the session on
//     that lock key (the acquisition's next attempt or give-back, a
//     Proclaim, a delete by Close or the stale-token cleanup) waits for it,
//     bounded by its own deadline. So a session's calls on one key are sent
//     in the order its callers made them, except that a release or give-back
//     goes ahead of calls still queued; but that is all the client can
//     order. A batch that ends at its deadline, without replies, can still
//     reach Redis after the next call, as can a call sent at once whose
//     caller gave up (it holds nothing). What such a late command could
//     undo is guarded where Redis runs it: an acquire's token is deleted
//     until it must have expired, and a Proclaim carries its term's sequence
//     number (proclaimScript).
//   - Replies are matched to commands one by one; RunCalls re-sends a
//     command that met a server without its script (NOSCRIPT) as EVAL, and
//     rewrites denied commands, per command. On a Cluster, RunCalls sends a
//     batch as one pipeline per master, concurrently (call.go), go-redis
//     follows redirections per command, and each caller has its reply as
//     soon as its own master's pipeline has ended: a master that stopped
//     answering fails and delays only its own calls of the batch.
//
// What changes: a batched command (a release with calls taken along too)
// runs on a context without its caller's values (hooks on the user's client
// see one ProcessPipelineHook call with the batch's context, on a Cluster
// one per master, on goroutines of the session), and a server that stops
// answering holds up the session's queued calls, each until its own
// deadline, once MaxOnWire calls are stuck on it. On a Cluster, calls for a
// name on a healthy node can so wait in the queue behind a node that
// stopped answering (not in a batch); a Redlock node holds up only its
// own queue, which no operation waits for once a quorum answered. A release
// that took calls along runs first in Redis, but its caller has its reply
// only with the whole pipeline's (go-redis reads them all): its context can
// end first (Release then reports an error, and the delete, already done,
// is retried in the background). A hook fault (hookfaults.go) fails every
// call of its pipeline.
//
// No goroutine is left: a flusher ends when the queue is empty, and Close
// waits until nothing is on the wire.

// MaxOnWire is how many calls or batches of one session may be on the wire
// at once, besides releases (alone or with the calls they take along);
// maxBatch bounds the commands in one batch.
const (
	MaxOnWire = 2
	maxBatch  = 128
)

// Combiner is the queue of a session's calls to one server waiting for a
// batch: the main client's (Transport.Combiner), and in Redlock mode
// each node's.
type Combiner struct {
	t       *Transport
	client  Client
	cluster bool // client is a Cluster's: a release takes only a call on its own name along
	mu      sync.Mutex
	onWire  int        // calls and flushers on the wire, at most MaxOnWire
	carried int        // releases' pipelines with calls taken along, on the wire (not counted in onWire)
	closed  bool       // after Close: calls go straight to Redis, uncounted
	queue   []*pending // waiting to be sent, oldest first
	idle    []*pending // pendings for reuse
	drained sync.Cond  // signalled when onWire and carried drop to 0 after closed
	// unsettled holds, per key (KeyOf), the calls whose callers gave up while
	// their batches were on the wire, each until its batch has ended: the
	// command may still reach Redis, and no later call on the key is sent
	// before then.
	unsettled map[any][]*pending
}

// pending is one queued call.
type pending struct {
	s         *Script
	argv      []any           // a copy of the caller's arguments: the caller may reuse its own after it gives up
	until     time.Time       // when its caller stops waiting
	ctx       context.Context // its caller's (bound): once it has ended, the call is never sent
	sent      bool            // taken into a batch; under Combiner.mu
	delivered bool            // cmd is set and done signalled; under Combiner.mu
	cmd       *redis.Cmd
	done      chan struct{} // capacity 1: cmd is set
	settled   chan struct{} // non-nil once its caller gave up on the wire (under Combiner.mu); closed when the batch has ended
}

// NewCombiner makes c the combiner of t's calls through client (another
// server's than Config.Client's: a Redlock node's) and returns it; Drain
// waits for it.
func (t *Transport) NewCombiner(c *Combiner, client Client) *Combiner {
	c.t, c.client, c.cluster = t, client, KindOf(client) == KindCluster
	c.drained.L = &c.mu
	t.combiners = append(t.combiners, c)
	return c
}

// Call runs one script on the Combiner's server, bounded as Transport.Bound
// says: at once on the caller's goroutine, or in a batch with other calls
// of the session (see Coalescing above). It first waits until no earlier
// call on the same key, given up while its batch was on the wire, can still
// reach Redis.
func (c *Combiner) Call(ctx context.Context, deadline time.Time, sc *Script, argv []any) *redis.Cmd {
	return c.send(ctx, deadline, sc, argv, true)
}

// CallNow runs a script that frees a name (a release or a give-back) as
// call does, but at once, never queued behind other calls and not counted on
// the wire: on the caller's goroutine, or ahead of the queued calls, which it
// takes along in its pipeline (see Coalescing). The sessions waiting for the
// name (and this one's own contenders, whose tries fill the queue) should
// not wait for it longer than one round trip.
func (c *Combiner) CallNow(ctx context.Context, deadline time.Time, sc *Script, argv []any) *redis.Cmd {
	return c.send(ctx, deadline, sc, argv, false)
}

// send is Call, or with coalesce false CallNow.
func (c *Combiner) send(ctx context.Context, deadline time.Time, sc *Script, argv []any, coalesce bool) *redis.Cmd {
	callCtx := c.t.Bound(ctx, deadline)
	defer Unbind(callCtx)
	c.mu.Lock()
	if err := c.awaitLocked(callCtx, KeyOf(argv)); err != nil {
		c.mu.Unlock()
		return ErrCmd(ctx, argv, err)
	}
	along, key := c.alongLocked(callCtx, argv, coalesce)
	if c.closed || (coalesce && c.onWire < MaxOnWire && len(c.queue) == 0) || (!coalesce && along == 0) {
		if coalesce && !c.closed {
			c.onWire++
			defer c.passSlot() // also when a hook on the client panics
		}
		c.mu.Unlock()
		return sc.Run(callCtx, c.client, argv)
	}
	p := c.getLocked()
	p.s, p.argv = sc, append(p.argv[:0], argv...)
	p.until, _ = callCtx.Deadline() // bound's result always has one
	p.ctx = callCtx
	if coalesce {
		c.queue = append(c.queue, p)
		c.mu.Unlock()
	} else {
		c.carryLocked(p, along, key) // unlocks c.mu
	}
	return c.reply(ctx, p, argv)
}

// alongLocked is how many queued calls a release (coalesce false) takes
// along in its pipeline, and on which key (nil: any).
func (c *Combiner) alongLocked(ctx context.Context, argv []any, coalesce bool) (along int, key any) {
	if coalesce || c.closed || ctx.Err() != nil {
		return 0, nil
	}
	c.pruneLocked()
	if !c.cluster {
		return min(len(c.queue), maxBatch-1), nil
	}
	// Only the oldest call on its own name, in its slot: a call for another
	// node could hold the release up with it.
	key = KeyOf(argv)
	if slices.ContainsFunc(c.queue, func(q *pending) bool { return KeyOf(q.argv) == key }) {
		return 1, key
	}
	return 0, key
}

// carryLocked sends the release p with along queued calls (on key, unless
// nil) right behind it, a round trip sooner than from the queue. It unlocks
// c.mu.
func (c *Combiner) carryLocked(p *pending, along int, key any) {
	batch := c.takeLocked(append(make([]*pending, 0, along+1), p), along, key)
	c.carried++
	c.mu.Unlock()
	go func() {
		defer func() { // also when a hook ends the goroutine
			c.mu.Lock()
			c.carried--
			c.drainedLocked()
			c.mu.Unlock()
		}()
		c.sendBatch(batch, nil)
	}()
}

// reply waits for p's reply until p's caller gives up (p.ctx ends). A call
// not sent yet is then taken out, so it never reaches Redis; one on the
// wire holds its key until its batch has ended (awaitLocked).
func (c *Combiner) reply(ctx context.Context, p *pending, argv []any) *redis.Cmd {
	select {
	case <-p.done:
		return c.collect(p)
	case <-p.ctx.Done():
	}
	err := p.ctx.Err()
	c.mu.Lock()
	switch {
	case !p.sent:
		c.queue = slices.DeleteFunc(c.queue, func(q *pending) bool { return q == p })
		c.putLocked(p)
	case p.delivered: // the reply came as we gave up: take it
		c.mu.Unlock()
		<-p.done
		return c.collect(p)
	default: // the flusher (or the release's pipeline) owns p now
		p.settled = make(chan struct{})
		if c.unsettled == nil {
			c.unsettled = make(map[any][]*pending)
		}
		key := KeyOf(p.argv)
		c.unsettled[key] = append(c.unsettled[key], p)
	}
	c.mu.Unlock()
	return ErrCmd(ctx, argv, err)
}

// awaitLocked waits, with c.mu held but released while it waits, until no
// call on key that a caller gave up on can still reach Redis, or ctx ends.
func (c *Combiner) awaitLocked(ctx context.Context, key any) error {
	for {
		us := c.unsettled[key]
		if len(us) == 0 {
			return nil
		}
		u := us[0]
		c.mu.Unlock()
		select {
		case <-u.settled:
		case <-ctx.Done():
			c.mu.Lock()
			return ctx.Err()
		}
		c.mu.Lock()
	}
}

// Await is awaitLocked for callers that do not hold c.mu.
func (c *Combiner) Await(ctx context.Context, key any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.awaitLocked(ctx, key)
}

// collect returns the reply of p, whose done signal its caller has
// received, and p to the idle list.
func (c *Combiner) collect(p *pending) *redis.Cmd {
	cmd := p.cmd
	c.mu.Lock()
	c.putLocked(p)
	c.mu.Unlock()
	return cmd
}

// ErrCmd is a command that failed with err before, or without, a reply.
func ErrCmd(ctx context.Context, argv []any, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx, argv...)
	cmd.SetErr(err)
	return cmd
}

// passSlot frees the slot of a call that returned: to a flusher when calls
// are queued, else for the next caller.
func (c *Combiner) passSlot() {
	c.mu.Lock()
	if len(c.queue) == 0 {
		c.freeSlotLocked()
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	go c.flush()
}

// flush sends what is queued, a batch at a time, until the queue is empty;
// it holds one slot meanwhile.
// After a hook fault (hookfaults.go) the next flusher takes the slot over.
func (c *Combiner) flush() { OnUnwind(c.flushAll, c.passSlot) }

func (c *Combiner) flushAll() {
	var (
		batch []*pending
		calls []Call
	)
	for {
		c.mu.Lock()
		c.pruneLocked()
		n := min(len(c.queue), maxBatch)
		if n == 0 {
			c.freeSlotLocked()
			c.mu.Unlock()
			return
		}
		batch = c.takeLocked(batch[:0], n, nil)
		c.mu.Unlock()
		calls = c.sendBatch(batch, calls)
		clear(batch)
	}
}

// pruneLocked takes the calls whose callers have given up (their contexts
// ended) but not yet taken them out themselves out of the queue: they are
// never sent, though a batch leaves meanwhile (as a Redlock give-back can,
// right after the grace period cancelled its attempt's calls).
func (c *Combiner) pruneLocked() {
	c.queue = slices.DeleteFunc(c.queue, func(p *pending) bool { return p.ctx.Err() != nil })
}

// takeLocked appends the n oldest queued calls (with key not nil, on that
// key) to batch, takes them out of the queue and marks every call of batch
// sent.
func (c *Combiner) takeLocked(batch []*pending, n int, key any) []*pending {
	kept := c.queue[:0]
	for _, q := range c.queue {
		if n > 0 && (key == nil || KeyOf(q.argv) == key) {
			batch, n = append(batch, q), n-1
		} else {
			kept = append(kept, q)
		}
	}
	clear(c.queue[len(kept):])
	c.queue = kept
	for _, p := range batch {
		p.sent = true
	}
	return batch
}

// sendBatch sends batch, taken from the queue, as one pipeline bounded by
// its latest deadline (on a Cluster, one per master: RunCalls), and
// delivers each reply (or settles the call whose caller gave up), on a
// Cluster as soon as its master's pipeline has ended; it returns calls
// (scratch space) for reuse.
func (c *Combiner) sendBatch(batch []*pending, calls []Call) []Call {
	var until time.Time
	calls = calls[:0]
	for _, p := range batch {
		if p.until.After(until) {
			until = p.until
		}
		calls = append(calls, Call{p.s, p.argv})
	}
	ctx := &boundCtx{Context: context.Background(), deadline: until, states: &c.t.dones}
	var (
		cmds     []*redis.Cmd
		answered []bool // by ready; under c.mu
		ready    func([]int, []*redis.Cmd)
	)
	failed := ErrHookGoexit // until RunCalls returns: a hook may end the goroutine
	defer func() {
		Unbind(ctx)
		if failed == ErrHookGoexit { // not under c.mu: the user's logger may take its time
			c.t.cfg.Logger.Error(failed.Error())
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, p := range batch {
			switch {
			case answered != nil && answered[i]: // p may already serve another call
			case failed != nil:
				c.answerLocked(p, ErrCmd(context.Background(), p.argv, failed))
			default:
				c.answerLocked(p, cmds[i])
			}
		}
	}()
	if c.cluster {
		ready = func(idx []int, cmds []*redis.Cmd) {
			c.mu.Lock()
			defer c.mu.Unlock()
			if answered == nil {
				answered = make([]bool, len(batch))
			}
			for _, i := range idx {
				c.answerLocked(batch[i], cmds[i])
				answered[i] = true
			}
		}
	}
	cmds, failed = RunCalls(ctx, c.client, calls, Acks{}, ready)
	return calls
}

// answerLocked hands cmd to p's caller, or, if it gave up while p was on
// the wire, frees p's key for the session's later calls.
func (c *Combiner) answerLocked(p *pending, cmd *redis.Cmd) {
	p.cmd = cmd
	if p.settled != nil {
		key := KeyOf(p.argv)
		if us := slices.DeleteFunc(c.unsettled[key], func(u *pending) bool { return u == p }); len(us) > 0 {
			c.unsettled[key] = us
		} else {
			delete(c.unsettled, key)
		}
		close(p.settled)
		return
	}
	p.delivered = true
	p.done <- struct{}{}
}

// drain makes later calls go straight to Redis and waits until no call or
// batch of c is on the wire (each ends by its deadline).
func (c *Combiner) drain() {
	c.mu.Lock()
	c.closed = true
	for c.onWire > 0 || c.carried > 0 {
		c.drained.Wait()
	}
	c.mu.Unlock()
}

// freeSlotLocked gives a slot on the wire back, and tells a waiting Close
// once the last one is free.
func (c *Combiner) freeSlotLocked() {
	c.onWire--
	c.drainedLocked()
}

// drainedLocked tells a waiting Close when nothing is left on the wire.
func (c *Combiner) drainedLocked() {
	if c.onWire == 0 && c.carried == 0 && c.closed {
		c.drained.Broadcast()
	}
}

func (c *Combiner) getLocked() *pending {
	if n := len(c.idle); n > 0 {
		p := c.idle[n-1]
		c.idle[n-1] = nil
		c.idle = c.idle[:n-1]
		return p
	}
	return &pending{done: make(chan struct{}, 1)}
}

func (c *Combiner) putLocked(p *pending) {
	clear(p.argv) // tokens and values
	p.s, p.ctx, p.cmd, p.sent, p.delivered = nil, nil, nil, false, false
	if len(c.idle) < maxBatch {
		c.idle = append(c.idle, p)
	}
}
