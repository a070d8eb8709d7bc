package prometheus_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/redisleader/redisleader"
	"github.com/redisleader/redisleader/adapters/prometheus"
	"github.com/redisleader/redisleader/internal/metrictest"
)

// setup makes a registry with the metrics, and returns a miniredis, a
// function that opens sessions on it feeding the metrics, and a channel of
// their renewal rounds, each sent once the metrics have recorded it.
func setup(t *testing.T) (*miniredis.Miniredis, *prom.Registry, func() *redisleader.Session, <-chan redisleader.RenewalEvent) {
	t.Helper()
	reg := prom.NewRegistry()
	opt, err := prometheus.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	rounds := make(chan redisleader.RenewalEvent, 256)
	after := redisleader.WithHooks(redisleader.Hooks{RenewalRound: func(e redisleader.RenewalEvent) {
		select {
		case rounds <- e:
		default:
		}
	}})
	m, open := metrictest.Open(t, opt, after)
	return m, reg, open, rounds
}

// sample scrapes reg and returns the value of the metric called name whose
// labels are the given name/value pairs: a counter's or gauge's value, a
// histogram's sample count. A metric that is not there fails t.
func sample(t *testing.T, reg *prom.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if matches(m, labels) {
				switch {
				case m.Counter != nil:
					return m.Counter.GetValue()
				case m.Gauge != nil:
					return m.Gauge.GetValue()
				case m.Histogram != nil:
					return float64(m.Histogram.GetSampleCount())
				}
			}
		}
	}
	t.Fatalf("no metric %s%v", name, labels)
	return 0
}

func matches(m *dto.Metric, labels []string) bool {
	if len(m.GetLabel()) != len(labels)/2 {
		return false
	}
	for _, lp := range m.GetLabel() {
		found := false
		for i := 0; i+1 < len(labels); i += 2 {
			found = found || (labels[i] == lp.GetName() && labels[i+1] == lp.GetValue())
		}
		if !found {
			return false
		}
	}
	return true
}

// next returns the next leader state from an Observe channel.
func next(t *testing.T, ch <-chan redisleader.Leader) redisleader.Leader {
	t.Helper()
	select {
	case l := <-ch:
		return l
	case <-time.After(5 * time.Second):
		t.Fatal("no leader state within 5s")
		return redisleader.Leader{}
	}
}

// waitRound waits for a renewal round for which ok is true.
func waitRound(t *testing.T, rounds <-chan redisleader.RenewalEvent, ok func(redisleader.RenewalEvent) bool) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case e := <-rounds:
			if ok(e) {
				return
			}
		case <-timeout:
			t.Fatal("no such renewal round within 5s")
		}
	}
}

// nextLeader skips vacancies and returns the next leader Observe sends.
func nextLeader(t *testing.T, ch <-chan redisleader.Leader) redisleader.Leader {
	t.Helper()
	for {
		if l := next(t, ch); l.Fence != 0 {
			return l
		}
	}
}

// TestElectionLossHandover scrapes the registry after an election, a loss
// (the key deleted behind the leader's back) and a handover between two
// sessions.
func TestElectionLossHandover(t *testing.T) {
	m, reg, open, rounds := setup(t)
	watcher, _ := open().Election("svc")
	ea, _ := open().Election("svc")
	eb, _ := open().Election("svc")
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	states := watcher.Observe(ctx)
	if l := next(t, states); l.Fence != 0 {
		t.Fatalf("initial state %+v, want nobody", l)
	}
	metrictest.Scenario(t, m, ea, eb, func(step string, term *redisleader.Lock) {
		if step != metrictest.Lost { // wait for the watcher to see the new term
			if l := nextLeader(t, states); l.Fence != term.Fence() {
				t.Fatalf("%s: observed %+v, want fence %d", step, l, term.Fence())
			}
		}
		want := map[string]float64{metrictest.Elected: 1, metrictest.Lost: 0, metrictest.Reelected: 1, metrictest.HandedOver: 1}[step]
		if v := sample(t, reg, "redisleader_leader", "name", "svc"); v != want {
			t.Fatalf("%s: leader gauge %v, want %v", step, v, want)
		}
	})

	want := `
# HELP redisleader_acquisitions_total Acquisitions of name handed to their caller (Lock, TryLock, Campaign, Run).
# TYPE redisleader_acquisitions_total counter
redisleader_acquisitions_total{name="svc"} 3
# HELP redisleader_leader 1 while a session of this process holds the lock or leads the election name, else 0.
# TYPE redisleader_leader gauge
redisleader_leader{name="svc"} 1
# HELP redisleader_leader_changes_total New leaders of election name seen by Observe (each Observe call counts on its own).
# TYPE redisleader_leader_changes_total counter
redisleader_leader_changes_total{name="svc"} 3
# HELP redisleader_losses_total Acquisitions of name that ended because ownership was lost; cause is not_owner or expired.
# TYPE redisleader_losses_total counter
redisleader_losses_total{cause="not_owner",name="svc"} 1
# HELP redisleader_observed_leader 1 while the last state Observe read for election name had a leader, 0 while nobody led.
# TYPE redisleader_observed_leader gauge
redisleader_observed_leader{name="svc"} 1
# HELP redisleader_releases_total Acquisitions of name that ended because they were given up (Release, Run resigning, Session.Close).
# TYPE redisleader_releases_total counter
redisleader_releases_total{name="svc"} 1
# HELP redisleader_renewal_failures_total Renewals of a lock that failed with an error (retried until the local deadline).
# TYPE redisleader_renewal_failures_total counter
redisleader_renewal_failures_total 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"redisleader_acquisitions_total", "redisleader_leader", "redisleader_leader_changes_total",
		"redisleader_losses_total", "redisleader_observed_leader", "redisleader_releases_total",
		"redisleader_renewal_failures_total"); err != nil {
		t.Fatal(err)
	}
	if n := sample(t, reg, "redisleader_acquire_wait_seconds", "name", "svc"); n != 3 {
		t.Fatalf("acquire_wait_seconds has %v samples, want 3", n)
	}
	if n := sample(t, reg, "redisleader_held_seconds", "name", "svc"); n != 2 {
		t.Fatalf("held_seconds has %v samples, want 2", n)
	}
	waitRound(t, rounds, func(redisleader.RenewalEvent) bool { return true }) // the loss was found by one
	if n := sample(t, reg, "redisleader_renewal_round_seconds"); n < 1 {
		t.Fatal("renewal_round_seconds has no samples")
	}
}

// TestRenewalFailureExpiry: renewals that fail until the local deadline
// count as failures, then as a loss with cause expired.
func TestRenewalFailureExpiry(t *testing.T) {
	m, reg, open, rounds := setup(t)
	s := open()
	l, err := s.TryLock(context.Background(), "job")
	if err != nil {
		t.Fatal(err)
	}
	m.SetError("LOADING (test)")
	waitRound(t, rounds, func(e redisleader.RenewalEvent) bool { return e.Failures > 0 })
	if v := sample(t, reg, "redisleader_renewal_failures_total"); v < 1 {
		t.Fatalf("renewal_failures_total = %v, want at least 1", v)
	}
	metrictest.WaitEnd(t, l, redisleader.ErrExpired)
	m.SetError("")
	if v := sample(t, reg, "redisleader_losses_total", "name", "job", "cause", "expired"); v != 1 {
		t.Fatalf("losses_total{cause=expired} = %v, want 1", v)
	}
	if v := sample(t, reg, "redisleader_leader", "name", "job"); v != 0 {
		t.Fatalf("leader gauge %v, want 0", v)
	}
}

func TestNewErrors(t *testing.T) {
	if _, err := prometheus.New(nil); err == nil {
		t.Error("New(nil) succeeded")
	}
	reg := prom.NewRegistry()
	if _, err := prometheus.New(reg); err != nil {
		t.Fatal(err)
	}
	var already prom.AlreadyRegisteredError
	if _, err := prometheus.New(reg); !errors.As(err, &already) {
		t.Errorf("second New on one registry: %v, want AlreadyRegisteredError", err)
	}
}

func TestOptions(t *testing.T) {
	reg := prom.NewRegistry()
	opt, err := prometheus.New(reg, prometheus.WithBuckets(nil, nil, []float64{1}), prometheus.WithConstLabels(prom.Labels{"app": "x"}))
	if err != nil {
		t.Fatal(err)
	}
	_, open := metrictest.Open(t, opt)
	if _, err := open().TryLock(context.Background(), "job"); err != nil {
		t.Fatal(err)
	}
	if v := sample(t, reg, "redisleader_acquisitions_total", "name", "job", "app", "x"); v != 1 {
		t.Fatalf("acquisitions_total{app=x} = %v, want 1", v)
	}
}
