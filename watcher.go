package redisleader

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// watcher is a session's one pub/sub connection, shared by everything in the
// session that waits for a name to change hands: blocking Lock and Campaign
// (woken at once by a release) and Observe (woken by every acquire and
// release). It is started on first use and stopped by Session.Close.
//
// Pub/sub is at-most-once: messages are lost while the connection is down.
// So it is only ever a hint to act sooner. Every waiter also re-reads the
// state when the current lease can have expired, and whenever the watcher
// reports a gap (reconnect, overflow), which bounds how long a lost message
// can delay anyone.
type watcher struct {
	s *Session

	mu      sync.Mutex // protects everything below
	ps      *redis.PubSub
	chans   map[string]*channelSubs
	closed  bool
	stopped chan struct{} // closed when run has returned; nil until started
}

// channelSubs is the state of one subscribed channel. A channel nobody
// watches any more stays subscribed until the watcher prunes it (at most
// every TTL), so that a waiter that comes back soon (a candidate campaigning
// again) finds it confirmed, and so that no one's Campaign pays for an
// UNSUBSCRIBE on its way out.
type channelSubs struct {
	ready     chan struct{} // closed when the server confirmed SUBSCRIBE
	confirmed bool
	subs      map[*subscription]struct{}
	idleSince time.Time // when subs became empty
}

// A subscription is one waiter's interest in one channel.
type subscription struct {
	w       *watcher
	channel string
	ready   <-chan struct{}
	notify  chan struct{} // capacity 1: something arrived

	mu   sync.Mutex // protects msgs and gap
	msgs []string   // payloads not yet taken, oldest first
	gap  bool       // messages may have been lost since the last take
}

// maxQueued bounds the messages a slow subscriber keeps; past it the oldest
// are dropped and the subscriber is told to re-read the state.
const maxQueued = 256

// subscribe registers interest in channel and waits, up to the call timeout
// or ctx, until the server has confirmed the subscription, so that a release
// published after subscribe returns is seen. If confirmation does not come
// in time the subscription still works but reports a gap, and the waiter
// falls back to reading the state.
func (w *watcher) subscribe(ctx context.Context, channel string) (*subscription, error) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil, ErrSessionClosed
	}
	sub := &subscription{w: w, channel: channel, notify: make(chan struct{}, 1)}
	cs := w.chans[channel]
	if cs == nil {
		cs = &channelSubs{ready: make(chan struct{}), subs: make(map[*subscription]struct{})}
		w.chans[channel] = cs
	}
	first := !cs.confirmed // (re)send SUBSCRIBE until the server confirms it
	cs.subs[sub] = struct{}{}
	cs.idleSince = time.Time{}
	sub.ready = cs.ready
	if w.ps == nil {
		w.ps = w.s.client.Subscribe(context.Background())
	}
	ps := w.ps
	if w.stopped == nil {
		w.stopped = make(chan struct{})
		go w.run()
	}
	w.mu.Unlock()

	if first {
		if err := ps.Subscribe(w.s.bound(ctx, time.Time{}), channel); err != nil {
			sub.markGap()
		}
	}
	t := time.NewTimer(w.s.cfg.callTimeout)
	defer t.Stop()
	select {
	case <-sub.ready:
	case <-t.C:
		sub.markGap()
	case <-ctx.Done():
		sub.Close()
		return nil, ctx.Err()
	case <-w.s.done:
		sub.Close()
		return nil, ErrSessionClosed
	}
	return sub, nil
}

// confirmed reports whether the server confirmed the subscription.
func (sub *subscription) confirmed() bool {
	select {
	case <-sub.ready:
		return true
	default:
		return false
	}
}

// Close ends the subscription. The channel stays subscribed until the
// watcher prunes it (see channelSubs); Close does no I/O.
func (sub *subscription) Close() {
	w := sub.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if cs := w.chans[sub.channel]; cs != nil {
		delete(cs.subs, sub)
		if len(cs.subs) == 0 {
			cs.idleSince = time.Now()
		}
	}
}

// prune unsubscribes channels that nobody has watched for a TTL. It runs on
// the watcher's goroutine.
func (w *watcher) prune(ps *redis.PubSub) {
	w.mu.Lock()
	var idle []string
	for ch, cs := range w.chans {
		if len(cs.subs) == 0 && time.Since(cs.idleSince) >= w.s.cfg.ttl {
			idle = append(idle, ch)
			delete(w.chans, ch)
		}
	}
	w.mu.Unlock()
	if len(idle) > 0 {
		_ = ps.Unsubscribe(w.s.bound(context.Background(), time.Time{}), idle...)
	}
}

// take returns the queued payloads and whether messages may have been lost,
// and clears both.
func (sub *subscription) take() (msgs []string, gap bool) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	msgs, gap = sub.msgs, sub.gap
	sub.msgs, sub.gap = nil, false
	return msgs, gap
}

func (sub *subscription) deliver(payload string) {
	sub.mu.Lock()
	if len(sub.msgs) >= maxQueued {
		sub.msgs = sub.msgs[1:]
		sub.gap = true
	}
	sub.msgs = append(sub.msgs, payload)
	sub.mu.Unlock()
	sub.poke()
}

func (sub *subscription) markGap() {
	sub.mu.Lock()
	sub.gap = true
	sub.mu.Unlock()
	sub.poke()
}

func (sub *subscription) poke() {
	select {
	case sub.notify <- struct{}{}:
	default:
	}
}

// run reads the pub/sub connection until the watcher is closed. It pings when
// the connection has been quiet for max(3 TTL, 10s) and replaces the
// connection when two pings in a row go unanswered (a half-open connection
// never errors).
func (w *watcher) run() {
	defer close(w.stopped)
	// Waiters never depend on pub/sub for correctness (they re-read the
	// state when a lease can have expired), so a dead connection only slows
	// handover: ping rarely, not to add a command per TTL to every waiter.
	quiet := max(3*w.s.cfg.ttl, 10*time.Second)
	unanswered := 0
	lastPrune := time.Now()
	for {
		w.mu.Lock()
		ps, closed := w.ps, w.closed
		w.mu.Unlock()
		if closed {
			return
		}
		if time.Since(lastPrune) >= w.s.cfg.ttl {
			w.prune(ps)
			lastPrune = time.Now()
		}
		msg, err := ps.ReceiveTimeout(context.Background(), quiet)
		if w.isClosed() {
			return
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				unanswered++
				if unanswered > 2 {
					w.replace(ps)
					unanswered = 0
				} else {
					_ = ps.Ping(w.s.bound(context.Background(), time.Time{}))
				}
				continue
			}
			// go-redis reconnects and resubscribes on the next receive;
			// whatever was published meanwhile is lost.
			w.gapAll()
			if w.s.wait(context.Background(), nil, w.s.retryDelay()) != nil {
				return
			}
			continue
		}
		unanswered = 0
		switch m := msg.(type) {
		case *redis.Subscription:
			switch m.Kind {
			case "subscribe":
				w.confirm(m.Channel)
			case "unsubscribe":
				w.unsubscribed(ps, m.Channel)
			}
		case *redis.Message:
			w.deliver(m.Channel, m.Payload)
		}
	}
}

// replace swaps a silent connection for a new one with the same channels.
func (w *watcher) replace(old *redis.PubSub) {
	w.mu.Lock()
	if w.closed || w.ps != old {
		w.mu.Unlock()
		return
	}
	channels := make([]string, 0, len(w.chans))
	for ch := range w.chans {
		channels = append(channels, ch)
	}
	w.ps = w.s.client.Subscribe(context.Background())
	ps := w.ps
	for _, cs := range w.chans { // not confirmed on the new connection yet
		if cs.confirmed {
			cs.confirmed = false
			cs.ready = make(chan struct{})
		}
	}
	w.mu.Unlock()
	_ = old.Close()
	w.gapAll()
	if len(channels) > 0 {
		_ = ps.Subscribe(w.s.bound(context.Background(), time.Time{}), channels...)
	}
}

func (w *watcher) isClosed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closed
}

func (w *watcher) confirm(channel string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if cs := w.chans[channel]; cs != nil && !cs.confirmed {
		cs.confirmed = true
		close(cs.ready)
	}
}

// unsubscribed handles the server's confirmation of an UNSUBSCRIBE. A prune
// can race with a new subscriber to the same channel (the prune's
// UNSUBSCRIBE arriving after the new SUBSCRIBE): then the channel is wanted,
// so subscribe again, and tell its subscribers that they may have missed
// messages meanwhile.
func (w *watcher) unsubscribed(ps *redis.PubSub, channel string) {
	w.mu.Lock()
	cs := w.chans[channel]
	if cs == nil || w.closed {
		w.mu.Unlock()
		return
	}
	if cs.confirmed {
		cs.confirmed = false
		cs.ready = make(chan struct{})
	}
	w.mu.Unlock()
	w.gap(channel)
	_ = ps.Subscribe(w.s.bound(context.Background(), time.Time{}), channel)
}

func (w *watcher) gap(channel string) {
	for _, sub := range w.subscribers(channel) {
		sub.markGap()
	}
}

func (w *watcher) deliver(channel, payload string) {
	for _, sub := range w.subscribers(channel) {
		sub.deliver(payload)
	}
}

// gapAll tells every subscriber that messages may have been lost.
func (w *watcher) gapAll() {
	w.mu.Lock()
	var subs []*subscription
	for _, cs := range w.chans {
		for sub := range cs.subs {
			subs = append(subs, sub)
		}
	}
	w.mu.Unlock()
	for _, sub := range subs {
		sub.markGap()
	}
}

func (w *watcher) subscribers(channel string) []*subscription {
	w.mu.Lock()
	defer w.mu.Unlock()
	cs := w.chans[channel]
	if cs == nil {
		return nil
	}
	subs := make([]*subscription, 0, len(cs.subs))
	for sub := range cs.subs {
		subs = append(subs, sub)
	}
	return subs
}

// close stops the watcher and waits for its goroutine. Called once, by
// Session.Close.
func (w *watcher) close() {
	w.mu.Lock()
	w.closed = true
	ps, stopped := w.ps, w.stopped
	w.mu.Unlock()
	if ps != nil {
		_ = ps.Close()
	}
	if stopped != nil {
		<-stopped
	}
}
