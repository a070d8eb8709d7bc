package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"

	"github.com/redisleader/redisleader"
)

// scaleResults holds the scale scenarios' numbers. The lease rows are the
// number of locks one Session holds; the candidate row is the number of
// candidates.
type scaleResults struct {
	goroutines, heapPerLock  *series // footprint
	slices, rtt, drift       *series // renewal rounds: slices per round; a slice's round trip and the schedule's drift (ms)
	cmdsPerSec, perLease     *series // renewal commands per second, and per lease per round
	electMs, candCmdsPerSec  *series // candidates: time to the first leader; commands/s while it holds
	candAttempts, candPubsub *series // candidates: attempts and pub/sub commands per waiting candidate per TTL
}

func newScaleResults(rounds int) *scaleResults {
	return &scaleResults{
		goroutines: newSeries(rounds), heapPerLock: newSeries(rounds),
		slices: newSeries(rounds), rtt: newSeries(rounds), drift: newSeries(rounds),
		cmdsPerSec: newSeries(rounds), perLease: newSeries(rounds),
		electMs: newSeries(rounds), candCmdsPerSec: newSeries(rounds),
		candAttempts: newSeries(rounds), candPubsub: newSeries(rounds),
	}
}

// runScale measures, for each size, one Session holding that many locks,
// then many candidates on one election.
func runScale(ctx context.Context, e *env, cfg config, round int, res *scaleResults, errs *errorLog) {
	for _, n := range cfg.scaleSizes {
		row := strconv.Itoa(n)
		prefix := fmt.Sprintf("bench:scale:r%d:n%d", round, n)
		g, heap, err := footprint(ctx, e, cfg, prefix+":f", n)
		if !errs.add("scale footprint", row+" locks", err) {
			res.goroutines.set(row, round, float64(g))
			res.heapPerLock.set(row, round, heap)
		}
		r, err := renewal(ctx, e, cfg, prefix+":r", n)
		if !errs.add("scale renewal", row+" locks", err) {
			res.slices.set(row, round, r.slices)
			res.rtt.set(row, round, ms(r.rtt))
			res.drift.set(row, round, ms(r.drift))
			res.cmdsPerSec.set(row, round, r.cmdsPerSec)
			res.perLease.set(row, round, r.perLease)
		}
	}
	row := strconv.Itoa(cfg.candidates)
	c, err := candidates(ctx, e, cfg, fmt.Sprintf("bench:candidates:r%d", round))
	if !errs.add("candidates", row, err) {
		res.electMs.set(row, round, ms(c.elected))
		res.candCmdsPerSec.set(row, round, c.cmdsPerSec)
		res.candAttempts.set(row, round, c.attempts)
		res.candPubsub.set(row, round, c.pubsub)
	}
}

// acquireMany takes n distinct names prefix:0 … prefix:n-1 with TryLock on
// goroutines goroutines.
func acquireMany(ctx context.Context, s *redisleader.Session, prefix string, n, goroutines int) ([]*redisleader.Lock, error) {
	locks := make([]*redisleader.Lock, n)
	errs := make([]error, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := g; i < n; i += goroutines {
				if locks[i], errs[g] = s.TryLock(ctx, prefix+":"+strconv.Itoa(i)); errs[g] != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	return locks, errors.Join(errs...)
}

// footprint returns what holding n locks in one Session adds to this
// process: goroutines and heap bytes per lock (HeapAlloc after GC), both
// measured with the locks held minus with none held, in the same Session
// after its connection pool has grown (so the pool's buffers and the
// Session's own goroutine are not counted per lock). The renew interval is
// the default (TTL/3), so no renewal round runs while it measures.
func footprint(ctx context.Context, e *env, cfg config, prefix string, n int) (goroutines int, heapPerLock float64, err error) {
	c := e.client()
	defer c.Close()
	s, err := redisleader.NewSession(c, redisleader.WithTTL(cfg.scaleTTL))
	if err != nil {
		return 0, 0, err
	}
	defer s.Close(context.Background())
	warm, err := acquireMany(ctx, s, prefix+":warm", cfg.goroutines, cfg.goroutines)
	if err != nil {
		return 0, 0, err
	}
	for _, l := range warm {
		if err := l.Release(ctx); err != nil {
			return 0, 0, err
		}
	}
	h0, g0 := heapAfterGC(), runtime.NumGoroutine()
	locks, err := acquireMany(ctx, s, prefix, n, cfg.goroutines)
	if err != nil {
		return 0, 0, err
	}
	h1, g1 := heapAfterGC(), runtime.NumGoroutine()
	runtime.KeepAlive(locks)
	return g1 - g0, float64(h1-h0) / float64(n), nil
}

// heapAfterGC returns the live heap after two full collections (the second
// also empties what sync.Pools kept through the first).
func heapAfterGC() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
