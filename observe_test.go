package redisleader

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestObserve(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		bystander := mustElection(t, newSession(t, b.client, fastOpts()...), "watched")
		o := observe(ctx, bystander)
		o.waitFor(t, "initial vacancy", func(l Leader) bool { return l.Fence == 0 })

		a := mustElection(t, newSession(t, b.client, fastOpts()...), "watched")
		la, err := a.Campaign(ctx, "a")
		require.NoError(t, err)
		got := o.waitFor(t, "leader a", func(l Leader) bool { return l.Fence != 0 })
		assert.Equal(t, "a", got.Value)
		assert.Equal(t, la.Fence(), got.Fence)

		require.NoError(t, la.Release(ctx))
		o.waitFor(t, "vacancy after resign", func(l Leader) bool { return l.Fence == 0 })

		cs, err := NewSession(b.client, fastOpts()...)
		require.NoError(t, err)
		lc, err := mustElection(t, cs, "watched").Campaign(ctx, "c")
		require.NoError(t, err)
		o.waitFor(t, "leader c", func(l Leader) bool { return l.Fence == lc.Fence() })
		crash(cs)
		b.expire(lc.Key()) // its lease runs out on the server: nothing is published
		o.waitFor(t, "vacancy after crash", func(l Leader) bool { return l.Fence == 0 })

		events := o.snapshot()
		var fences []int64
		for i, l := range events {
			if i > 0 {
				assert.NotEqual(t, events[i-1].Fence, l.Fence, "no duplicate events: %v", events)
			}
			if l.Fence != 0 {
				fences = append(fences, l.Fence)
			}
		}
		assert.True(t, slices.IsSorted(fences), "leaders in fence order: %v", events)
		assert.Equal(t, []int64{0, la.Fence(), 0, lc.Fence(), 0}, fenceList(events))

		cancel()
		waitClosed(t, o.closed, time.Second, "Observe channel after ctx ends")
	})
}

// TestObserveIgnoresForgedEvents: anyone allowed to subscribe to a name's
// channel may also publish on it. Forged acquisitions (with a fence near
// 2^53), forged releases and garbage must never show up in Observe, and must
// not blind it to the real leaders that follow.
func TestObserveIgnoresForgedEvents(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		bystander := mustElection(t, newSession(t, b.client, fastOpts()...), "forged")
		channel := bystander.keys.Channel
		forge := func(payloads ...string) {
			t.Helper()
			for _, p := range payloads {
				require.NoError(t, b.client.Publish(ctx, channel, p).Err())
			}
		}
		o := observe(ctx, bystander)
		o.waitFor(t, "initial vacancy", func(l Leader) bool { return l.Fence == 0 })
		forge("A1000\nFAKE\n9007199254740000\nattacker", "", "A", "R", "garbage\n\n\n",
			strings.Repeat("A1\nX\n9\n", 10000))

		var fences []int64
		for i, who := range []string{"a", "b", "c"} {
			e := mustElection(t, newSession(t, b.client, fastOpts()...), "forged")
			l, err := e.Campaign(ctx, who)
			require.NoError(t, err)
			o.waitFor(t, "leader "+who, func(got Leader) bool { return got.Fence == l.Fence() && got.Value == who })
			fences = append(fences, 0, l.Fence())
			// A forged release of the real leader, a forged successor with
			// the next fence, and a forged acquisition at 2^53 − 1.
			forge(fmt.Sprintf("RFAKE\n%d\n", l.Fence()),
				fmt.Sprintf("A1000\nFAKE\n%d\nattacker%d", l.Fence()+1, i),
				"A1000\nFAKE\n9007199254740991\nattacker")
			require.NoError(t, l.Release(ctx))
			o.waitFor(t, "vacancy after "+who, func(got Leader) bool { return got.Fence == 0 })
		}
		events := o.snapshot()
		for _, l := range events {
			assert.NotContains(t, l.Value, "attacker", "a forged event reached Observe: %v", events)
		}
		assert.Equal(t, append(fences, 0), fenceList(events), "exactly the real leaders and vacancies: %v", events)
	})
}

func TestObserveEndsWithSession(t *testing.T) {
	_, c := newMini(t)
	s, err := NewSession(c)
	require.NoError(t, err)
	o := observe(context.Background(), mustElection(t, s, "x"))
	o.waitFor(t, "initial state", func(Leader) bool { return true })
	require.NoError(t, s.Close(context.Background()))
	waitClosed(t, o.closed, time.Second, "Observe channel after Close")
	closedCh := mustElection(t, s, "x").Observe(context.Background())
	_, ok := <-closedCh
	assert.False(t, ok, "Observe on a closed session returns a closed channel")
	checkNoLeaks(t)
}
