package prometheus_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/alicebob/miniredis/v2"
	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader"
	"github.com/redisleader/redisleader/adapters/prometheus"
)

func ExampleNew() {
	m, _ := miniredis.Run()
	defer m.Close()
	client := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()

	reg := prom.NewRegistry() // or prom.DefaultRegisterer
	opt, err := prometheus.New(reg)
	if err != nil {
		panic(err)
	}
	s, err := redisleader.NewSession(client, opt)
	if err != nil {
		panic(err)
	}
	defer s.Close(context.Background())

	l, err := s.TryLock(context.Background(), "nightly-report")
	if err != nil {
		panic(err)
	}
	fmt.Println(testutil.CollectAndCount(reg, "redisleader_leader"), "leader series")
	_ = l.Release(context.Background())
	err = testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP redisleader_releases_total Acquisitions of name that ended because they were given up (Release, Run resigning, Session.Close).
# TYPE redisleader_releases_total counter
redisleader_releases_total{name="nightly-report"} 1
`), "redisleader_releases_total")
	fmt.Println(err)
	// Output:
	// 1 leader series
	// <nil>
}
