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
var ErrNotTaken = lease.ErrNotTaken

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
	q := e.request(lease.Request{ID: rand.Text(), Fence: from.Fence, To: to})
	if err := q.Send(ctx, q.Request, e.s.cfg.TTL); err != nil {
		if _, werr := q.Withdraw(ctx); werr != nil { // it may have been stored all the same
			return Leader{}, q.Errorf("%w; cannot withdraw it (it expires within the TTL): %w", err, werr)
		}
		if ctx.Err() != nil {
			return Leader{}, q.Errorf("%w; withdrawn: %w", ErrNotTaken, err)
		}
		return Leader{}, q.Errorf("%w", err)
	}
	renew := time.NewTicker(e.s.cfg.TTL / 3)
	defer renew.Stop()
	for { // follow the leader changes until To leads, or another does after the request was taken
		select {
		case l, ok := <-changes:
			if !ok {
				return Leader{}, q.GiveUp(ctx)
			}
			if done, err := q.Changed(ctx, l.Fence, l.Value); done {
				return l, err
			}
		case <-renew.C:
			_, _ = q.Readdress(ctx, q.Fence) // a failure is retried; one taken is seen as a change
		}
	}
}

// requests are the election's transfer requests on the session's server.
func (e *Election) requests() lease.Requests {
	return lease.Requests{C: e.s.wire.Combiner(), Keys: e.keys}
}

// request is RequestTransfer's requester of q (lease.Requester), which
// withdraws it on the way out if it is still there.
func (e *Election) request(q lease.Request) *lease.Requester {
	return &lease.Requester{Request: q, Requests: e.requests(), TTL: e.s.cfg.TTL, Log: e.s.cfg.logger}
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
	return e.awaitRequest(ctx, ctx, leadership, func(string) bool { return leadership.Held() })
}

// awaitRequest takes the requests addressed to the term l
// (lease.Watch.Await, its takes on call) until the term has claimed one
// (claim), it has ended (ErrNotLeader, with why) or ctx ends.
func (e *Election) awaitRequest(ctx, call context.Context, l *Lock, claim func(to string) bool) (string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer l.onEnd(cancel)()
	w := &lease.Watch{Requests: e.requests(), T: &e.s.wire, TTL: e.s.cfg.TTL, Log: e.s.cfg.logger,
		Fence: l.Fence(), Token: l.lease.Token, Held: l.Held, Own: l.isOwn, Claim: claim}
	to, err := w.Await(ctx, call)
	if to != "" {
		return to, nil
	}
	if why := l.Err(); why != nil || !l.Held() {
		return "", fmt.Errorf("redisleader: transfer requests of %q: %w: %w", e.keys.Name, ErrNotLeader, cmp.Or(why, ErrExpired))
	}
	return "", err
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
		_, err := e.awaitRequest(ctx, context.WithoutCancel(ctx), l, claim)
		if err != nil && ctx.Err() == nil && !errors.Is(err, ErrNotLeader) && !errors.Is(err, ErrSessionClosed) {
			e.s.cfg.logger.Warn("redisleader: transfer requests are not honoured in this term", "election", e.keys.Name, "err", err)
		}
	}()
	return h
}

// stop ends the watch and returns the value of the request it claimed, or
// "". It does not wait for a take still on the wire: a request that take
// finds after stop is put back (lease.Watch), as the term no longer
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
