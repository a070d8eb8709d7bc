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

// semActors are the chaos run's semaphore holders: in-process sessions
// (cs, which the run's proxy faults pick among the election's candidates)
// and child processes, all on the election's name (its fence key is
// shared), each taking a permit of N=semChaosN in a loop. Their events go
// to their own recorder (sides) and are judged by history.CheckShared.
type semActors struct {
	h   *harness
	rec history.Recorder
	cs  []*candidate

	mu       sync.Mutex // protects children and spawned
	children []*child
	spawned  int

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startSemActors starts 4 in-process holders and 2 child processes for
// -duration; 2% of the in-process permits end as a crash would.
func startSemActors(t *testing.T, h *harness) *semActors {
	s := &semActors{h: h}
	ctx, cancel := context.WithTimeout(context.Background(), *chaosDuration)
	s.cancel = cancel
	crash := newCrashes(0.02, math.MaxInt64)
	for i := range 4 {
		who := fmt.Sprintf("sem-g%d", i)
		side(t, who, &s.rec)
		c := h.candidate(who, nil)
		c.client.AddHook(triedHook{who: who, set: h.key + ":sem", emit: h.add})
		s.cs = append(s.cs, c)
		wgGo(&s.wg, func() { c.holdPermits(ctx, h.name, semChaosN, crash) })
	}
	for range 2 {
		s.children = append(s.children, s.spawn())
	}
	return s
}

// spawn starts a new semaphore child process.
func (s *semActors) spawn() *child {
	s.mu.Lock()
	who := fmt.Sprintf("sem-p%d", s.spawned)
	s.spawned++
	s.mu.Unlock()
	side(s.h.t, who, &s.rec)
	return s.h.child(who, "20,150", semChildEnv(semChaosN)...)
}

// faults are the faults of the semaphore's child processes (the run's
// other faults reach the in-process holders: Redis, the proxies).
func (s *semActors) faults(rng *rand.Rand) []chaosFault {
	pick := func() (int, *child) {
		s.mu.Lock()
		defer s.mu.Unlock()
		i := rng.IntN(len(s.children))
		return i, s.children[i]
	}
	return []chaosFault{
		{"sem-pause-child", func(d time.Duration, heal func(time.Duration) bool) {
			_, c := pick()
			_ = c.cmd.Process.Signal(syscall.SIGSTOP)
			heal(d)
			_ = c.cmd.Process.Signal(syscall.SIGCONT)
		}},
		{"sem-kill-child", func(time.Duration, func(time.Duration) bool) {
			i, c := pick()
			c.kill()
			nc := s.spawn()
			s.mu.Lock()
			s.children[i] = nc
			s.mu.Unlock()
		}},
	}
}

// finish stops the holders and judges their history: at most semChaosN
// believed at once, fences increasing in grant order; it prints the line.
func (s *semActors) finish() {
	h := s.h
	h.t.Helper()
	s.cancel()
	s.wg.Wait()
	s.mu.Lock()
	for _, c := range s.children {
		c.kill()
	}
	spawned := s.spawned
	s.mu.Unlock()
	rep := history.CheckShared(s.rec.Events(), semChaosN)
	h.check(rep.Safe(), "semaphore: unsafe history:\n%s", strings.Join(rep.Problems, "\n"))
	h.check(rep.MaxHolders == semChaosN, "semaphore: never %d holders at once (at most %d)", semChaosN, rep.MaxHolders)
	line := rep.Line(h.id+"-SEM", rep.Safe() && rep.MaxHolders == semChaosN) +
		fmt.Sprintf(" expect=safe faults=%d in_process=%d procs_spawned=%d", h.faults.Load(), len(s.cs), spawned)
	h.t.Log(line)
	lines.Lock()
	lines.all = append(lines.all, line)
	lines.Unlock()
}
