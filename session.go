package redisleader

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader/internal/lease"
	"github.com/redisleader/redisleader/internal/wire"
)

// Client is the part of go-redis this package uses: running a command
// (scripts, as EVALSHA/EVAL), pipelining several, and one pub/sub connection
// per session. *redis.Client (also from redis.NewFailoverClient),
// *redis.ClusterClient, redis.UniversalClient and any wrapper that embeds
// one implement it. Hooks added with AddHook see every command sent.
//
// NewSession and NewRedlockSession reject a *redis.Ring: each Ring client
// moves a down shard's keys on its own, so two clients can hold one name on
// different shards. They recognise a Ring or ClusterClient by its methods,
// also embedded in a wrapper (as a pointer, or in an embedded interface) or
// under an AutoPipeline client (go-redis v9.22+), which counts as the client
// under it; not held in a named field.
type Client interface {
	Process(ctx context.Context, cmd redis.Cmder) error
	Pipeline() redis.Pipeliner
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// A Session is one participant's lease on Redis: a TTL and one heartbeat
// goroutine that renews every key the session holds once per renewal round,
// in pipelined round trips of up to 100 keys (heartbeat.go), plus (on first
// use) one pub/sub connection
// shared by everything in the session that waits for a name. Ownership of
// each key ends at a local deadline (see the package documentation, section
// Timing).
//
// A Session is safe for concurrent use. Its zero value is not usable: create
// one with NewSession or NewRedlockSession and end it with Close.
type Session struct {
	// wire is how calls reach Redis: per-call deadlines, the combiners, and
	// the pub/sub connection, on the only server or Redlock's first node.
	wire   wire.Transport
	place  place // where the leases live: one server, or a Redlock quorum
	cfg    config
	ttlArg any // the TTL in ms, boxed once for script arguments

	// unsupported is what the place cannot do (place.supports), asked once
	// when the session starts: nil for every feature on one server.
	unsupported [nFeatures]error

	mu     sync.Mutex     // protects reg, err and hb (ring, stale, idle); orders work.Add before Close
	reg    registry       // what the session holds and waits for (registry.go)
	err    error          // nil until Close
	done   chan struct{}  // closed when Close starts
	closed chan struct{}  // closed when the first Close has finished
	hb     heartbeatState // the heartbeat's ring, stale tokens and signals (heartbeat.go)
	work   sync.WaitGroup // acquisitions in flight and Observe goroutines
	left   leftCalls      // Redlock's calls that their operation left behind (redlock.go)
	// id names the session's wake-up channels and waiters (fair mode)
	id        string
	waiterSeq atomic.Uint64 // numbers the session's waiters
	// names are the keys of the names Lock and TryLock were given
	// (keysOf, acquire.go).
	names struct {
		mu sync.RWMutex
		m  map[string]lease.Keys
	}
}

// NewSession validates the options and starts the session's heartbeat
// goroutine. It does no I/O: an unreachable Redis shows up in the first
// acquire. Bad input (a nil client, an option that breaks a rule) returns an
// error matching ErrInvalid that names the option and the rule.
//
// The caller must call Close to stop the heartbeat and release what the
// session holds.
func NewSession(client Client, opts ...Option) (*Session, error) {
	kind := wire.KindOf(client)
	switch kind {
	case wire.KindNil:
		return nil, invalidf("NewSession: client must not be nil")
	case wire.KindRing:
		return nil, invalidf(wire.RingRejectf, "NewSession: the client", client)
	}
	cfg, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	if kind == wire.KindCluster && cfg.Acks.N > 0 {
		return nil, invalidf("WithReplicaAcks(%d, %v) needs WAIT on the connection that wrote, which a cluster client (%T is or wraps a *redis.ClusterClient) does not give; use it with a *redis.Client (also from redis.NewFailoverClient)",
			cfg.Acks.N, cfg.Acks.Timeout, client)
	}
	return startSession(client, cfg, func(s *Session) place {
		return &node{Node: lease.Node{T: &s.wire, C: client, Acks: cfg.Acks, Log: cfg.logger}, c: client}
	}), nil
}

// node is the place of a session on one Redis server: lease.Node, whose
// Acquire, Renew, Release, ReleaseAll, Inspect and Proclaim the session
// calls, and the rest of place here; c is the session's client.
type node struct {
	lease.Node // Acquire, Renew, Release, ReleaseAll, Inspect, Proclaim
	c          Client
}

func (n *node) each(f func(c Client)) { f(n.c) }

func (n *node) supports(feature) error { return nil }

// startSession starts a session on a validated configuration, with pub/sub
// on client and its leases in the place that newPlace makes.
func startSession(client Client, cfg config, newPlace func(*Session) place) *Session {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Session{
		cfg:    cfg,
		ttlArg: strconv.FormatInt(cfg.TTL.Milliseconds(), 10),
		reg:    newRegistry(),
		id:     rand.Text(),
		done:   make(chan struct{}),
		closed: make(chan struct{}),
		hb:     newHeartbeatState(cfg.RenewInterval, cancel),
	}
	s.wire.Init(wire.Config{Client: client, CallTimeout: cfg.CallTimeout, TTL: cfg.TTL,
		RetryDelay: cfg.RetryDelay, Logger: cfg.logger, Done: s.done})
	s.place = newPlace(s)
	for f := range s.unsupported {
		s.unsupported[f] = s.place.supports(feature(f))
	}
	s.place.each(func(c Client) { wire.WarnRiskyClient(c, cfg.CallTimeout, cfg.logger) })
	wire.WarnGoRedis(client, cfg.logger) // internal/wire/goredis.go
	go s.heartbeat(ctx, false)
	return s
}

// Done returns a channel that is closed when Close is called. It is never
// closed otherwise. Blocking calls on the session return ErrSessionClosed
// once it is closed.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err returns nil while the session is open and ErrSessionClosed after Close.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close ends the session. Every lock it holds ends with ErrSessionClosed,
// and its key is released in one pipelined round trip, so waiters take
// over at once; Run releases its own terms (package documentation,
// Elections). Close then stops the heartbeat, the pub/sub connection,
// observers and acquisitions, and waits for them and Run's releases, so the
// client can be closed next. Blocking calls return ErrSessionClosed.
//
// Close returns when all that is done, or ctx's error when ctx ends first
// (the rest finishes in the background). A failed release is returned;
// those keys expire within one TTL. Later and concurrent calls wait for the
// first and return nil, or ctx's error when their own ctx ends first.
func (s *Session) Close(ctx context.Context) error {
	chain := termsOf(ctx)
	if chain.of(s) {
		// Called from onElected with its context, which ending self cancels:
		// keep only its deadline.
		var cancel context.CancelFunc
		ctx, cancel = wire.DeadlineOnly(ctx)
		defer cancel()
	}
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		select {
		case <-s.closed:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.err = ErrSessionClosed
	close(s.done)
	held, stale := slices.Collect(maps.Keys(s.reg.locks)), slices.Collect(maps.Keys(s.hb.stale))
	again := s.againLocked(held)
	clear(s.hb.stale)
	terms := maps.Clone(s.reg.terms)
	s.mu.Unlock()

	var relErr error
	var stopped <-chan struct{}
	func() {
		// Deferred, so that the session stops even if a hook on the client
		// ends this goroutine (runtime.Goexit) in the deletes (the keys not
		// deleted then expire).
		defer func() { s.hb.cancel(); stopped = s.stopped(terms, chain, again) }()
		relErr = s.releaseAll(ctx, append(s.endAll(held, terms), stale...))
	}()
	select {
	case <-stopped:
		return relErr
	case <-ctx.Done():
		return errors.Join(ctx.Err(), relErr)
	}
}

// endAll ends the held locks with ErrSessionClosed and returns those whose
// keys Close deletes: all but Run's terms, which Run deletes once onElected
// has returned, so that the next leader never starts while this one still
// works. Stale tokens (ended locks, terms too) are always Close's to delete:
// Run does not delete a term that was lost.
func (s *Session) endAll(locks []*Lock, terms map[*Lock]*term) []*Lock {
	keep := locks[:0]
	for _, l := range locks {
		l.end(ErrSessionClosed)
		if _, ok := terms[l]; !ok {
			keep = append(keep, l)
		}
	}
	return keep
}

// stopped returns a channel closed once the heartbeat, acquisitions in
// flight, the calls they left behind (detach), observers and the pub/sub
// connection have stopped, again's keys have been deleted once more, and
// Run has released its terms (except those in chain, which cannot
// meanwhile); it also closes s.closed then.
func (s *Session) stopped(terms map[*Lock]*term, chain *terms, again []*Lock) <-chan struct{} {
	stopped := make(chan struct{})
	go func() {
		<-s.hb.done
		s.work.Wait()
		s.left.wg.Wait()
		s.wire.Drain() // batches too may hold calls left behind
		if len(again) > 0 {
			_ = s.releaseAll(context.Background(), again) // bounded by the call timeout
		}
		s.wire.StopWatcher()
		for l, t := range terms {
			if !chain.has(l) {
				<-t.released
			}
		}
		close(stopped)
		close(s.closed)
	}()
	return stopped
}

// held returns the locks the session holds now.
func (s *Session) held() []*Lock {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Keys(s.reg.locks))
}

// releaseAll deletes the keys of ended locks, one pipelined round trip. A key
// that no longer holds a lock's token is not an error: the lock had already
// ended, or the delete's reply was lost and go-redis retried it.
func (s *Session) releaseAll(ctx context.Context, locks []*Lock) error {
	var failed []error
	if len(locks) == 0 {
		return nil
	}
	for _, d := range s.place.ReleaseAll(ctx, endings(locks), time.Time{}) {
		if d.Err != nil {
			failed = append(failed, d.Err)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("redisleader: releasing %d keys (%d failed; they expire within the TTL): %w", len(locks), len(failed), failed[0])
	}
	return nil
}
