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

// TestScheduleTurns: asked once each time the heartbeat's timer fires, a
// schedule says what is due (a retry first, then the next occupied slot,
// then the round's end, which begins the next round) and when to ask again;
// a slot's turn drops its retries, and the round's end says whether the
// heartbeat may go idle and whether a slice failed.
func TestScheduleTurns(t *testing.T) {
	r := New[int](4 * time.Millisecond) // 4 slots, 500µs apart, opening in the order 0, 2, 1, 3
	for i := range SliceMax + 1 {
		r.Add(i) // slot 0 full, the last in slot 2
	}
	const gap = 500 * time.Microsecond
	sc := Schedule[int]{Interval: 4 * time.Millisecond}
	base := time.Now().Add(time.Hour)
	sc.Begin(base, 0)

	turn := sc.Turn(&r, base.Add(-time.Microsecond), false)
	assert.Equal(t, Turn[int]{Slot: -1, At: base}, turn, "nothing due before slot 0")
	turn = sc.Turn(&r, base, false)
	assert.Equal(t, 0, turn.Slot)
	assert.Len(t, turn.Members, SliceMax)
	assert.False(t, turn.Retry || turn.End)
	assert.Equal(t, base.Add(2*gap), turn.At, "ask again when slot 2 is due")

	sc.Retry(base.Add(gap), 0, []int{7})
	sc.Retry(base.Add(3*gap), 2, []int{SliceMax})
	turn = sc.Turn(&r, base.Add(gap), false)
	assert.Equal(t, Turn[int]{Slot: 0, Members: []int{7}, Retry: true, At: base.Add(2 * gap)}, turn, "a due retry")
	turn = sc.Turn(&r, base.Add(2*gap), false)
	assert.Equal(t, Turn[int]{Slot: 2, Members: []int{SliceMax}, At: base.Add(r.Span())}, turn, "slot 2's turn")
	assert.Empty(t, sc.Retries, "slot 2's turn supersedes its retry")
	assert.Equal(t, base.Add(2*gap), sc.LastDue)

	sc.Held, sc.LastEnd = SliceMax+1, sc.LastDue.Add(time.Millisecond) // late
	turn = sc.Turn(&r, base.Add(r.Span()), true)
	next := base.Add(sc.Interval + time.Millisecond) // stale tokens wait: later by as much as the last slice was late
	assert.Equal(t, Turn[int]{Slot: -1, End: true, At: next}, turn, "the round's end")
	assert.True(t, sc.Active)
	assert.Equal(t, next, sc.Base, "the next round has begun")
	assert.Zero(t, sc.Next)
	assert.Zero(t, sc.Held)

	sc.Failed = true
	assert.Equal(t, 0, sc.Turn(&r, next, false).Slot)
	assert.Equal(t, 2, sc.Turn(&r, next.Add(2*gap), false).Slot)
	turn = sc.Turn(&r, next.Add(r.Span()), false)
	assert.True(t, turn.End && turn.Idle && turn.Failed, "a round that renewed nothing, with a failed slice: %+v", turn)

	sc.Retry(time.Now().Add(2*time.Hour), 1, []int{1})
	sc.Next = 4 // every slot's turn has passed
	turn = sc.Turn(&r, sc.Base.Add(r.Span()), false)
	assert.True(t, turn.End)
	assert.False(t, turn.Idle, "a retry waits")
}
