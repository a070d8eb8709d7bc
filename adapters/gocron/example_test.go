package redisgocron_test

import (
	"context"
	"log"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader"
	redisgocron "github.com/redisleader/redisleader/adapters/gocron"
)

func sendReport() {}

// Compiled, not run: it needs a Redis at localhost:6379.
func ExampleNewLocker() {
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	defer client.Close()
	session, err := redisleader.NewSession(client, redisleader.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close(context.Background())

	// Jobs run every minute on the wall clock: hold each run's lock 30s.
	locker, err := redisgocron.NewLocker(session, 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close(context.Background())

	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
	if err != nil {
		log.Fatal(err)
	}
	_, err = s.NewJob(gocron.CronJob("0 * * * * *", true), gocron.NewTask(sendReport),
		gocron.WithName("send-report")) // the lock name is derived from the job name
	if err != nil {
		log.Fatal(err)
	}
	s.Start()
	defer s.Shutdown() // runs first: no job starts after it
}

// Compiled, not run: it needs a Redis at localhost:6379.
func ExampleNewElector() {
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	defer client.Close()
	session, err := redisleader.NewSession(client, redisleader.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close(context.Background())

	elector, err := redisgocron.NewElector(session, "reports-scheduler", "host-a:8080",
		redisgocron.WithSettle(time.Second)) // ≥ the splay of the schedulers' timers
	if err != nil {
		log.Fatal(err)
	}
	defer elector.Close(context.Background()) // resigns

	s, err := gocron.NewScheduler(gocron.WithDistributedElector(elector))
	if err != nil {
		log.Fatal(err)
	}
	_, err = s.NewJob(gocron.CronJob("0 * * * * *", true), gocron.NewTask(sendReport))
	if err != nil {
		log.Fatal(err)
	}
	s.Start()
	defer s.Shutdown()
}
