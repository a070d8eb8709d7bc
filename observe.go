package redisleader

import (
	"context"
	"github.com/redisleader/redisleader/internal/wire"
	"time"
)

// Observe returns a channel of leader changes: the current state first, then
// one Leader per change, with Fence 0 meaning nobody leads; between two
// leaders it always sends that vacancy, however short. Every state sent was
// read from Redis (package documentation, Waiting). A term shorter than a
// read may be missed; the latest state always arrives.
//
// The channel buffers 64 changes, dropping the oldest when full, so a slow
// reader never blocks the library. This package closes it when ctx ends or
// the session closes. Errors reading Redis are retried, not reported.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	out := make(chan Leader, observeBuffer)
	if e.s.enter() != nil {
		close(out)
		return out
	}
	go (&observer{e: e, out: out}).run(ctx, 0)
	return out
}

// observeBuffer is how many changes an Observe channel holds.
const observeBuffer = 64

// observer is one Observe goroutine. Everything it reports comes from a read
// of the lock key: a message on the name's channel only says "read now"
// (anyone allowed to subscribe may also publish, so a message's content is
// never trusted).
type observer struct {
	e    *Election
	out  chan Leader
	last Leader // last state sent
	sent bool
}

// run reads and reports until ctx ends or the session closes, the first
// read after first. After a hook fault (internal/wire/hookfaults.go) a new goroutine goes
// on after the retry delay, as after a failed read.
func (o *observer) run(ctx context.Context, first time.Duration) {
	wire.OnUnwind(func() {
		o.observe(ctx, first)
		close(o.out)
		o.e.s.work.Done()
	}, func() { go o.run(ctx, o.e.s.cfg.RetryDelay()) })
}

func (o *observer) observe(ctx context.Context, next time.Duration) {
	e := o.e
	sub, err := e.s.wire.Subscribe(ctx, e.keys.Channel, nil)
	if err != nil {
		return
	}
	defer sub.Close()
	// Subscribed before the first read, so no change after it goes unheard.
	// A message is a hint, whatever it says (or a gap): read now.
	for e.s.wire.Wait(ctx, sub, next) == nil {
		next = o.read(ctx)
	}
}

// read reads the leader, reports it if it changed, and returns how long until
// it must be read again: when the leader's lease can have expired (expiry
// publishes nothing), the TTL while nobody leads, the retry delay after an
// error.
func (o *observer) read(ctx context.Context) time.Duration {
	l, ok, err := o.e.read(ctx)
	switch {
	case err != nil:
		return o.e.s.cfg.RetryDelay()
	case !ok:
		o.report(Leader{})
		return o.e.s.cfg.TTL
	}
	o.report(l)
	if l.TTL <= 0 { // no TTL (someone PERSISTed the key): poll slowly
		return o.e.s.cfg.TTL
	}
	return l.TTL + time.Millisecond
}

// report sends l if it differs from the last state sent. A new leader read
// while the last one sent still led means that one's term ended first:
// the vacancy, however short, is sent before the new leader.
func (o *observer) report(l Leader) {
	if o.sent && l.Fence == o.last.Fence && l.Value == o.last.Value {
		return
	}
	if o.sent && o.last.Fence != 0 && l.Fence != 0 && l.Fence != o.last.Fence {
		o.send(Leader{})
	}
	o.send(l)
}

// send puts l on the channel; when it is full the oldest change is dropped,
// so the latest state always arrives.
func (o *observer) send(l Leader) {
	o.e.s.cfg.hooks.observed(o.e.keys.Name, l, !o.sent)
	o.last, o.sent = l, true
	for {
		select {
		case o.out <- l:
			return
		default:
		}
		select {
		case <-o.out:
		default:
		}
	}
}
