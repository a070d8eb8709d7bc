package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader"
)

// Rows of the topology results.
const (
	rowRedlock3 = "redisleader-redlock-3"
	rowRedsync3 = "redsync-3"
	rowRaw3     = "raw-3"
	rowPlain    = "redisleader"
	rowWait1    = "redisleader+WAIT-1"
)

// topoResults: handovers across three independent nodes, and acquire+release
// on a primary with a replica, with and without the WAIT safety level.
type topoResults struct {
	handover *pooled // rowRedlock3, rowRedsync3
	pairs    *pooled // rowPlain, rowWait1
}

func newTopoResults(rounds int) *topoResults {
	return &topoResults{handover: newPooled(rounds), pairs: newPooled(rounds)}
}

// topoEnv is what the topology scenarios run on: sessions and mutexes over
// the run's three servers, and a primary with one replica.
type topoEnv struct {
	redlock         [2]*redisleader.Election // leader and follower sessions over servers[:3]
	rs              *redsync.Redsync
	plain, waitSess *redisleader.Session // on the replicated primary
	close           func()
}

func (e *env) topologies() (*topoEnv, error) {
	var closers []func()
	t := &topoEnv{close: func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}}
	fail := func(err error) (*topoEnv, error) { t.close(); return nil, err }
	client := func(addr string) *redis.Client {
		c := redis.NewClient(clientOptions(addr))
		closers = append(closers, func() { _ = c.Close() })
		return c
	}
	var pools []redsyncredis.Pool
	for i := range t.redlock {
		var nodes []redisleader.Client
		for _, s := range e.servers[:3] {
			nodes = append(nodes, client(s.addr()))
		}
		s, err := redisleader.NewRedlockSession(nodes, redisleader.WithTTL(lockTTL))
		if err != nil {
			return fail(err)
		}
		closers = append(closers, func() { _ = s.Close(context.Background()) })
		if t.redlock[i], err = s.Election("topo-handover"); err != nil {
			return fail(err)
		}
	}
	for _, s := range e.servers[:3] {
		pools = append(pools, goredis.NewPool(client(s.addr())))
	}
	t.rs = redsync.New(pools...)

	primary, err := startServer()
	if err != nil {
		return fail(err)
	}
	closers = append(closers, primary.stop)
	replica, err := startServer("--replicaof", "127.0.0.1", fmt.Sprint(primary.port))
	if err != nil {
		return fail(err)
	}
	closers = append(closers, replica.stop)
	pc := client(primary.addr())
	if err := waitReplica(pc); err != nil {
		return fail(err)
	}
	if t.plain, err = redisleader.NewSession(client(primary.addr()), redisleader.WithTTL(lockTTL)); err != nil {
		return fail(err)
	}
	closers = append(closers, func() { _ = t.plain.Close(context.Background()) })
	if t.waitSess, err = redisleader.NewSession(client(primary.addr()), redisleader.WithTTL(lockTTL),
		redisleader.WithReplicaAcks(1, 50*time.Millisecond)); err != nil {
		return fail(err)
	}
	closers = append(closers, func() { _ = t.waitSess.Close(context.Background()) })
	return t, nil
}

// waitReplica waits until one replica acknowledges the primary's writes.
func waitReplica(c *redis.Client) error {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if n, err := c.Wait(context.Background(), 1, 100*time.Millisecond).Result(); err == nil && n == 1 {
			return nil
		}
	}
	return errors.New("the replica did not connect within 10s")
}

// runTopologies runs one round of the topology scenarios.
func runTopologies(ctx context.Context, t *topoEnv, cfg config, round int, res *topoResults, errs *errorLog) {
	d, err := redlockHandovers(ctx, t, cfg.handovers)
	errs.add("handover", rowRedlock3, err)
	res.handover.add(rowRedlock3, round, d)
	d, err = redsyncHandovers(ctx, t, cfg.handovers)
	errs.add("handover", rowRedsync3, err)
	res.handover.add(rowRedsync3, round, d)

	n := cfg.seqPairs / 10
	plain, wait := make([]time.Duration, 0, n), make([]time.Duration, 0, n)
	for i := range 2 * n {
		s, out := t.plain, &plain
		if i%2 == 1 {
			s, out = t.waitSess, &wait
		}
		start := time.Now()
		err := pair(ctx, &leaderWorker{s: s, name: "topo-pair"})
		if err != nil {
			errs.add("WAIT pairs", rowWait1, err)
			break
		}
		*out = append(*out, time.Since(start))
	}
	res.pairs.add(rowPlain, round, plain)
	res.pairs.add(rowWait1, round, wait)
}

// redlockHandovers: the leader resigns while a follower of another session
// waits in Campaign, n times; each sample runs from just before the
// release to the follower's Campaign returning.
func redlockHandovers(ctx context.Context, t *topoEnv, n int) ([]time.Duration, error) {
	lead, err := t.redlock[0].Campaign(ctx, "a")
	if err != nil {
		return nil, err
	}
	var out []time.Duration
	for i := range n {
		follower := t.redlock[(i+1)%2]
		c := startCampaign(ctx, follower, "next")
		phase(ctx)
		t0 := time.Now()
		if err := lead.Release(ctx); err != nil {
			c.stop()
			return out, err
		}
		w := c.wait()
		if w.err != nil {
			return out, w.err
		}
		out = append(out, w.at.Sub(t0))
		lead = w.lock
	}
	return out, lead.Release(ctx)
}

// redsyncHandovers: the same with redsync: the follower waits in
// LockContext (redsync's retry: up to 32 tries, 50–250ms apart).
func redsyncHandovers(ctx context.Context, t *topoEnv, n int) ([]time.Duration, error) {
	opts := []redsync.Option{redsync.WithExpiry(lockTTL)}
	lead := t.rs.NewMutex("topo-redsync", opts...)
	if err := lead.LockContext(ctx); err != nil {
		return nil, err
	}
	var out []time.Duration
	for range n {
		follower := t.rs.NewMutex("topo-redsync", opts...)
		got := make(chan error, 1)
		var at time.Time
		go func() {
			err := follower.LockContext(ctx)
			at = time.Now()
			got <- err
		}()
		phase(ctx)
		t0 := time.Now()
		if ok, err := lead.UnlockContext(ctx); err != nil || !ok {
			return out, fmt.Errorf("redsync unlock: ok=%t err=%v", ok, err)
		}
		if err := <-got; err != nil {
			return out, err
		}
		out = append(out, at.Sub(t0))
		lead = follower
	}
	_, err := lead.UnlockContext(ctx)
	return out, err
}

// phase waits 20–40ms so the follower is waiting (its first try failed)
// when the leader lets go, at a random point of a poller's cycle.
func phase(ctx context.Context) {
	select {
	case <-time.After(20*time.Millisecond + rand.N(20*time.Millisecond)):
	case <-ctx.Done():
	}
}

func (r *report) topologies(t *topoResults) {
	r.printf("## Topologies\n\n### Handover across three independent nodes (ms)\n\n")
	r.printf("Three independent redis-servers (quorum 2). The leader lets go while a follower of another client waits; from just before the release to the follower holding the lock. %d samples per round.\n\n", r.cfg.handovers)
	r.printf("- `%s`: `NewRedlockSession` over the three servers, Election.Campaign / Lock.Release (the follower is woken by pub/sub from the first node)\n", rowRedlock3)
	r.printf("- `%s`: go-redsync/redsync over the same servers, follower in `LockContext` (its default retry: 32 tries, 50–250ms apart), leader `UnlockContext`\n\n", rowRedsync3)
	p50s := t.handover.p50s()
	r.printf("| mechanism | n | p50 | p99 | per-round p50 | × %s p50 |\n|---|---|---|---|---|---|\n", rowRedsync3)
	for _, row := range []string{rowRedlock3, rowRedsync3} {
		d := describe(t.handover.all(row))
		r.printf("| %s | %d | %.3f | %.3f | %s | %s |\n", row, d.n, ms(d.p50), ms(d.p99), cell(p50s.of(row), "%.3f"), ratioCell(p50s.ratio(row, rowRedsync3)))
	}
	r.printf("\n### WAIT safety level: acquire+release on a primary with one replica (µs)\n\n")
	r.printf("TryLock + Release on one primary with one replica (`--replicaof`), alternating between a plain session and one with `WithReplicaAcks(1, 50ms)` (every acquire followed by `WAIT 1 50` on the same connection). %d pairs of each per round.\n\n", r.cfg.seqPairs/10)
	p50s = t.pairs.p50s()
	r.printf("| session | n | p50 | p99 | per-round p50 (ms) | × plain p50 |\n|---|---|---|---|---|---|\n")
	for _, row := range []string{rowPlain, rowWait1} {
		d := describe(t.pairs.all(row))
		r.printf("| %s | %d | %.1f | %.1f | %s | %s |\n", row, d.n, us(d.p50), us(d.p99), cell(p50s.of(row), "%.3f"), ratioCell(p50s.ratio(row, rowPlain)))
	}
	r.printf("\n")
}
