//go:build chaos && linux

package scenario

import (
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/redisleader/redisleader"
	"github.com/redisleader/redisleader/internal/history"
)

// chaos_rw_test.go: the chaos run's read-write lock holders, on a name of
// their own (the election's name with "-rw": its own slot, fence key and
// set): readers and writers in-process (among the proxy faults' targets)
// and as child processes (paused and killed by their own faults), judged
// by history.CheckRW; the CHAOS-RW line.

// Environment of a read-write lock child (mode "rw").
const envRWWrite = "SCENARIO_RW_WRITE" // "1": the child writes, else it reads

func init() { childModes["rw"] = rwChildMain }

// rwWriter tells a writer's Who from a reader's: writers are "rww-...".
func rwWriter(who string) bool { return strings.HasPrefix(who, "rww-") }

// rwChildWriterPause is how long a writer child waits before it asks
// again: writers that ask at once keep an intent live all the time, and
// writer preference then leaves the readers nothing.
const rwChildWriterPause = 200 * time.Millisecond

// rwChildMain is a read-write lock child: it reads (or, with
// $SCENARIO_RW_WRITE=1, writes, rwChildWriterPause apart) the scenario's
// name in a loop (sharedChildMain), its id as the lease's value.
func rwChildMain() int {
	write := os.Getenv(envRWWrite) == "1"
	return sharedChildMain(":rw", 2, func(s *redisleader.Session, name, who string) (acquireFunc, error) {
		rw, err := s.RWLock(name, redisleader.WithRWValue(who))
		if err != nil {
			return nil, err
		}
		if !write {
			return rw.RLock, nil
		}
		return func(ctx context.Context) (*redisleader.Lock, error) {
			<-time.After(rwChildWriterPause) // the writers' pace: readers get their turns
			return rw.Lock(ctx)
		}, nil
	})
}

// startRWActors starts 5 in-process readers and a writer (holdRW: reads
// of 20–80 ms, writes of 20–50 ms then a pause of 50 ms; 2% end as a
// crash would) and 2 child processes, a reader and a writer (slot 0
// reads, slot 1 writes; holds of 20–150 ms), on the name h.name+"-rw".
func startRWActors(h *harness) *sideActors {
	name := h.name + "-rw"
	s := newSideActors(h, "rw", func(i, n int) (string, []string) {
		role, write := "rwr", "0"
		if i == 1 {
			role, write = "rww", "1"
		}
		return fmt.Sprintf("%s-p%d", role, n), []string{envMode + "=rw", envName + "=" + name, envRWWrite + "=" + write}
	})
	crash := newCrashes(0.02, math.MaxInt64)
	for i := range 6 {
		who := fmt.Sprintf("rwr-g%d", i)
		if i == 5 {
			who = "rww-g0"
		}
		s.inProcess(who, "redisleader:{"+name+"}:rw", 2, func(ctx context.Context, c *candidate) {
			c.holdRW(ctx, name, rwWriter(who), crash, nil)
		})
	}
	for i := range 2 {
		s.spawn(i)
	}
	return s
}

// finishRWActors stops the read-write lock's holders and judges their history:
// no reader believed while a writer is, no two writers, fences increasing
// in grant order; readers shared and writers wrote. It prints the line.
func finishRWActors(s *sideActors) {
	h := s.h
	h.t.Helper()
	s.stop()
	rep := history.CheckRW(s.rec.Events(), rwWriter)
	contended := rep.MaxReaders >= 2 && rep.Writes > 0
	h.check(rep.Safe(), "rwlock: unsafe history:\n%s", strings.Join(rep.Problems, "\n"))
	h.check(contended, "rwlock: readers never shared (at most %d) or nobody wrote (%d)", rep.MaxReaders, rep.Writes)
	s.report(rep.Line(h.id+"-RW", rep.Safe() && contended))
}
