package redisleader

import (
	"context"
	"errors"
	"net"
	"slices"
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
//
// Only the watcher's two goroutines call the go-redis PubSub: run reads it,
// send writes SUBSCRIBE, UNSUBSCRIBE and PING. PubSub holds a mutex while it
// sets up a connection (dial, handshake, resubscribe), and a server that
// accepts connections but never answers keeps it for as long as the call's
// context allows, so a caller that took it could not walk away. Callers
// queue their requests instead and wait for the outcome, the call timeout,
// their ctx or the session's end, whichever comes first. Every call into
// go-redis is bounded by the call timeout and cancelled when the watcher
// closes.
type watcher struct {
	s  *Session
	wg sync.WaitGroup // run and send

	mu     sync.Mutex // protects everything below
	ps     *redis.PubSub
	ctx    context.Context // the parent of every go-redis call; cancelled by close
	cancel context.CancelFunc
	chans  map[string]*channelSubs
	out    outbox
	kick   chan struct{} // capacity 1: out is not empty
	closed bool
}

// outbox holds the requests that send has not written yet.
type outbox struct {
	subscribe, unsubscribe []string
	ping                   bool
}

// channelSubs is the state of one subscribed channel. A channel nobody
// watches any more stays subscribed until the watcher prunes it (at most
// every TTL), so that a waiter that comes back soon (a candidate campaigning
// again) finds it confirmed, and so that no one's Campaign pays for an
// UNSUBSCRIBE on its way out.
type channelSubs struct {
	channel   string
	ready     chan struct{} // closed when the server confirmed SUBSCRIBE
	confirmed bool
	queued    bool // a SUBSCRIBE is in the outbox
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
	w.startLocked()
	cs := w.chans[channel]
	if cs == nil {
		cs = &channelSubs{channel: channel, ready: make(chan struct{}), subs: make(map[*subscription]struct{})}
		w.chans[channel] = cs
		w.out.unsubscribe = slices.DeleteFunc(w.out.unsubscribe, func(ch string) bool { return ch == channel })
	}
	sub := &subscription{w: w, channel: channel, ready: cs.ready, notify: make(chan struct{}, 1)}
	cs.subs[sub] = struct{}{}
	cs.idleSince = time.Time{}
	if !cs.confirmed { // (re)send SUBSCRIBE until the server confirms it
		w.requestLocked(cs)
	}
	w.mu.Unlock()

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

// startLocked creates the connection and starts the watcher's goroutines,
// unless that was done before. w.mu must be held.
func (w *watcher) startLocked() {
	if w.ps != nil {
		return
	}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	w.kick = make(chan struct{}, 1)
	w.ps = w.s.client.Subscribe(w.ctx) // no channels: no I/O
	w.wg.Add(2)
	go w.run()
	go w.send()
}

// requestLocked queues a SUBSCRIBE of cs's channel. w.mu must be held.
func (w *watcher) requestLocked(cs *channelSubs) {
	if !cs.queued {
		cs.queued = true
		w.out.subscribe = append(w.out.subscribe, cs.channel)
		w.kickLocked()
	}
}

func (w *watcher) kickLocked() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
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

// prune unsubscribes channels that nobody has watched for a TTL.
func (w *watcher) prune() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch, cs := range w.chans {
		if len(cs.subs) == 0 && time.Since(cs.idleSince) >= w.s.cfg.ttl {
			delete(w.chans, ch)
			if cs.queued {
				w.out.subscribe = slices.DeleteFunc(w.out.subscribe, func(c string) bool { return c == ch })
			}
			w.out.unsubscribe = append(w.out.unsubscribe, ch)
			w.kickLocked()
		}
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

// send writes the queued requests until the watcher closes. Each batch is
// bounded by the call timeout, including any connection setup go-redis does
// on the way.
func (w *watcher) send() {
	defer w.wg.Done()
	for {
		select {
		case <-w.kick:
		case <-w.ctx.Done():
			return
		}
		w.mu.Lock()
		ps, out := w.ps, w.out
		w.out = outbox{}
		for _, ch := range out.subscribe {
			w.chans[ch].queued = false // prune takes a pruned channel out of the outbox
		}
		w.mu.Unlock()
		ctx := w.s.bound(w.ctx, time.Time{})
		if len(out.unsubscribe) > 0 {
			_ = ps.Unsubscribe(ctx, out.unsubscribe...)
		}
		if len(out.subscribe) > 0 {
			_ = ps.Subscribe(ctx, out.subscribe...)
		}
		if out.ping {
			_ = ps.Ping(ctx)
		}
	}
}

// run reads the pub/sub connection until the watcher is closed. It pings when
// the connection has been quiet for max(3 TTL, 10s) and replaces the
// connection when two pings in a row go unanswered (a half-open connection
// never errors).
func (w *watcher) run() {
	defer w.wg.Done()
	// Waiters never depend on pub/sub for correctness (they re-read the
	// state when a lease can have expired), so a dead connection only slows
	// handover: ping rarely, not to add a command per TTL to every waiter.
	quiet := max(3*w.s.cfg.ttl, 10*time.Second)
	heard, pinged := time.Now(), 0 // when the last message came, and pings sent since
	lastPrune := time.Now()
	for {
		w.mu.Lock()
		ps, closed := w.ps, w.closed
		w.mu.Unlock()
		if closed {
			return
		}
		if time.Since(lastPrune) >= w.s.cfg.ttl {
			w.prune()
			lastPrune = time.Now()
		}
		// Each read ends at the call timeout: go-redis takes the socket's
		// read deadline from the context, whose deadline must also bound
		// the connection setup that go-redis does inside the call (on first
		// use, and at once after a broken connection).
		msg, err := ps.ReceiveTimeout(w.s.bound(w.ctx, time.Time{}), w.s.cfg.callTimeout)
		if w.isClosed() {
			return
		}
		if err != nil {
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				// go-redis reconnects and resubscribes on the next call;
				// whatever was published meanwhile is lost.
				w.gapAll()
				if w.s.wait(w.ctx, nil, w.s.retryDelay()) != nil {
					return
				}
				continue
			}
			// Nothing arrived in time, or a connection setup timed out.
			switch silent := time.Since(heard); {
			case silent < quiet*time.Duration(pinged+1):
			case pinged == 2:
				w.replace(ps)
				heard, pinged = time.Now(), 0
			default:
				pinged++
				w.ping()
			}
			continue
		}
		heard, pinged = time.Now(), 0
		switch m := msg.(type) {
		case *redis.Subscription:
			switch m.Kind {
			case "subscribe":
				w.confirm(m.Channel)
			case "unsubscribe":
				w.unsubscribed(m.Channel)
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
	w.ps = w.s.client.Subscribe(w.ctx)
	w.out.subscribe, w.out.unsubscribe = nil, nil
	for _, cs := range w.chans { // not confirmed on the new connection yet
		if cs.confirmed {
			cs.confirmed = false
			cs.ready = make(chan struct{})
		}
		cs.queued = false
		w.requestLocked(cs)
	}
	w.mu.Unlock()
	_ = old.Close()
	w.gapAll()
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
func (w *watcher) unsubscribed(channel string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	cs := w.chans[channel]
	if cs == nil || w.closed {
		return
	}
	if cs.confirmed {
		cs.confirmed = false
		cs.ready = make(chan struct{})
	}
	for sub := range cs.subs {
		sub.markGap()
	}
	w.requestLocked(cs)
}

// gapAll tells every subscriber that messages may have been lost.
func (w *watcher) gapAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, cs := range w.chans {
		for sub := range cs.subs {
			sub.markGap()
		}
	}
}

func (w *watcher) deliver(channel, payload string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if cs := w.chans[channel]; cs != nil {
		for sub := range cs.subs {
			sub.deliver(payload)
		}
	}
}

// ping queues a PING.
func (w *watcher) ping() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.out.ping = true
	w.kickLocked()
}

func (w *watcher) isClosed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closed
}

// close stops the watcher and waits for its goroutines: it cancels their
// go-redis calls and closes the connection, which waits for a connection
// setup in progress (bounded by the call timeout). Called once, by
// Session.Close.
func (w *watcher) close() {
	w.mu.Lock()
	w.closed = true
	ps, cancel := w.ps, w.cancel
	w.mu.Unlock()
	if ps == nil {
		return
	}
	cancel()
	_ = ps.Close()
	w.wg.Wait()
}
