package redisleader

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// queued returns a session option that reports, on the returned channel,
// every acquire attempt that found the name taken (the waiter is queued
// after it in fair mode).
func queued() (Option, <-chan string) {
	ch := make(chan string, 64)
	return withAttemptHook(func(name string, err error) {
		if errors.Is(err, ErrLocked) {
			select {
			case ch <- name:
			default:
			}
		}
	}), ch
}

// await waits for a value on ch, failing t after within.
func await[T any](t testing.TB, ch <-chan T, within time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(within):
		t.Fatalf("%s: nothing within %v", what, within)
	}
	var zero T
	return zero
}

// TestFairOrder queues n waiters in a known order behind a holder and checks
// that they are served in that order, each woken by the release before it.
func TestFairOrder(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		const n = 8
		name := "fair-order-" + b.name
		ctx := context.Background()
		holder := newSession(t, b.client, WithFairness())
		first, err := holder.Lock(ctx, name)
		require.NoError(t, err)

		served := make(chan int, n)
		errs := make(chan error, n)
		for i := range n {
			hook, locked := queued()
			s := newSession(t, b.client, WithFairness(), WithTTL(2*time.Second), hook)
			go func() {
				l, err := s.Lock(ctx, name)
				if err != nil {
					errs <- err
					return
				}
				served <- i
				errs <- l.Release(ctx)
			}()
			// The next waiter starts only once this one is in the queue.
			await(t, locked, 5*time.Second, fmt.Sprintf("waiter %d queued", i))
		}
		n0, err := b.client.ZCard(ctx, first.keys.queue()).Result()
		require.NoError(t, err)
		require.EqualValues(t, n, n0, "every waiter has a place")

		require.NoError(t, first.Release(ctx))
		var order []int
		for range n {
			order = append(order, await(t, served, 5*time.Second, "next waiter served"))
			require.NoError(t, await(t, errs, 5*time.Second, "release"))
		}
		want := make([]int, n)
		for i := range want {
			want[i] = i
		}
		assert.Equal(t, want, order, "served in arrival order")
		left, err := b.client.Exists(ctx, first.keys.queue(), first.keys.leases()).Result()
		require.NoError(t, err)
		assert.Zero(t, left, "the queue keys are gone with the last waiter")
	})
}

// TestFairTryLock: in fair mode TryLock takes a free name only if nobody
// waits for it.
func TestFairTryLock(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		name := "fair-try-" + b.name
		ctx := context.Background()
		a := newSession(t, b.client, WithFairness())
		l, err := a.Lock(ctx, name)
		require.NoError(t, err)

		hook, locked := queued()
		w := newSession(t, b.client, WithFairness(), hook)
		got := make(chan *Lock, 1)
		go func() {
			l, err := w.Lock(ctx, name)
			assert.NoError(t, err)
			got <- l
		}()
		await(t, locked, 5*time.Second, "waiter queued")

		// Free, but the waiter came first: with the waiter's wake-up gone
		// astray (its session's channel is not the one the release
		// publishes on while it is held up), TryLock still must not barge.
		try := newSession(t, b.client, WithFairness())
		_, err = try.TryLock(ctx, name)
		require.ErrorIs(t, err, ErrLocked)
		require.NoError(t, l.Release(ctx))
		wl := await(t, got, 5*time.Second, "waiter served")
		_, err = try.TryLock(ctx, name)
		require.ErrorIs(t, err, ErrLocked, "held by the waiter")
		require.NoError(t, wl.Release(ctx))
		tl, err := try.TryLock(ctx, name)
		require.NoError(t, err, "free and nobody waits")
		require.NoError(t, tl.Release(ctx))
	})
}

// TestFairRedlockRefused: fairness across independent nodes is not defined.
func TestFairRedlockRefused(t *testing.T) {
	var clients []Client
	for range 3 {
		_, c := newMini(t)
		clients = append(clients, c)
	}
	_, err := NewRedlockSession(clients, WithFairness())
	require.ErrorIs(t, err, ErrInvalid)
	assert.True(t, strings.Contains(err.Error(), "WithFairness"), err.Error())
}
