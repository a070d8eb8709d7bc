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

// semRows are the semaphore scenarios' rows, in report order.
var semRows = []struct{ name, desc string }{
	{rowSemRawLock, "the lock floor (the locks' `raw`): SET key token PX ttl NX + EVALSHA compare-and-delete"},
	{rowSemLock, "Session.TryLock + Lock.Release (the locks' `redisleader`), one Session"},
	{rowSemRaw, fmt.Sprintf("the semaphore floor, plain go-redis: one EVALSHA {TIME; ZREMRANGEBYSCORE set -inf now; ZCARD; below N=%d: ZADD set now+ttl token, PEXPIRE set ttl} + one EVALSHA {ZREM set token; if removed, PUBLISH channel} (no fence, no limit key, no validation of what the set holds)", semLimit)},
	{rowSem, fmt.Sprintf("Semaphore(name, %d).TryAcquire + Lock.Release, one Session (a fence per permit, the limit key checked, every member validated, a release published)", semLimit)},
}

// semResults holds the semaphore scenarios' numbers: (s1) and (s2) in the
// lock scenarios' series (a) and (c), one row per contender.
type semResults struct {
	locks    *lockResults
	handover *pooled // (s3): rows "lock", "semaphore"
}

func newSemResults(rounds int) *semResults {
	return &semResults{locks: newLockResults(rounds), handover: newPooled(rounds)}
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

// semWorker tries a semaphore's permit; err: the handle could not be made.
type semWorker struct {
	m   *redisleader.Semaphore
	err error
}

func (w *semWorker) try(ctx context.Context) (bool, error) {
	if w.err != nil {
		return false, w.err
	}
	l, err := w.m.TryAcquire(ctx)
	return releaseTaken(ctx, l, err)
}

// semContenders are the semaphore scenarios' rows (semRows), on
// one client and one Session, with a function that closes them.
func semContenders(e *env) ([]contender, func(), error) {
	c := e.client()
	s, err := redisleader.NewSession(c, redisleader.WithTTL(lockTTL))
	if err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	closeAll := func() { _ = s.Close(context.Background()); _ = c.Close() }
	workers := map[string]func(key string) worker{
		rowSemRawLock: func(key string) worker { return &rawWorker{c: c, key: key} },
		rowSemLock:    func(key string) worker { return &leaderWorker{s: s, name: key} },
		rowSemRaw:     func(key string) worker { return &rawSemWorker{c: c, key: key} },
		rowSem: func(key string) worker {
			m, err := s.Semaphore(key, semLimit)
			return &semWorker{m: m, err: err}
		},
	}
	var list []contender
	for _, row := range semRows {
		list = append(list, contender{row.name, row.desc, workers[row.name]})
	}
	return list, closeAll, nil
}

// runSemaphores runs the semaphore scenarios once, the rows in an order
// rotated by round.
func runSemaphores(ctx context.Context, e *env, cfg config, round int, res *semResults, errs *errorLog) {
	rows, closeAll, err := semContenders(e)
	if errs.add("semaphores", "setup", err) {
		return
	}
	defer closeAll()
	order := rotate(rows, round)
	runSequential(ctx, cfg, order, round, res.locks, errs)
	runContended(ctx, cfg, order, round, res.locks, errs)
	for _, h := range rotate(semHandovers, round) {
		d, err := h.run(ctx, e, cfg, fmt.Sprintf("bench:%s:r%d:s3", h.name, round))
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
	cfg, l := r.cfg, sr.locks
	rows := semRows
	r.printf("## Semaphores\n\nRows (fresh 128-bit random token per acquisition; TTL %v; rows rotated each round; × columns are per-round ratios):\n\n", lockTTL)
	for _, row := range rows {
		r.printf("- `%s`: %s\n", row.name, row.desc)
	}
	ratios := func(s *series, row string) string {
		return fmt.Sprintf("%s | %s | %s", ratioCell(s.ratio(row, rowSemLock)), ratioCell(s.ratio(row, rowSemRawLock)), ratioCell(s.ratio(row, rowSemRaw)))
	}
	r.printf("\n### (s1) Sequential: 1 goroutine, 1 name, %d acquire+release pairs after %d warm-up pairs (uncontended)\n\n", cfg.seqPairs, cfg.warmup)
	r.printf("| row | pairs/s | p50 µs | p99 µs | p50 × redisleader-lock | p50 × raw-lock | p50 × raw-sem |\n|---|---|---|---|---|---|---|\n")
	for _, row := range rows {
		r.printf("| %s | %s | %s | %s | %s |\n", row.name, cell(l.seqRate.of(row.name), "%.0f"), cell(l.seqP50.of(row.name), "%.1f"),
			cell(l.seqP99.of(row.name), "%.1f"), ratios(l.seqP50, row.name))
	}
	r.printf("\n### (s2) Contended: %d goroutines on one name (semaphores N=%d, locks N=1), non-blocking try (released at once on success), %v\n\n", cfg.goroutines, semLimit, cfg.window)
	r.printf("| row | acquisitions/s | failed tries/s | acq/s × redisleader-lock | acq/s × raw-lock | acq/s × raw-sem |\n|---|---|---|---|---|---|\n")
	for _, row := range rows {
		r.printf("| %s | %s | %s | %s |\n", row.name, cell(l.conAcq.of(row.name), "%.0f"), cell(l.conFail.of(row.name), "%.0f"), ratios(l.conAcq, row.name))
	}
	r.printf("\n### (s3) Handover (ms): release → the waiter's blocking acquire returns\n\n")
	r.printf("Two Sessions pass the name back and forth, %d times per round: `lock` is Session.Lock, `semaphore` Semaphore(name, 1).Acquire (the waiter is known to wait: the server ran its acquire script's PTTL, resp. ZRANGE, since it started); from just before Lock.Release to the waiter's call returning.\n\n", cfg.handovers)
	p50s := sr.handover.p50s()
	r.printf("| row | n | p50 | p99 | mean | min | max | per-round p50 | × lock p50 |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, h := range semHandovers {
		r.latencyRow(h.name, sr.handover, p50s, "lock")
	}
	r.printf("\n")
}
