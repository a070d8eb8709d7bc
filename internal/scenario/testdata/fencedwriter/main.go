// Command fencedwriter is the paused former leader of scenario S29, a
// process of its own so that SIGSTOP freezes all of it: its session, its
// timers and the write it is about to make. It campaigns, writes once
// through redisleader.FencedSet with its fence, checks it still leads and
// reports write_ready, then waits for "go" on stdin (the parent stops it
// there) and writes again with the same fence. Every event (the library's
// lease events, and each write's outcome) goes to stdout as JSON lines for
// the parent's history checker.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader"
	"github.com/redisleader/redisleader/internal/history"
	"github.com/redisleader/redisleader/internal/probe"
)

func main() {
	addrs := flag.String("addrs", "", "comma-separated Redis addresses")
	cluster := flag.Bool("cluster", false, "the addresses are Redis Cluster nodes")
	who := flag.String("who", "p0", "the candidate's id (its election value)")
	name := flag.String("name", "", "the election")
	key := flag.String("key", "", "the fenced data key")
	ttl := flag.Duration("ttl", time.Second, "the lease TTL")
	flag.Parse()

	out := history.NewWriter(os.Stdout)
	probe.Set(func(e probe.Event) {
		if e.Value != *who {
			return
		}
		out.Add(history.FromProbe(e, func(err error) string { return err.Error() }))
	})
	var client redisleader.Client
	if *cluster {
		client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(*addrs, ","), ContextTimeoutEnabled: true})
	} else {
		client = redis.NewClient(&redis.Options{Addr: *addrs, ContextTimeoutEnabled: true})
	}
	s, err := redisleader.NewSession(client, redisleader.WithTTL(*ttl), redisleader.WithCallTimeout(*ttl*15/100),
		redisleader.WithMargin(*ttl/100), redisleader.WithRetryInterval(*ttl/10), redisleader.WithRetryJitter(*ttl/20))
	if err != nil {
		fail(err)
	}
	el, err := s.Election(*name)
	if err != nil {
		fail(err)
	}
	ctx := context.Background()
	l, err := el.Campaign(ctx, *who)
	if err != nil {
		fail(err)
	}
	fence := l.Fence()
	write := func(value string) {
		err := redisleader.FencedSet(ctx, client, *key, value, fence)
		ev := history.Event{Mono: history.Now(), Who: *who, Kind: history.WriteOK, Fence: fence}
		switch {
		case errors.Is(err, redisleader.ErrStaleFence):
			ev.Kind, ev.Reason = history.WriteRej, err.Error()
		case err != nil:
			ev.Kind, ev.Reason = "write_err", err.Error()
		}
		out.Add(ev)
	}
	write(*who + " #1")
	if !l.Held() {
		fail(errors.New("lost the lease before the second write"))
	}
	out.Add(history.Event{Mono: history.Now(), Who: *who, Kind: "write_ready", Fence: fence})
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() || in.Text() != "go" {
		os.Exit(0)
	}
	write(*who + " #2 (late)")
	out.Add(history.Event{Mono: history.Now(), Who: *who, Kind: "held_after", Fence: fence, Reason: fmt.Sprint(l.Held())})
	in.Scan() // "exit", or the parent went away
	_ = s.Close(ctx)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "fencedwriter:", err)
	os.Exit(2)
}
