package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader"
)

// semaphores.go: the semaphore scenarios (-only semaphores; in the full
// run too), each beside its lock baseline in the same round:
//
//	(s1) sequential acquire+release pairs of a semaphore of N=semLimit,
//	     uncontended, vs a lock pair and vs the raw ZSET floor;
//	(s2) 16 goroutines on one semaphore of N=semLimit, non-blocking tries
//	     (released at once on success), vs the raw ZSET floor (and a lock's
//	     one key, N=1, for reference);
//	(s3) handover: a holder releases, a waiter blocked in Acquire (or
//	     Session.Lock) returns, vs a lock's handover.

// semLimit is the N of the semaphore scenarios.
const semLimit = 4

// Rows of the semaphore scenarios.
const (
	rowSemRawLock = "raw-lock"
	rowSemLock    = "redisleader-lock"
	rowSemRaw     = "raw-sem"
	rowSem        = "redisleader-sem"
)

// semRows are the semaphore scenarios' contenders, in report order.
var semRows = []struct{ name, desc string }{
	{rowSemRawLock, "the lock floor (the locks' `raw`): SET key token PX ttl NX + EVALSHA compare-and-delete"},
	{rowSemLock, "Session.TryLock + Lock.Release (the locks' `redisleader`), one Session"},
	{rowSemRaw, fmt.Sprintf("the semaphore floor, plain go-redis: one EVALSHA {TIME; ZREMRANGEBYSCORE set -inf now; ZCARD; below N=%d: ZADD set now+ttl token, PEXPIRE set ttl} + one EVALSHA {ZREM set token; if removed, PUBLISH channel} (no fence, no limit key, no validation of what the set holds)", semLimit)},
	{rowSem, fmt.Sprintf("Semaphore(name, %d).TryAcquire + Lock.Release, one Session (a fence per permit, the limit key checked, every member validated, a release published)", semLimit)},
}

// semResults holds the semaphore scenarios' numbers.
type semResults struct {
	seqRate, seqP50, seqP99 *series // (s1)
	conAcq, conFail         *series // (s2)
	handover                *pooled // (s3): rows "lock", "semaphore"
}

func newSemResults(rounds int) *semResults {
	return &semResults{seqRate: newSeries(rounds), seqP50: newSeries(rounds), seqP99: newSeries(rounds),
		conAcq: newSeries(rounds), conFail: newSeries(rounds), handover: newPooled(rounds)}
}

// rawSemAcquire and rawSemRelease are the semaphore floor (rowSemRaw).
var (
	rawSemAcquire = redis.NewScript(`local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1`)
	rawSemRelease = redis.NewScript(`if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then redis.call('PUBLISH', KEYS[2], 'R') return 1 end return 0`)
)

type rawSemWorker struct {
	c   *redis.Client
	key string
}

func (w *rawSemWorker) try(ctx context.Context) (bool, error) {
	token := rawToken()
	ok, err := rawSemAcquire.Run(ctx, w.c, []string{w.key}, token, semLimit, lockTTL.Milliseconds()).Int()
	if err != nil || ok == 0 {
		return false, err
	}
	n, err := rawSemRelease.Run(ctx, w.c, []string{w.key, w.key + ":ch"}, token).Int()
	if err == nil && n != 1 {
		err = errors.New("ZREM did not remove the permit")
	}
	return true, err
}

type semWorker struct{ m *redisleader.Semaphore }

func (w *semWorker) try(ctx context.Context) (bool, error) {
	l, err := w.m.TryAcquire(ctx)
	switch {
	case errors.Is(err, redisleader.ErrLocked):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, l.Release(ctx)
}

// semWorkers returns a worker factory per row, on one client and one
// Session, and a function that closes them.
func semWorkers(e *env) (map[string]func(key string) (worker, error), func(), error) {
	c := e.client()
	s, err := redisleader.NewSession(c, redisleader.WithTTL(lockTTL))
	if err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	closeAll := func() { _ = s.Close(context.Background()); _ = c.Close() }
	return map[string]func(key string) (worker, error){
		rowSemRawLock: func(key string) (worker, error) { return &rawWorker{c: c, key: key}, nil },
		rowSemLock:    func(key string) (worker, error) { return &leaderWorker{s: s, name: key}, nil },
		rowSemRaw:     func(key string) (worker, error) { return &rawSemWorker{c: c, key: key}, nil },
		rowSem: func(key string) (worker, error) {
			m, err := s.Semaphore(key, semLimit)
			return &semWorker{m: m}, err
		},
	}, closeAll, nil
}

// runSemaphores runs the semaphore scenarios once, the rows in an order
// rotated by round.
func runSemaphores(ctx context.Context, e *env, cfg config, round int, res *semResults, errs *errorLog) {
	workers, closeAll, err := semWorkers(e)
	if errs.add("semaphores", "setup", err) {
		return
	}
	defer closeAll()
	order := rotate(semRows, round)
	key := func(row, scenario string) string { return fmt.Sprintf("bench:%s:r%d:%s", row, round, scenario) }
	for _, r := range order {
		w, err := workers[r.name](key(r.name, "s1"))
		var d []time.Duration
		var rate float64
		if err == nil {
			d, rate, err = sequential(ctx, w, cfg.warmup, cfg.seqPairs)
		}
		if errs.add("(s1) sequential", r.name, err) {
			continue
		}
		l := describe(d)
		res.seqRate.set(r.name, round, rate)
		res.seqP50.set(r.name, round, us(l.p50))
		res.seqP99.set(r.name, round, us(l.p99))
	}
	for _, r := range order {
		ws := make([]worker, cfg.goroutines)
		for i := range ws {
			if ws[i], err = workers[r.name](key(r.name, "s2")); err != nil {
				break
			}
		}
		var acq, failed int64
		var elapsed time.Duration
		if err == nil {
			acq, failed, elapsed, err = hammer(ctx, ws, cfg.window)
		}
		if errs.add("(s2) contended", r.name, err) {
			continue
		}
		res.conAcq.set(r.name, round, float64(acq)/elapsed.Seconds())
		res.conFail.set(r.name, round, float64(failed)/elapsed.Seconds())
	}
	for _, h := range rotate(semHandovers, round) {
		d, err := h.run(ctx, e, cfg, key(h.name, "s3"))
		if errs.add("(s3) handover", h.name, err) {
			continue
		}
		res.handover.add(h.name, round, d)
	}
}

// A grabber is one session's blocking acquisition of the scenario's name.
type grabber func(ctx context.Context) (*redisleader.Lock, error)

// semHandovers are the handover rows: a blocking waiter of each kind, and
// the command its acquire script runs once per attempt, by which the
// server shows that the waiter has tried and now waits.
var semHandovers = []struct {
	name string
	run  func(ctx context.Context, e *env, cfg config, key string) ([]time.Duration, error)
}{
	{"lock", func(ctx context.Context, e *env, cfg config, key string) ([]time.Duration, error) {
		return grabHandovers(ctx, e, cfg, "pttl", func(s *redisleader.Session) (grabber, error) {
			return func(ctx context.Context) (*redisleader.Lock, error) { return s.Lock(ctx, key) }, nil
		})
	}},
	{"semaphore", func(ctx context.Context, e *env, cfg config, key string) ([]time.Duration, error) {
		return grabHandovers(ctx, e, cfg, "zrange", func(s *redisleader.Session) (grabber, error) {
			m, err := s.Semaphore(key, 1)
			if err != nil {
				return nil, err
			}
			return m.Acquire, nil
		})
	}},
}

// grabHandovers hands the name back and forth between two Sessions
// cfg.handovers times: each time the holder releases once the other waits
// (its attempt ran marker on the server), and the sample runs from just
// before the release call to the waiter's acquire returning.
func grabHandovers(ctx context.Context, e *env, cfg config, marker string, of func(*redisleader.Session) (grabber, error)) ([]time.Duration, error) {
	c := e.client()
	defer c.Close()
	list, closeAll, err := sessions(c, 2, redisleader.WithTTL(lockTTL))
	if err != nil {
		return nil, err
	}
	defer closeAll()
	var grab [2]grabber
	for i, s := range list {
		if grab[i], err = of(s); err != nil {
			return nil, err
		}
	}
	held, err := grab[0](ctx)
	if err != nil {
		return nil, err
	}
	out := make([]time.Duration, 0, cfg.handovers)
	for i := range cfg.handovers {
		d, next, err := grabHandover(ctx, e, held, grab[(i+1)%2], marker)
		if err != nil {
			_ = held.Release(context.Background())
			return nil, err
		}
		out, held = append(out, d), next
	}
	return out, held.Release(ctx)
}

// grabHandover starts waiter, releases held once waiter has tried, and
// returns the latency and the waiter's acquisition.
func grabHandover(ctx context.Context, e *env, held *redisleader.Lock, waiter grabber, marker string) (time.Duration, *redisleader.Lock, error) {
	ctx, cancel := context.WithTimeout(ctx, sampleTimeout)
	defer cancel()
	before, err := commandCalls(ctx, e.admin)
	if err != nil {
		return 0, nil, err
	}
	done := make(chan won, 1)
	go func() {
		l, err := waiter(ctx)
		done <- won{lock: l, at: time.Now(), err: err}
	}()
	if err := waitCalls(ctx, e.admin, before, marker, 1); err != nil {
		cancel()
		if w := <-done; w.lock != nil {
			_ = w.lock.Release(context.Background())
		}
		return 0, nil, err
	}
	t0 := time.Now()
	if err := held.Release(ctx); err != nil {
		cancel()
		<-done
		return 0, nil, err
	}
	w := <-done
	return w.at.Sub(t0), w.lock, w.err
}

// semaphores writes the semaphore section of the report.
func (r *report) semaphores(sr *semResults) {
	cfg := r.cfg
	r.printf("## Semaphores\n\nRows (fresh 128-bit random token per acquisition; TTL %v; rows rotated each round; × columns are per-round ratios):\n\n", lockTTL)
	for _, row := range semRows {
		r.printf("- `%s`: %s\n", row.name, row.desc)
	}
	ratios := func(s *series, row string) string {
		return fmt.Sprintf("%s | %s | %s", ratioCell(s.ratio(row, rowSemLock)), ratioCell(s.ratio(row, rowSemRawLock)), ratioCell(s.ratio(row, rowSemRaw)))
	}
	r.printf("\n### (s1) Sequential: 1 goroutine, 1 name, %d acquire+release pairs after %d warm-up pairs (uncontended)\n\n", cfg.seqPairs, cfg.warmup)
	r.printf("| row | pairs/s | p50 µs | p99 µs | p50 × redisleader-lock | p50 × raw-lock | p50 × raw-sem |\n|---|---|---|---|---|---|---|\n")
	for _, row := range semRows {
		r.printf("| %s | %s | %s | %s | %s |\n", row.name, cell(sr.seqRate.of(row.name), "%.0f"), cell(sr.seqP50.of(row.name), "%.1f"),
			cell(sr.seqP99.of(row.name), "%.1f"), ratios(sr.seqP50, row.name))
	}
	r.printf("\n### (s2) Contended: %d goroutines on one name (semaphores N=%d, locks N=1), non-blocking try (released at once on success), %v\n\n", cfg.goroutines, semLimit, cfg.window)
	r.printf("| row | acquisitions/s | failed tries/s | acq/s × redisleader-lock | acq/s × raw-lock | acq/s × raw-sem |\n|---|---|---|---|---|---|\n")
	for _, row := range semRows {
		r.printf("| %s | %s | %s | %s |\n", row.name, cell(sr.conAcq.of(row.name), "%.0f"), cell(sr.conFail.of(row.name), "%.0f"), ratios(sr.conAcq, row.name))
	}
	r.printf("\n### (s3) Handover (ms): release → the waiter's blocking acquire returns\n\n")
	r.printf("Two Sessions pass the name back and forth, %d times per round: `lock` is Session.Lock, `semaphore` Semaphore(name, 1).Acquire (the waiter is known to wait: the server ran its acquire script's PTTL, resp. ZRANGE, since it started); from just before Lock.Release to the waiter's call returning.\n\n", cfg.handovers)
	p50s := sr.handover.p50s()
	r.printf("| row | n | p50 | p99 | mean | max | per-round p50 | × lock p50 |\n|---|---|---|---|---|---|---|---|\n")
	for _, h := range semHandovers {
		d := describe(sr.handover.all(h.name))
		if d.n == 0 {
			r.printf("| %s | 0 | — | — | — | — | — | — |\n", h.name)
			continue
		}
		r.printf("| %s | %d | %.3f | %.3f | %.3f | %.3f | %s | %s |\n", h.name, d.n, ms(d.p50), ms(d.p99), ms(d.mean), ms(d.max),
			cell(p50s.of(h.name), "%.3f"), ratioCell(p50s.ratio(h.name, "lock")))
	}
	r.printf("\n")
}
