// Package otel records a redisleader session's hooks (see redisleader.Hooks)
// as OpenTelemetry metrics. It lives in its own module, so that the
// redisleader module does not depend on OpenTelemetry.
//
//	opt, err := otel.New(otelapi.GetMeterProvider())
//	...
//	s, err := redisleader.NewSession(client, opt)
//
// The instruments are listed in this module's README; they mirror the
// Prometheus adapter's metrics. Every instrument but the renewal ones
// carries the lock or election name as its "name" attribute, so the number
// of names a process uses should be bounded.
package otel

import (
	"context"
	"errors"
	"sync"

	"github.com/redisleader/redisleader"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// ScopeName is the instrumentation scope of the meter New creates.
const ScopeName = "github.com/redisleader/redisleader/adapters/otel"

// instruments are the instruments New created, and the attribute sets of
// each name seen so far.
type instruments struct {
	leader        metric.Int64UpDownCounter
	acquisitions  metric.Int64Counter
	losses        metric.Int64Counter
	releases      metric.Int64Counter
	acquireWait   metric.Float64Histogram
	held          metric.Float64Histogram
	renewalRound  metric.Float64Histogram
	renewFailures metric.Int64Counter
	leaderChanges metric.Int64Counter
	observed      metric.Int64Gauge

	byName sync.Map // name → *nameAttrs
}

// nameAttrs are the measurement options of one name, made once, as slices
// so that passing them allocates nothing.
type nameAttrs struct {
	add               []metric.AddOption // the name
	record            []metric.RecordOption
	notOwner, expired []metric.AddOption // the name and the cause of a loss
}

// New creates the instruments with a meter from mp and returns the session
// option that records into them (redisleader.WithHooks). Pass the option to
// every session whose names should be recorded. It returns an error if mp
// is nil or refuses an instrument.
func New(mp metric.MeterProvider) (redisleader.Option, error) {
	if mp == nil {
		return nil, errors.New("redisleader/adapters/otel: New: nil MeterProvider")
	}
	in, err := newInstruments(mp.Meter(ScopeName))
	if err != nil {
		return nil, err
	}
	return redisleader.WithHooks(in.hooks()), nil
}

// newInstruments creates the instruments with m.
func newInstruments(m metric.Meter) (*instruments, error) {
	var (
		in   instruments
		errs []error
	)
	in.leader = create(&errs, m.Int64UpDownCounter, "redisleader.leader", "{lock}",
		"1 while a session of this process holds the lock or leads the election name, else 0.")
	in.acquisitions = create(&errs, m.Int64Counter, "redisleader.acquisitions", "{acquisition}",
		"Acquisitions of name handed to their caller (Lock, TryLock, Campaign, Run).")
	in.losses = create(&errs, m.Int64Counter, "redisleader.losses", "{acquisition}",
		"Acquisitions of name that ended because ownership was lost; cause is not_owner or expired.")
	in.releases = create(&errs, m.Int64Counter, "redisleader.releases", "{acquisition}",
		"Acquisitions of name that ended because they were given up (Release, Run resigning, Session.Close).")
	in.acquireWait = create(&errs, m.Float64Histogram, "redisleader.acquire.wait", "s",
		"Time from the call to Lock, TryLock or Campaign until it returned the acquisition of name.")
	in.held = create(&errs, m.Float64Histogram, "redisleader.held", "s",
		"How long acquisitions of name were held, from the hand-over to the end (release or loss).")
	in.renewalRound = create(&errs, m.Float64Histogram, "redisleader.renewal.round", "s",
		"Duration of heartbeat renewal rounds that renewed at least one lock.")
	in.renewFailures = create(&errs, m.Int64Counter, "redisleader.renewal.failures", "{renewal}",
		"Renewals of a lock that failed with an error (retried until the local deadline).")
	in.leaderChanges = create(&errs, m.Int64Counter, "redisleader.leader.changes", "{change}",
		"New leaders of election name seen by Observe (each Observe call counts on its own).")
	in.observed = create(&errs, m.Int64Gauge, "redisleader.observed_leader", "{leader}",
		"1 while the last state Observe read for election name had a leader, 0 while nobody led.")
	return &in, errors.Join(errs...)
}

// create makes an instrument with newInstrument (a Meter method), the name,
// unit and description, and appends the error, if any, to errs. The unit
// and description options (metric.InstrumentOption) are options of every
// kind of instrument.
func create[I, O any](errs *[]error, newInstrument func(string, ...O) (I, error), name, unit, desc string) I {
	i, err := newInstrument(name, metric.WithUnit(unit).(O), metric.WithDescription(desc).(O))
	if err != nil {
		*errs = append(*errs, err)
	}
	return i
}

// attrs returns the attribute sets of name.
func (in *instruments) attrs(name string) *nameAttrs {
	if a, ok := in.byName.Load(name); ok {
		return a.(*nameAttrs)
	}
	set := func(kv ...attribute.KeyValue) metric.MeasurementOption {
		return metric.WithAttributeSet(attribute.NewSet(kv...))
	}
	n := attribute.String("name", name)
	a, _ := in.byName.LoadOrStore(name, &nameAttrs{
		add:      []metric.AddOption{set(n)},
		record:   []metric.RecordOption{set(n)},
		notOwner: []metric.AddOption{set(n, attribute.String("cause", "not_owner"))},
		expired:  []metric.AddOption{set(n, attribute.String("cause", "expired"))},
	})
	return a.(*nameAttrs)
}

// hooks returns the hooks that record into in. Hooks have no context of
// their own: measurements are made with context.Background.
func (in *instruments) hooks() redisleader.Hooks {
	ctx := context.Background()
	return redisleader.Hooks{
		Acquired: func(e redisleader.AcquireEvent) {
			a := in.attrs(e.Name)
			in.leader.Add(ctx, 1, a.add...)
			in.acquisitions.Add(ctx, 1, a.add...)
			in.acquireWait.Record(ctx, e.Wait.Seconds(), a.record...)
		},
		Lost: func(e redisleader.EndEvent) {
			a := in.ended(ctx, e)
			cause := a.expired
			if e.Cause == redisleader.ErrNotOwner {
				cause = a.notOwner
			}
			in.losses.Add(ctx, 1, cause...)
		},
		Released: func(e redisleader.EndEvent) {
			in.releases.Add(ctx, 1, in.ended(ctx, e).add...)
		},
		RenewalRound: func(e redisleader.RenewalEvent) {
			in.renewalRound.Record(ctx, e.Duration.Seconds())
			in.renewFailures.Add(ctx, int64(e.Failures)) // 0 too: the series exists from the first round
		},
		LeaderChanged: func(e redisleader.LeaderEvent) {
			a := in.attrs(e.Name)
			var leads int64
			if e.Leader.Fence != 0 {
				leads = 1
				if !e.Initial {
					in.leaderChanges.Add(ctx, 1, a.add...)
				}
			}
			in.observed.Record(ctx, leads, a.record...)
		},
	}
}

// ended records what every end records and returns the name's options.
func (in *instruments) ended(ctx context.Context, e redisleader.EndEvent) *nameAttrs {
	a := in.attrs(e.Name)
	in.leader.Add(ctx, -1, a.add...)
	in.held.Record(ctx, e.Held.Seconds(), a.record...)
	return a
}
