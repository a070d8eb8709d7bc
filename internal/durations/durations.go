// Package durations is a session's durations: their defaults, some derived
// from the TTL, and the rules they keep together. The root's With* options
// set them; NewSession derives and validates them here, once. It knows
// nothing of Redis and of the session.
package durations

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/redisleader/redisleader/internal/lease"
	"github.com/redisleader/redisleader/internal/wire"
)

// Config is the validated, fully defaulted timing of a Session. Fields
// that have derived defaults record whether the user set them.
type Config struct {
	TTL              time.Duration
	RenewInterval    time.Duration
	RenewIntervalSet bool
	CallTimeout      time.Duration
	CallTimeoutSet   bool
	Drift            float64
	Margin           time.Duration
	MarginSet        bool
	RetryInterval    time.Duration
	RetryIntervalSet bool
	RetryJitter      time.Duration
	RetryJitterSet   bool
	TakeoverDelay    time.Duration
	Acks             wire.Acks
	AcksSet          bool
	// Validity is how long after the send time of a successful acquire or
	// renew this process may believe it holds the key: TTL·(1−ρ) − margin.
	Validity time.Duration
}

// Defaults, stated once (and in each option's doc). Derived defaults depend
// on the TTL and are filled in by Derive after all options are applied.
const (
	DefaultTTL           = 15 * time.Second
	DefaultDrift         = 0.01
	DefaultRetryInterval = 100 * time.Millisecond // at most TTL/10

	MinMargin      = 2 * time.Millisecond
	MinDrift       = 0.001
	MaxDrift       = 0.1
	MinTTL         = 10 * time.Millisecond
	MinInterval    = time.Millisecond // every other duration option, unless 0 means off
	MaxTTL         = 24 * time.Hour
	DefaultMaxCall = time.Second
)

// Defaults is the timing before any option.
func Defaults() Config { return Config{TTL: DefaultTTL, Drift: DefaultDrift} }

// Derive checks the TTL's own rule and fills in the defaults derived from
// it, for the durations the options did not set.
func (c *Config) Derive() error {
	switch {
	case c.TTL < MinTTL:
		return lease.Invalidf("WithTTL(%v) must be at least %v", c.TTL, MinTTL)
	case c.TTL > MaxTTL:
		return lease.Invalidf("WithTTL(%v) must be at most %v", c.TTL, MaxTTL)
	case c.TTL%time.Millisecond != 0:
		return lease.Invalidf("WithTTL(%v) must be a whole number of milliseconds", c.TTL)
	}
	if !c.RenewIntervalSet {
		c.RenewInterval = c.TTL / 3
	}
	if !c.CallTimeoutSet {
		c.CallTimeout = min(c.TTL/6, DefaultMaxCall)
	}
	if !c.MarginSet {
		c.Margin = max(5*time.Millisecond, c.TTL/100)
	}
	if !c.RetryIntervalSet {
		c.RetryInterval = min(DefaultRetryInterval, c.TTL/10)
	}
	if !c.RetryJitterSet {
		c.RetryJitter = max(c.RetryInterval/2, MinInterval)
	}
	c.Validity = time.Duration(float64(c.TTL)*(1-c.Drift)) - c.Margin
	return nil
}

// Validate checks the rules the durations keep together, once Derive
// has filled in the defaults.
func (c *Config) Validate() error {
	switch {
	case c.Drift < MinDrift || c.Drift > MaxDrift || c.Drift != c.Drift:
		return lease.Invalidf("WithDriftFactor(%v) must be within [%v, %v]", c.Drift, MinDrift, MaxDrift)
	case c.Margin < MinMargin:
		return lease.Invalidf("WithMargin(%v) must be at least %v", c.Margin, MinMargin)
	case c.TTL < 20*c.Margin:
		return lease.Invalidf("WithTTL(%v) must be at least 20 × margin (%v)", c.TTL, 20*c.Margin)
	case c.RenewInterval < MinInterval:
		return lease.Invalidf("WithRenewInterval(%v) must be at least %v", c.RenewInterval, MinInterval)
	case c.RenewInterval > c.TTL/3:
		return lease.Invalidf("WithRenewInterval(%v) must be at most TTL/3 (%v)", c.RenewInterval, c.TTL/3)
	case c.RetryInterval < MinInterval:
		return lease.Invalidf("WithRetryInterval(%v) must be at least %v", c.RetryInterval, MinInterval)
	case c.RetryInterval > c.TTL:
		return lease.Invalidf("WithRetryInterval(%v) must be at most the TTL (%v)", c.RetryInterval, c.TTL)
	case c.RetryJitter != 0 && c.RetryJitter < MinInterval:
		return lease.Invalidf("WithRetryJitter(%v) must be 0 (no jitter) or at least %v", c.RetryJitter, MinInterval)
	case c.RetryJitter > c.TTL:
		return lease.Invalidf("WithRetryJitter(%v) must be at most the TTL (%v)", c.RetryJitter, c.TTL)
	case c.TakeoverDelay != 0 && c.TakeoverDelay < MinInterval:
		return lease.Invalidf("WithTakeoverDelay(%v) must be 0 (off) or at least %v", c.TakeoverDelay, MinInterval)
	case c.TakeoverDelay > MaxTTL:
		return lease.Invalidf("WithTakeoverDelay(%v) must be at most %v", c.TakeoverDelay, MaxTTL)
	case c.CallTimeout < MinInterval:
		return lease.Invalidf("WithCallTimeout(%v) must be at least %v", c.CallTimeout, MinInterval)
	case c.CallTimeout > c.TTL: // also keeps the sum below from overflowing
		return lease.Invalidf("WithCallTimeout(%v) must be at most the TTL (%v)", c.CallTimeout, c.TTL)
	case c.AcksSet && c.Acks.N < 1:
		return lease.Invalidf("WithReplicaAcks(%d, %v): the number of replicas must be at least 1", c.Acks.N, c.Acks.Timeout)
	case c.AcksSet && (c.Acks.Timeout <= 0 || c.Acks.Timeout%time.Millisecond != 0):
		return lease.Invalidf("WithReplicaAcks(%d, %v): the timeout must be a positive whole number of milliseconds", c.Acks.N, c.Acks.Timeout)
	case c.AcksSet && c.Acks.Timeout >= c.CallTimeout:
		return lease.Invalidf("WithReplicaAcks(%d, %v): the timeout must be below the call timeout (%v)", c.Acks.N, c.Acks.Timeout, c.CallTimeout)
	case c.RenewInterval+2*c.CallTimeout+c.RenewRetryMax() >= c.Validity:
		name := fmt.Sprintf("WithCallTimeout(%v)", c.CallTimeout)
		if !c.CallTimeoutSet {
			name = fmt.Sprintf("the default call timeout (%v)", c.CallTimeout)
		}
		return lease.Invalidf("%s must leave room for a retried renewal: renewInterval (%v) + 2 × callTimeout + retry delay (%v) must be less than TTL·(1−drift) − margin (%v)",
			name, c.RenewInterval, c.RenewRetryMax(), c.Validity)
	}
	return nil
}

// RenewRetryMax is the longest wait before a failed renewal is retried.
func (c *Config) RenewRetryMax() time.Duration {
	return min(c.RenewInterval, c.RetryInterval+max(c.RetryJitter, 0))
}

// RetryDelay is the retry interval plus a random jitter in [0, retryJitter].
func (c *Config) RetryDelay() time.Duration {
	d := c.RetryInterval
	if j := c.RetryJitter; j > 0 {
		d += rand.N(j + 1)
	}
	return d
}
