package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader"
	"github.com/redisleader/redisleader/internal/redisserver"
)

// These tests run the library over go-redis's AutoPipeliner (v9.22+,
// experimental), which satisfies redisleader.Client; they live in this
// module because the library's go.mod holds go-redis at its floor, which
// has no AutoPipeliner. CI runs them against each server of its matrix.

// apKind is an auto-pipelining client on its own servers, and how many
// clients those servers have subscribed to a channel.
type apKind struct {
	client      redisleader.Client
	subscribers func(t *testing.T, channel string) int64
}

// numsub counts the subscribers of channel on the servers.
func numsub(servers ...*redisserver.Server) func(t *testing.T, channel string) int64 {
	return func(t *testing.T, channel string) int64 {
		var n int64
		for _, s := range servers {
			reply, _ := s.Do(t, "PUBSUB", "NUMSUB", channel).([]any)
			if len(reply) == 2 {
				c, _ := reply[1].(int64)
				n += c
			}
		}
		return n
	}
}

// apKinds are the auto-pipelining clients a user can build: over a plain
// client half or full duplex, and over a ClusterClient.
func apKinds() map[string]func(t *testing.T) apKind {
	plain := func(fd bool) func(t *testing.T) apKind {
		return func(t *testing.T) apKind {
			srv := redisserver.Start(t)
			c := srv.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
			ap, err := c.AutoPipelineWithOptions(&redis.AutoPipelineOptions{FullDuplex: fd})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = ap.Close() })
			return apKind{ap, numsub(srv)}
		}
	}
	return map[string]func(t *testing.T) apKind{
		"plain/half-duplex": plain(false),
		"plain/full-duplex": plain(true),
		"cluster": func(t *testing.T) apKind {
			cluster := redisserver.StartCluster(t, 3)
			c := cluster.Client(t, func(o *redis.ClusterOptions) { o.ContextTimeoutEnabled = true })
			ap, err := c.AutoPipeline()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = ap.Close() })
			return apKind{ap, numsub(cluster.Nodes()...)}
		},
	}
}

// TestAutoPipeliner: on each kind, locks on several names are taken and
// released; a lock outlives several TTLs (renewed); a Lock waiting on its
// channel (pub/sub over the AutoPipeliner's Subscribe) gets the name a
// fraction of a lease after the holder's release; an election hands over
// and Leader reads the new leader.
func TestAutoPipeliner(t *testing.T) {
	for name, newKind := range apKinds() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			kind := newKind(t)
			c := kind.client
			ctx := context.Background()
			const ttl = 300 * time.Millisecond
			session := func(ttl time.Duration) *redisleader.Session {
				s, err := redisleader.NewSession(c, redisleader.WithTTL(ttl))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = s.Close(ctx) })
				return s
			}
			a, b := session(ttl), session(ttl)

			for _, n := range []string{"a", "b", "c", "d", "e", "f"} {
				l, err := a.TryLock(ctx, n)
				if err != nil {
					t.Fatalf("TryLock %s: %v", n, err)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatalf("Release %s: %v", n, err)
				}
			}

			held, err := a.TryLock(ctx, "held")
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-held.Done():
				t.Fatalf("the lock ended within 4 TTLs: %v", held.Err())
			case <-time.After(4 * ttl):
			}
			if _, err := b.TryLock(ctx, "held"); !errors.Is(err, redisleader.ErrLocked) {
				t.Fatalf("TryLock of a held name: %v, want ErrLocked", err)
			}
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}

			// Sessions with a 10s lease: a waiter that gets the name within
			// 2s of the release was woken by its message, not by the lease.
			const long = 10 * time.Second
			holder, waiter := session(long), session(long)
			l, err := holder.TryLock(ctx, "woken")
			if err != nil {
				t.Fatal(err)
			}
			woken := make(chan error, 1)
			go func() {
				l, err := waiter.Lock(ctx, "woken")
				if err == nil {
					err = l.Release(ctx)
				}
				woken <- err
			}()
			// The waiter subscribes before it tries; released earlier than
			// its try, it takes the free name at once, which passes too.
			deadline := time.Now().Add(5 * time.Second)
			for kind.subscribers(t, "redisleader:{woken}:ch") == 0 {
				if time.Now().After(deadline) {
					t.Fatal("the waiting Lock did not subscribe to its channel")
				}
				<-time.After(2 * time.Millisecond) // poll interval
			}
			released := time.Now()
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-woken:
				if err != nil {
					t.Fatalf("the waiting Lock: %v", err)
				}
				t.Logf("the waiting Lock took the name %v after the release", time.Since(released))
			case <-time.After(2 * time.Second):
				t.Fatal("the waiting Lock was not woken by the release")
			}

			ea, err := a.Election("ap-election")
			if err != nil {
				t.Fatal(err)
			}
			eb, err := b.Election("ap-election")
			if err != nil {
				t.Fatal(err)
			}
			la, err := ea.Campaign(ctx, "a")
			if err != nil {
				t.Fatal(err)
			}
			next := make(chan *redisleader.Lock, 1)
			go func() {
				l, err := eb.Campaign(ctx, "b")
				if err != nil {
					t.Errorf("Campaign b: %v", err)
				}
				next <- l
			}()
			if err := la.Release(ctx); err != nil {
				t.Fatal(err)
			}
			lb := <-next
			if lb == nil {
				t.FailNow()
			}
			who, err := ea.Leader(ctx)
			if err != nil || who.Value != "b" || who.Fence != lb.Fence() {
				t.Fatalf("Leader = %+v, %v; want b with fence %d", who, err, lb.Fence())
			}
		})
	}
}
