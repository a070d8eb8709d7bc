package redisleader

import (
	"fmt"
	"github.com/redisleader/redisleader/internal/wire"
	"io"
	"log/slog"
	"math/rand/v2"
	"time"
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
// Fields that have derived defaults record whether the user set them.
type config struct {
	ttl              time.Duration
	renewInterval    time.Duration
	renewIntervalSet bool
	callTimeout      time.Duration
	callTimeoutSet   bool
	drift            float64
	margin           time.Duration
	marginSet        bool
	retryInterval    time.Duration
	retryIntervalSet bool
	retryJitter      time.Duration
	retryJitterSet   bool
	takeoverDelay    time.Duration
	acks             wire.Acks
	acksSet          bool
	fair             bool
	logger           *slog.Logger
	hooks            Hooks
	test             testHooks // nil in production
	// validity is how long after the send time of a successful acquire or
	// renew this process may believe it holds the key: TTL·(1−ρ) − margin.
	validity time.Duration
}

// Defaults, stated once (and in each option's doc). Derived defaults depend
// on the TTL and are filled in by buildConfig after all options are applied.
const (
	defaultTTL           = 15 * time.Second
	defaultDrift         = 0.01
	defaultRetryInterval = 100 * time.Millisecond // at most TTL/10

	minMargin      = 2 * time.Millisecond
	minDrift       = 0.001
	maxDrift       = 0.1
	minTTL         = 10 * time.Millisecond
	minInterval    = time.Millisecond // every other duration option, unless 0 means off
	maxTTL         = 24 * time.Hour
	defaultMaxCall = time.Second
)

// WithTTL sets the lease TTL: how long Redis keeps a key after the last
// successful acquire or renew. It bounds how long followers wait after a
// leader crashes. The default is 15s. It must be a whole number of
// milliseconds (Redis's unit) from 10ms to 24h, and at least 20 × the margin.
func WithTTL(d time.Duration) Option {
	return optionFunc(func(c *config) { c.ttl = d })
}

// WithRenewInterval sets how often the session's heartbeat renews every key
// it holds, in pipelined round trips of up to 100 keys (one for a session
// that holds no more) spread over the first half of the interval. The
// default is TTL/3; it must be at
// least 1ms and at most TTL/3, so that at least two renewals fit in a lease.
func WithRenewInterval(d time.Duration) Option {
	return optionFunc(func(c *config) { c.renewInterval, c.renewIntervalSet = d, true })
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
	return optionFunc(func(c *config) { c.callTimeout, c.callTimeoutSet = d, true })
}

// WithDriftFactor sets ρ, the assumed relative clock-rate error between this
// process and the Redis server, by which the local deadline falls short of
// the TTL (see the package documentation, section Timing). The default is
// 0.01; it must be within [0.001, 0.1].
func WithDriftFactor(f float64) Option {
	return optionFunc(func(c *config) { c.drift = f })
}

// WithMargin sets the fixed safety margin subtracted from the local deadline
// (expiry granularity, millisecond rounding, timer latency). The default is
// max(5ms, TTL/100); it must be at least 2ms and at most TTL/20.
func WithMargin(d time.Duration) Option {
	return optionFunc(func(c *config) { c.margin, c.marginSet = d, true })
}

// WithRetryInterval sets the base delay before an acquire is retried after a
// Redis error, or while the holder's key has no TTL or the session's pub/sub
// subscription is not confirmed (see the package documentation, section
// Waiting), and before a failed renewal is retried. The default is
// min(100ms, TTL/10); it must be at least 1ms and at most the TTL.
func WithRetryInterval(d time.Duration) Option {
	return optionFunc(func(c *config) { c.retryInterval, c.retryIntervalSet = d, true })
}

// WithRetryJitter sets the largest random delay added to each retry, so that
// candidates do not retry in lockstep. The default is retryInterval/2, but at
// least 1ms; it must be 0 (no jitter) or from 1ms to the TTL.
func WithRetryJitter(d time.Duration) Option {
	return optionFunc(func(c *config) { c.retryJitter, c.retryJitterSet = d, true })
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
	return optionFunc(func(c *config) { c.takeoverDelay = d })
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
	return optionFunc(func(c *config) { c.acks, c.acksSet = wire.Acks{N: n, Timeout: timeout}, true })
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
	c := config{
		ttl:    defaultTTL,
		drift:  defaultDrift,
		logger: discardLogger,
	}
	for _, o := range opts {
		if o == nil {
			return config{}, invalidf("nil Option")
		}
		o.apply(&c)
	}
	switch {
	case c.ttl < minTTL:
		return config{}, invalidf("WithTTL(%v) must be at least %v", c.ttl, minTTL)
	case c.ttl > maxTTL:
		return config{}, invalidf("WithTTL(%v) must be at most %v", c.ttl, maxTTL)
	case c.ttl%time.Millisecond != 0:
		return config{}, invalidf("WithTTL(%v) must be a whole number of milliseconds", c.ttl)
	}
	if !c.renewIntervalSet {
		c.renewInterval = c.ttl / 3
	}
	if !c.callTimeoutSet {
		c.callTimeout = min(c.ttl/6, defaultMaxCall)
	}
	if !c.marginSet {
		c.margin = max(5*time.Millisecond, c.ttl/100)
	}
	if !c.retryIntervalSet {
		c.retryInterval = min(defaultRetryInterval, c.ttl/10)
	}
	if !c.retryJitterSet {
		c.retryJitter = max(c.retryInterval/2, minInterval)
	}
	c.validity = time.Duration(float64(c.ttl)*(1-c.drift)) - c.margin
	return c, c.validate()
}

func (c *config) validate() error {
	switch {
	case c.logger == nilLogger:
		return invalidf("WithLogger(nil): pass a logger, or omit the option to discard logs")
	case c.drift < minDrift || c.drift > maxDrift || c.drift != c.drift:
		return invalidf("WithDriftFactor(%v) must be within [%v, %v]", c.drift, minDrift, maxDrift)
	case c.margin < minMargin:
		return invalidf("WithMargin(%v) must be at least %v", c.margin, minMargin)
	case c.ttl < 20*c.margin:
		return invalidf("WithTTL(%v) must be at least 20 × margin (%v)", c.ttl, 20*c.margin)
	case c.renewInterval < minInterval:
		return invalidf("WithRenewInterval(%v) must be at least %v", c.renewInterval, minInterval)
	case c.renewInterval > c.ttl/3:
		return invalidf("WithRenewInterval(%v) must be at most TTL/3 (%v)", c.renewInterval, c.ttl/3)
	case c.retryInterval < minInterval:
		return invalidf("WithRetryInterval(%v) must be at least %v", c.retryInterval, minInterval)
	case c.retryInterval > c.ttl:
		return invalidf("WithRetryInterval(%v) must be at most the TTL (%v)", c.retryInterval, c.ttl)
	case c.retryJitter != 0 && c.retryJitter < minInterval:
		return invalidf("WithRetryJitter(%v) must be 0 (no jitter) or at least %v", c.retryJitter, minInterval)
	case c.retryJitter > c.ttl:
		return invalidf("WithRetryJitter(%v) must be at most the TTL (%v)", c.retryJitter, c.ttl)
	case c.takeoverDelay != 0 && c.takeoverDelay < minInterval:
		return invalidf("WithTakeoverDelay(%v) must be 0 (off) or at least %v", c.takeoverDelay, minInterval)
	case c.takeoverDelay > maxTTL:
		return invalidf("WithTakeoverDelay(%v) must be at most %v", c.takeoverDelay, maxTTL)
	case c.callTimeout < minInterval:
		return invalidf("WithCallTimeout(%v) must be at least %v", c.callTimeout, minInterval)
	case c.callTimeout > c.ttl: // also keeps the sum below from overflowing
		return invalidf("WithCallTimeout(%v) must be at most the TTL (%v)", c.callTimeout, c.ttl)
	case c.acksSet && c.acks.N < 1:
		return invalidf("WithReplicaAcks(%d, %v): the number of replicas must be at least 1", c.acks.N, c.acks.Timeout)
	case c.acksSet && (c.acks.Timeout <= 0 || c.acks.Timeout%time.Millisecond != 0):
		return invalidf("WithReplicaAcks(%d, %v): the timeout must be a positive whole number of milliseconds", c.acks.N, c.acks.Timeout)
	case c.acksSet && c.acks.Timeout >= c.callTimeout:
		return invalidf("WithReplicaAcks(%d, %v): the timeout must be below the call timeout (%v)", c.acks.N, c.acks.Timeout, c.callTimeout)
	case c.renewInterval+2*c.callTimeout+c.renewRetryMax() >= c.validity:
		name := fmt.Sprintf("WithCallTimeout(%v)", c.callTimeout)
		if !c.callTimeoutSet {
			name = fmt.Sprintf("the default call timeout (%v)", c.callTimeout)
		}
		return invalidf("%s must leave room for a retried renewal: renewInterval (%v) + 2 × callTimeout + retry delay (%v) must be less than TTL·(1−drift) − margin (%v)",
			name, c.renewInterval, c.renewRetryMax(), c.validity)
	}
	return nil
}

// renewRetryMax is the longest wait before a failed renewal is retried.
func (c *config) renewRetryMax() time.Duration {
	return min(c.renewInterval, c.retryInterval+max(c.retryJitter, 0))
}

// retryDelay is the retry interval plus a random jitter in [0, retryJitter].
func (c *config) retryDelay() time.Duration {
	d := c.retryInterval
	if j := c.retryJitter; j > 0 {
		d += rand.N(j + 1)
	}
	return d
}
