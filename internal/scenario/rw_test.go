//go:build linux

package scenario

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redisleader/redisleader"
	"github.com/redisleader/redisleader/internal/history"
)

// rwWriterBound is how long a writer may wait for the write lease when no
// fault is under way: a TTL (a crashed reader's lease runs out), the
// longest read in place (80 ms), the other writer's write (50 ms), and
// slack for round trips on a busy machine.
const rwWriterBound = ttl + 300*time.Millisecond

// TestScenarioRWLock (R1): 10 sessions stream reads of one read-write lock
// (each holds 20–80 ms and asks again at once: the name is never free of
// readers), 2 sessions write (20–50 ms, then a pause of 50 ms) for 6 s; up
// to 4 holders crash (blackholed, nothing released) and come back with a
// fresh session, and Redis is killed and restarted a TTL later without
// persistence. history.CheckRW wants no reader believed while a writer
// is, no two writers, and fences increasing in grant order; each writer's
// wait, outside the restart's window, stays within rwWriterBound (writer
// preference: the readers' stream does not starve it).
func TestScenarioRWLock(t *testing.T) {
	const readers, writers = 10, 2
	h := newHarness(t, "R1-rwlock-10-readers-2-writers")
	ctx, cancel := context.WithCancel(context.Background())
	crash := newCrashes(0.05, 4)
	waits := &rwWaits{}
	var wg sync.WaitGroup
	for i := range readers {
		c := h.candidate(fmt.Sprintf("R%d", i), nil).recordTries(h.key+":rw", 2)
		wgGo(&wg, func() { c.holdRW(ctx, h.name, false, crash, nil) })
	}
	for i := range writers {
		c := h.candidate(fmt.Sprintf("W%d", i), nil).recordTries(h.key+":rw", 2)
		wgGo(&wg, func() { c.holdRW(ctx, h.name, true, crash, waits) })
	}
	<-time.After(3 * time.Second)
	h.fault("restart-redis", true)
	waits.fault(time.Now())
	h.srv.Kill(t)
	<-time.After(ttl) // Redis down for a TTL: the fault itself
	h.srv.Restart(t)
	h.fault("restart-redis", false)
	waits.fault(time.Now().Add(ttl)) // and a TTL for the sessions to find it again
	<-time.After(3 * time.Second)
	cancel()
	wg.Wait()
	h.note("crashes", "%d", 4-max(crash.left.Load(), 0))
	worst, n := waits.worst()
	h.note("writer_waits", "%d", n)
	h.note("writer_wait_max_ms", "%d", worst.Milliseconds())
	h.note("writer_bound_ms", "%d", rwWriterBound.Milliseconds())
	h.check(n >= 10, "only %d writes outside the fault", n)
	h.check(worst <= rwWriterBound, "a writer waited %v, beyond the bound %v: starved", worst, rwWriterBound)
	h.finishRW()
}

// rwWaits records the writers' waits, and the window of the fault (Redis
// down, then a TTL), whose waits are not held to the bound.
type rwWaits struct {
	mu       sync.Mutex
	from, to time.Time
	waits    [][2]time.Time
}

func (w *rwWaits) fault(at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.from.IsZero() {
		w.from = at
	} else {
		w.to = at
	}
}

func (w *rwWaits) add(start, end time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.waits = append(w.waits, [2]time.Time{start, end})
}

// worst is the longest wait that does not overlap the fault's window, and
// how many there are.
func (w *rwWaits) worst() (worst time.Duration, n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, x := range w.waits {
		if !w.from.IsZero() && x[1].After(w.from) && (w.to.IsZero() || x[0].Before(w.to)) {
			continue
		}
		n++
		worst = max(worst, x[1].Sub(x[0]))
	}
	return worst, n
}

// holdRW reads (or writes) name in a loop until ctx ends, holding for
// 20–80 ms (writes 20–50 ms, then a pause of 50 ms) and releasing (or,
// when crash says so, abandoning its session). A writer records its
// waits in waits.
func (c *candidate) holdRW(ctx context.Context, name string, write bool, crash *crashes, waits *rwWaits) {
	for ctx.Err() == nil {
		rw, err := c.session().RWLock(name, redisleader.WithRWValue(c.who))
		if err != nil {
			c.h.t.Error(err)
			return
		}
		acquire, hold := rw.RLock, 20*time.Millisecond+rand.N(60*time.Millisecond)
		if write {
			acquire, hold = rw.Lock, 20*time.Millisecond+rand.N(30*time.Millisecond)
		}
		start := time.Now()
		l, err := acquire(ctx)
		if err != nil {
			continue // ctx ended, or the session was abandoned meanwhile
		}
		if waits != nil {
			waits.add(start, time.Now())
		}
		c.holdFor(ctx, l, hold)
		if ctx.Err() == nil && crash.next() {
			c.abandon()
			continue
		}
		_ = l.Release(context.Background())
		if write {
			c.holdFor(ctx, nil, 50*time.Millisecond)
		}
	}
}

// holdFor waits for d, or until l (if any) ends or ctx does.
func (c *candidate) holdFor(ctx context.Context, l *redisleader.Lock, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	var done <-chan struct{}
	if l != nil {
		done = l.Done()
	}
	select {
	case <-t.C:
	case <-done:
	case <-ctx.Done():
	}
}

// finishRW is finish for a read-write lock: the history is judged by
// history.CheckRW (a writer's Who starts with "W").
func (h *harness) finishRW() history.RWReport {
	h.t.Helper()
	rep := history.CheckRW(h.rec.Events(), func(who string) bool { return strings.HasPrefix(who, "W") })
	h.check(rep.Safe(), "unsafe history:\n%s", strings.Join(rep.Problems, "\n"))
	h.check(rep.MaxReaders >= 2 && rep.Writes > 0, "readers never shared (at most %d) or nobody wrote (%d): the scenario did not contend", rep.MaxReaders, rep.Writes)
	h.summarize(func(pass bool) string { return rep.Line(h.id, pass) })
	return rep
}

// summarize logs and records the line of a scenario judged safe or not:
// line(pass), then expect=safe, the faults and the notes.
func (h *harness) summarize(line func(pass bool) string) {
	h.mu.Lock()
	l := line(len(h.failed) == 0) + " expect=safe" + fmt.Sprintf(" faults=%d", h.faults.Load())
	for _, x := range h.extra {
		l += " " + x
	}
	h.mu.Unlock()
	h.t.Log(l)
	lines.Lock()
	lines.all = append(lines.all, l)
	lines.Unlock()
}
