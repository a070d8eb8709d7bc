package wire

import (
	"container/list"
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
// release). It is started on first use and stopped by Transport.StopWatcher.
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
// closes, and the goroutines stop when the session starts closing.
type watcher struct {
	t  *Transport
	wg sync.WaitGroup // run and send

	mu sync.Mutex // protects everything below
	ps *redis.PubSub
	// primed is the connection run has read from once. go-redis's PubSub
	// sets up its reader state on the first ReceiveTimeout without its
	// mutex, and reads that state under the mutex when a SUBSCRIBE fails, so
	// send waits until run has read from ps before it writes to it.
	primed *redis.PubSub
	ctx    context.Context // the parent of every go-redis call; cancelled by close
	cancel context.CancelFunc
	chans  map[string]*channelSubs
	idle   list.List // *channelSubs nobody watches, most recently left first
	out    outbox
	kick   chan struct{} // capacity 1: out is not empty
}

// outbox holds the requests that send has not written yet.
type outbox struct {
	subscribe, unsubscribe []string
	ping                   bool
}

// MaxIdleChannels bounds the channels that nobody watches and that stay
// subscribed nonetheless, so that a waiter that comes back soon (a
// candidate campaigning again) finds its channel confirmed, and so that no
// one's Campaign pays for an UNSUBSCRIBE on its way out. The least recently
// used beyond it are unsubscribed, and so is any channel idle for
// min(TTL, MaxIdleTime): the watcher's memory, and the server's, grow with
// the names in use, not with time.
const (
	MaxIdleChannels = 32
	MaxIdleTime     = time.Minute
)

// channelSubs is the state of one channel, watched or idle.
type channelSubs struct {
	channel   string
	ready     chan struct{} // closed once confirmed; a new one when that stops holding
	confirmed bool          // the server confirmed SUBSCRIBE on the current connection
	queued    bool          // a SUBSCRIBE is in the outbox
	regap     bool          // a gap was reported while unconfirmed: report one on confirmation
	subs      map[*Subscription]struct{}
	idle      *list.Element // in watcher.idle while subs is empty
	idleSince time.Time
}

// A Subscription is one waiter's interest in one channel: in every message,
// or (accept set) only in those whose payload accept lets through (a
// wake-up addressed to one waiter, say).
type Subscription struct {
	w      *watcher
	cs     *channelSubs
	accept func(payload string) bool // nil: every message
	notify chan struct{}             // capacity 1: something arrived

	mu   sync.Mutex // protects msgs and gap
	msgs int        // messages since the last take; their content is never used
	gap  bool       // messages may have been lost since the last take
}

// Subscribe registers interest in channel's messages that accept lets
// through (nil: every message); see watcher.subscribe.
func (t *Transport) Subscribe(ctx context.Context, channel string, accept func(payload string) bool) (*Subscription, error) {
	return t.watch.subscribe(ctx, channel, accept)
}

// subscribe registers interest in channel (with accept set, in the
// messages whose payload it accepts) and waits, up to the call timeout or ctx, until the
// server has confirmed the Subscription, so that a release published after
// subscribe returns is seen. If confirmation does not come in time the
// Subscription still works but reports a gap, and the waiter falls back to
// reading the state.
func (w *watcher) subscribe(ctx context.Context, channel string, accept func(string) bool) (*Subscription, error) {
	w.mu.Lock()
	if w.ending() {
		w.mu.Unlock()
		return nil, ErrClosed
	}
	w.startLocked()
	cs := w.chans[channel]
	if cs == nil {
		cs = &channelSubs{channel: channel, ready: make(chan struct{}), subs: make(map[*Subscription]struct{})}
		w.chans[channel] = cs
		w.out.unsubscribe = slices.DeleteFunc(w.out.unsubscribe, func(ch string) bool { return ch == channel })
	}
	if cs.idle != nil {
		w.idle.Remove(cs.idle)
		cs.idle = nil
	}
	sub := &Subscription{w: w, cs: cs, accept: accept, notify: make(chan struct{}, 1)}
	cs.subs[sub] = struct{}{}
	if !cs.confirmed { // (re)send SUBSCRIBE until the server confirms it
		w.requestLocked(cs)
	}
	ready := cs.ready
	w.mu.Unlock()

	t := time.NewTimer(w.t.cfg.CallTimeout)
	defer t.Stop()
	select {
	case <-ready:
	case <-t.C:
		w.mu.Lock()
		if !cs.confirmed {
			cs.regap = true
		}
		w.mu.Unlock()
		sub.markGap()
	case <-ctx.Done():
		sub.Close()
		return nil, ctx.Err()
	case <-w.t.cfg.Done:
		sub.Close()
		return nil, ErrClosed
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
	w.ps = w.t.cfg.Client.Subscribe(w.ctx) // no channels: no I/O
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

// Confirmed reports whether the server has the channel subscribed, as far
// as the watcher knows.
func (sub *Subscription) Confirmed() bool {
	sub.w.mu.Lock()
	defer sub.w.mu.Unlock()
	return sub.cs.confirmed
}

// Close ends the Subscription; later calls do nothing. The channel stays
// subscribed for a while (see MaxIdleChannels); Close does no I/O.
func (sub *Subscription) Close() {
	w, cs := sub.w, sub.cs
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := cs.subs[sub]; !ok {
		return
	}
	delete(cs.subs, sub)
	if len(cs.subs) > 0 {
		return
	}
	cs.idleSince = time.Now()
	cs.idle = w.idle.PushFront(cs)
	if w.idle.Len() > MaxIdleChannels {
		w.evictLocked(w.idle.Back().Value.(*channelSubs))
	}
}

// pruneLocked unsubscribes the channels nobody has watched for
// min(TTL, MaxIdleTime). w.mu must be held.
func (w *watcher) pruneLocked(now time.Time) {
	keep := min(w.t.cfg.TTL, MaxIdleTime)
	for e := w.idle.Back(); e != nil && now.Sub(e.Value.(*channelSubs).idleSince) >= keep; e = w.idle.Back() {
		w.evictLocked(e.Value.(*channelSubs))
	}
}

// evictLocked forgets an idle channel and queues its UNSUBSCRIBE. w.mu must
// be held.
func (w *watcher) evictLocked(cs *channelSubs) {
	w.idle.Remove(cs.idle)
	delete(w.chans, cs.channel)
	if cs.queued {
		w.out.subscribe = slices.DeleteFunc(w.out.subscribe, func(ch string) bool { return ch == cs.channel })
	}
	w.out.unsubscribe = append(w.out.unsubscribe, cs.channel)
	w.kickLocked()
}

// Take returns how many messages arrived and whether messages may have been
// lost since the last take, and clears both. A message is only a hint to
// read Redis, so its payload is not kept.
func (sub *Subscription) Take() (msgs int, gap bool) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	msgs, gap = sub.msgs, sub.gap
	sub.msgs, sub.gap = 0, false
	return msgs, gap
}

func (sub *Subscription) note() {
	sub.mu.Lock()
	sub.msgs++
	sub.mu.Unlock()
	sub.Poke()
}

func (sub *Subscription) markGap() {
	sub.mu.Lock()
	sub.gap = true
	sub.mu.Unlock()
	sub.Poke()
}

// Notify returns a channel that receives when a message arrived or a gap
// was marked (then call Take), or Poke was called.
func (sub *Subscription) Notify() <-chan struct{} { return sub.notify }

// Poke wakes the subscriber as a message would, without one.
func (sub *Subscription) Poke() {
	select {
	case sub.notify <- struct{}{}:
	default:
	}
}

// send writes the queued requests until the session closes. Each batch is
// bounded by the call timeout, including any connection setup go-redis does
// on the way.
func (w *watcher) send() {
	defer w.wg.Done()
	for {
		select {
		case <-w.kick:
		case <-w.t.cfg.Done:
			return
		}
		w.mu.Lock()
		if w.ps != w.primed {
			w.mu.Unlock()
			continue // run kicks once it has read from w.ps
		}
		ps, out := w.ps, w.out
		w.out = outbox{}
		for _, ch := range out.subscribe {
			w.chans[ch].queued = false // evictLocked takes an evicted channel out of the outbox
		}
		w.mu.Unlock()
		ctx := w.t.Bound(w.ctx, time.Time{})
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

// run reads the pub/sub connection until the session closes. It pings when
// the connection has been quiet for max(3 TTL, 10s) and replaces the
// connection when two pings in a row go unanswered (a half-open connection
// never errors).
func (w *watcher) run() {
	defer w.wg.Done()
	// Waiters never depend on pub/sub for correctness (they re-read the
	// state when a lease can have expired), so a dead connection only slows
	// handover: ping rarely, not to add a command per TTL to every waiter.
	quiet := max(3*w.t.cfg.TTL, 10*time.Second)
	heard, pinged := time.Now(), 0 // when the last message came, and pings sent since
	for {
		w.mu.Lock()
		ps, primed := w.ps, w.primed == w.ps
		w.pruneLocked(time.Now())
		w.mu.Unlock()
		if w.ending() {
			return
		}
		msg, err := w.receive(ps, primed)
		if w.ending() {
			return
		}
		if err != nil {
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				// go-redis reconnects and resubscribes on the next call;
				// whatever was published meanwhile is lost.
				w.lost()
				if !w.sleep(w.t.cfg.RetryDelay()) {
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
		w.handle(msg)
	}
}

// receive reads one message from ps. Each read ends at the call timeout:
// go-redis takes the socket's read deadline from the context, whose deadline
// must also bound the connection setup that go-redis does inside the call
// (on first use, and at once after a broken connection). The first read from
// a connection is short, since send waits for it (see watcher.primed).
func (w *watcher) receive(ps *redis.PubSub, primed bool) (any, error) {
	timeout := w.t.cfg.CallTimeout
	if !primed {
		timeout = time.Millisecond
	}
	msg, err := ps.ReceiveTimeout(w.t.Bound(w.ctx, time.Time{}), timeout)
	if !primed {
		w.mu.Lock()
		w.primed = ps
		w.kickLocked()
		w.mu.Unlock()
	}
	return msg, err
}

// handle acts on one message read from the connection.
func (w *watcher) handle(msg any) {
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

// replace swaps a silent connection for a new one with the same channels.
func (w *watcher) replace(old *redis.PubSub) {
	w.mu.Lock()
	if w.ending() || w.ps != old { // once ending, close may have taken w.ps already
		w.mu.Unlock()
		return
	}
	w.ps = w.t.cfg.Client.Subscribe(w.ctx)
	w.out.subscribe, w.out.unsubscribe = nil, nil
	for _, cs := range w.chans {
		w.unconfirmLocked(cs)
		cs.queued = false
		w.requestLocked(cs)
	}
	w.mu.Unlock()
	_ = old.Close()
}

// lost records that the connection broke: no channel is subscribed until
// the server confirms it again.
func (w *watcher) lost() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, cs := range w.chans {
		w.unconfirmLocked(cs)
	}
}

// unconfirmLocked records that cs's channel is no longer subscribed and
// tells its subscribers that they may miss messages from now on. w.mu must
// be held.
func (w *watcher) unconfirmLocked(cs *channelSubs) {
	if !cs.confirmed {
		return
	}
	cs.confirmed = false
	cs.ready = make(chan struct{})
	cs.regap = true
	cs.gap()
}

// gap tells every subscriber of the channel that messages may have been
// lost. w.mu must be held.
func (cs *channelSubs) gap() {
	for sub := range cs.subs {
		sub.markGap()
	}
}

func (w *watcher) confirm(channel string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	cs := w.chans[channel]
	if cs == nil || cs.confirmed {
		return
	}
	cs.confirmed = true
	close(cs.ready)
	if cs.regap { // what was published since the last gap is lost too
		cs.regap = false
		cs.gap()
	}
}

// unsubscribed handles the server's confirmation of an UNSUBSCRIBE, normally
// of an evicted channel. A channel that is wanted is subscribed again.
func (w *watcher) unsubscribed(channel string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if cs := w.chans[channel]; cs != nil {
		w.unconfirmLocked(cs)
		w.requestLocked(cs)
	}
}

// deliver hands a message on channel to the subscribers it is for: those
// that take every message and those whose accept lets payload through.
func (w *watcher) deliver(channel, payload string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if cs := w.chans[channel]; cs != nil {
		for sub := range cs.subs {
			if sub.accept == nil || sub.accept(payload) {
				sub.note()
			}
		}
	}
}

// sleep waits for d, or until the watcher closes or the session starts
// closing; it reports whether d passed.
func (w *watcher) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-w.ctx.Done():
	case <-w.t.cfg.Done:
	}
	return false
}

// ping queues a PING.
func (w *watcher) ping() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.out.ping = true
	w.kickLocked()
}

// ending reports whether the session is closing: from then on nobody waits
// for the watcher, so nothing new starts and its goroutines stop once their
// call in progress returns, while Close releases the session's keys.
func (w *watcher) ending() bool {
	select {
	case <-w.t.cfg.Done:
		return true
	default:
		return false
	}
}

// close stops the watcher and waits for its goroutines: it cancels their
// go-redis calls and closes the connection, which waits for a connection
// setup in progress (bounded by the call timeout). Called once, by
// StopWatcher, after Config.Done is closed.
func (w *watcher) close() {
	w.mu.Lock()
	ps, cancel := w.ps, w.cancel
	w.mu.Unlock()
	if ps == nil {
		return
	}
	cancel()
	_ = ps.Close()
	w.wg.Wait()
}

// Wait waits for a message on sub (nil: none), taking it, or for d; it
// returns ctx's error when ctx ends first, ErrClosed when the transport's
// Done is closed.
func (t *Transport) Wait(ctx context.Context, sub *Subscription, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	var notify <-chan struct{}
	if sub != nil {
		notify = sub.Notify()
	}
	select {
	case <-timer.C:
	case <-notify:
		sub.Take()
	case <-ctx.Done():
		return ctx.Err()
	case <-t.cfg.Done:
		return ErrClosed
	}
	return nil
}
