package redisgocron

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/jonboulle/clockwork"
	"github.com/redisleader/redisleader"
)

// The schedulers' clocks are skewed by these offsets, so that their timers
// for one tick fire up to 80ms apart, as on machines whose clocks differ.
var skews = []time.Duration{0, 40 * time.Millisecond, -40 * time.Millisecond}

const (
	everySecond = "* * * * * *" // a cron job on every wall-clock second
	jobName     = "report"
)

// skewed is a clock that reads off ahead of the real one: a scheduler on it
// fires its timers off early in real time.
type skewed struct {
	clockwork.Clock
	off time.Duration
}

func (c skewed) Now() time.Time                  { return c.Clock.Now().Add(c.off) }
func (c skewed) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c skewed) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }

// tally counts the runs of each tick (the real wall-clock second a run is
// nearest to) by instance.
type tally struct {
	mu    sync.Mutex
	runs  map[int64][]int // tick (Unix seconds) → instances that ran it
	after func(tick int64, inst int)
}

func newTally() *tally { return &tally{runs: make(map[int64][]int)} }

func (t *tally) run(inst int) {
	tick := time.Now().Round(time.Second).Unix()
	t.mu.Lock()
	t.runs[tick] = append(t.runs[tick], inst)
	after := t.after
	t.mu.Unlock()
	if after != nil {
		after(tick, inst)
	}
}

// figures summarises the ticks from first to last (inclusive).
type figures struct {
	ticks, runs, duplicates int
	missed                  []int64
	byInstance              map[int]int
}

func (f figures) String() string {
	return fmt.Sprintf("ticks=%d runs=%d duplicates=%d missed=%d %v runs by instance=%v",
		f.ticks, f.runs, f.duplicates, len(f.missed), f.missed, f.byInstance)
}

func (t *tally) figures(first, last int64) figures {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := figures{byInstance: make(map[int]int)}
	for tick, insts := range t.runs {
		if tick < first || tick > last {
			continue
		}
		f.runs += len(insts)
		f.duplicates += len(insts) - 1
		for _, i := range insts {
			f.byInstance[i]++
		}
	}
	for tick := first; tick <= last; tick++ {
		f.ticks++
		if len(t.runs[tick]) == 0 {
			f.missed = append(f.missed, tick)
		}
	}
	return f
}

// dups lists the ticks from first to last that ran more than once.
func (t *tally) dups(first, last int64) map[int64][]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	d := make(map[int64][]int)
	for tick, insts := range t.runs {
		if tick >= first && tick <= last && len(insts) > 1 {
			d[tick] = slices.Clone(insts)
		}
	}
	return d
}

// newSession returns a session on client with the given TTL, closed when
// the test ends.
func newSession(t *testing.T, client redisleader.Client, ttl time.Duration) *redisleader.Session {
	t.Helper()
	s, err := redisleader.NewSession(client, redisleader.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return s
}

// startScheduler starts a gocron scheduler on instance inst's skewed clock
// running the job every second, shut down when the test ends.
func startScheduler(t *testing.T, inst int, tl *tally, opt gocron.SchedulerOption) gocron.Scheduler {
	t.Helper()
	s, err := gocron.NewScheduler(opt, gocron.WithClock(skewed{clockwork.NewRealClock(), skews[inst]}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.NewJob(gocron.CronJob(everySecond, true), gocron.NewTask(tl.run, inst), gocron.WithName(jobName)); err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() { _ = s.Shutdown() })
	return s
}

// untilTick waits (a timer: the schedule is the point) until the real
// wall clock is past tick by d.
func untilTick(tick int64, d time.Duration) {
	<-time.After(time.Until(time.Unix(tick, 0).Add(d)))
}

// TestLockerExactlyOnce runs one job every second on three gocron
// schedulers whose clocks are up to 80ms apart, each with its own session
// and a Locker with MinHold 500ms: every tick runs exactly once. With
// MinHold 0 the same setup runs ticks twice, which is what MinHold is for.
func TestLockerExactlyOnce(t *testing.T) {
	addr := startRedis(t)
	run := func(t *testing.T, minHold time.Duration, ticks int64) (figures, map[int64][]int) {
		tl := newTally()
		var lockers []*Locker
		for range skews {
			s := newSession(t, newClient(t, addr, nil), 3*time.Second)
			l, err := NewLocker(s, minHold, WithPrefix(t.Name()+":"))
			if err != nil {
				t.Fatal(err)
			}
			lockers = append(lockers, l)
		}
		start := time.Now().Unix()
		var scheds []gocron.Scheduler
		for i, l := range lockers {
			scheds = append(scheds, startScheduler(t, i, tl, gocron.WithDistributedLocker(l)))
		}
		first, last := start+2, start+1+ticks // every scheduler is running by first
		untilTick(last, 500*time.Millisecond)
		for _, s := range scheds {
			if err := s.Shutdown(); err != nil {
				t.Error(err)
			}
		}
		for _, l := range lockers {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := l.Close(ctx); err != nil {
				t.Error(err)
			}
			cancel()
		}
		return tl.figures(first, last), tl.dups(first, last)
	}

	t.Run("MinHold=500ms", func(t *testing.T) {
		f, dups := run(t, 500*time.Millisecond, 8)
		t.Logf("Locker, MinHold 500ms, 3 schedulers, skews %v: %v", skews, f)
		if f.duplicates != 0 {
			t.Errorf("%d ticks ran more than once: %v", f.duplicates, dups)
		}
		if len(f.missed) != 0 {
			t.Errorf("ticks never run: %v", f.missed)
		}
	})
	t.Run("MinHold=0", func(t *testing.T) {
		f, _ := run(t, 0, 3)
		t.Logf("Locker, MinHold 0, 3 schedulers, skews %v: %v", skews, f)
		if f.duplicates == 0 {
			t.Errorf("no duplicates without MinHold: the skews do not exercise MinHold")
		}
	})
}

// TestElectorExactlyOnceAndTakeover runs one job every second on three
// gocron schedulers with Electors (sessions with a 2s TTL). Every tick runs
// exactly once; then the leader is cut off from Redis without resigning, as
// if its process had died, and another instance takes over within the TTL,
// still without running any tick twice.
func TestElectorExactlyOnceAndTakeover(t *testing.T) {
	const ttl = 2 * time.Second
	addr := startRedis(t)
	tl := newTally()
	cuts := make([]*cuttable, len(skews))
	electors := make([]*Elector, len(skews))
	for i := range skews {
		cuts[i] = &cuttable{}
		s := newSession(t, newClient(t, addr, cuts[i]), ttl)
		e, err := NewElector(s, "scheduler", fmt.Sprint(i), WithSettle(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		electors[i] = e
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := e.Close(ctx); err != nil {
				t.Errorf("Close elector %d: %v", i, err)
			}
		})
	}

	// An observer reports when leadership changes hands.
	obs := newSession(t, newClient(t, addr, nil), ttl)
	election, err := obs.Election("scheduler")
	if err != nil {
		t.Fatal(err)
	}
	octx, ocancel := context.WithCancel(context.Background())
	defer ocancel()
	changes := election.Observe(octx)

	start := time.Now().Unix()
	for i, e := range electors {
		startScheduler(t, i, tl, gocron.WithDistributedElector(e))
	}
	first := start + 2
	killTick := first + 4
	untilTick(killTick, 300*time.Millisecond) // mid-way between two ticks

	leader := -1
	for i, e := range electors {
		if e.IsLeader(context.Background()) == nil {
			if leader >= 0 {
				t.Fatalf("instances %d and %d both lead", leader, i)
			}
			leader = i
		}
	}
	if leader < 0 {
		t.Fatal("no instance leads")
	}
	before := tl.figures(first, killTick)
	t.Logf("Elector, before the kill (leader %d): %v", leader, before)

	resumed := make(chan int64, 1)
	var once sync.Once
	tl.mu.Lock()
	tl.after = func(tick int64, inst int) {
		if inst != leader {
			once.Do(func() { resumed <- tick })
		}
	}
	tl.mu.Unlock()
	cutAt := time.Now()
	cuts[leader].Cut()

	// The new leader, as the observer sees it.
	var took time.Duration
	timeout := time.After(3 * ttl)
wait:
	for {
		select {
		case l := <-changes:
			if l.Fence != 0 && l.Value != fmt.Sprint(leader) {
				took = time.Since(cutAt)
				t.Logf("instance %s leads %v after the cut", l.Value, took.Round(time.Millisecond))
				break wait
			}
		case <-timeout:
			t.Fatalf("no other instance leads %v after the leader was cut off", 3*ttl)
		}
	}
	var resumedTick int64
	select {
	case resumedTick = <-resumed:
	case <-timeout:
		t.Fatal("no other instance ran the job after the takeover")
	}
	firstRunAfter := time.Unix(resumedTick, 0).Sub(cutAt)
	if l := electors[leader].IsLeader(context.Background()); l == nil {
		t.Error("the cut-off instance still says it leads")
	}
	last := resumedTick + 3
	untilTick(last, 500*time.Millisecond)
	all := tl.figures(first, last)
	t.Logf("Elector, whole run: %v; cut at +%v after tick %d, new leader after %v, first run by it at tick %d (%v after the cut)",
		all, cutAt.Sub(time.Unix(killTick, 0)).Round(time.Millisecond), killTick,
		took.Round(time.Millisecond), resumedTick, firstRunAfter.Round(time.Millisecond))
	if all.duplicates != 0 {
		t.Errorf("%d ticks ran more than once: %v", all.duplicates, tl.dups(first, last))
	}
	if took > ttl+500*time.Millisecond {
		t.Errorf("takeover took %v, want within about a TTL (%v)", took, ttl)
	}
	for _, m := range all.missed {
		if m <= killTick || m >= resumedTick {
			t.Errorf("tick %d missed outside the takeover gap (%d, %d)", m, killTick, resumedTick)
		}
	}
	if before.duplicates != 0 || len(before.missed) != 0 {
		t.Errorf("before the kill: %v", before)
	}
	if errors.Is(electors[leader].Err(), ErrClosed) {
		t.Error("the cut-off elector stopped campaigning")
	}
}
