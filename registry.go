package redisleader

// registry.go: what a session holds and waits for. A lock joins it where it
// is armed (Session.add, acquire.go), where the heartbeat gives it its slot
// in its ring (internal/ring) later, and leaves it where it ends
// (Session.remove, lock.go), both under Session.mu.

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
