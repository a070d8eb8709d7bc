package prometheus

import (
	"testing"
	"time"

	"github.com/redisleader/redisleader"
)

// BenchmarkHooks measures what the metrics add to one acquisition's life:
// Acquired, one renewal round, Released.
//
//	go test -run '^$' -bench Hooks -benchmem .
func BenchmarkHooks(b *testing.B) {
	h := newMetrics(config{acquireWait: DefaultAcquireWaitBuckets, held: DefaultHeldBuckets, renewalRound: DefaultRenewalRoundBuckets}).hooks()
	acq := redisleader.AcquireEvent{Name: "job", Fence: 1, Wait: time.Millisecond}
	end := redisleader.EndEvent{Name: "job", Fence: 1, Held: time.Second, Cause: redisleader.ErrReleased}
	round := redisleader.RenewalEvent{Duration: time.Millisecond, Locks: 1}
	b.ReportAllocs()
	for b.Loop() {
		h.Acquired(acq)
		h.RenewalRound(round)
		h.Released(end)
	}
}
