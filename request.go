package redisleader

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/redisleader/redisleader/internal/lease"
	"github.com/redisleader/redisleader/internal/wire"
)

// Transfer requests: any process may ask whoever leads a name to Transfer
// (docs/elections.md, Transfer requests). What Redis holds, and the
// scripts, are in internal/lease/request.go.

var (
	requestSendScript = wire.NewScript(lease.RequestSendSHA, lease.RequestSendSrc)
	requestTakeScript = wire.NewScript(lease.RequestTakeSHA, lease.RequestTakeSrc)
)

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
	q := &request{e: e, key: lease.RequestKey(e.keys.Name), Request: lease.Request{ID: rand.Text(), Fence: from.Fence, To: to}}
	if err := e.s.wire.Combiner().Call(ctx, time.Time{}, requestSendScript, lease.SendArgs(q.key, q.Request, e.s.cfg.ttl)).Err(); err != nil {
		_, _ = q.withdraw(ctx) // it may have been stored all the same
		if ctx.Err() != nil {
			return Leader{}, q.errorf("%w; withdrawn: %w", ErrNotTaken, err)
		}
		return Leader{}, q.errorf("%w", err)
	}
	return q.await(ctx, changes)
}

// takeRequest runs the take script (take, withdraw or readdress: argv
// says) on the session's server.
func (e *Election) takeRequest(ctx context.Context, argv []any) (lease.Taken, error) {
	return lease.TakeReply(e.s.wire.Combiner().Call(ctx, time.Time{}, requestTakeScript, argv).Slice())
}

// A request is one RequestTransfer's request, addressed to the term whose
// fence is Fence.
type request struct {
	lease.Request
	e   *Election
	key string
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
	t, err := q.e.takeRequest(ctx, lease.ReaddressArgs(q.key, next, q.e.s.cfg.ttl))
	if err != nil || !t.Took {
		return false, err
	}
	q.Fence = fence
	return true, nil
}

// withdraw deletes the request if the key still holds it, whatever term it
// addresses (also once ctx has ended), and reports whether it did not
// (taken: a leader took it).
func (q *request) withdraw(ctx context.Context) (taken bool, err error) {
	t, err := q.e.takeRequest(context.WithoutCancel(ctx), lease.WithdrawArgs(q.key, q.ID))
	return !t.Took, err
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
	return e.awaitRequest(ctx, leadership)
}

// awaitRequest takes the request addressed to l's term at once, then on
// every hint and once per TTL, until it has taken one, l has ended or ctx
// ends.
func (e *Election) awaitRequest(ctx context.Context, l *Lock) (string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer l.onEnd(cancel)()
	w := &requestWatch{e: e, l: l, key: lease.RequestKey(e.keys.Name)}
	sub, err := e.s.wire.Subscribe(ctx, w.key, nil)
	for err == nil {
		if !l.Held() {
			break // lost by the clock only: a term that cannot hand over takes none
		}
		if to := w.take(ctx); to != "" {
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

// requestWatch takes the requests addressed to one term.
type requestWatch struct {
	e       *Election
	l       *Lock
	key     string
	warned  bool // a key that is no request was reported
	ignored bool // a request for another term was reported
}

// take takes the request addressed to the term, if any, and returns its
// value, or "" if there is none to act on (none, one for another term, one
// for the leader's own value, or an error, logged).
func (w *requestWatch) take(ctx context.Context) string {
	t, err := w.e.takeRequest(ctx, lease.TakeArgs(w.key, w.l.Fence()))
	log, name := w.e.s.cfg.logger, w.e.keys.Name
	switch {
	case ctx.Err() != nil || err == nil && !t.Present:
		return ""
	case err != nil:
		log.Warn("redisleader: reading transfer requests", "election", name, "err", err)
		return ""
	}
	to, ok := lease.RequestValue(t.Held)
	switch {
	case !ok && !w.warned:
		w.warned = true
		log.Warn(fmt.Sprintf("redisleader: %s holds %d bytes that are no transfer request; left as they are", w.key, len(t.Held)))
	case !ok:
	case !t.Took && !w.ignored:
		w.ignored = true
		log.Warn(fmt.Sprintf("redisleader: ignoring a request to transfer %s made for another term (not for fence %d); left as it is", name, w.l.Fence()))
	case !t.Took:
	case w.l.isOwn(to):
		log.Info("redisleader: transfer requested to the leader's own value: it leads already", "election", name)
	default:
		return to
	}
	return ""
}

// honouring is Run's watch of the requests addressed to one term.
type honouring struct {
	to     string // the value of the request taken; written before done closes
	cancel context.CancelFunc
	done   chan struct{}
}

// honour starts taking the requests addressed to Run's term l; on one, it
// ends onElected's context with a TransferRequest (end). stop ends it.
func (e *Election) honour(ctx context.Context, l *Lock, end context.CancelCauseFunc) *honouring {
	if e.redlock() {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	h := &honouring{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		if to, err := e.awaitRequest(ctx, l); err == nil {
			h.to = to
			end(&TransferRequest{To: to})
		}
	}()
	return h
}

// stop ends the watch, waits for it, and returns the value of the request
// it took, or "".
func (h *honouring) stop() string {
	if h == nil {
		return ""
	}
	h.cancel()
	<-h.done
	return h.to
}

// transferTo makes Run's release of the term l, if still held, a Transfer
// to to (none for ""): l ends with ErrReleased and heir to, as Transfer
// ends it, and Run's release hands the name over.
func (l *Lock) transferTo(to string) {
	if to != "" && l.check() == nil {
		l.endTo(ErrReleased, to)
	}
}
