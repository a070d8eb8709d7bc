package redisleader

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redisleader/redisleader/internal/lease"
)

// Transfer requests: any process may ask whoever leads a name to Transfer
// (docs/elections.md, Transfer requests). What Redis holds, the scripts
// and their calls (lease.Requests) are in internal/lease/request.go; here
// is what the requester and the leader believe.

// ErrNotTaken is returned, with ctx's error, by Election.RequestTransfer
// when ctx ended before any leader took the request; it was withdrawn.
var ErrNotTaken = errors.New("redisleader: no leader took the transfer request")

// A TransferRequest is the cause of a Run term's onElected context when a
// RequestTransfer to To reached the term: Run transfers to To once
// onElected has returned, unless onElected called Transfer itself.
type TransferRequest struct{ To string }

func (r *TransferRequest) Error() string {
	return fmt.Sprintf("redisleader: transfer to %q requested", r.To)
}

// RequestTransfer asks whoever leads the election, in any process, to
// Transfer to the candidate campaigning with value to, and returns once to
// leads (that Leader). Run honours requests; so does a leader that calls
// TransferRequested. The request names the leader's term and lives one TTL,
// renewed while RequestTransfer waits; a later term's leader never acts on
// it, and RequestTransfer addresses it to the next term if its term ends
// without taking it. Errors: ErrInvalid (no I/O) for a bad to or a Redlock
// session; ErrNoLeader, writing nothing; ErrNoSuccessor if another
// candidate leads after the request was taken (with that Leader); once ctx
// ends, ctx's error, with ErrNotTaken if no leader took the request (it is
// withdrawn then, as on any return); or a Redis error.
func (e *Election) RequestTransfer(ctx context.Context, to string) (Leader, error) {
	if err := e.checkTransfer(to); err != nil {
		return Leader{}, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	changes := e.Observe(ctx) // before the request: no change after it goes unseen
	from, err := e.Leader(ctx)
	switch {
	case err != nil && ctx.Err() != nil:
		return Leader{}, fmt.Errorf("%w: %w", ErrNotTaken, err) // nothing written
	case err != nil:
		return Leader{}, err
	case from.Value == to:
		return from, nil
	}
	q := &request{e: e, Request: lease.Request{ID: rand.Text(), Fence: from.Fence, To: to}}
	if err := e.requests().Send(ctx, q.Request, e.s.cfg.ttl); err != nil {
		_, _ = q.withdraw(ctx) // it may have been stored all the same
		if ctx.Err() != nil {
			return Leader{}, q.errorf("%w; withdrawn: %w", ErrNotTaken, err)
		}
		return Leader{}, q.errorf("%w", err)
	}
	return q.await(ctx, changes)
}

// requests are the election's transfer requests on the session's server.
func (e *Election) requests() lease.Requests {
	return lease.Requests{C: e.s.wire.Combiner(), Keys: e.keys}
}

// A request is one RequestTransfer's request, addressed to the term whose
// fence is Fence.
type request struct {
	lease.Request
	e *Election
}

// await follows the leader changes until To leads, or another candidate
// does after the request was taken, and renews the request meanwhile. The
// request is withdrawn on the way out, if it is still there.
func (q *request) await(ctx context.Context, changes <-chan Leader) (Leader, error) {
	renew := time.NewTicker(q.e.s.cfg.ttl / 3)
	defer renew.Stop()
	for {
		select {
		case l, ok := <-changes:
			if !ok {
				return Leader{}, q.giveUp(ctx)
			}
			if done, err := q.changed(ctx, l); done {
				return l, err
			}
		case <-renew.C:
			_, _ = q.readdress(ctx, q.Fence) // a failure is retried; one taken is seen as a change
		}
	}
}

// changed acts on a leader change: done when To leads (err nil) or another
// candidate leads after the request was taken (ErrNoSuccessor).
func (q *request) changed(ctx context.Context, l Leader) (done bool, err error) {
	switch {
	case l.Fence != 0 && l.Value == q.To:
		_, _ = q.withdraw(ctx) // if not taken, its term has ended: nobody would take it
		return true, nil
	case l.Fence == 0 || l.Fence == q.Fence:
		return false, nil // the hand-over under way, or the same term
	}
	// Another term: the one addressed ended, and took the request (then it
	// handed over to another candidate) or not (then it goes to this term).
	switch moved, err := q.readdress(ctx, l.Fence); {
	case err != nil && ctx.Err() == nil:
		q.e.s.cfg.logger.Warn("redisleader: cannot address a transfer request to the new term",
			"election", q.e.keys.Name, "fence", l.Fence, "err", err)
	case err == nil && !moved:
		return true, q.errorf("%w; %q leads (fence %d)", ErrNoSuccessor, l.Value, l.Fence)
	}
	return false, nil
}

// readdress stores the request, addressed to the term with fence, for one
// TTL, if the key still holds this request (for any term), and the script
// hints the leader; moved is false if it does not (a leader took it).
func (q *request) readdress(ctx context.Context, fence int64) (moved bool, err error) {
	next := q.Request
	next.Fence = fence
	moved, err = q.e.requests().Readdress(ctx, next, q.e.s.cfg.ttl)
	if moved {
		q.Fence = fence
	}
	return moved, err
}

// withdraw deletes the request if the key still holds it, whatever term it
// addresses (also once ctx has ended), and reports whether it did not
// (taken: a leader took it).
func (q *request) withdraw(ctx context.Context) (taken bool, err error) {
	return q.e.requests().Withdraw(context.WithoutCancel(ctx), q.ID)
}

// giveUp withdraws the request unless a leader has taken it, once ctx has
// ended or the session closed, and says which.
func (q *request) giveUp(ctx context.Context) error {
	taken, err := q.withdraw(ctx)
	switch {
	case err != nil:
		return q.errorf("cannot withdraw it (it expires within the TTL): %w", err)
	case ctx.Err() == nil:
		return q.errorf("%w", ErrSessionClosed)
	case !taken:
		return q.errorf("%w; withdrawn: %w", ErrNotTaken, ctx.Err())
	}
	return q.errorf("the leader took it, and %q does not lead yet: %w", q.To, ctx.Err())
}

func (q *request) errorf(format string, a ...any) error {
	return fmt.Errorf("redisleader: transfer request %q to %q: "+format, append([]any{q.e.keys.Name, q.To}, a...)...)
}

// TransferRequested waits until RequestTransfer asks leadership (this
// session's, from Campaign) to transfer, takes the request (deletes it) and
// returns the successor's value: stop the work, then call Transfer. It
// takes only requests addressed to leadership's term, none once leadership
// has ended (ErrNotLeader, with why) and none for leadership's own value.
// It returns ctx's error when ctx ends, ErrInvalid for a leadership of
// another election or session, or on Redlock. Run does this by itself (see
// TransferRequest): do not call it for a term of Run.
func (e *Election) TransferRequested(ctx context.Context, leadership *Lock) (to string, err error) {
	switch {
	case leadership == nil || leadership.s != e.s || leadership.lease.Keys.Name != e.keys.Name:
		return "", invalidf("TransferRequested: not a leadership of %q in this session", e.keys.Name)
	case e.redlock():
		return "", errRedlockTransfer
	}
	w := &requestWatch{e: e, l: leadership, claim: func(string) bool { return leadership.Held() }}
	return w.await(ctx, ctx)
}

// requestWatch takes the requests addressed to one term.
type requestWatch struct {
	e *Election
	l *Lock
	// claim tells whether the term can still honour a request to to that
	// it took; if not, the request is put back.
	claim   func(to string) bool
	warned  bool // a key that is no request was reported
	ignored bool // a request for another term was reported
	failing bool // reading the requests failed, and was reported
}

// await takes the request addressed to the term at once, then on every
// hint and once per TTL, until the term has claimed one, it has ended or
// ctx ends. The takes run on call: ctx, or one that outlives ctx, so that
// a take whose reply comes after ctx has ended still puts back a request
// that the term no longer honours.
func (w *requestWatch) await(ctx, call context.Context) (string, error) {
	e, l := w.e, w.l
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer l.onEnd(cancel)()
	sub, err := e.s.wire.Subscribe(ctx, lease.RequestKey(e.keys.Name), nil)
	for err == nil {
		if !l.Held() {
			break // lost by the clock only: a term that cannot hand over takes none
		}
		if to := w.take(call); to != "" {
			sub.Close()
			return to, nil
		}
		err = e.s.wait(ctx, sub, e.s.cfg.ttl)
	}
	if sub != nil {
		sub.Close()
	}
	if why := l.Err(); why != nil || !l.Held() {
		return "", fmt.Errorf("redisleader: transfer requests of %q: %w: %w", e.keys.Name, ErrNotLeader, cmp.Or(why, ErrExpired))
	}
	return "", err
}

// take takes the request addressed to the term, if any, and returns its
// value once the term has claimed it, or "" if there is none to act on
// (none, one for another term, one for the leader's own value, one the
// term could no longer honour, put back, or an error, logged once until a
// read succeeds again).
func (w *requestWatch) take(ctx context.Context) string {
	r := w.e.requests()
	t, err := r.Take(ctx, w.l.Fence(), w.l.lease.Token)
	log, name := w.e.s.cfg.logger, w.e.keys.Name
	switch {
	case err != nil && !w.failing && ctx.Err() == nil:
		w.failing = true
		log.Warn("redisleader: cannot read transfer requests; they are not honoured until this is fixed", "election", name, "err", err)
		return ""
	case err != nil || !t.Present:
		w.failing = w.failing && err != nil
		return ""
	}
	w.failing = false
	to, ok := lease.RequestValue(t.Held)
	switch {
	case !ok && !w.warned:
		w.warned = true
		log.Warn(fmt.Sprintf("redisleader: %s holds %d bytes that are no transfer request; left as they are", lease.RequestKey(name), len(t.Held)))
	case !ok:
	case !t.Took && !w.ignored:
		w.ignored = true
		log.Warn(fmt.Sprintf("redisleader: ignoring a request to transfer %s made for another term (not for fence %d); left as it is", name, w.l.Fence()))
	case !t.Took:
	case w.l.isOwn(to):
		log.Info("redisleader: transfer requested to the leader's own value: it leads already", "election", name)
	case !w.claim(to):
		// Taken as the term ended: its requester addresses it to the next.
		if err := r.PutBack(context.WithoutCancel(ctx), t.Held, w.e.s.cfg.ttl); err != nil {
			log.Warn("redisleader: cannot put back a transfer request its term did not honour; its requester sees it taken",
				"election", name, "err", err)
		}
	default:
		return to
	}
	return ""
}

// honouring is Run's watch of the requests addressed to one term.
type honouring struct {
	mu      sync.Mutex
	to      string // the value of the request claimed
	stopped bool   // no request is claimed any more
	cancel  context.CancelFunc
}

// honour starts taking the requests addressed to Run's term l; on one, it
// ends onElected's context with a TransferRequest (end). stop ends it. A
// watch that cannot run (Subscribe failed) says so once.
func (e *Election) honour(ctx context.Context, l *Lock, end context.CancelCauseFunc) *honouring {
	if e.redlock() || e.s.enter() != nil {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	h := &honouring{cancel: cancel}
	claim := func(to string) bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.stopped || !l.Held() {
			return false
		}
		h.to = to
		end(&TransferRequest{To: to})
		return true
	}
	go func() {
		defer e.s.work.Done() // Close waits for a take still on the wire
		w := &requestWatch{e: e, l: l, claim: claim}
		_, err := w.await(ctx, context.WithoutCancel(ctx))
		if err != nil && ctx.Err() == nil && !errors.Is(err, ErrNotLeader) && !errors.Is(err, ErrSessionClosed) {
			e.s.cfg.logger.Warn("redisleader: transfer requests are not honoured in this term", "election", e.keys.Name, "err", err)
		}
	}()
	return h
}

// stop ends the watch and returns the value of the request it claimed, or
// "". It does not wait for a take still on the wire: a request that take
// finds after stop is put back (requestWatch.take), as the term no longer
// honours it.
func (h *honouring) stop() string {
	if h == nil {
		return ""
	}
	h.mu.Lock()
	h.stopped = true
	to := h.to
	h.mu.Unlock()
	h.cancel()
	return to
}

// transferTo makes Run's release of the term l, if still held, a Transfer
// to to (none for ""): l ends with ErrReleased and heir to, as Transfer
// ends it, and Run's release hands the name over.
func (l *Lock) transferTo(to string) {
	if to != "" && l.check() == nil {
		l.endTo(ErrReleased, to)
	}
}
