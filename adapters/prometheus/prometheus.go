// Package prometheus exports a redisleader session's hooks (see
// redisleader.Hooks) as Prometheus metrics. It lives in its own module, so
// that the redisleader module does not depend on client_golang.
//
//	opt, err := prometheus.New(prom.DefaultRegisterer)
//	...
//	s, err := redisleader.NewSession(client, opt)
//
// The metrics are listed in this module's README. Every metric but the
// renewal ones carries the lock or election name as its "name" label, so
// the number of names a process uses should be bounded.
package prometheus

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redisleader/redisleader"
)

// Default histogram buckets, in seconds.
var (
	// DefaultAcquireWaitBuckets span a TryLock's round trip (1ms) to a
	// follower's wait through long terms (about 4½ minutes).
	DefaultAcquireWaitBuckets = prometheus.ExponentialBuckets(0.001, 4, 10)
	// DefaultHeldBuckets span a term of 10ms to one of about 12 hours.
	DefaultHeldBuckets = prometheus.ExponentialBuckets(0.01, 4, 12)
	// DefaultRenewalRoundBuckets span a local round trip (0.5ms) to a round
	// that takes about a second.
	DefaultRenewalRoundBuckets = prometheus.ExponentialBuckets(0.0005, 2, 12)
)

// An Option configures New.
type Option func(*config)

type config struct {
	acquireWait, held, renewalRound []float64
	constLabels                     prometheus.Labels
}

// WithBuckets sets the buckets of redisleader_acquire_wait_seconds,
// redisleader_held_seconds and redisleader_renewal_round_seconds; a nil
// slice keeps that metric's default.
func WithBuckets(acquireWait, held, renewalRound []float64) Option {
	return func(c *config) {
		if acquireWait != nil {
			c.acquireWait = acquireWait
		}
		if held != nil {
			c.held = held
		}
		if renewalRound != nil {
			c.renewalRound = renewalRound
		}
	}
}

// WithConstLabels adds labels with fixed values to every metric, to tell
// several sets apart in one registry.
func WithConstLabels(l prometheus.Labels) Option {
	return func(c *config) { c.constLabels = l }
}

// metrics are the collectors that New registered.
type metrics struct {
	leader        *prometheus.GaugeVec
	acquisitions  *prometheus.CounterVec
	losses        *prometheus.CounterVec
	releases      *prometheus.CounterVec
	held          *prometheus.HistogramVec
	acquireWait   *prometheus.HistogramVec
	renewalRound  prometheus.Histogram
	renewFailures prometheus.Counter
	leaderChanges *prometheus.CounterVec
	observed      *prometheus.GaugeVec
}

// New creates the metrics, registers them with reg and returns the session
// option that feeds them (redisleader.WithHooks). Pass the option to every
// session whose names should be counted: calling New twice with one
// registry fails, because the metrics are registered already. It returns
// an error if reg refuses a metric or reg is nil.
func New(reg prometheus.Registerer, opts ...Option) (redisleader.Option, error) {
	if reg == nil {
		return nil, errors.New("redisleader/adapters/prometheus: New: nil Registerer")
	}
	c := config{acquireWait: DefaultAcquireWaitBuckets, held: DefaultHeldBuckets, renewalRound: DefaultRenewalRoundBuckets}
	for _, o := range opts {
		o(&c)
	}
	m := newMetrics(c)
	for _, col := range []prometheus.Collector{m.leader, m.acquisitions, m.losses, m.releases, m.held,
		m.acquireWait, m.renewalRound, m.renewFailures, m.leaderChanges, m.observed} {
		if err := reg.Register(col); err != nil {
			return nil, err
		}
	}
	return redisleader.WithHooks(m.hooks()), nil
}

func newMetrics(c config) *metrics {
	opts := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: "redisleader", Name: name, Help: help, ConstLabels: c.constLabels}
	}
	hist := func(name, help string, buckets []float64) prometheus.HistogramOpts {
		o := opts(name, help)
		return prometheus.HistogramOpts{Namespace: o.Namespace, Name: o.Name, Help: o.Help, ConstLabels: o.ConstLabels, Buckets: buckets}
	}
	name := []string{"name"}
	return &metrics{
		leader: prometheus.NewGaugeVec(prometheus.GaugeOpts(opts("leader",
			"1 while a session of this process holds the lock or leads the election name, else 0.")), name),
		acquisitions: prometheus.NewCounterVec(prometheus.CounterOpts(opts("acquisitions_total",
			"Acquisitions of name handed to their caller (Lock, TryLock, Campaign, Run).")), name),
		losses: prometheus.NewCounterVec(prometheus.CounterOpts(opts("losses_total",
			"Acquisitions of name that ended because ownership was lost; cause is not_owner or expired.")), []string{"name", "cause"}),
		releases: prometheus.NewCounterVec(prometheus.CounterOpts(opts("releases_total",
			"Acquisitions of name that ended because they were given up (Release, Run resigning, Session.Close).")), name),
		held: prometheus.NewHistogramVec(hist("held_seconds",
			"How long acquisitions of name were held, from the hand-over to the end (release or loss).", c.held), name),
		acquireWait: prometheus.NewHistogramVec(hist("acquire_wait_seconds",
			"Time from the call to Lock, TryLock or Campaign until it returned the acquisition of name.", c.acquireWait), name),
		renewalRound: prometheus.NewHistogram(hist("renewal_round_seconds",
			"Duration of heartbeat renewal rounds that renewed at least one lock.", c.renewalRound)),
		renewFailures: prometheus.NewCounter(prometheus.CounterOpts(opts("renewal_failures_total",
			"Renewals of a lock that failed with an error (retried until the local deadline)."))),
		leaderChanges: prometheus.NewCounterVec(prometheus.CounterOpts(opts("leader_changes_total",
			"New leaders of election name seen by Observe (each Observe call counts on its own).")), name),
		observed: prometheus.NewGaugeVec(prometheus.GaugeOpts(opts("observed_leader",
			"1 while the last state Observe read for election name had a leader, 0 while nobody led.")), name),
	}
}

// hooks returns the hooks that feed m. The leader gauge counts up and down
// rather than being set, so that two sessions of the process whose terms
// overlap for a moment (the former one not yet aware of its loss) leave it
// right.
func (m *metrics) hooks() redisleader.Hooks {
	return redisleader.Hooks{
		Acquired: func(e redisleader.AcquireEvent) {
			m.leader.WithLabelValues(e.Name).Inc()
			m.acquisitions.WithLabelValues(e.Name).Inc()
			m.acquireWait.WithLabelValues(e.Name).Observe(e.Wait.Seconds())
		},
		Lost: func(e redisleader.EndEvent) {
			m.ended(e)
			m.losses.WithLabelValues(e.Name, cause(e.Cause)).Inc()
		},
		Released: func(e redisleader.EndEvent) {
			m.ended(e)
			m.releases.WithLabelValues(e.Name).Inc()
		},
		RenewalRound: func(e redisleader.RenewalEvent) {
			m.renewalRound.Observe(e.Duration.Seconds())
			m.renewFailures.Add(float64(e.Failures))
		},
		LeaderChanged: func(e redisleader.LeaderEvent) {
			leads := e.Leader.Fence != 0
			if leads && !e.Initial {
				m.leaderChanges.WithLabelValues(e.Name).Inc()
			}
			m.observed.WithLabelValues(e.Name).Set(b2f(leads))
		},
	}
}

func (m *metrics) ended(e redisleader.EndEvent) {
	m.leader.WithLabelValues(e.Name).Dec()
	m.held.WithLabelValues(e.Name).Observe(e.Held.Seconds())
}

// cause is the cause label of a loss.
func cause(err error) string {
	switch err {
	case redisleader.ErrNotOwner:
		return "not_owner"
	case redisleader.ErrExpired:
		return "expired"
	}
	return "other"
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
