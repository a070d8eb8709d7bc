package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// lockResults holds the lock scenarios' numbers: one series per metric,
// one row per contender.
type lockResults struct {
	seqRate, seqP50, seqP99 *series // (a) pairs/s; p50 and p99 µs per pair
	parRate                 *series // (b) pairs/s
	conAcq, conFail         *series // (c) successful and failed tries/s
	allocs, bytes, ns       *series // (d) per pair
	pairs                   *pooled // (a) every timed pair's latency, for -samples
}

func newLockResults(rounds int) *lockResults {
	return &lockResults{
		seqRate: newSeries(rounds), seqP50: newSeries(rounds), seqP99: newSeries(rounds),
		parRate: newSeries(rounds),
		conAcq:  newSeries(rounds), conFail: newSeries(rounds),
		allocs: newSeries(rounds), bytes: newSeries(rounds), ns: newSeries(rounds),
		pairs: newPooled(rounds),
	}
}

// errHeld is an uncontended acquisition that found its key held.
var errHeld = errors.New("uncontended key found held")

// pair is one acquire+release on a key nobody else uses.
func pair(ctx context.Context, w worker) error {
	ok, err := w.try(ctx)
	if err == nil && !ok {
		err = errHeld
	}
	return err
}

// runLocks runs every lock scenario once for each contender, in the given
// order, scenario by scenario, so that a scenario's contenders run close
// together in time.
func runLocks(ctx context.Context, cfg config, order []contender, round int, res *lockResults, errs *errorLog) {
	runSequential(ctx, cfg, order, round, res, errs)
	for _, c := range order {
		workers := make([]worker, cfg.goroutines)
		for i := range workers {
			workers[i] = c.worker(fmt.Sprintf("%s:%d", lockKey(c, round, "b"), i))
		}
		acq, failed, elapsed, err := hammer(ctx, workers, cfg.window)
		if err == nil && failed > 0 {
			err = fmt.Errorf("%d tries found their own key held", failed)
		}
		if errs.add("(b) parallel", c.name, err) {
			continue
		}
		res.parRate.set(c.name, round, float64(acq)/elapsed.Seconds())
	}
	runContended(ctx, cfg, order, round, res, errs)
	for _, c := range order {
		r, err := allocations(ctx, c.worker(lockKey(c, round, "d")))
		if errs.add("(d) allocations", c.name, err) {
			continue
		}
		res.allocs.set(c.name, round, float64(r.AllocsPerOp()))
		res.bytes.set(c.name, round, float64(r.AllocedBytesPerOp()))
		res.ns.set(c.name, round, float64(r.NsPerOp()))
	}
}

// runContended runs scenario (c), goroutines on one key, once for each
// contender in the given order.
func runContended(ctx context.Context, cfg config, order []contender, round int, res *lockResults, errs *errorLog) {
	for _, c := range order {
		workers := make([]worker, cfg.goroutines)
		for i := range workers {
			workers[i] = c.worker(lockKey(c, round, "c"))
		}
		acq, failed, elapsed, err := hammer(ctx, workers, cfg.window)
		if errs.add("(c) contended", c.name, err) {
			continue
		}
		res.conAcq.set(c.name, round, float64(acq)/elapsed.Seconds())
		res.conFail.set(c.name, round, float64(failed)/elapsed.Seconds())
	}
}

// lockKey is contender c's key for scenario in round.
func lockKey(c contender, round int, scenario string) string {
	return fmt.Sprintf("bench:%s:r%d:%s", c.name, round, scenario)
}

// runSequential runs scenario (a), sequential pairs, once for each
// contender in the given order.
func runSequential(ctx context.Context, cfg config, order []contender, round int, res *lockResults, errs *errorLog) {
	for _, c := range order {
		d, rate, err := sequential(ctx, c.worker(lockKey(c, round, "a")), cfg.warmup, cfg.seqPairs)
		if errs.add("(a) sequential", c.name, err) {
			continue
		}
		l := describe(d)
		res.seqRate.set(c.name, round, rate)
		res.seqP50.set(c.name, round, us(l.p50))
		res.seqP99.set(c.name, round, us(l.p99))
		res.pairs.add(c.name, round, d)
	}
}

// sequential runs warmup untimed pairs, then n timed ones, one after the
// other on one goroutine, and returns each pair's latency and pairs/s.
func sequential(ctx context.Context, w worker, warmup, n int) (d []time.Duration, rate float64, err error) {
	for range warmup {
		if err := pair(ctx, w); err != nil {
			return nil, 0, err
		}
	}
	d = make([]time.Duration, n)
	start := time.Now()
	for i := range d {
		t := time.Now()
		err := pair(ctx, w)
		d[i] = time.Since(t)
		if err != nil {
			return nil, 0, err
		}
	}
	return d, float64(n) / time.Since(start).Seconds(), nil
}

// hammer runs one goroutine per worker, each trying (and on success
// releasing) back to back for window, and returns the successful and failed
// tries and the time from the start until the last goroutine stopped. A
// goroutine stops at its first error; the others run on.
func hammer(ctx context.Context, workers []worker, window time.Duration) (acquired, failed int64, elapsed time.Duration, err error) {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex // protects the totals and errs
		errs  []error
		start = make(chan struct{})
		end   time.Time
	)
	for _, w := range workers {
		wg.Go(func() {
			<-start
			var a, f int64
			var err error
			for time.Now().Before(end) {
				var ok bool
				if ok, err = w.try(ctx); err != nil {
					break
				}
				if ok {
					a++
				} else {
					f++
				}
			}
			mu.Lock()
			acquired, failed = acquired+a, failed+f
			if err != nil {
				errs = append(errs, err)
			}
			mu.Unlock()
		})
	}
	t0 := time.Now()
	end = t0.Add(window)
	close(start)
	wg.Wait()
	elapsed = time.Since(t0)
	if len(errs) > 0 {
		err = fmt.Errorf("%d of %d goroutines failed, the first with: %w", len(errs), len(workers), errs[0])
	}
	return acquired, failed, elapsed, err
}

// allocations measures one acquire+release pair with testing.Benchmark and
// ReportAllocs (the iteration count is set by -test.benchtime, see main).
func allocations(ctx context.Context, w worker) (testing.BenchmarkResult, error) {
	var err error
	r := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err = pair(ctx, w); err != nil {
				b.FailNow()
			}
		}
	})
	return r, err
}
