package redisleader

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNoLeader is returned by Election.Leader when nobody leads.
var ErrNoLeader = errors.New("redisleader: no leader")

// ErrNotLeader is returned by Election.Proclaim when this session does not
// lead the election.
var ErrNotLeader = errors.New("redisleader: this session does not lead the election")

// An Election is a named leadership contest: a lock whose holder publishes a
// value (its identity, such as host:port) that everyone can read. Create it
// with Session.Election. An Election holds no state of its own and is safe
// for concurrent use; every Campaign is a separate acquisition.
type Election struct {
	s    *Session
	keys keys
}

// Leader describes who leads an election.
type Leader struct {
	// Value is what the leader passed to Campaign or Run, or last to Proclaim.
	Value string
	// Fence is the leader's fencing token; it is never zero for a leader.
	// Observe sends a Leader with Fence 0 when nobody leads.
	Fence int64
	// TTL is what was left of the leader's lease on the Redis server when it
	// was read (the leader renews it).
	TTL time.Duration
}

// Election returns the election called name in this session. It does no I/O.
// A bad name returns an error matching ErrInvalid (the naming rule is in the
// package documentation).
func (s *Session) Election(name string) (*Election, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	return &Election{s: s, keys: newKeys(name)}, nil
}

// Name returns the election's name.
func (e *Election) Name() string { return e.keys.name }

// Campaign blocks until this candidate leads, and returns its leadership as a
// Lock: Done is closed when leadership ends and Err says why, Fence is the
// leader's fencing token, Value is value (until Proclaim changes it), and
// Release resigns (as Resign does: at once, the key is deleted and waiting
// candidates are woken through pub/sub).
//
// While another candidate leads, Campaign waits on the session's pub/sub
// connection (subscribed before its first attempt, so a resignation is never
// missed) and otherwise tries again when the leader's lease can have expired,
// so it sends about one command per TTL while a healthy leader holds.
//
// Campaign returns ctx's error when ctx ends and ErrSessionClosed when the
// session closes, promptly in both cases, leaving no key behind; an error
// matching ErrInvalid when value is longer than 64 KiB; an error matching
// ErrLocked when this session already leads (a session never waits for
// itself); or a Redis error that retrying cannot fix. Transient Redis errors
// are retried.
func (e *Election) Campaign(ctx context.Context, value string) (*Lock, error) {
	return e.s.acquire(ctx, e.keys.name, value, true, false)
}

// Resign ends this session's leadership of the election, if it leads,
// whether Campaign or Run won it: it is that leadership Lock's Release. The
// leadership ends with ErrReleased, its key is deleted and waiting
// candidates take over at once.
//
// A leadership that Run holds is deleted by Run once onElected has returned:
// Resign cancels onElected's context (with cause ErrReleased) at once and
// waits for the delete until ctx ends; from inside onElected, with
// onElected's context (or that of a Run nested in it), it does not wait. As
// after Close, the key is no longer renewed meanwhile: it expires after the TTL if onElected takes
// longer. Run then campaigns again, as when onElected returns nil; to stop
// campaigning, end Run's context.
//
// When this session does not lead the election (it never did, or its
// leadership has ended already), Resign returns nil and writes nothing, as
// etcd's does; but while Run has yet to delete a resigned term's key, it
// waits for that delete too. It does not stop a Campaign or Run that is
// still campaigning. Otherwise it returns what Release returns.
func (e *Election) Resign(ctx context.Context) error {
	l := e.s.leading(e.keys.name)
	if l == nil {
		l = e.s.resignedTerm(e.keys.name)
	}
	if l == nil {
		return nil
	}
	return l.release(ctx, true)
}

// Proclaim publishes value as this leader's new value without resigning:
// the key keeps its token, its fence and its TTL, so the leadership, its
// Lock and its fencing token stay as they are; Leader and Observe report the
// new value with the same Fence, and the leadership's Lock.Value returns it.
//
// Proclaim returns an error matching ErrInvalid, without Redis I/O, when value
// is longer than 64 KiB, and on a Redlock session (a value stored on only
// some nodes could not be told apart from the former one by readers);
// ErrSessionClosed when the session is closed; and an error matching
// ErrNotLeader, writing nothing, when this session does not lead the
// election. When Redis says the key no longer holds this leadership's token,
// the leadership ends with ErrNotOwner and the error matches both
// ErrNotLeader and ErrNotOwner. After a Redis error the stored value may be
// either; Proclaim again. The call is bounded by ctx, the call timeout and
// the leadership's local deadline. Proclaim does not wait for replicas
// (WithReplicaAcks): after a failover the former value may come back.
func (e *Election) Proclaim(ctx context.Context, value string) error {
	if err := checkValue(value); err != nil {
		return err
	}
	if e.s.quorum > 1 {
		return invalidf("Proclaim is not available on a Redlock session")
	}
	if err := e.s.Err(); err != nil {
		return err
	}
	l := e.s.leading(e.keys.name)
	if l == nil {
		return fmt.Errorf("redisleader: proclaim %q: %w", e.keys.name, ErrNotLeader)
	}
	return l.proclaim(ctx, value)
}

// proclaim stores value as the leadership's value in Redis, then here.
func (l *Lock) proclaim(ctx context.Context, value string) error {
	l.mu.Lock()
	if l.proclaiming == nil {
		l.proclaiming = make(chan struct{}, 1)
	}
	turn := l.proclaiming
	l.mu.Unlock()
	select {
	case turn <- struct{}{}:
		defer func() { <-turn }()
	case <-ctx.Done():
		return fmt.Errorf("redisleader: proclaim %q: %w", l.keys.name, ctx.Err())
	}
	deadline, ok := l.liveDeadline(time.Now())
	if !ok {
		return fmt.Errorf("redisleader: proclaim %q: %w", l.keys.name, ErrNotLeader)
	}
	argv := []any{nil, nil, 1, l.keys.lock, l.tokenArg, value}
	callCtx := l.s.bound(ctx, deadline)
	n, err := proclaimScript.run(callCtx, l.s.client, argv).Int()
	unbind(callCtx)
	switch {
	case err != nil:
		return fmt.Errorf("redisleader: proclaim %q (the stored value may be the former one or the new one): %w", l.keys.name, err)
	case n == 0:
		l.lose(ErrNotOwner)
		return fmt.Errorf("redisleader: proclaim %q: %w: %w", l.keys.name, ErrNotLeader, ErrNotOwner)
	}
	l.mu.Lock()
	l.value = value
	l.mu.Unlock()
	return nil
}

// leading returns the session's leadership of name (its delivered, held
// lock of the name), or nil.
func (s *Session) leading(name string) *Lock {
	s.mu.Lock()
	l := s.names[name]
	s.mu.Unlock()
	if l == nil {
		return nil
	}
	l.mu.Lock()
	delivered := l.delivered
	l.mu.Unlock()
	if !delivered || !l.Held() {
		return nil
	}
	return l
}

// resignedTerm returns a Run term of name that was resigned and that Run
// has yet to release, or nil.
func (s *Session) resignedTerm(name string) *Lock {
	var terms []*Lock
	s.mu.Lock()
	for l := range s.terms {
		if l.keys.name == name {
			terms = append(terms, l)
		}
	}
	s.mu.Unlock()
	for _, l := range terms { // Err may end l, which takes s.mu
		if l.Err() == ErrReleased {
			return l
		}
	}
	return nil
}

// termOf returns the channel closed once Election.Run has released l, or
// nil when l is not a Run term.
func (s *Session) termOf(l *Lock) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.terms[l] // a nil channel when absent
}

// Leader returns the current leader with one Redis call, or ErrNoLeader.
// The answer may be stale by the time it is used: leadership can change at
// any moment. Only the leader's own Lock (Held, Done) says for sure that it
// still leads.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	l, ok, err := e.inspect(ctx)
	switch {
	case err != nil:
		return Leader{}, err
	case !ok:
		return Leader{}, ErrNoLeader
	}
	return l, nil
}

// inspect reads the leader and its remaining TTL in one call.
func (e *Election) inspect(ctx context.Context) (Leader, bool, error) {
	if e.s.quorum > 1 {
		return e.inspectQuorum(ctx)
	}
	argv := []any{nil, nil, 1, e.keys.lock}
	callCtx := e.s.bound(ctx, time.Time{})
	res, err := inspectScript.run(callCtx, e.s.client, argv).Slice()
	unbind(callCtx)
	if err != nil {
		if errors.Is(err, redis.Nil) {
			return Leader{}, false, nil
		}
		return Leader{}, false, fmt.Errorf("redisleader: leader of %q: %w", e.keys.name, err)
	}
	if len(res) != 2 {
		return Leader{}, false, fmt.Errorf("redisleader: leader of %q: unexpected reply %v", e.keys.name, res)
	}
	stored, _ := res[0].(string)
	h, ok := parseHolder(stored)
	if !ok {
		return Leader{}, false, fmt.Errorf("redisleader: leader of %q: key %s holds a value this package did not write", e.keys.name, e.keys.lock)
	}
	var ttl time.Duration
	if ms, ok := res[1].(int64); ok && ms > 0 {
		ttl = time.Duration(ms) * time.Millisecond
	}
	return Leader{Value: h.value, Fence: h.fence, TTL: ttl}, true, nil
}

// Observe returns a channel of leader changes: the current state first, then
// one Leader per change, with Fence 0 meaning nobody leads. Every state sent
// was read from Redis; a message on the name's pub/sub channel only makes the
// observer read at once, and the state is also read when the leader's lease
// can have expired (expiry publishes nothing). So a lost or forged message
// cannot make the channel report anything Redis did not say, and a lost one
// delays a change by at most about one TTL. A term shorter than a read may
// be missed; the latest state always arrives. While a leader holds, an
// observer sends about one command per TTL.
//
// The channel buffers 64 changes; when it is full the oldest is dropped, so
// a slow reader never blocks the library. The channel is closed, by this
// package, when ctx ends or the session closes; errors reading Redis are
// retried and are not reported on the channel.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	out := make(chan Leader, observeBuffer)
	if e.s.enter() != nil {
		close(out)
		return out
	}
	go func() {
		defer e.s.work.Done()
		defer close(out)
		e.observe(ctx, out)
	}()
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

func (e *Election) observe(ctx context.Context, out chan Leader) {
	sub, err := e.s.watch.subscribe(ctx, e.keys.channel())
	if err != nil {
		return
	}
	defer sub.Close()
	o := observer{e: e, out: out}
	// Subscribed before the first read, so no change after it goes unheard.
	next := time.Duration(0)
	for {
		t := time.NewTimer(next)
		select {
		case <-t.C:
		case <-sub.notify:
			sub.take() // a hint, whatever it says (or a gap): read now
		case <-ctx.Done():
			t.Stop()
			return
		case <-e.s.done:
			t.Stop()
			return
		}
		t.Stop()
		next = o.read(ctx)
	}
}

// read reads the leader, reports it if it changed, and returns how long until
// it must be read again: when the leader's lease can have expired (expiry
// publishes nothing), the TTL while nobody leads, the retry delay after an
// error.
func (o *observer) read(ctx context.Context) time.Duration {
	l, ok, err := o.e.inspect(ctx)
	switch {
	case err != nil:
		return o.e.s.retryDelay()
	case !ok:
		o.report(Leader{})
		return o.e.s.cfg.ttl
	}
	o.report(l)
	if l.TTL <= 0 { // no TTL (someone PERSISTed the key): poll slowly
		return o.e.s.cfg.ttl
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
	o.e.s.cfg.hooks.observed(o.e.keys.name, l, !o.sent)
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

// Run campaigns for leadership with value and, each time this candidate is
// elected, calls onElected on Run's own goroutine with a context that is
// cancelled the moment leadership is lost (lease expired, key taken or
// deleted, session closed) or ctx ends; context.Cause of that context says
// why (ErrNotOwner, ErrExpired, ErrSessionClosed, ErrReleased after Resign,
// or ctx's cause). The leadership argument is this term's Lock: pass
// leadership.Fence() with every write to a resource that can check it.
// Run waits for onElected to return before it releases leadership, so this
// leader's work never overlaps with the next leader's; then it campaigns
// again. Resign (or the Lock's Release) ends the term at once, but the
// release still waits for onElected (see Resign). onElected is never run
// concurrently with itself.
//
// onElected should return when its context is cancelled:
//   - If it returns after leadership was lost, whatever it returns, Run
//     campaigns again (a non-nil error is logged).
//   - If it returns nil while still leading, Run resigns and campaigns again
//     (another candidate may win).
//   - If it returns an error while still leading, Run resigns and returns
//     that error.
//   - If it panics, Run resigns first (so the others take over at once) and
//     the panic continues up Run's caller.
//
// Closing the session cancels onElected's context too; Run still releases
// the leadership only after onElected has returned, and Session.Close waits
// for that release (see Close). Run returns ctx's error when ctx ends,
// ErrSessionClosed when the session closes, what Campaign returns otherwise
// (ErrLocked when the session already leads this election, in another Run
// say), or an error matching ErrInvalid for a nil onElected or a value over
// 64 KiB. To learn who leads while this candidate does not, use Observe.
func (e *Election) Run(ctx context.Context, value string, onElected func(ctx context.Context, leadership *Lock) error) error {
	if onElected == nil {
		return invalidf("Run: onElected must not be nil")
	}
	if err := checkValue(value); err != nil {
		return err
	}
	for {
		lead, err := e.s.acquire(ctx, e.keys.name, value, true, true)
		if err != nil {
			return err
		}
		err = e.lead(ctx, lead, onElected)
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if serr := e.s.Err(); serr != nil {
			return serr
		}
		if err != nil {
			return err
		}
	}
}

// lead runs one term: onElected under a context tied to the leadership, then
// the release, which happens only after onElected has returned (or panicked).
// It returns onElected's error only if onElected gave up a leadership that
// was still held.
func (e *Election) lead(ctx context.Context, lead *Lock, onElected func(context.Context, *Lock) error) error {
	if lead.term == nil {
		return nil // the session closed before the term was registered: Close releases the key
	}
	leaderCtx, cancel := context.WithCancelCause(withTerm(ctx, lead))
	stop := lead.onEnd(func() { cancel(lead.Err()) })
	defer func() {
		stop()
		cancel(ErrReleased)
		// A fresh context: the release must happen even when ctx has ended.
		lead.runErr = lead.releaseTerm(context.WithoutCancel(ctx))
		e.s.endTerm(lead)
	}()
	if lead.Err() != nil {
		return nil // resigned or closed before onElected could start
	}
	err := onElected(leaderCtx, lead)
	if lost := lead.Err(); lost != nil {
		if err != nil {
			e.s.cfg.logger.Warn("redisleader: onElected returned after leadership ended",
				"election", e.keys.name, "fence", lead.Fence(), "why", lost, "err", err)
		}
		return nil
	}
	return err
}
