package redisleader

import (
	"context"
	"errors"
	"fmt"

	"github.com/redisleader/redisleader/internal/wire"
)

// Run campaigns for leadership with value and, for each term it wins, calls
// onElected on Run's goroutine with the term's Lock and a context cancelled
// when the term ends or ctx does; context.Cause says why (ErrExpired,
// ErrNotOwner, ErrReleased, ErrPreempted, ErrSessionClosed, or ctx's cause).
// Once onElected has returned, Run releases the term (package documentation,
// Elections; a preempted one goes to the better candidate) and campaigns
// again, after a Transfer without its priority, so that the transfer holds.
// An error onElected returns after the loss is logged, one returned while
// still leading ends Run with it, and a panic goes on once Run resigned.
// Run returns ctx's error, ErrSessionClosed, what Campaign returns, or an
// error matching ErrInvalid for a nil onElected, a value over 64 KiB or an
// option that breaks its rule.
func (e *Election) Run(ctx context.Context, value string, onElected func(ctx context.Context, leadership *Lock) error, opts ...CampaignOption) error {
	if onElected == nil {
		return invalidf("Run: onElected must not be nil")
	}
	if err := checkValue(value); err != nil {
		return err
	}
	c, err := e.s.candidacyOf(e.keys, value, opts)
	if err != nil {
		return err
	}
	for cand := c; ; {
		lead, err := e.s.acquire(ctx, e.keys, value, runTerm, cand)
		if err != nil {
			return err
		}
		err = e.lead(ctx, lead, onElected)
		cand = c
		if lead.heir() != "" {
			cand = nil // it stepped back: no priority until it leads again
		}
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
	t := e.s.termOf(lead)
	if t == nil {
		return nil // the session closed before the term was registered: Close releases the key
	}
	leaderCtx, cancel := context.WithCancelCause(withTerm(ctx, lead))
	stop := lead.onEnd(func() { cancel(lead.Err()) })
	lead.onPreempt(func() { cancel(ErrPreempted) })
	requests := e.honour(leaderCtx, lead, cancel) // RequestTransfer's, for this term
	// Deferred on its own, so that the term ends even if a hook on the
	// client ends this goroutine (runtime.Goexit) in the release, whose
	// outcome is then unknown (the session deletes the key again).
	t.err = wire.ErrHookGoexit
	defer e.s.endTerm(lead, t)
	defer func() {
		stop()
		to := requests.stop()
		cancel(ErrReleased)
		lead.transferTo(to) // a request taken: the release hands the name over
		// A fresh context: the release must happen even when ctx has ended.
		t.err = lead.releaseTerm(context.WithoutCancel(ctx))
	}()
	if lead.Err() != nil {
		return nil // resigned or closed before onElected could start
	}
	err := onElected(leaderCtx, lead)
	lost := lead.Err()
	var requested *TransferRequest
	if why := context.Cause(leaderCtx); lost == nil && (why == ErrPreempted || errors.As(why, &requested)) {
		lost = why // it yields or transfers: the release hands the name over
	}
	if lost != nil {
		if err != nil {
			e.s.cfg.logger.Warn("redisleader: onElected returned after leadership ended",
				"election", e.keys.Name, "fence", lead.Fence(), "why", lost, "err", err)
		}
		return nil
	}
	return err
}

// termKey is the context key under which Run's onElected context carries
// its term, and the terms of the Runs it is nested in, so that Close and
// Resign called from onElected do not wait for them.
type termKey struct{}

// A term is a leadership that Election.Run holds. Run, not Release or
// Close, deletes its key, once onElected has returned, so that the next
// leader never starts while this one still works.
type term struct {
	released chan struct{} // closed once Run has deleted the key (or found it lost)
	err      error         // what that delete returned; written before released is closed
}

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
		s.reg.terms[l] = &term{released: make(chan struct{})}
	}
}

// endTerm records that Run has released its term l.
func (s *Session) endTerm(l *Lock, t *term) {
	s.mu.Lock()
	delete(s.reg.terms, l)
	s.mu.Unlock()
	close(t.released)
}

// resignedTerm returns a Run term of name that was resigned and that Run
// has yet to release, or nil.
func (s *Session) resignedTerm(name string) *Lock {
	var terms []*Lock
	s.mu.Lock()
	for l := range s.reg.terms {
		if l.lease.Keys.Name == name {
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

// awaitTerm waits, with wait, until Run has deleted or handed over its
// resigned term l (not when ctx comes from the term's own onElected, which
// cannot return meanwhile), and returns what that returned.
func (l *Lock) awaitTerm(ctx context.Context, t *term, wait bool) error {
	if !wait || termsOf(ctx).has(l) {
		return nil
	}
	select {
	case <-t.released:
		return t.err
	case <-ctx.Done():
		return fmt.Errorf("redisleader: release %q: Election.Run deletes the key once onElected has returned: %w", l.lease.Keys.Name, ctx.Err())
	}
}

// releaseTerm is Election.Run's release of a term, once onElected has
// returned: it deletes the key if the term is still held, or if Release,
// Resign or Close ended it (they leave a term's delete to Run). A term that
// was lost is not Run's to delete.
func (l *Lock) releaseTerm(ctx context.Context) error {
	if l.check() == nil && l.end(ErrReleased) {
		return l.del(ctx)
	}
	if err := l.Err(); err == ErrReleased || errors.Is(err, ErrSessionClosed) {
		return l.del(ctx)
	}
	return nil
}
