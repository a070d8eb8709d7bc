package redisleader

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisleader/redisleader/internal/lease"
)

func TestRelease(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		s := newSession(t, b.client)
		l, err := s.TryLock(ctx, "released")
		require.NoError(t, err)
		assert.Equal(t, "released", l.Name())
		assert.Equal(t, "redisleader:{released}", l.Key())

		sub := b.client.Subscribe(ctx, lease.NewKeys("released").Channel)
		defer sub.Close()
		_, err = sub.Receive(ctx) // subscription confirmed
		require.NoError(t, err)

		require.NoError(t, l.Release(ctx))
		waitClosed(t, l.Done(), time.Second, "Done after Release")
		assert.ErrorIs(t, l.Err(), ErrReleased)
		assert.False(t, l.Held())
		assert.Empty(t, b.get(l.Key()), "key deleted")
		select {
		case msg := <-sub.Channel():
			assert.Equal(t, lease.NewKeys("released").Channel, msg.Channel)
		case <-time.After(time.Second):
			t.Fatal("release published nothing")
		}
		assert.NoError(t, l.Release(ctx), "a second Release is a no-op")

		// Another owner takes it; the old handle cannot touch it.
		l2, err := s.TryLock(ctx, "released")
		require.NoError(t, err)
		assert.NoError(t, l.Release(ctx))
		assert.True(t, l2.Held())
		assert.NotEmpty(t, b.get(l2.Key()))
	})
}

func TestErrAndHeldCheckTheClock(t *testing.T) {
	_, c := newMini(t)
	s := newSession(t, c)
	l, err := s.TryLock(context.Background(), "clock")
	require.NoError(t, err)
	// As if the deadline timer were late (a starved runtime): the deadline
	// has passed but nothing has ended the lock yet.
	l.mu.Lock()
	l.deadline = time.Now().Add(-time.Millisecond)
	l.mu.Unlock()
	assert.ErrorIs(t, l.Err(), ErrExpired)
	select {
	case <-l.Done():
	default:
		t.Fatal("Done must be closed once Err reported the expiry")
	}
	assert.False(t, l.Held())
}

func TestReleaseWithLostReply(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		var drop atomic.Int32
		c := dropClient(t, b.addr, &drop, nil)
		checked := serverChecked(c)
		s := newSession(t, c)
		l, err := s.TryLock(ctx, "lost-release-reply")
		require.NoError(t, err)
		// The session checks the server's settings once it first holds a
		// lock, in the background; the reply to drop is the delete's.
		waitClosed(t, checked, 5*time.Second, "the session's check of the server's settings")
		drop.Store(1) // the delete runs; its reply is lost; go-redis re-sends it
		assert.NoError(t, l.Release(ctx), "a retried delete that finds the key gone is no loss")
		assert.Zero(t, drop.Load())
		assert.ErrorIs(t, l.Err(), ErrReleased)
		assert.Empty(t, b.get(l.Key()))
	})
}

// failFirstInPipeline fails, while on, the first command of every pipeline
// of more than one with a timeout and reports that error, as go-redis does
// for the first failure.
func failFirstInPipeline(on *atomic.Bool) testHook {
	return testHook{pipeline: func(ctx context.Context, cmds []redis.Cmder, send sendFunc) error {
		err := send(ctx, cmds)
		if on.Load() && len(cmds) > 1 {
			timeout := errors.New("i/o timeout (injected)")
			cmds[0].SetErr(timeout)
			return timeout
		}
		return err
	}}
}

// A NOSCRIPT hidden behind another error in the same pipeline (another
// Cluster node timing out, say) is still handled: healthy locks stay held.
func TestNoScriptBehindAnotherError(t *testing.T) {
	_, c := newMini(t)
	var failing atomic.Bool
	c.AddHook(failFirstInPipeline(&failing))
	roundHook, roundsCh := rounds()
	s := newSession(t, c, fastOpts(roundHook)...)
	ctx := context.Background()
	var locks []*Lock
	for i := 0; i < 3; i++ {
		l, err := s.TryLock(ctx, fmt.Sprint("hidden-", i))
		require.NoError(t, err)
		locks = append(locks, l)
	}
	failing.Store(true)
	for i := 0; i < 8; i++ { // more rounds than fit in one lease
		require.NoError(t, c.ScriptFlush(ctx).Err())
		waitRound(t, roundsCh, time.Second)
	}
	held := 0
	for _, l := range locks {
		if l.Held() {
			held++
		}
	}
	assert.GreaterOrEqual(t, held, 2, "only the lock whose renewal keeps failing may expire")
}

// A failed TryLock returns a nil *Lock; `defer lock.Release(ctx)` right
// after it, or any other method, must not panic.
func TestNilLockMethods(t *testing.T) {
	var l *Lock
	ctx := context.Background()
	assert.ErrorIs(t, l.Release(ctx), ErrInvalid)
	assert.ErrorContains(t, l.Release(ctx), "nil *Lock")
	assert.ErrorIs(t, l.Err(), ErrInvalid)
	assert.False(t, l.Held())
	select {
	case <-l.Done():
	default:
		t.Fatal("Done of a nil *Lock is not closed")
	}
	assert.Empty(t, l.Name())
	assert.Empty(t, l.Value())
	assert.Empty(t, l.Key())
	assert.Zero(t, l.Fence())
	assert.True(t, l.Deadline().IsZero())
}

// A Lock printed with any verb, or logged, shows its key and fence and
// never its token (a plain lock, a leadership and a semaphore permit: all
// are Locks). fmt printed the struct, token included.
func TestLockPrintsNoToken(t *testing.T) {
	_, c := newMini(t)
	s := newSession(t, c)
	ctx := context.Background()
	plain, err := s.TryLock(ctx, "printed")
	require.NoError(t, err)
	lead, err := mustElection(t, s, "printed-election").Campaign(ctx, "v")
	require.NoError(t, err)
	sem, err := s.Semaphore("printed-sem", 2)
	require.NoError(t, err)
	permit, err := sem.TryAcquire(ctx)
	require.NoError(t, err)
	for _, l := range []*Lock{plain, lead, permit} {
		var logged bytes.Buffer
		slog.New(slog.NewTextHandler(&logged, nil)).Info("held", "lock", l)
		slog.New(slog.NewJSONHandler(&logged, nil)).Info("held", "lock", l)
		out := fmt.Sprintf("%v %+v %#v %s %q", l, l, l, l, l) + logged.String()
		assert.NotContains(t, out, l.lease.Token)
		assert.Contains(t, out, fmt.Sprintf("redisleader.Lock{key: %q, fence: %d}", l.Key(), l.Fence()))
	}
	var none *Lock
	assert.Equal(t, "redisleader.Lock(nil)", fmt.Sprint(none))
}
