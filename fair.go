package redisleader

import (
	"context"
	"strconv"

	"github.com/redisleader/redisleader/internal/lease"
	"github.com/redisleader/redisleader/internal/wire"
)

// Fair mode (WithFairness; its contract is in doc.go, section Fairness).
// The queue as Redis holds it (a waiter's place, its lease and tombstone,
// the wake-ups addressed to the head) is described in internal/lease/fair.go;
// here is a fair acquisition's place as the session keeps it.

// A waiter is one fair acquisition's place in a name's queue, kept across
// its attempts (and their tokens).
type waiter struct {
	id   string
	keys lease.Keys
	// proto is its protocol, which holds its place's arguments
	// (internal/lease/fair.go).
	proto lease.FairProtocol
	sub   *wire.Subscription // the acquisition's, when it blocks
}

// newWaiter prepares a fair acquisition of k. join: it waits in the queue
// when it cannot take the lock at once.
func (s *Session) newWaiter(k lease.Keys, join bool) *waiter {
	w := &waiter{id: s.id + "." + strconv.FormatUint(s.waiterSeq.Add(1), 10), keys: k}
	w.proto.Args = lease.NewFair(k, w.id, join)
	return w
}

// addWaiter registers w as queued, so that the session wakes it when it
// takes w's name (wakeWaitersLocked).
func (s *Session) addWaiter(w *waiter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.reg.waiting[w] = struct{}{}
	}
}

// dropWaiter unregisters w (see addWaiter).
func (s *Session) dropWaiter(w *waiter) {
	s.mu.Lock()
	delete(s.reg.waiting, w)
	s.mu.Unlock()
}

// leave gives up a fair acquisition's place, if it may have one: it is
// removed from the queue, best effort (if that fails, its lease ends within
// a TTL), with a tombstone that keeps an attempt still on its way from
// queueing it again. Like dispose, it runs within ctx, or in the background
// once ctx has ended. The caller must be
// registered with s.work.
func (a *acquisition) leave(ctx context.Context) {
	if a.w == nil || !a.queued {
		return
	}
	a.queued = false
	s, w := a.s, a.w
	s.dropWaiter(w)
	s.bestEffortCleanup(ctx, func(ctx context.Context) { w.proto.Leave(ctx, s.wire.Combiner(), w.keys.Lock, s.ttlArg) })
}
