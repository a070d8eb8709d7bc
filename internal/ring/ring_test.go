package ring

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRingSlots: a ring, without a session, fits as many slots (a power of
// two, up to slotsMax) as fit gapMin apart in half the interval; fills slot
// 0 to SliceMax first, then opens slots in bit-reversed order, then gives
// the least loaded slot the next member; and forgets removed members.
func TestRingSlots(t *testing.T) {
	for _, c := range []struct {
		interval time.Duration
		slots    int
	}{{time.Millisecond, 1}, {2 * time.Millisecond, 2}, {5 * time.Second, slotsMax}, {40 * time.Millisecond, 32}} {
		r := New[int](c.interval)
		assert.Len(t, r.slots, c.slots, "interval %v", c.interval)
		assert.InDelta(t, float64(c.interval/2), float64(r.Span()), float64(c.slots), "the slots' offsets lie over the first half of %v", c.interval)
		assert.GreaterOrEqual(t, r.gap, gapMin, "interval %v", c.interval)
	}

	r := New[int](4 * time.Millisecond) // 4 slots, 500µs apart
	require.Equal(t, []int{0, 2, 1, 3}, r.order, "bit-reversed")
	assert.Equal(t, -1, r.Next(0), "empty")
	slot := map[int]int{}
	for k := range 4*SliceMax + 1 {
		slot[k] = r.Add(k)
	}
	for i, want := range []int{0, 2, 1, 3} {
		assert.Equal(t, want, slot[i*SliceMax], "the %d-th slot to open", i+1)
		assert.Equal(t, want, slot[(i+1)*SliceMax-1], "slot %d takes SliceMax members first", want)
	}
	assert.Equal(t, 0, slot[4*SliceMax], "all full: the first of the least loaded")
	assert.Len(t, r.Members(0), SliceMax+1)
	assert.Equal(t, 1500*time.Microsecond, r.Offset(3))

	for k := range SliceMax {
		r.Remove(k, slot[k])
	}
	r.Remove(4*SliceMax, slot[4*SliceMax])
	assert.Empty(t, r.Members(0))
	assert.Equal(t, 1, r.Next(0), "slot 0 emptied")
	assert.Equal(t, 2, slot[SliceMax])
	var want []int
	for k := SliceMax; k < 2*SliceMax; k++ {
		want = append(want, k)
	}
	got := r.Members(2)
	slices.Sort(got)
	assert.Equal(t, want, got)
	assert.Equal(t, 0, r.Add(-1), "slot 0, emptied, is the first in opening order with room")
}
