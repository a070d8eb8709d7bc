// Command fipsprobe takes and releases one lock on the Redis server at the
// address in its first argument, and prints "ok". TestFIPS140Only runs it
// under GODEBUG=fips140=only, where a use of an algorithm FIPS 140 does not
// approve (such as SHA-1) panics, also at start-up.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader"
)

func main() {
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "fipsprobe:", err)
		os.Exit(1)
	}
	fmt.Println("ok")
}

func run(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	s, err := redisleader.NewSession(c)
	if err != nil {
		return err
	}
	l, err := s.TryLock(ctx, "fips")
	if err != nil {
		return fmt.Errorf("TryLock: %w", err)
	}
	if err := l.Release(ctx); err != nil {
		return fmt.Errorf("Release: %w", err)
	}
	return s.Close(ctx)
}
