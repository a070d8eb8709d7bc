package redisleader

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redisleader/redisleader/internal/lease"
)

// BenchmarkServerCost runs lock pairs against the server at
// $SERVER_COST_ADDR, for bench/servercost.sh, which runs that server under
// valgrind and reports the instructions it executes per pair: a count that
// does not drift with the machine's load, as the µs of INFO commandstats
// (BenchmarkServerTime) do. Its sub-benchmarks, 100 pairs a pipeline:
//
//	scripts     the default acquire and release scripts, by EVALSHA, on a
//	            free name (a fresh token each pair)
//	nine-calls  two scripts that make the nine redis.calls of the default
//	            pair's contract (acquire: GET, TIME, GET, PUBLISH, SET, SET;
//	            release: GET, PUBLISH, DEL) with constant arguments and no
//	            logic: the floor of any script keeping that contract
//	empty       two scripts that return at once, with the same keys and
//	            arguments: what EVALSHA itself costs
//	raw-cad     SET NX PX and an EVALSHA compare-and-delete
//	fair        fair mode's scripts (fair_acquire as TryLock sends it,
//	            fair_release), on a free name with no waiters
//	priority    a campaign with a priority: acquire_candidate (the
//	            candidate enlisted) and release
func BenchmarkServerCost(b *testing.B) {
	addr := os.Getenv("SERVER_COST_ADDR")
	if addr == "" {
		b.Skip("SERVER_COST_ADDR is not set: run bench/servercost.sh")
	}
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	k := lease.NewKeys("cost")
	nineAcquire := redis.NewScript(`redis.call('GET', KEYS[1]) redis.call('TIME') redis.call('GET', KEYS[2])
redis.call('PUBLISH', 'cost:ch', 'A') redis.call('SET', KEYS[2], '1') redis.call('SET', KEYS[1], 'v') return 1`)
	nineRelease := redis.NewScript(`redis.call('GET', KEYS[1]) redis.call('PUBLISH', 'cost:ch', 'R') redis.call('DEL', KEYS[1]) return 1`)
	empty := redis.NewScript(`return 1`)
	loadScripts(ctx, b, c, lease.FairAcquireRun, lease.FairReleaseRun, lease.AcquireCandidateRun)
	for _, sc := range []*redis.Script{nineAcquire, nineRelease, empty, rawRelease} {
		if err := sc.Load(ctx, c).Err(); err != nil {
			b.Fatal(err)
		}
	}
	for _, bm := range []struct {
		name     string
		pair     func(p redis.Pipeliner, token string)
		releases bool // each pair takes and frees the name: its release replies 1
	}{
		{"scripts", func(p redis.Pipeliner, token string) {
			p.EvalSha(ctx, lease.AcquireRun.SHA(), []string{k.Lock, k.Fence}, token, "10000", "")
			p.EvalSha(ctx, lease.ReleaseRun.SHA(), []string{k.Lock}, token)
		}, true},
		{"nine-calls", func(p redis.Pipeliner, token string) {
			nineAcquire.EvalSha(ctx, p, []string{k.Lock, k.Fence}, token, "10000", "")
			nineRelease.EvalSha(ctx, p, []string{k.Lock}, token)
		}, false},
		{"empty", func(p redis.Pipeliner, token string) {
			empty.EvalSha(ctx, p, []string{k.Lock, k.Fence}, token, "10000", "")
			empty.EvalSha(ctx, p, []string{k.Lock}, token)
		}, false},
		{"raw-cad", func(p redis.Pipeliner, token string) {
			p.SetNX(ctx, "cost-raw", token, 10e9)
			rawRelease.EvalSha(ctx, p, []string{"cost-raw"}, token)
		}, true},
		{"fair", func(p redis.Pipeliner, token string) {
			p.EvalSha(ctx, lease.FairAcquireRun.SHA(), []string{k.Lock, k.Fence, k.Queue, k.Leases}, token, "10000", "", "s.1", "0")
			p.EvalSha(ctx, lease.FairReleaseRun.SHA(), []string{k.Lock, k.Queue, k.Leases}, token)
		}, true},
		{"priority", func(p redis.Pipeliner, token string) {
			p.EvalSha(ctx, lease.AcquireCandidateRun.SHA(), []string{k.Lock, k.Fence, k.Candidates, k.CandidateLeases}, token, "10000", "v", "1")
			p.EvalSha(ctx, lease.ReleaseRun.SHA(), []string{k.Lock}, token)
		}, true},
	} {
		b.Run(bm.name, func(b *testing.B) {
			p := c.Pipeline()
			for i := 0; i < b.N; {
				for j := 0; j < 100 && i < b.N; j, i = j+1, i+1 {
					bm.pair(p, benchToken())
				}
				cmds, err := p.Exec(ctx)
				if err != nil {
					b.Fatal(err)
				}
				for j := 1; bm.releases && j < len(cmds); j += 2 {
					if n, err := cmds[j].(*redis.Cmd).Int(); err != nil || n != 1 {
						b.Fatalf("release: %d, %v", n, err)
					}
				}
			}
		})
	}
}
