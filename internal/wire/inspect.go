package wire

import (
	"time"

	"github.com/redis/go-redis/v9"
)

// What the tests of the floors above read of the transport, and the few
// things they do to it, from outside the package.

// Queued reports how many calls wait for a batch.
func (c *Combiner) Queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}

// OnWire reports the calls and flushers on the wire (at most MaxOnWire),
// and the releases' pipelines with calls taken along.
func (c *Combiner) OnWire() (onWire, carried int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.onWire, c.carried
}

// PubSub returns the watcher's pub/sub connection, nil before first use.
func (t *Transport) PubSub() *redis.PubSub {
	t.watch.mu.Lock()
	defer t.watch.mu.Unlock()
	return t.watch.ps
}

// PruneIdle unsubscribes the channels nobody has watched since before
// now minus min(TTL, MaxIdleTime).
func (t *Transport) PruneIdle(now time.Time) {
	t.watch.mu.Lock()
	defer t.watch.mu.Unlock()
	t.watch.pruneLocked(now)
}

// Channels reports how many channels the watcher knows, watched or idle.
func (t *Transport) Channels() int {
	t.watch.mu.Lock()
	defer t.watch.mu.Unlock()
	return len(t.watch.chans)
}

// Watchers reports how many subscriptions watch channel, and whether the
// watcher knows the channel at all (watched or idle).
func (t *Transport) Watchers(channel string) (subs int, known bool) {
	t.watch.mu.Lock()
	defer t.watch.mu.Unlock()
	cs := t.watch.chans[channel]
	if cs == nil {
		return 0, false
	}
	return len(cs.subs), true
}

// Draining reports whether Drain has reached c: its calls go straight to
// Redis from then on.
func (c *Combiner) Draining() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// Cluster reports whether the combiner takes its client for a Cluster's.
func (c *Combiner) Cluster() bool { return c.cluster }
