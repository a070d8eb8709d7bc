package otel

import (
	"testing"

	"github.com/redisleader/redisleader/internal/metrictest"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// BenchmarkHooks measures what the instruments add to one acquisition's
// life (Acquired, one renewal round, Released) with the SDK's meter
// provider.
//
//	go test -run '^$' -bench Hooks -benchmem .
func BenchmarkHooks(b *testing.B) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	in, err := newInstruments(mp.Meter(ScopeName))
	if err != nil {
		b.Fatal(err)
	}
	metrictest.BenchHooks(b, in.hooks())
}
