//go:build chaos && linux

package scenario

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redisleader/redisleader/internal/history"
)

// TestChaosSemaphoreFleet is issue 39's semaphore scenario at its full
// length (the fast tier runs it for 8 s: TestScenarioSemaphoreFleet): 20
// processes on N=3 for 30 s, holders SIGKILLed and SIGSTOPped past their
// TTL, Redis restarted without persistence.
//
//	go test -tags chaos -run TestChaosSemaphoreFleet -v ./internal/scenario
func TestChaosSemaphoreFleet(t *testing.T) {
	semFleet(t, "M2-semaphore-fleet-20-on-3-30s", 30*time.Second)
}

// semChaosN is the limit of the chaos run's semaphore.
const semChaosN = 3

// sideActors are actors of a shared name in the chaos run, judged apart
// from the election (sides): in-process sessions (cs, which the run's
// proxy faults pick among the election's candidates) and child processes,
// which their own faults pause and kill. The semaphore's and the
// read-write lock's holders are sideActors.
type sideActors struct {
	h    *harness
	kind string // "sem", "rw": the prefix of its faults' names
	rec  history.Recorder
	cs   []*candidate
	ctx  context.Context
	// child names the child of slot i (its n-th process) and its
	// environment.
	child func(i, n int) (who string, env []string)

	mu       sync.Mutex // protects children and spawned
	children []*child
	spawned  int

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// newSideActors returns kind's actors, for -duration.
func newSideActors(h *harness, kind string, child func(i, n int) (string, []string)) *sideActors {
	s := &sideActors{h: h, kind: kind, child: child}
	s.ctx, s.cancel = context.WithTimeout(context.Background(), *chaosDuration)
	return s
}

// inProcess starts an in-process actor who, whose acquire script (of keys
// keys) runs on set, running hold until the run ends.
func (s *sideActors) inProcess(who, set string, keys int, hold func(ctx context.Context, c *candidate)) {
	side(s.h.t, who, &s.rec)
	c := s.h.candidate(who, nil).recordTries(set, keys)
	s.cs = append(s.cs, c)
	wgGo(&s.wg, func() { hold(s.ctx, c) })
}

// spawn starts (or restarts) the child of slot i.
func (s *sideActors) spawn(i int) {
	s.mu.Lock()
	n := s.spawned
	s.spawned++
	s.mu.Unlock()
	who, env := s.child(i, n)
	side(s.h.t, who, &s.rec)
	c := s.h.child(who, "20,150", env...)
	s.mu.Lock()
	defer s.mu.Unlock()
	if i == len(s.children) {
		s.children = append(s.children, c)
	} else {
		s.children[i] = c
	}
}

// startSemActors starts 4 in-process holders and 2 child processes on
// the election's name (its fence key is shared), each taking a permit of
// N=semChaosN in a loop; 2% of the in-process permits end as a crash
// would. They are judged by history.CheckShared.
func startSemActors(h *harness) *sideActors {
	s := newSideActors(h, "sem", func(_, n int) (string, []string) {
		return fmt.Sprintf("sem-p%d", n), semChildEnv(semChaosN)
	})
	crash := newCrashes(0.02, math.MaxInt64)
	for i := range 4 {
		s.inProcess(fmt.Sprintf("sem-g%d", i), h.key+":sem", 3, func(ctx context.Context, c *candidate) {
			c.holdPermits(ctx, h.name, semChaosN, crash)
		})
	}
	for i := range 2 {
		s.spawn(i)
	}
	return s
}

// faults are the faults of the actors' child processes (the run's other
// faults reach the in-process holders: Redis, the proxies).
func (s *sideActors) faults(rng *rand.Rand) []chaosFault {
	pick := func() (int, *child) {
		s.mu.Lock()
		defer s.mu.Unlock()
		i := rng.IntN(len(s.children))
		return i, s.children[i]
	}
	return []chaosFault{
		{s.kind + "-pause-child", func(d time.Duration, heal func(time.Duration) bool) {
			_, c := pick()
			_ = c.cmd.Process.Signal(syscall.SIGSTOP)
			heal(d)
			_ = c.cmd.Process.Signal(syscall.SIGCONT)
		}},
		{s.kind + "-kill-child", func(time.Duration, func(time.Duration) bool) {
			i, c := pick()
			c.kill()
			s.spawn(i)
		}},
	}
}

// stop stops the actors and their children.
func (s *sideActors) stop() {
	s.cancel()
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.children {
		c.kill()
	}
}

// report logs and records line, the actors' SCENARIO line, with the
// run's faults and the actors' counts.
func (s *sideActors) report(line string) {
	s.h.t.Helper()
	s.mu.Lock()
	line += fmt.Sprintf(" expect=safe faults=%d in_process=%d procs_spawned=%d", s.h.faults.Load(), len(s.cs), s.spawned)
	s.mu.Unlock()
	s.h.t.Log(line)
	lines.Lock()
	lines.all = append(lines.all, line)
	lines.Unlock()
}

// finishSem stops the semaphore's holders and judges their history: at
// most semChaosN believed at once, fences increasing in grant order; it
// prints the line.
func finishSem(s *sideActors) {
	h := s.h
	h.t.Helper()
	s.stop()
	rep := history.CheckShared(s.rec.Events(), semChaosN)
	h.check(rep.Safe(), "semaphore: unsafe history:\n%s", strings.Join(rep.Problems, "\n"))
	h.check(rep.MaxHolders == semChaosN, "semaphore: never %d holders at once (at most %d)", semChaosN, rep.MaxHolders)
	s.report(rep.Line(h.id+"-SEM", rep.Safe() && rep.MaxHolders == semChaosN))
}
