package otel_test

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redisleader/redisleader"
	"github.com/redisleader/redisleader/adapters/otel"
	"github.com/redisleader/redisleader/internal/metrictest"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// value collects from reader and returns the value of the instrument called
// name at the data point whose attributes are the given name/value pairs: a
// sum's or gauge's value, a histogram's count. A missing point fails t.
func value(t *testing.T, reader sdkmetric.Reader, name string, attrs ...string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var kvs []attribute.KeyValue
	for i := 0; i+1 < len(attrs); i += 2 {
		kvs = append(kvs, attribute.String(attrs[i], attrs[i+1]))
	}
	want := attribute.NewSet(kvs...)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if p.Attributes.Equals(&want) {
						return p.Value
					}
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					if p.Attributes.Equals(&want) {
						return p.Value
					}
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					if p.Attributes.Equals(&want) {
						return int64(p.Count)
					}
				}
			}
		}
	}
	t.Fatalf("no data point %s%v", name, attrs)
	return 0
}

// setup returns a miniredis, a function that opens sessions on it
// recording into the adapter's instruments, and the reader of those.
func setup(t *testing.T) (*miniredis.Miniredis, func() *redisleader.Session, sdkmetric.Reader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	opt, err := otel.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	if err != nil {
		t.Fatal(err)
	}
	m, open := metrictest.Open(t, opt)
	return m, open, reader
}

// TestElectionLossHandover collects after an election, a loss (the key
// deleted behind the leader's back) and a handover between two sessions.
func TestElectionLossHandover(t *testing.T) {
	m, open, reader := setup(t)
	ea, _ := open().Election("svc")
	eb, _ := open().Election("svc")
	metrictest.Scenario(t, m, ea, eb, func(step string, _ *redisleader.Lock) {
		want := map[string]int64{metrictest.Elected: 1, metrictest.Lost: 0, metrictest.Reelected: 1, metrictest.HandedOver: 1}[step]
		if v := value(t, reader, "redisleader.leader", "name", "svc"); v != want {
			t.Fatalf("%s: leader %d, want %d", step, v, want)
		}
	})
	for _, c := range []struct {
		name  string
		attrs []string
		want  int64
	}{
		{"redisleader.acquisitions", []string{"name", "svc"}, 3},
		{"redisleader.losses", []string{"name", "svc", "cause", "not_owner"}, 1},
		{"redisleader.releases", []string{"name", "svc"}, 1},
		{"redisleader.acquire.wait", []string{"name", "svc"}, 3},
		{"redisleader.held", []string{"name", "svc"}, 2},
	} {
		if v := value(t, reader, c.name, c.attrs...); v != c.want {
			t.Errorf("%s%v = %d, want %d", c.name, c.attrs, v, c.want)
		}
	}
}

func TestObserve(t *testing.T) {
	_, open, reader := setup(t)
	e, _ := open().Election("svc")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	states := e.Observe(ctx)
	<-states // nobody
	if v := value(t, reader, "redisleader.observed_leader", "name", "svc"); v != 0 {
		t.Fatalf("observed_leader %d, want 0", v)
	}
	if _, err := e.Campaign(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-states:
	case <-time.After(5 * time.Second):
		t.Fatal("Observe did not see the leader within 5s")
	}
	if v := value(t, reader, "redisleader.observed_leader", "name", "svc"); v != 1 {
		t.Fatalf("observed_leader %d, want 1", v)
	}
	if v := value(t, reader, "redisleader.leader.changes", "name", "svc"); v != 1 {
		t.Fatalf("leader.changes %d, want 1", v)
	}
}

func TestNewNil(t *testing.T) {
	if _, err := otel.New(nil); err == nil {
		t.Fatal("New(nil) succeeded")
	}
}
