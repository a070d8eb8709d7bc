package ring

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestScheduleRounds: without a session, a schedule walks a ring's occupied
// slots in order, keeps its retries in the order they are due, and starts
// the next round a renew interval after this one, later by as much as its
// last slice ended late only when that matters (stale tokens wait, or the
// next round's first slice is overrun).
func TestScheduleRounds(t *testing.T) {
	r := New[int](4 * time.Millisecond) // 4 slots, 500µs apart
	r.Add(1)
	var sc Schedule[int]
	base := time.Now().Add(time.Hour)
	sc.Begin(base, 0)
	slot, at := sc.NextSlot(&r)
	assert.Equal(t, 0, slot)
	assert.Equal(t, base, at)
	sc.Next = 1
	slot, at = sc.NextSlot(&r)
	assert.Equal(t, -1, slot, "no occupied slot after 0")
	assert.Equal(t, base.Add(r.Span()), at, "the round's span ends it")

	sc.Retry(base.Add(3*time.Second), 2, []int{3})
	sc.Retry(base.Add(time.Second), 0, []int{1})
	sc.Retry(base.Add(2*time.Second), 1, []int{2})
	for i, want := range []int{0, 1, 2} {
		assert.Equal(t, want, sc.Retries[i].Slot, "retries in the order they are due")
	}

	sc.LastDue, sc.LastEnd = base, base.Add(time.Millisecond)
	next, first := sc.NextRound(&r, time.Second, false)
	assert.Equal(t, base.Add(time.Second), next, "late, but neither stale tokens wait nor the next first slice is overrun")
	assert.Equal(t, next, first, "slot 0's offset is 0")
	next, first = sc.NextRound(&r, time.Second, true)
	assert.Equal(t, base.Add(time.Second+time.Millisecond), next, "stale tokens wait: later by as much as the last slice was late")
	assert.Equal(t, next, first)

	sc.Begin(time.Now().Add(-time.Hour), 0) // a stalled heartbeat
	next, _ = sc.NextRound(&r, time.Second, false)
	assert.WithinDuration(t, time.Now(), next.Add(r.Span()), time.Second, "a whole round late: the next round's span ends now")
}
