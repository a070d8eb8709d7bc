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
	mr, err := miniredis.Run() // in production: your Redis
	if err != nil {
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
	lock, err := session.Lock(ctx, "nightly-report") // waits while another session holds it
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("held:", lock.Held(), "fence:", lock.Fence() > 0) // pass the fence with every write
	// ... the work; stop it when lock.Done() closes (lock.Err() says why)
	if err := lock.Release(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("released:", errors.Is(lock.Err(), redisleader.ErrReleased))
	// Output:
	// held: true fence: true
	// released: true
}

// TryLock makes one attempt: another owner's name is ErrLocked. Lock waits,
// and a release wakes it at once. With WithFairness waiters are served first
// come, first served.
func ExampleSession_TryLock() {
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()
	ctx := context.Background()

	holder, err := redisleader.NewSession(client, redisleader.WithFairness())
	if err != nil {
		log.Fatal(err)
	}
	defer holder.Close(ctx)
	waiter, err := redisleader.NewSession(client, redisleader.WithFairness())
	if err != nil {
		log.Fatal(err)
	}
	defer waiter.Close(ctx)

	first, err := holder.Lock(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	_, err = waiter.TryLock(ctx, "nightly-report")
	fmt.Println("TryLock while held:", errors.Is(err, redisleader.ErrLocked))

	acquired := make(chan *redisleader.Lock)
	go func() {
		next, err := waiter.Lock(ctx, "nightly-report") // waits for the release
		if err != nil {
			log.Fatal(err)
		}
		acquired <- next
	}()
	if err := first.Release(ctx); err != nil {
		log.Fatal(err)
	}
	next := <-acquired
	fmt.Println("Lock after the release, fence higher:", next.Fence() > first.Fence())
	if err := next.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// TryLock while held: true
	// Lock after the release, fence higher: true
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

// Run is what a service calls: it campaigns, calls the function while this
// process leads, cancels the function's context the moment leadership is
// lost, waits for it to return before resigning, and campaigns again, until
// ctx ends.
func ExampleElection_Run() {
	mr, err := miniredis.Run() // in production: your Redis
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()
	session, err := redisleader.NewSession(client)
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close(context.Background())
	election, err := session.Election("scheduler")
	if err != nil {
		log.Fatal(err)
	}

	ctx, stop := context.WithCancel(context.Background()) // in a service: ends at shutdown
	err = election.Run(ctx, "host-a:8080", func(leaderCtx context.Context, leadership *redisleader.Lock) error {
		fmt.Println("elected, fence:", leadership.Fence() > 0)
		stop()             // for the example: shut down now
		<-leaderCtx.Done() // lost, resigned or ctx ended: stop the work
		return nil
	})
	fmt.Println("Run returned:", err)
	// Output:
	// elected, fence: true
	// Run returned: context canceled
}

// Campaign blocks until this candidate leads and returns its leadership as
// a Lock. Proclaim announces a new value without resigning; Resign resigns
// (as the Lock's Release does). Leader tells anyone who leads now.
func ExampleElection_Campaign() {
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
	election, err := session.Election("scheduler")
	if err != nil {
		log.Fatal(err)
	}

	leadership, err := election.Campaign(ctx, "host-a:8080")
	if err != nil {
		log.Fatal(err)
	}
	who, err := election.Leader(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("leader:", who.Value, "same fence:", who.Fence == leadership.Fence())

	// Moved to another port: announce it without resigning (same fence).
	if err := election.Proclaim(ctx, "host-a:9090"); err != nil {
		log.Fatal(err)
	}
	who, err = election.Leader(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("leader:", who.Value, "same fence:", who.Fence == leadership.Fence())

	if err := election.Resign(ctx); err != nil { // followers take over at once
		log.Fatal(err)
	}
	_, err = election.Leader(ctx)
	fmt.Println("after resigning:", err)
	// Output:
	// leader: host-a:8080 same fence: true
	// leader: host-a:9090 same fence: true
	// after resigning: redisleader: no leader
}

// Resign during Run ends the term at once: onElected's context is cancelled
// with cause ErrReleased, and Resign returns once Run has deleted the key,
// after onElected returned. Run then campaigns again, until ctx ends.
func ExampleElection_Transfer() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()
	ctx := context.Background()

	// Two instances, each with its own session: version 1 leads.
	old, err := redisleader.NewSession(client)
	if err != nil {
		log.Fatal(err)
	}
	defer old.Close(ctx)
	oldElection, err := old.Election("scheduler")
	if err != nil {
		log.Fatal(err)
	}
	if _, err := oldElection.Campaign(ctx, "v1:host-a", redisleader.WithPriority(1)); err != nil {
		log.Fatal(err)
	}
	next, err := redisleader.NewSession(client)
	if err != nil {
		log.Fatal(err)
	}
	defer next.Close(ctx)
	nextElection, err := next.Election("scheduler")
	if err != nil {
		log.Fatal(err)
	}
	elected := make(chan *redisleader.Lock)
	go func() {
		// Version 2 campaigns with a higher priority. (A Run leader would
		// yield to it by itself; a Campaign leader hands over on release.)
		l, err := nextElection.Campaign(ctx, "v2:host-b", redisleader.WithPriority(2))
		if err != nil {
			log.Fatal(err)
		}
		elected <- l
	}()
	// Hand over to v2:host-b: nobody else can lead in between. The name
	// waits one TTL for it, so it may still be starting.
	if err := oldElection.Transfer(ctx, "v2:host-b"); err != nil {
		log.Fatal(err)
	}
	leadership := <-elected
	fmt.Println("leader:", leadership.Value())
	candidates, err := oldElection.Candidates(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("candidates:", candidates)
	// Output:
	// leader: v2:host-b
	// candidates: [{v2:host-b 2}]
}

func ExampleElection_Resign() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()

	session, err := redisleader.NewSession(client)
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close(context.Background())
	election, err := session.Election("scheduler")
	if err != nil {
		log.Fatal(err)
	}

	ctx, stop := context.WithCancel(context.Background())
	elected, returned := make(chan struct{}), make(chan error)
	go func() {
		terms := 0
		returned <- election.Run(ctx, "host-a:8080", func(leaderCtx context.Context, _ *redisleader.Lock) error {
			if terms++; terms == 1 {
				close(elected)
			}
			<-leaderCtx.Done()
			if terms == 1 {
				fmt.Println("term over:", context.Cause(leaderCtx))
			}
			return nil
		})
	}()
	<-elected
	if err := election.Resign(context.Background()); err != nil {
		log.Fatal(err)
	}
	fmt.Println("resigned")
	stop()
	fmt.Println("Run returned:", <-returned)
	// Output:
	// term over: redisleader: released
	// resigned
	// Run returned: context canceled
}

// Observe streams leader changes, pushed through pub/sub, with Fence 0 for
// "no leader".
func ExampleElection_Observe() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	watcher, err := redisleader.NewSession(client)
	if err != nil {
		log.Fatal(err)
	}
	defer watcher.Close(ctx)
	candidate, err := redisleader.NewSession(client)
	if err != nil {
		log.Fatal(err)
	}
	defer candidate.Close(ctx)

	observed, err := watcher.Election("scheduler")
	if err != nil {
		log.Fatal(err)
	}
	changes := observed.Observe(ctx)
	show := func(l redisleader.Leader) {
		if l.Fence == 0 {
			fmt.Println("no leader")
			return
		}
		fmt.Println("leader:", l.Value)
	}
	show(<-changes) // the current state comes first

	election, err := candidate.Election("scheduler")
	if err != nil {
		log.Fatal(err)
	}
	leadership, err := election.Campaign(ctx, "host-b:8080")
	if err != nil {
		log.Fatal(err)
	}
	show(<-changes)
	if err := leadership.Release(ctx); err != nil {
		log.Fatal(err)
	}
	show(<-changes)
	// Output:
	// no leader
	// leader: host-b:8080
	// no leader
}

// A Redlock session holds a name on a majority of independent Redis
// servers, so it keeps working while a minority is down.
func ExampleNewRedlockSession() {
	var nodes []redisleader.Client
	var servers []*miniredis.Miniredis
	for range 3 {
		mr := miniredis.NewMiniRedis()
		if err := mr.Start(); err != nil {
			log.Fatal(err)
		}
		defer mr.Close()
		servers = append(servers, mr)
		client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
		defer client.Close()
		nodes = append(nodes, client)
	}
	ctx := context.Background()

	session, err := redisleader.NewRedlockSession(nodes)
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close(ctx)

	servers[2].Close() // one node of three is down: a quorum of two remains
	lock, err := session.TryLock(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("held with one node down:", lock.Held())
	if err := lock.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// held with one node down: true
}

// A fenced write: the data key refuses a write whose fence is below the
// highest it has accepted, so an owner that resumes after a pause cannot
// overwrite what its successor wrote.
func ExampleFencedSet() {
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
	staleFence := first.Fence() // the first owner pauses here, and its lease ends
	if err := first.Release(ctx); err != nil {
		log.Fatal(err)
	}
	second, err := session.Lock(ctx, "ledger")
	if err != nil {
		log.Fatal(err)
	}
	defer second.Release(ctx)
	if err := redisleader.FencedSet(ctx, client, "ledger:balance", "100", second.Fence()); err != nil {
		log.Fatal(err)
	}

	// The first owner resumes and makes the write it had prepared.
	err = redisleader.FencedSet(ctx, client, "ledger:balance", "0", staleFence)
	fmt.Println("stale write refused:", errors.Is(err, redisleader.ErrStaleFence))
	balance, err := client.HGet(ctx, "ledger:balance", "value").Result()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("balance:", balance)
	// Output:
	// stale write refused: true
	// balance: 100
}

// Ownership ends at a local deadline that comes before Redis can expire the
// key. When Redis stops answering, renewals fail, and a timer ends the lock
// at that deadline with ErrExpired: nobody else can have it yet.
func ExampleLock_Deadline() {
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()
	ctx := context.Background()

	const ttl = 200 * time.Millisecond // short, for the example; the default is 15s
	session, err := redisleader.NewSession(client, redisleader.WithTTL(ttl))
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close(ctx)
	lock, err := session.Lock(ctx, "migrations")
	if err != nil {
		log.Fatal(err)
	}
	// D = send time + TTL·(1−ρ) − margin: 200ms·0.99 − 5ms after the acquire
	// was sent, while Redis keeps the key at least TTL after that.
	fmt.Println("local deadline within the TTL:", time.Until(lock.Deadline()) < ttl)

	mr.SetError("LOADING Redis is loading the dataset in memory") // every call fails now
	<-lock.Done()
	fmt.Println("expired:", errors.Is(lock.Err(), redisleader.ErrExpired), "held:", lock.Held())
	mr.SetError("")
	// Output:
	// local deadline within the TTL: true
	// expired: true held: false
}

// Hooks report acquisitions, losses, releases and renewal rounds, for
// metrics (adapters/prometheus and adapters/otel turn them into metrics);
// CheckHealth (and HealthHandler, over HTTP) says whether the session renews.
func ExampleWithHooks() {
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()
	ctx := context.Background()

	hooks := redisleader.Hooks{ // called on the library's goroutines: must not block
		Acquired: func(e redisleader.AcquireEvent) { fmt.Println("acquired", e.Name) },
		Released: func(e redisleader.EndEvent) { fmt.Println("released", e.Name, "cause:", e.Cause) },
	}
	session, err := redisleader.NewSession(client, redisleader.WithHooks(hooks))
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close(ctx)
	lock, err := session.Lock(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("healthy:", session.CheckHealth(time.Second) == nil)
	if err := lock.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// acquired nightly-report
	// healthy: true
	// released nightly-report cause: redisleader: released
}

// A semaphore: at most N holders of a name at once, across every session.
// A permit is a Lock: renewed by the session, fenced, released with Release
// (or by Close); a crashed holder's permit comes back within one TTL.
func Example_semaphore() {
	mr, err := miniredis.Run() // in production: your Redis
	if err != nil {
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
	api, err := session.Semaphore("partner-api", 2, redisleader.WithPermitValue("worker-7"))
	if err != nil {
		log.Fatal(err)
	}
	first, err := api.Acquire(ctx) // waits while all 2 permits are held
	if err != nil {
		log.Fatal(err)
	}
	second, err := api.TryAcquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	_, err = api.TryAcquire(ctx)
	fmt.Println("third:", errors.Is(err, redisleader.ErrLocked))
	holders, limit, err := api.Holders(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("holders:", len(holders), "of", limit, "-", holders[0].Value)
	fmt.Println("fences increase:", second.Fence() > first.Fence())
	_ = first.Release(ctx)
	_ = second.Release(ctx)
	// Output:
	// third: true
	// holders: 2 of 2 - worker-7
	// fences increase: true
}

// A read-write lock: many readers or one writer, each grant a lease with
// a fence. A writer that waits stops new readers, so a stream of readers
// cannot starve it; a session that reads may not ask to write (an upgrade
// is refused: release the read lease first).
func Example_rwlock() {
	mr, err := miniredis.Run() // in production: your Redis
	if err != nil {
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
	doc, err := session.RWLock("config-doc", redisleader.WithRWValue("host-3"))
	if err != nil {
		log.Fatal(err)
	}
	read1, err := doc.RLock(ctx) // waits while a writer holds or waits
	if err != nil {
		log.Fatal(err)
	}
	read2, err := doc.RLock(ctx) // readers share
	if err != nil {
		log.Fatal(err)
	}
	_, err = doc.Lock(ctx)
	fmt.Println("upgrade refused:", errors.Is(err, redisleader.ErrInvalid))
	holders, waiting, err := doc.Holders(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("readers:", len(holders), "writers waiting:", waiting)
	_ = read1.Release(ctx)
	_ = read2.Release(ctx)
	write, err := doc.Lock(ctx) // waits while anyone reads
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("fences increase:", write.Fence() > read2.Fence())
	_ = write.Release(ctx)
	// Output:
	// upgrade refused: true
	// readers: 2 writers waiting: 0
	// fences increase: true
}
