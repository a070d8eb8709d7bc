package pace

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestPace: the waits between attempts, without a session. Follow sleeps
// until the lease can have expired plus 1–2ms, or polls at the retry delay
// when the key has no TTL or the subscription is not confirmed; Backoff's
// window doubles with each split in a row up to the TTL; KeepPlace cuts a
// wait at the place's lease, unless that moment has passed.
func TestPace(t *testing.T) {
	retry := func() time.Duration { return 50 * time.Millisecond }
	assert.Equal(t, 50*time.Millisecond, Follow(-1, true, retry), "no TTL: poll")
	d := Follow(time.Second, true, retry)
	assert.True(t, d > time.Second+time.Millisecond-1 && d < time.Second+2*time.Millisecond, "%v", d)
	assert.Equal(t, 50*time.Millisecond, Follow(time.Second, false, retry), "not confirmed: poll")

	var s Splits
	for i := 1; i <= 20; i++ {
		d := s.Backoff(time.Millisecond, 100*time.Millisecond, 5*time.Millisecond)
		window := min(time.Millisecond<<min(i, 16), 100*time.Millisecond)
		assert.True(t, d >= 5*time.Millisecond && d <= 5*time.Millisecond+window, "split %d: %v", i, d)
	}
	assert.Equal(t, Splits(16), s, "the doubling stops")

	assert.Equal(t, time.Second, KeepPlace(time.Second, time.Time{}, time.Second), "no place kept yet")
	d = KeepPlace(time.Second, time.Now(), 100*time.Millisecond)
	assert.True(t, d > 0 && d <= 100*time.Millisecond, "%v", d)
	assert.Equal(t, time.Second, KeepPlace(time.Second, time.Now().Add(-time.Hour), time.Second), "the place may be lost: no cut")
}
