package wire

import (
	"context"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// The queue of a Combiner: the calls that wait for a slot on the wire, or
// for a given-up call on their key to settle, and the batches that send
// them (see Coalescing in combine.go).

// pending is one queued call.
type pending struct {
	s         *Script
	argv      []any           // a copy of the caller's arguments: the caller may reuse its own after it gives up
	native    []redis.Cmder   // the call's native form (Call.Native), or nil
	nreply    *redis.Cmd      // and its Call.Reply
	until     time.Time       // when its caller stops waiting
	ctx       context.Context // its caller's (bound): once it has ended, the call is never sent
	sent      bool            // taken into a batch; under Combiner.mu
	delivered bool            // cmd is set and done signalled; under Combiner.mu
	cmd       *redis.Cmd
	done      chan struct{} // capacity 1: cmd is set
	settled   chan struct{} // non-nil once its caller gave up on the wire (under Combiner.mu); closed when the batch has ended
}

// enqueue is send for a call that may have to wait: behind a call on its
// key given up on the wire (awaitLocked), or in the queue for a slot. It
// still sends the call at once when, under c.mu, nothing holds it back;
// a release (coalesce false) takes queued calls along (carryLocked).
func (c *Combiner) enqueue(ctx context.Context, deadline time.Time, cl Call, coalesce bool) *redis.Cmd {
	argv := cl.Argv
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
		return c.run(callCtx, cl)
	}
	p := c.getLocked()
	p.s, p.argv, p.native, p.nreply = cl.Script, append(p.argv[:0], argv...), cl.Native, cl.Reply
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
		calls = append(calls, Call{Script: p.s, Argv: p.argv, Native: p.native, Reply: p.nreply})
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
	p.s, p.native, p.nreply, p.ctx, p.cmd, p.sent, p.delivered = nil, nil, nil, nil, nil, false, false
	if len(c.idle) < maxBatch {
		c.idle = append(c.idle, p)
	}
}
