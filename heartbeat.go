package redisleader

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// Client is the part of go-redis this package uses. *redis.Client (also as
// returned by redis.NewFailoverClient), *redis.ClusterClient, *redis.Ring and
// redis.UniversalClient all implement it, as does any wrapper that embeds one.
type Client interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
}

// A Session is one participant's lease on Redis: a random owner ID, a TTL,
// and one heartbeat goroutine that renews every key the session holds, all in
// one pipelined round trip per renewal round.
//
// Ownership of each key ends at a local deadline computed on the monotonic
// clock from the send time of the last successful acquire or renew:
// D = sendTime + TTL·(1−drift) − margin. A timer at D, not the heartbeat,
// signals the loss, so a stuck Redis call or a starved goroutine cannot
// extend ownership past the moment Redis may give the key to someone else.
//
// A Session is safe for concurrent use. Its zero value is not usable: create
// one with NewSession and end it with Close.
type Session struct {
	client Client
	cfg    config
	id     string
	ttlArg any // the TTL in ms, boxed once for script arguments

	mu     sync.Mutex // protects locks and err
	locks  map[*Lock]struct{}
	err    error // nil until Close
	done   chan struct{}
	kick   chan struct{} // capacity 1: a lock was added, wake the heartbeat
	cancel context.CancelFunc
	hbDone chan struct{} // closed when the heartbeat goroutine has returned
}

// NewSession validates the options and starts the session's heartbeat
// goroutine. It does no I/O: an unreachable Redis shows up in the first
// acquire. Bad input (a nil client, an option that breaks a rule) returns an
// error matching ErrInvalid that names the option and the rule.
//
// The caller must call Close to stop the heartbeat and release what the
// session holds.
func NewSession(client Client, opts ...Option) (*Session, error) {
	if client == nil || isNilPointer(client) {
		return nil, invalidf("NewSession: client must not be nil")
	}
	cfg, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Session{
		client: client,
		cfg:    cfg,
		id:     uuid.NewString(),
		ttlArg: strconv.FormatInt(cfg.ttl.Milliseconds(), 10),
		locks:  make(map[*Lock]struct{}),
		done:   make(chan struct{}),
		kick:   make(chan struct{}, 1),
		cancel: cancel,
		hbDone: make(chan struct{}),
	}
	warnRiskyClient(client, cfg)
	go s.heartbeat(ctx)
	return s, nil
}

// ID returns the session's random owner ID (a UUID).
func (s *Session) ID() string { return s.id }

// Done returns a channel that is closed when the session ends (Close was
// called). It is never closed otherwise. Blocking calls on the session return
// ErrSessionClosed once it is closed.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err returns nil while the session is open and ErrSessionClosed after Close.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close ends the session: it stops the heartbeat goroutine and waits for it,
// ends every lock the session holds with ErrSessionClosed, and then releases
// their keys in Redis (compare-and-delete, one pipelined round trip), so that
// waiting owners can take over at once. The release is bounded by ctx and by
// the call timeout; if it fails, the keys expire after at most one TTL and the
// error is returned. When Close returns, no goroutine of the session is left.
// Close is idempotent: later calls return nil.
func (s *Session) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return nil
	}
	s.err = ErrSessionClosed
	close(s.done)
	held := make([]*Lock, 0, len(s.locks))
	for l := range s.locks {
		held = append(held, l)
	}
	s.mu.Unlock()

	s.cancel()
	<-s.hbDone

	var toRelease []*Lock
	for _, l := range held {
		if l.end(ErrSessionClosed) {
			toRelease = append(toRelease, l)
		}
	}
	return s.releaseAll(ctx, toRelease)
}

// releaseAll deletes the keys of ended locks, one pipelined round trip.
func (s *Session) releaseAll(ctx context.Context, locks []*Lock) error {
	switch len(locks) {
	case 0:
		return nil
	case 1:
		return locks[0].del(ctx)
	}
	ctx, cancel := s.callContext(ctx, time.Time{})
	defer cancel()
	pipe := s.client.Pipeline()
	cmds := make([]*redis.Cmd, len(locks))
	for i, l := range locks {
		cmds[i] = releaseScript.Eval(ctx, pipe, []string{l.keys.lock}, l.token, l.keys.channel)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("redisleader: releasing %d keys on close (they expire within the TTL): %w", len(locks), err)
	}
	return nil
}

// callContext bounds one Redis call by the call timeout and, when deadline is
// not zero, by a lease's local deadline. It reuses ctx when ctx already ends
// sooner, to save the allocation.
func (s *Session) callContext(ctx context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	d := time.Now().Add(s.cfg.callTimeout)
	if !deadline.IsZero() && deadline.Before(d) {
		d = deadline
	}
	if cur, ok := ctx.Deadline(); ok && !cur.After(d) {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, d)
}

// add registers an acquired lock with the heartbeat. It fails when the
// session was closed meanwhile; the caller then releases the key.
func (s *Session) add(l *Lock) error {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return s.err
	}
	s.locks[l] = struct{}{}
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
	return nil
}

func (s *Session) remove(l *Lock) {
	s.mu.Lock()
	delete(s.locks, l)
	s.mu.Unlock()
}

// heartbeat is the session's one goroutine. It sleeps while nothing is held;
// otherwise it renews every held key each renew interval, and sooner (after a
// jittered retry delay) when a round failed. It never decides that a lock is
// lost by itself except on a "not owner" reply: deadlines are timer-driven.
func (s *Session) heartbeat(ctx context.Context) {
	defer close(s.hbDone)
	t := time.NewTimer(0)
	if !t.Stop() {
		<-t.C
	}
	defer t.Stop()
	armed := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
			if !armed {
				t.Reset(s.cfg.renewInterval)
				armed = true
			}
			continue
		case <-t.C:
			armed = false
		}
		held, failed := s.renewRound(ctx)
		if s.cfg.onRound != nil {
			s.cfg.onRound(held, failed)
		}
		switch {
		case failed:
			t.Reset(min(s.cfg.renewInterval, s.retryDelay()))
			armed = true
		case held > 0:
			t.Reset(s.cfg.renewInterval)
			armed = true
		}
	}
}

// renewRound renews every held lock in one round trip and reports how many
// locks are still held and whether any renewal failed with an error (to be
// retried soon). The round's context ends at the earliest local deadline.
func (s *Session) renewRound(ctx context.Context) (held int, failed bool) {
	s.mu.Lock()
	locks := make([]*Lock, 0, len(s.locks))
	for l := range s.locks {
		locks = append(locks, l)
	}
	s.mu.Unlock()
	if len(locks) == 0 {
		return 0, false
	}
	sent := time.Now()
	earliest := time.Time{}
	live := locks[:0]
	for _, l := range locks {
		d, ok := l.liveDeadline(sent)
		if !ok {
			continue // its timer ends it; never renew past the deadline
		}
		if earliest.IsZero() || d.Before(earliest) {
			earliest = d
		}
		live = append(live, l)
	}
	if len(live) == 0 {
		return 0, false
	}
	cctx, cancel := s.callContext(ctx, earliest)
	defer cancel()
	replies, errs := s.runRenew(cctx, live)
	for i, l := range live {
		switch {
		case errs[i] != nil:
			if ctx.Err() != nil {
				return len(live), false // closing
			}
			failed = true
			s.cfg.logger.Warn("redisleader: renewal failed; retrying until the local deadline",
				"name", l.keys.name, "fence", l.fence, "deadline_in", time.Until(earliest), "err", errs[i])
		case replies[i] == 0:
			l.lose(ErrNotOwner)
		default:
			l.extend(sent)
		}
	}
	return len(live), failed
}

// runRenew sends the renew script for every lock: a plain call for one lock
// (Script.Run handles NOSCRIPT), a pipeline of EVALSHA for several, re-sent
// once after loading the script if the server had lost it.
func (s *Session) runRenew(ctx context.Context, locks []*Lock) ([]int64, []error) {
	replies := make([]int64, len(locks))
	errs := make([]error, len(locks))
	if len(locks) == 1 {
		replies[0], errs[0] = renewScript.Run(ctx, s.client, []string{locks[0].keys.lock}, locks[0].token, s.ttlArg).Int64()
		return replies, errs
	}
	for attempt := 0; attempt < 2; attempt++ {
		pipe := s.client.Pipeline()
		cmds := make([]*redis.Cmd, len(locks))
		for i, l := range locks {
			cmds[i] = renewScript.EvalSha(ctx, pipe, []string{l.keys.lock}, l.token, s.ttlArg)
		}
		_, _ = pipe.Exec(ctx) // per-command errors are read below
		noScript := false
		for i, c := range cmds {
			replies[i], errs[i] = c.Int64()
			if redis.HasErrorPrefix(errs[i], "NOSCRIPT") {
				noScript = true
			}
		}
		if !noScript {
			break
		}
		if err := renewScript.Load(ctx, s.client).Err(); err != nil {
			break
		}
	}
	return replies, errs
}

// retryDelay is the retry interval plus a random jitter in [0, retryJitter].
func (s *Session) retryDelay() time.Duration {
	d := s.cfg.retryInterval
	if j := s.cfg.retryJitter; j > 0 {
		d += rand.N(j + 1)
	}
	return d
}

// warnRiskyClient logs, once per session, client settings that make calls
// outlive their deadlines. Safety does not depend on them (scripts are
// idempotent and loss is timer-driven), but Close and blocking calls may
// take up to the client's socket timeouts to return.
func warnRiskyClient(c Client, cfg config) {
	var opt *redis.Options
	switch cl := c.(type) {
	case *redis.Client:
		opt = cl.Options()
	case *redis.ClusterClient:
		o := cl.Options()
		if !o.ContextTimeoutEnabled {
			cfg.logger.Warn("redisleader: redis.ClusterOptions.ContextTimeoutEnabled is false, so go-redis ignores call deadlines on sockets; set it to true so calls end within the call timeout",
				"call_timeout", cfg.callTimeout, "read_timeout", o.ReadTimeout)
		}
		return
	default:
		return
	}
	if !opt.ContextTimeoutEnabled {
		cfg.logger.Warn("redisleader: redis.Options.ContextTimeoutEnabled is false, so go-redis ignores call deadlines on sockets; set it to true so calls end within the call timeout",
			"call_timeout", cfg.callTimeout, "read_timeout", opt.ReadTimeout)
	}
}

// isNilPointer reports a typed nil (*redis.Client)(nil) hidden in the interface.
func isNilPointer(c Client) bool {
	switch v := c.(type) {
	case *redis.Client:
		return v == nil
	case *redis.ClusterClient:
		return v == nil
	case *redis.Ring:
		return v == nil
	}
	return false
}
