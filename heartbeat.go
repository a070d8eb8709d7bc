package redisleader

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client is the part of go-redis this package uses: running a command
// (scripts, as EVALSHA/EVAL), pipelining several, and one pub/sub connection
// per session for release notifications. *redis.Client (also as
// returned by redis.NewFailoverClient), *redis.ClusterClient and
// redis.UniversalClient implement it, as does any wrapper that embeds one (to
// inject faults in tests, say). Hooks added to the client with AddHook see
// every command this package sends.
//
// *redis.Ring implements it too, but NewSession and NewRedlockSession reject
// it: each Ring client decides on its own when a shard is down and moves
// that shard's keys to another, so two clients can hold the same name on
// different shards at once. They recognise a Ring or a *redis.ClusterClient
// by its methods, also when a wrapper embeds it (as a pointer, or in an
// embedded interface); a wrapper that holds it in a named field hides it.
type Client interface {
	Process(ctx context.Context, cmd redis.Cmder) error
	Pipeline() redis.Pipeliner
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// A Session is one participant's lease on Redis: a TTL and one heartbeat
// goroutine that renews every key the session holds, all in one pipelined
// round trip per renewal round, plus (on first use) one pub/sub connection
// shared by everything in the session that waits for a name.
//
// Ownership of each key ends at a local deadline computed on the monotonic
// clock from the send time of the last successful acquire or renew:
// D = sendTime + TTL·(1−drift) − margin. A timer at D, not the heartbeat,
// signals the loss, so a stuck Redis call or a starved goroutine cannot
// extend ownership past the moment Redis may give the key to someone else.
//
// A Session is safe for concurrent use. Its zero value is not usable: create
// one with NewSession and end it with Close.
type Session struct {
	client Client   // the only node; for Redlock the first, which also carries pub/sub
	nodes  []Client // Redlock: every independent node; otherwise just client
	quorum int      // nodes needed: 1, or len(nodes)/2+1 for Redlock
	cfg    config
	ttlArg any // the TTL in ms, boxed once for script arguments

	mu     sync.Mutex // protects locks, names, stale, terms, err and idle, and orders work.Add before Close
	locks  map[*Lock]struct{}
	names  map[string]*Lock        // the held lock of each name in locks
	stale  map[*Lock]staleness     // ended locks whose token may still be in Redis
	terms  map[*Lock]chan struct{} // leaderships Election.Run releases itself; closed once it has
	err    error                   // nil until Close
	idle   bool                    // the heartbeat sleeps until kicked
	done   chan struct{}           // closed when Close starts
	closed chan struct{}           // closed when the first Close has finished
	kick   chan struct{}           // capacity 1: work was added while idle
	cancel context.CancelFunc
	hbDone chan struct{}  // closed when the heartbeat goroutine has returned
	watch  *watcher       // the session's pub/sub connection, started on first use
	work   sync.WaitGroup // acquisitions in flight and Observe goroutines
	dones  doneStates     // idle timers for the contexts of bound
}

// NewSession validates the options and starts the session's heartbeat
// goroutine. It does no I/O: an unreachable Redis shows up in the first
// acquire. Bad input (a nil client, an option that breaks a rule) returns an
// error matching ErrInvalid that names the option and the rule.
//
// The caller must call Close to stop the heartbeat and release what the
// session holds.
func NewSession(client Client, opts ...Option) (*Session, error) {
	kind := kindOf(client)
	switch kind {
	case kindNil:
		return nil, invalidf("NewSession: client must not be nil")
	case kindRing:
		return nil, invalidf(ringRejectf, "NewSession: the client", client)
	}
	cfg, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	if kind == kindCluster && cfg.acks.n > 0 {
		return nil, invalidf("WithReplicaAcks(%d, %v) needs WAIT on the connection that wrote, which a cluster client (%T is or wraps a *redis.ClusterClient) does not give; use it with a *redis.Client (also from redis.NewFailoverClient)",
			cfg.acks.n, cfg.acks.timeout, client)
	}
	return startSession([]Client{client}, cfg), nil
}

// startSession starts a session on validated nodes and configuration.
func startSession(nodes []Client, cfg config) *Session {
	client := nodes[0]
	ctx, cancel := context.WithCancel(context.Background())
	s := &Session{
		client: client,
		nodes:  nodes,
		quorum: len(nodes)/2 + 1,
		cfg:    cfg,
		ttlArg: strconv.FormatInt(cfg.ttl.Milliseconds(), 10),
		locks:  make(map[*Lock]struct{}),
		names:  make(map[string]*Lock),
		stale:  make(map[*Lock]staleness),
		terms:  make(map[*Lock]chan struct{}),
		idle:   true,
		done:   make(chan struct{}),
		closed: make(chan struct{}),
		kick:   make(chan struct{}, 1),
		cancel: cancel,
		hbDone: make(chan struct{}),
	}
	s.watch = &watcher{s: s, chans: make(map[string]*channelSubs)}
	for _, c := range nodes {
		warnRiskyClient(c, cfg)
	}
	go s.heartbeat(ctx)
	return s
}

// Done returns a channel that is closed when Close is called. It is never
// closed otherwise. Blocking calls on the session return ErrSessionClosed
// once it is closed.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err returns nil while the session is open and ErrSessionClosed after Close.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// enter registers an acquisition or observer, unless the session is closed.
// Close waits for every registered one to call s.work.Done.
func (s *Session) enter() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	s.work.Add(1) // under mu, so never concurrently with Close's Wait
	return nil
}

// Close ends the session. First every lock it holds ends with
// ErrSessionClosed (Done closes, Held turns false, Run's onElected contexts
// are cancelled), then their keys are released in Redis (compare-and-delete,
// one pipelined round trip) so that waiting owners take over at once —
// except a leadership held by Election.Run, which Run releases once
// onElected has returned. Then Close stops the heartbeat, the pub/sub
// connection, observers and acquisitions in flight, and waits for them and
// for those releases by Run, so that the client can be closed next.
// Blocking calls on the session return ErrSessionClosed.
//
// Close returns when all that is done, or with ctx's error when ctx ends
// first (the rest then finishes in the background). From inside onElected,
// pass onElected's context (or one derived from it, also through nested
// Runs): Close then waits for everything but those onElected calls; with
// another context it would wait for the onElected that called it, until
// that context ends. A failed release
// is returned; those keys expire within one TTL.
// Later and concurrent calls wait for the first to finish (or for their own
// ctx) and return nil.
func (s *Session) Close(ctx context.Context) error {
	chain := termsOf(ctx)
	if chain.of(s) {
		// Called from onElected with its context, which ending self cancels:
		// keep only its deadline.
		var cancel context.CancelFunc = func() {}
		if d, ok := ctx.Deadline(); ok {
			ctx, cancel = context.WithDeadline(context.WithoutCancel(ctx), d)
		} else {
			ctx = context.WithoutCancel(ctx)
		}
		defer cancel()
	}
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		select {
		case <-s.closed:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.err = ErrSessionClosed
	close(s.done)
	release := append(slices.Collect(maps.Keys(s.locks)), slices.Collect(maps.Keys(s.stale))...)
	clear(s.stale)
	terms := maps.Clone(s.terms)
	s.mu.Unlock()

	keep := release[:0]
	for _, l := range release {
		l.end(ErrSessionClosed) // a no-op for the stale ones
		s.remove(l)
		// A Run term releases its own key once onElected has returned, so
		// that the next leader never starts while this one still works.
		if _, ok := terms[l]; !ok {
			keep = append(keep, l)
		}
	}
	relErr := s.releaseAll(ctx, keep)

	s.cancel()
	stopped := make(chan struct{})
	go func() {
		<-s.hbDone
		s.work.Wait()
		s.watch.close()
		for l, released := range terms {
			if !chain.has(l) {
				<-released
			}
		}
		close(stopped)
		close(s.closed)
	}()
	select {
	case <-stopped:
		return relErr
	case <-ctx.Done():
		return errors.Join(ctx.Err(), relErr)
	}
}

// termKey is the context key under which Run's onElected context carries
// its term, and the terms of the Runs it is nested in, so that Close and
// Resign called from onElected do not wait for them.
type termKey struct{}

// terms is the chain of Run terms a context was derived from, innermost
// first.
type terms struct {
	l      *Lock
	parent *terms
}

// withTerm returns ctx carrying l in front of ctx's chain of terms.
func withTerm(ctx context.Context, l *Lock) context.Context {
	return context.WithValue(ctx, termKey{}, &terms{l: l, parent: termsOf(ctx)})
}

// termsOf returns the chain of terms ctx carries (nil: none).
func termsOf(ctx context.Context) *terms {
	t, _ := ctx.Value(termKey{}).(*terms)
	return t
}

// has reports whether l is in the chain.
func (t *terms) has(l *Lock) bool {
	for ; t != nil; t = t.parent {
		if t.l == l {
			return true
		}
	}
	return false
}

// of reports whether a term of s is in the chain.
func (t *terms) of(s *Session) bool {
	for ; t != nil; t = t.parent {
		if t.l.s == s {
			return true
		}
	}
	return false
}

// registerTerm registers a fresh acquisition by Election.Run as a term,
// unless the session was closed meanwhile (Close then releases it).
func (s *Session) registerTerm(l *Lock) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		l.term = make(chan struct{})
		s.terms[l] = l.term
	}
}

// endTerm records that Run has released its term l.
func (s *Session) endTerm(l *Lock) {
	s.mu.Lock()
	delete(s.terms, l)
	s.mu.Unlock()
	close(l.term)
}

// releaseAll deletes the keys of ended locks, one pipelined round trip. A key
// that no longer holds a lock's token is not an error: the lock had already
// ended, or the delete's reply was lost and go-redis retried it.
func (s *Session) releaseAll(ctx context.Context, locks []*Lock) error {
	var failed []error
	for _, d := range s.deleteTokens(ctx, locks) {
		if d.failed >= s.quorum {
			failed = append(failed, d.err)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("redisleader: releasing %d keys (%d failed; they expire within the TTL): %w", len(locks), len(failed), failed[0])
	}
	return nil
}

// deleted is the outcome of one lock's compare-and-delete: on how many
// nodes it failed, and the first error.
type deleted struct {
	failed int
	err    error
}

// deleteTokens runs the compare-and-delete for every lock's token in one
// pipelined round trip (per node, all nodes at once) and returns each
// lock's outcome. A node where the key no longer held the token counts as
// deleted.
func (s *Session) deleteTokens(ctx context.Context, locks []*Lock) []deleted {
	if len(locks) == 0 {
		return nil
	}
	out := make([]deleted, len(locks))
	// run deletes every lock's token on one node; record adds its errors.
	run := func(ctx context.Context, c Client) []error {
		argvs := make([][]any, len(locks))
		for i, l := range locks {
			argvs[i] = []any{nil, nil, 1, l.keys.lock, l.tokenArg}
		}
		errs := make([]error, len(locks))
		for i, cmd := range releaseScript.runAll(ctx, c, argvs) {
			errs[i] = cmd.Err()
		}
		return errs
	}
	record := func(errs []error) {
		for i, err := range errs {
			if err != nil {
				out[i].failed++
				if out[i].err == nil {
					out[i].err = err
				}
			}
		}
	}
	if s.quorum == 1 {
		callCtx := s.bound(ctx, time.Time{})
		errs := run(callCtx, s.client)
		unbind(callCtx)
		record(errs)
		return out
	}
	// Redlock: every node, at once, and wait for every one (up to the call
	// timeout): unlike an acquire or a renewal, a delete cut short leaves
	// the token on a healthy node, where it keeps the next owner from a
	// quorum while another node is down.
	callCtx, cancel := s.boundNodes(ctx, time.Time{})
	defer cancel()
	var mu sync.Mutex
	s.onNodes(func(_ int, c Client) {
		errs := run(callCtx, c)
		mu.Lock()
		defer mu.Unlock()
		record(errs)
	})
	return out
}

// held returns the locks the session holds now.
func (s *Session) held() []*Lock {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Keys(s.locks))
}

// bound bounds one Redis call by the call timeout and, when deadline is not
// zero, by a lease's local deadline. It returns ctx itself when ctx already
// ends sooner. Once the call has returned, the caller passes the result to
// unbind, which ends it and keeps its timer for the next call; a context that
// is never unbound ends at its deadline all the same. ctx must not itself
// come from bound.
func (s *Session) bound(ctx context.Context, deadline time.Time) context.Context {
	d := time.Now().Add(s.cfg.callTimeout)
	if !deadline.IsZero() && deadline.Before(d) {
		d = deadline
	}
	if cur, ok := ctx.Deadline(); ok && !cur.After(d) {
		return ctx
	}
	return &boundCtx{Context: ctx, deadline: d, states: &s.dones}
}

// unbind ends a context from bound once its call has returned: its Done
// channel closes, Err returns context.Canceled unless the context had already
// ended, and its timer goes back to the session for the next call. Any other
// context is left alone.
func unbind(ctx context.Context) {
	c, ok := ctx.(*boundCtx)
	if !ok {
		return
	}
	c.mu.Lock()
	if c.err == nil {
		c.err = context.Canceled
	}
	if c.done == nil {
		c.done = closedChan
	}
	st := c.st
	c.st = nil
	if st != nil {
		st.closeDone()
	}
	c.mu.Unlock()
	if st != nil {
		st.recycle(c.states)
	}
}

// boundCtx is a context with an earlier deadline than its parent, made for
// one go-redis call. go-redis bounds socket reads and writes by Deadline
// (with ContextTimeoutEnabled), checks Err, and selects on Done while it
// waits for a pool connection, for a dial, or between its own retries, so
// each of these waits ends at the deadline or when the parent is done. Done,
// Deadline and Err keep the context.Context contract exactly: Done returns
// one channel, closed at the deadline, when the parent is done, or by unbind;
// Err is non-nil from that moment (from the deadline on, by the clock, even
// before the timer has run) and does not change afterwards. A context derived
// from it is cancelled at the deadline too. One wait in go-redis does not use
// it: a *redis.ClusterClient loads the server's command table (COMMAND) when
// a single command (not a pipeline) first needs it, on a context of its own
// with a 5s timeout, and until one load has succeeded every such command
// waits for it.
//
// Every go-redis command calls Done, so its cost is on the hot path. The
// channel is made on the first call to Done, with a timer at the deadline
// and, only for a parent that can be cancelled, a context.AfterFunc on the
// parent; the timer and its callback come from a per-session list of idle
// doneStates, so a call costs the context and the channel, two allocations
// (context.WithDeadline costs about ten). unbind returns the doneState to the
// list when neither its timer nor the parent's callback has started. A
// context that is never unbound (the pub/sub calls) ends at its deadline:
// the timer closes the channel and unregisters the parent's callback, so
// nothing stays registered on a long-lived parent. The channel itself is
// never reused: whoever still holds it after the call (a hook's goroutine,
// say) sees it closed. Only go-redis, and hooks on the user's client, see a
// boundCtx.
type boundCtx struct {
	context.Context
	deadline time.Time
	states   *doneStates // where the timer comes from and goes back to

	mu   sync.Mutex    // protects done, err and st; Done may be called from several goroutines
	done chan struct{} // made by the first Done
	err  error         // why the context ended, once it has
	st   *doneState    // closes done at the deadline or when the parent is done; nil after unbind
}

func (c *boundCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		if c.errLocked() != nil {
			c.done = closedChan
		} else {
			c.done = make(chan struct{})
			c.st = c.states.get()
			c.st.arm(c.Context, c.done, c.deadline)
		}
	}
	return c.done
}

func (c *boundCtx) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *boundCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.errLocked()
}

// errLocked returns why the context ended, recording it the first time it
// sees the parent done or the deadline passed, and then closes Done at once
// rather than when the timer or the parent's callback runs. c.mu must be held.
func (c *boundCtx) errLocked() error {
	if c.err != nil {
		return c.err
	}
	if err := c.Context.Err(); err != nil {
		c.err = err
	} else if !time.Now().Before(c.deadline) {
		c.err = context.DeadlineExceeded
	} else {
		return nil
	}
	if c.st != nil {
		c.st.closeDone()
	}
	return c.err
}

// A doneState closes one boundCtx's Done channel at its deadline or when its
// parent is done. It is reused, for another channel, once unbind has stopped
// both callbacks before they started.
type doneState struct {
	fireFunc func()      // fire, as a func value made once
	timer    *time.Timer // runs fire at the deadline

	mu    sync.Mutex    // protects ch, stop and fired
	ch    chan struct{} // the channel to close; nil once closed
	stop  func() bool   // unregisters fire from the parent; nil when not registered
	fired bool          // a callback ran: the state is not reused
}

// arm makes the state close ch at deadline or when parent is done.
func (st *doneState) arm(parent context.Context, ch chan struct{}, deadline time.Time) {
	st.mu.Lock()
	st.ch = ch
	st.mu.Unlock()
	if parent.Done() != nil {
		// Registered before the timer is armed, so that the timer always
		// finds it to unregister.
		stop := context.AfterFunc(parent, st.fireFunc)
		st.mu.Lock()
		st.stop = stop
		st.mu.Unlock()
	}
	if st.timer == nil {
		st.timer = time.AfterFunc(time.Until(deadline), st.fireFunc)
	} else {
		st.timer.Reset(time.Until(deadline))
	}
}

// fire runs on the timer or on the parent's AfterFunc: it closes the channel
// and unregisters the parent's callback (a no-op when that is the caller).
func (st *doneState) fire() {
	st.mu.Lock()
	st.fired = true
	st.closeDoneLocked()
	stop := st.stop
	st.stop = nil
	st.mu.Unlock()
	if stop != nil {
		stop()
	}
}

func (st *doneState) closeDone() {
	st.mu.Lock()
	st.closeDoneLocked()
	st.mu.Unlock()
}

func (st *doneState) closeDoneLocked() {
	if st.ch != nil {
		close(st.ch)
		st.ch = nil
	}
}

// recycle stops the callbacks of a state whose channel unbind has closed,
// and returns it to the list unless one of them has started (it may still be
// running; the state is then left to the garbage collector).
func (st *doneState) recycle(states *doneStates) {
	reusable := st.timer.Stop()
	st.mu.Lock()
	stop := st.stop
	st.stop = nil
	if st.fired {
		reusable = false
	}
	st.mu.Unlock()
	if stop != nil && !stop() {
		reusable = false
	}
	if reusable {
		states.put(st)
	}
}

// maxIdleDoneStates bounds the idle doneStates a session keeps: about the
// number of its Redis calls in flight at once that it expects.
const maxIdleDoneStates = 64

// doneStates is a session's list of idle doneStates.
type doneStates struct {
	mu   sync.Mutex
	idle []*doneState
}

func (d *doneStates) get() *doneState {
	d.mu.Lock()
	if n := len(d.idle); n > 0 {
		st := d.idle[n-1]
		d.idle[n-1] = nil
		d.idle = d.idle[:n-1]
		d.mu.Unlock()
		return st
	}
	d.mu.Unlock()
	st := &doneState{}
	st.fireFunc = st.fire
	return st
}

func (d *doneStates) put(st *doneState) {
	d.mu.Lock()
	if len(d.idle) < maxIdleDoneStates {
		d.idle = append(d.idle, st)
	}
	d.mu.Unlock()
}

// add registers an acquired lock with the heartbeat. It fails when the
// session was closed meanwhile; the caller then releases the key.
func (s *Session) add(l *Lock) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	s.locks[l] = struct{}{}
	s.names[l.keys.name] = l
	s.wakeLocked()
	return nil
}

// wakeLocked kicks the heartbeat if it is idle. s.mu must be held.
func (s *Session) wakeLocked() {
	if s.idle {
		s.idle = false
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

func (s *Session) remove(l *Lock) {
	s.mu.Lock()
	delete(s.locks, l)
	if s.names[l.keys.name] == l {
		delete(s.names, l.keys.name)
	}
	s.mu.Unlock()
}

// holds reports whether the session holds name now.
func (s *Session) holds(name string) bool {
	s.mu.Lock()
	l := s.names[name]
	s.mu.Unlock()
	return l != nil && l.Held()
}

// staleness says how the heartbeat cleans up an ended lock's token.
type staleness struct {
	until  time.Time // stop trying then: the token must have expired
	repeat bool      // a request of ours may still set the key: delete until then, even after a success
}

// markStale hands an ended lock to the heartbeat for a best-effort delete:
// a renewal that reached Redis but whose reply came after the deadline (or
// never came) may have left our token there for up to another TTL, and so
// may a release whose outcome is unknown. The heartbeat tries until the
// delete succeeds or the token must have expired (two TTLs after the lock's
// deadline or now, whichever is later). With repeat (an abandoned acquire:
// an attempt still on its way to Redis can set the key after any delete),
// it keeps deleting until then.
func (s *Session) markStale(l *Lock, repeat bool) {
	until := time.Now()
	if d := l.Deadline(); d.After(until) {
		until = d
	}
	until = until.Add(2 * s.cfg.ttl)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		prev := s.stale[l]
		if prev.until.After(until) {
			until = prev.until
		}
		s.stale[l] = staleness{until: until, repeat: repeat || prev.repeat}
		s.wakeLocked()
	}
}

// heartbeat is the session's one goroutine. It sleeps while nothing is held;
// otherwise it renews every held key each renew interval, and sooner (after a
// jittered retry delay) when a round failed. It never decides that a lock is
// lost by itself except on a "not owner" reply: deadlines are timer-driven.
func (s *Session) heartbeat(ctx context.Context) {
	defer close(s.hbDone)
	t := time.NewTimer(0)
	if !t.Stop() {
		<-t.C
	}
	defer t.Stop()
	armed, checked := false, false
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
			if !armed {
				t.Reset(s.cfg.renewInterval)
				armed = true
			}
			if !checked { // the first time the session holds something
				checked = true
				s.checkServer(ctx)
			}
			continue
		case <-t.C:
			armed = false
		}
		start := time.Now()
		held, failures := s.renewRound(ctx)
		s.cfg.hooks.round(start, held, failures)
		failed := failures > 0
		if !failed { // not while Redis misbehaves: never delay a renewal retry
			s.cleanStale(ctx)
		}
		if s.cfg.onRound != nil {
			s.cfg.onRound(held, failed)
		}
		switch {
		case failed:
			t.Reset(min(s.cfg.renewInterval, s.retryDelay()))
			armed = true
		case held > 0 || !s.goIdle():
			t.Reset(s.cfg.renewInterval)
			armed = true
		}
	}
}

// goIdle marks the heartbeat idle if the session has nothing to renew or
// clean up, so that the next add kicks it; it reports whether it did.
func (s *Session) goIdle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.locks) > 0 || len(s.stale) > 0 {
		return false
	}
	s.idle = true
	return true
}

// renewRound renews every held lock in one round trip and reports how many
// locks are still held and how many renewals failed with an error (to be
// retried soon). The round's context ends at the earliest local deadline.
func (s *Session) renewRound(ctx context.Context) (held, failed int) {
	locks := s.held()
	if len(locks) == 0 {
		return 0, 0
	}
	sent := time.Now()
	earliest := time.Time{}
	live := locks[:0]
	for _, l := range locks {
		d, ok := l.liveDeadline(sent)
		if !ok {
			continue // its timer ends it; never renew past the deadline
		}
		if earliest.IsZero() || d.Before(earliest) {
			earliest = d
		}
		live = append(live, l)
	}
	if len(live) == 0 {
		return 0, 0
	}
	if s.quorum > 1 {
		return len(live), s.renewRoundQuorum(ctx, sent, earliest, live)
	}
	argvs := s.renewArgs(live)
	var (
		cmds   []*redis.Cmd
		ackErr error // the round was not acknowledged by enough replicas
	)
	callCtx := s.bound(ctx, earliest)
	if s.cfg.acks.n == 0 {
		cmds = renewScript.runAll(callCtx, s.client, argvs)
	} else {
		cmds, ackErr = renewScript.runAllWait(callCtx, s.client, argvs, s.cfg.acks)
	}
	unbind(callCtx)
	for i, c := range cmds {
		l := live[i]
		n, err := c.Int64()
		if err == nil && n != 0 && ackErr != nil {
			err = ackErr
		}
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return len(live), 0 // closing
			}
			failed++
			if left := time.Until(l.Deadline()); left > 0 {
				s.cfg.logger.Warn("redisleader: renewal failed; retrying until the local deadline",
					"name", l.keys.name, "fence", l.fence, "deadline_in", left, "err", err)
			}
		case n == 0:
			l.lose(ErrNotOwner)
		default:
			l.extend(sent)
		}
	}
	return len(live), failed
}

// renewArgs returns the renew script's argument vectors for locks, one each
// (a script call fills in the first two slots, so a vector serves one call).
func (s *Session) renewArgs(locks []*Lock) [][]any {
	argvs := make([][]any, len(locks))
	for i, l := range locks {
		argvs[i] = []any{nil, nil, 1, l.keys.lock, l.tokenArg, s.ttlArg}
	}
	return argvs
}

// cleanStale deletes the keys of ended locks if they still hold their
// tokens (compare-and-delete, so it never touches anyone else's). A lock is
// forgotten once the delete succeeded, or once its token must have expired
// on the server anyway.
func (s *Session) cleanStale(ctx context.Context) {
	s.mu.Lock()
	locks := slices.Collect(maps.Keys(s.stale))
	s.mu.Unlock()
	outcomes := s.deleteTokens(ctx, locks)
	now := time.Now()
	s.mu.Lock()
	for i, l := range locks {
		st := s.stale[l]
		if (outcomes[i].failed == 0 && !st.repeat) || now.After(st.until) {
			delete(s.stale, l)
		}
	}
	s.mu.Unlock()
}

// checkServer warns, once per session, about server settings under which
// Redis itself can break a lease: an eviction policy that can evict lock keys
// (volatile-*) or even fence keys (allkeys-*), and no persistence, so that a
// restart loses every lock at once; and a primary with replicas without
// WithReplicaAcks, where a failover can lose a lock. It reads CONFIG GET and
// INFO replication in one round trip per node, and uses each reply that
// came: a user whose ACL denies CONFIG (managed Redis, -@dangerous) still
// gets the replica check. What could not be read is itself a warning, once
// per session (with every node's reasons), since it hides those settings.
func (s *Session) checkServer(ctx context.Context) {
	callCtx, cancel := s.boundNodes(ctx, time.Time{})
	defer cancel()
	var (
		mu        sync.Mutex
		unchecked []error
	)
	s.onNodes(func(_ int, c Client) {
		errs := s.checkNode(callCtx, c)
		mu.Lock()
		defer mu.Unlock()
		unchecked = append(unchecked, errs...)
	})
	if len(unchecked) > 0 && ctx.Err() == nil {
		s.cfg.logger.Warn("redisleader: could not check the Redis server's settings (eviction policy, persistence, replicas), so a setting under which Redis can lose locks would go unnoticed; allow this user CONFIG GET and INFO (see the README's ACL section), or check them yourself",
			"err", errors.Join(unchecked...))
	}
}

// checkNode runs checkServer's checks on one node and returns why a part of
// them could not run: CONFIG GET's error, INFO's error, or both.
func (s *Session) checkNode(ctx context.Context, c Client) []error {
	pipe := c.Pipeline()
	policy := pipe.ConfigGet(ctx, "maxmemory-policy")
	aof := pipe.ConfigGet(ctx, "appendonly")
	save := pipe.ConfigGet(ctx, "save")
	repl := pipe.Info(ctx, "replication")
	_, _ = pipe.Exec(ctx) // errors are per command
	var unchecked []error
	if err := cmp.Or(policy.Err(), aof.Err(), save.Err()); err != nil {
		unchecked = append(unchecked, fmt.Errorf("CONFIG GET: %w", err))
	} else {
		if p := policy.Val()["maxmemory-policy"]; p != "" && p != "noeviction" {
			s.cfg.logger.Warn("redisleader: maxmemory-policy lets Redis evict lock keys (volatile-*) or fence keys (allkeys-*) when memory runs out; an evicted lock key can give a name two owners. Use noeviction.",
				"maxmemory-policy", p)
		}
		if a, ok := aof.Val()["appendonly"]; ok && a == "no" && save.Val()["save"] == "" {
			s.cfg.logger.Warn("redisleader: Redis persistence is off (appendonly no, save \"\"): a restart loses every lock at once and a new owner can start while the former one still believes it holds the name, until its next renewal. Enable AOF, restart Redis only after a TTL, or see WithTakeoverDelay.")
		}
	}
	if err := repl.Err(); err != nil {
		unchecked = append(unchecked, fmt.Errorf("INFO replication: %w", err))
	} else if n := infoField(repl.Val(), "connected_slaves"); n != "" && n != "0" && s.cfg.acks.n == 0 {
		s.cfg.logger.Warn("redisleader: the Redis primary has replicas, and replication is asynchronous: a failover can lose a lock while its owner still believes it holds the name. See WithReplicaAcks.",
			"connected_replicas", n)
	}
	return unchecked
}

// infoField returns a field of an INFO reply ("" when absent).
func infoField(info, name string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// retryDelay is the retry interval plus a random jitter in [0, retryJitter].
func (s *Session) retryDelay() time.Duration {
	d := s.cfg.retryInterval
	if j := s.cfg.retryJitter; j > 0 {
		d += rand.N(j + 1)
	}
	return d
}

// warnRiskyClient logs, once per session, client settings that make calls
// outlive their deadlines. Safety does not depend on them (scripts are
// idempotent and loss is timer-driven), but Close and blocking calls may
// take up to the client's socket timeouts to return.
func warnRiskyClient(c Client, cfg config) {
	var opt *redis.Options
	switch cl := c.(type) {
	case *redis.Client:
		opt = cl.Options()
	case *redis.ClusterClient:
		o := cl.Options()
		if !o.ContextTimeoutEnabled {
			cfg.logger.Warn("redisleader: redis.ClusterOptions.ContextTimeoutEnabled is false, so go-redis ignores call deadlines on sockets; set it to true so calls end within the call timeout",
				"call_timeout", cfg.callTimeout, "read_timeout", o.ReadTimeout)
		}
		return
	default:
		return
	}
	if !opt.ContextTimeoutEnabled {
		cfg.logger.Warn("redisleader: redis.Options.ContextTimeoutEnabled is false, so go-redis ignores call deadlines on sockets; set it to true so calls end within the call timeout",
			"call_timeout", cfg.callTimeout, "read_timeout", opt.ReadTimeout)
	}
}
