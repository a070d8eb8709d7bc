package redisleader

import (
	"io"
	"log/slog"
	"time"

	"github.com/redisleader/redisleader/internal/durations"
	"github.com/redisleader/redisleader/internal/wire"
)

// An Option configures a Session. Options are created by the With* functions
// of this package; the set is sealed (Option cannot be implemented outside it).
// NewSession validates the combined options and reports the first broken rule.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// config is the validated, fully defaulted configuration of a Session.
type config struct {
	durations.Config // the durations, their defaults and rules (internal/durations)
	fair             bool
	logger           *slog.Logger
	hooks            Hooks
	test             testHooks // nil in production
}

// WithTTL sets the lease TTL: how long Redis keeps a key after the last
// successful acquire or renew. It bounds how long followers wait after a
// leader crashes. The default is 15s. It must be a whole number of
// milliseconds (Redis's unit) from 10ms to 24h, and at least 20 × the margin.
func WithTTL(d time.Duration) Option {
	return optionFunc(func(c *config) { c.TTL = d })
}

// WithRenewInterval sets how often the session's heartbeat renews every key
// it holds, in pipelined round trips of up to 100 keys (one for a session
// that holds no more) spread over the first half of the interval. The
// default is TTL/3; it must be at
// least 1ms and at most TTL/3, so that at least two renewals fit in a lease.
func WithRenewInterval(d time.Duration) Option {
	return optionFunc(func(c *config) { c.RenewInterval, c.RenewIntervalSet = d, true })
}

// WithCallTimeout bounds every Redis call the session makes; calls made on
// behalf of a held lease are further bounded by that lease's local deadline.
// The default is min(TTL/6, 1s). It must be at least 1ms and small enough that
// a renewal that times out can be retried once before the local deadline:
// renewInterval + 2 × callTimeout + min(renewInterval, retryInterval +
// retryJitter) < TTL·(1−drift) − margin.
//
// The bound is enforced through the context passed to go-redis, which needs
// a client built with ContextTimeoutEnabled (see the package documentation,
// section Timing).
func WithCallTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.CallTimeout, c.CallTimeoutSet = d, true })
}

// WithDriftFactor sets ρ, the assumed relative clock-rate error between this
// process and the Redis server, by which the local deadline falls short of
// the TTL (see the package documentation, section Timing). The default is
// 0.01; it must be within [0.001, 0.1].
func WithDriftFactor(f float64) Option {
	return optionFunc(func(c *config) { c.Drift = f })
}

// WithMargin sets the fixed safety margin subtracted from the local deadline
// (expiry granularity, millisecond rounding, timer latency). The default is
// max(5ms, TTL/100); it must be at least 2ms and at most TTL/20.
func WithMargin(d time.Duration) Option {
	return optionFunc(func(c *config) { c.Margin, c.MarginSet = d, true })
}

// WithRetryInterval sets the base delay before an acquire is retried after a
// Redis error, or while the holder's key has no TTL or the session's pub/sub
// subscription is not confirmed (see the package documentation, section
// Waiting), and before a failed renewal is retried. The default is
// min(100ms, TTL/10); it must be at least 1ms and at most the TTL.
func WithRetryInterval(d time.Duration) Option {
	return optionFunc(func(c *config) { c.RetryInterval, c.RetryIntervalSet = d, true })
}

// WithRetryJitter sets the largest random delay added to each retry, so that
// candidates do not retry in lockstep. The default is retryInterval/2, but at
// least 1ms; it must be 0 (no jitter) or from 1ms to the TTL.
func WithRetryJitter(d time.Duration) Option {
	return optionFunc(func(c *config) { c.RetryJitter, c.RetryJitterSet = d, true })
}

// WithTakeoverDelay makes every acquisition (Lock, TryLock, Campaign, Run)
// wait d after its acquire succeeded, holding and renewing the key, before it
// is handed to the caller. It protects against a former owner whose key Redis
// dropped early while that owner still believes it holds the name: a forward
// step of the Redis host's wall clock by up to d, or a Redis restart without
// persistence (which loses every key at once; a former owner notices at its
// next renewal, so d ≥ renewInterval + callTimeout covers a reachable Redis
// and d ≥ TTL covers every case). The former owner's local deadline passes
// before the new owner starts. The cost is d added to every takeover,
// including after a clean release. Consul calls the same idea lock-delay.
// The default is 0 (no delay); it must be 0 or from 1ms to 24h. See
// docs/RELIABILITY.md for the measurements.
func WithTakeoverDelay(d time.Duration) Option {
	return optionFunc(func(c *config) { c.TakeoverDelay = d })
}

// WithReplicaAcks follows every acquire and renewal round trip, on the same
// connection, by WAIT n timeout, and counts it only if n replicas
// acknowledged it. An unacknowledged acquire is not taken (its key is
// deleted; TryLock returns ErrReplication, blocking acquisitions retry); an
// unacknowledged renewal is retried until the local deadline. This narrows
// failovers, but WAIT is not consensus: see docs/topologies.md.
//
// The default is off. n must be at least 1, and timeout a positive whole
// number of milliseconds below the call timeout, leaving 1/hz of room (an
// unacknowledged WAIT takes up to timeout + 1/hz: 100ms at Redis's default
// hz 10). Not with a *redis.ClusterClient, a wrapper around one or its
// AutoPipeline client: WAIT must run on the connection that wrote.
func WithReplicaAcks(n int, timeout time.Duration) Option {
	return optionFunc(func(c *config) { c.Acks, c.AcksSet = wire.Acks{N: n, Timeout: timeout}, true })
}

// WithFairness makes every blocking acquisition of the session (Lock,
// Campaign, Run) wait in a first-come, first-served queue per name, and
// TryLock succeed only if the name is free and nobody waits for it. The
// package documentation, section Fairness, says what it guarantees and
// costs. The default is off: waiters race for a released name, which is
// faster (no queue to keep) but lets one waiter win again and again.
func WithFairness() Option {
	return optionFunc(func(c *config) { c.fair = true })
}

// WithLogger sets the logger for renewal failures, lost leases and risky
// client settings. The default discards everything. A nil logger is an error.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) {
		if l == nil {
			c.logger = nilLogger
			return
		}
		c.logger = l
	})
}

// nilLogger marks an explicit WithLogger(nil) so validation can reject it.
var nilLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

var discardLogger = slog.New(slog.DiscardHandler)

// buildConfig applies the options over the defaults, derives the dependent
// defaults and validates the result. It is the one place defaults live.
func buildConfig(opts []Option) (config, error) {
	c := config{Config: durations.Defaults(), logger: discardLogger}
	if err := eachOption("Option", opts, func(o Option) error { o.apply(&c); return nil }); err != nil {
		return config{}, err
	}
	if err := c.Derive(); err != nil {
		return config{}, err
	}
	if c.logger == nilLogger {
		return c, invalidf("WithLogger(nil): pass a logger, or omit the option to discard logs")
	}
	return c, c.Validate()
}
