package prometheus

import (
	"testing"

	"github.com/redisleader/redisleader/internal/metrictest"
)

// BenchmarkHooks measures what the metrics add to one acquisition's life:
// Acquired, one renewal round, Released.
//
//	go test -run '^$' -bench Hooks -benchmem .
func BenchmarkHooks(b *testing.B) {
	metrictest.BenchHooks(b, newMetrics(config{acquireWait: DefaultAcquireWaitBuckets, held: DefaultHeldBuckets, renewalRound: DefaultRenewalRoundBuckets}).hooks())
}
