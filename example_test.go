package redisleader_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader"
)

// A lock in a few lines: one session per process, one Lock per critical
// section. The examples run on miniredis, an in-process Redis for tests.
func Example() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()
	ctx := context.Background()

	session, err := redisleader.NewSession(client, redisleader.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close(ctx)

	lock, err := session.Lock(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("acquired", lock.Name(), "held:", lock.Held())

	// Meanwhile nobody else gets it.
	other, err := redisleader.NewSession(client)
	if err != nil {
		log.Fatal(err)
	}
	defer other.Close(ctx)
	_, err = other.TryLock(ctx, "nightly-report")
	fmt.Println("other session:", errors.Is(err, redisleader.ErrLocked))

	if err := lock.Release(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("released:", errors.Is(lock.Err(), redisleader.ErrReleased))
	// Output:
	// acquired nightly-report held: true
	// other session: true
	// released: true
}

// Work under a lock stops as soon as the lock is lost: Done is closed by a
// timer at the local deadline, or at once when Redis says the key is no
// longer ours. Here someone deletes the key behind our back.
func ExampleLock_Done() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()
	ctx := context.Background()

	session, err := redisleader.NewSession(client, redisleader.WithTTL(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close(ctx)
	lock, err := session.Lock(ctx, "migrations")
	if err != nil {
		log.Fatal(err)
	}

	mr.Del(lock.Key()) // an operator, an eviction, a failover...

	select {
	case <-lock.Done():
		fmt.Println("stopped:", lock.Err())
		fmt.Println("lost:", errors.Is(lock.Err(), redisleader.ErrLost))
	case <-time.After(5 * time.Second):
		fmt.Println("still working")
	}
	// Output:
	// stopped: redisleader: ownership lost: not owner any more (key deleted, expired on the server, or taken)
	// lost: true
}

// Fencing tokens strictly increase across owners. Pass the fence with every
// write to the protected resource and have the resource reject a fence lower
// than the highest it has seen: a former owner that acts late is refused.
func ExampleLock_Fence() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()
	ctx := context.Background()

	session, err := redisleader.NewSession(client)
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close(ctx)

	first, err := session.Lock(ctx, "ledger")
	if err != nil {
		log.Fatal(err)
	}
	if err := first.Release(ctx); err != nil {
		log.Fatal(err)
	}
	second, err := session.Lock(ctx, "ledger")
	if err != nil {
		log.Fatal(err)
	}
	defer second.Release(ctx)
	fmt.Println("second fence is higher:", second.Fence() > first.Fence())
	// Output:
	// second fence is higher: true
}
