package redisleader

// registry.go: what a session holds and waits for, and how a lock joins
// and leaves it: Session.add registers a lock, gives it its slot in the
// heartbeat's ring and wakes the heartbeat, all under Session.mu.

// registry is what a session holds and waits for: the held locks (by
// identity and by name), the leaderships Election.Run releases itself, and
// the fair acquisitions that may have a place in a queue. Session.mu
// guards it.
type registry struct {
	locks   map[*Lock]struct{}
	names   map[string]*Lock     // the held lock of each name in locks
	terms   map[*Lock]*term      // leaderships Election.Run releases itself (run.go)
	waiting map[*waiter]struct{} // fair acquisitions that may have a place in a queue (fair.go)
}

func newRegistry() registry {
	return registry{
		locks:   make(map[*Lock]struct{}),
		names:   make(map[string]*Lock),
		terms:   make(map[*Lock]*term),
		waiting: make(map[*waiter]struct{}),
	}
}

// hold registers l as held, its name's lock.
func (r *registry) hold(l *Lock) {
	r.locks[l] = struct{}{}
	r.names[l.lease.Keys.Name] = l
}

// drop forgets l, and reports whether it was held.
func (r *registry) drop(l *Lock) (held bool) {
	_, held = r.locks[l]
	delete(r.locks, l)
	if r.names[l.lease.Keys.Name] == l {
		delete(r.names, l.lease.Keys.Name)
	}
	return held
}

// add registers an acquired lock with the heartbeat and wakes the session's
// fair waiters for its name, which end with ErrLocked (a session never waits
// for itself; default-mode waiters hear the acquire's own message). It fails
// when the session was closed meanwhile; the caller then releases the key.
func (s *Session) add(l *Lock) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	s.reg.hold(l)
	l.slot = s.hb.ring.add(l)
	s.hb.wake()
	s.wakeWaitersLocked(l.lease.Keys.Name)
	return nil
}

// wakeWaitersLocked wakes the session's queued waiters for name, which has
// just become the session's: they find it held by their next look and end
// (a session never waits for itself). A waiter not yet registered makes
// that check after it registers. s.mu must be held.
func (s *Session) wakeWaitersLocked(name string) {
	for w := range s.reg.waiting {
		if w.keys.Name == name && w.sub != nil {
			w.sub.Poke()
		}
	}
}

func (s *Session) remove(l *Lock) {
	s.mu.Lock()
	if s.reg.drop(l) {
		s.hb.ring.remove(l, l.slot)
	}
	s.mu.Unlock()
}

// wake kicks the heartbeat if it is idle. Session.mu must be held.
func (h *heartbeatState) wake() {
	if h.idle {
		h.idle = false
		select {
		case h.kick <- struct{}{}:
		default:
		}
	}
}
