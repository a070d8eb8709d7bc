package wire

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client is the part of go-redis the transport uses: running a command
// (scripts, as EVALSHA/EVAL), pipelining several, and one pub/sub
// connection. The root package's Client has the same methods, so either
// is assignable to the other.
type Client interface {
	Process(ctx context.Context, cmd redis.Cmder) error
	Pipeline() redis.Pipeliner
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// Config is what the transport needs to know of the session it serves.
type Config struct {
	Client      Client        // the main client: the combiner's and the pub/sub connection's
	CallTimeout time.Duration // bounds every call (Bound) and every pub/sub request
	// TTL sets the watcher's pace: an idle channel stays subscribed for
	// min(TTL, a minute), and a quiet connection is pinged after
	// max(3 TTL, 10s).
	TTL        time.Duration
	RetryDelay func() time.Duration // before the watcher reads again after a broken connection
	Logger     *slog.Logger         // told of a hook that ended a batch's goroutine
	Done       <-chan struct{}      // closed when the session starts closing
}

// Transport is a session's way to Redis: its per-call deadlines (Bound),
// the combiners that share pipelines among its script calls, and its one
// pub/sub connection (Subscribe). Its zero value is not usable: call Init.
type Transport struct {
	cfg       Config
	dones     doneStates  // idle timers for the contexts of Bound
	combine   Combiner    // calls through cfg.Client waiting to share a pipeline
	combiners []*Combiner // combine and those of NewCombiner; Drain waits for them
	watch     watcher     // the pub/sub connection, started on first use
}

// Init prepares t for cfg; it does no I/O and starts no goroutine.
func (t *Transport) Init(cfg Config) {
	t.cfg = cfg
	t.NewCombiner(&t.combine, cfg.Client)
	t.watch = watcher{t: t, chans: make(map[string]*channelSubs)}
}

// Drain makes later calls through the combiners go straight to Redis and
// waits until none of their calls or batches is on the wire (each ends by
// its deadline).
func (t *Transport) Drain() {
	for _, c := range t.combiners {
		c.drain()
	}
}

// StopWatcher stops the pub/sub connection and waits for its goroutines;
// call it once, after Done is closed.
func (t *Transport) StopWatcher() { t.watch.close() }

// Go is sync.WaitGroup.Go, which needs Go 1.25: the module's go line is
// 1.24 (see go.mod), so the library and its tests start goroutines with it.
func Go(wg *sync.WaitGroup, f func()) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		f()
	}()
}
