package redisleader

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
	r.names[l.keys.name] = l
}

// drop forgets l, and reports whether it was held.
func (r *registry) drop(l *Lock) (held bool) {
	_, held = r.locks[l]
	delete(r.locks, l)
	if r.names[l.keys.name] == l {
		delete(r.names, l.keys.name)
	}
	return held
}
