//go:build linux

package scenario

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader"
	"github.com/redisleader/redisleader/internal/history"
	"github.com/redisleader/redisleader/internal/probe"
)

// semfleet_test.go: issue 39's semaphore scenario on real processes (M2),
// the child processes that hold permits, and the hooks by which a shared
// name's actors join another scenario (the chaos run): childModes (a child
// process of another kind) and sides (events of some actors judged apart).

// Child-process modes beyond the election child (childMain) and the Run
// child (runChildMain): SCENARIO_MODE names one; each file registers its
// own in an init function.
const envMode = "SCENARIO_MODE"

var childModes = map[string]func() int{}

// Environment of a semaphore child (mode "sem").
const envSemN = "SCENARIO_SEM_N" // the semaphore's limit N

func init() { childModes["sem"] = semChildMain }

// semChildEnv is the environment that makes h.child a semaphore child of
// a name with limit n.
func semChildEnv(n int) []string { return []string{envMode + "=sem", envSemN + "=" + strconv.Itoa(n)} }

// sides routes the events of some actors (by Who) to their own recorder,
// so that actors of another kind can share a scenario with the election's
// candidates and be judged by their own checker (harness.add).
var sides sync.Map // who → *history.Recorder

// side records the events of who in rec, until the test ends.
func side(t *testing.T, who string, rec *history.Recorder) {
	sides.Store(who, rec)
	t.Cleanup(func() { sides.Delete(who) })
}

// sideAdd records e in its actor's own recorder, if it has one.
func sideAdd(e history.Event) bool {
	r, ok := sides.Load(e.Who)
	if ok {
		r.(*history.Recorder).Add(e)
	}
	return ok
}

// semChildMain is a semaphore child: it takes a permit of the scenario's
// name (limit $SCENARIO_SEM_N, its id as the permit's value) in a loop
// (sharedChildMain).
func semChildMain() int {
	n, _ := strconv.Atoi(os.Getenv(envSemN))
	return sharedChildMain(":sem", 3, func(s *redisleader.Session, name, who string) (acquireFunc, error) {
		m, err := s.Semaphore(name, n, redisleader.WithPermitValue(who))
		if err != nil {
			return nil, err
		}
		return m.Acquire, nil
	})
}

// An acquireFunc blocks until it holds a lease of a shared name.
type acquireFunc func(context.Context) (*redisleader.Lock, error)

// sharedChildMain is a child process on a shared name: it makes a
// session, gets acquire from handle, and in a loop acquires, holds for a
// random time in $SCENARIO_HOLD_MS and releases, reporting every lease
// event on stdout (and, as history.Tried, every acquire script of keys
// keys on the name's key with suffix set), until it is killed or its
// parent goes away.
func sharedChildMain(set string, keys int, handle func(s *redisleader.Session, name, who string) (acquireFunc, error)) int {
	who, name := os.Getenv(envChild), os.Getenv(envName)
	out := history.NewWriter(os.Stdout)
	probe.Set(func(e probe.Event) { out.Add(fromProbe(e)) })
	ttlMs, _ := strconv.Atoi(os.Getenv(envTTL))
	a, b, _ := strings.Cut(os.Getenv(envHold), ",")
	lo, _ := strconv.Atoi(a)
	hi, _ := strconv.Atoi(b)
	client := redis.NewClient(&redis.Options{Addr: os.Getenv(envAddr), ContextTimeoutEnabled: true,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second})
	client.AddHook(triedHook{who: who, set: "redisleader:{" + name + "}" + set, keys: keys, emit: out.Add})
	s, err := redisleader.NewSession(client, leaseOpts(time.Duration(ttlMs)*time.Millisecond)...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	acquire, err := handle(s, name, who)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	go func() {
		_, _ = os.Stdin.Read(make([]byte, 1)) // the parent went away (or said so)
		os.Exit(0)
	}()
	ctx := context.Background()
	for {
		l, err := acquire(ctx)
		if err != nil {
			fmt.Fprintln(os.Stderr, "acquire:", err)
			continue
		}
		t := time.NewTimer(time.Duration(lo+rand.IntN(hi-lo+1)) * time.Millisecond)
		select {
		case <-t.C:
			_ = l.Release(ctx)
		case <-l.Done():
			t.Stop()
		}
	}
}

// TestScenarioSemaphoreFleet (M2, fast tier: 8 s; the 30 s run of the
// issue is TestChaosSemaphoreFleet, under the chaos tag): issue 39's
// scenario, see semFleet.
func TestScenarioSemaphoreFleet(t *testing.T) {
	semFleet(t, "M2-semaphore-fleet-20-on-3", 8*time.Second)
}

// semFleet: 20 child processes take permits of a semaphore of N=3 for
// run, each holding 200–800 ms, while a nemesis SIGKILLs holders (a new
// process replaces each), SIGSTOPs holders for T + 300 ms, and halfway
// kills Redis and restarts it a TTL later without persistence. The
// history must be safe (history.CheckShared: at most 3 believed at once,
// fences increasing), and every dead holder's permit must be granted
// again within 100 ms of the end of its lease, its last renewal's (the
// score Redis held for it), while the others wait: reclaim is measured on
// the server's clock, from that score to the next grant's fence (the
// server's TIME in µs when it granted).
func semFleet(t *testing.T, id string, run time.Duration) {
	const n, procs = 3, 20
	h := newHarness(t, id)
	f := &semFleetRun{h: h, n: n, byWho: map[string]*child{}}
	for i := range procs {
		f.spawn(fmt.Sprintf("p%d", i))
	}
	w := h.expect(kind(history.Acquired))
	h.wait(w, 20*time.Second, "a first permit")
	f.nemesis(run)
	for _, c := range f.byWho {
		c.kill()
	}
	f.reclaimNotes(h.rec.Events())
	h.finishShared(n)
}

// semFleetRun is semFleet's state: its children and the permits of the dead.
type semFleetRun struct {
	h       *harness
	n       int
	byWho   map[string]*child
	spawned int
	dead    []deadPermit
	restart [2]float64 // Redis down, server ms: from, to
}

// A deadPermit is the permit of a holder that was SIGKILLed or SIGSTOPped
// past its lease: its member and the end of its lease (server ms).
type deadPermit struct {
	who, how, member string
	end              float64
}

func (f *semFleetRun) spawn(who string) {
	f.byWho[who] = f.h.child(who, "200,800", semChildEnv(f.n)...)
	f.spawned++
}

// nemesis injects a fault every 0.4–1 s until run has passed: a holder
// SIGKILLed or SIGSTOPped past its TTL, and once, halfway, Redis killed
// and restarted a TTL later without persistence. No fault starts in the
// last 2 T, so that every dead permit's reclaim is seen.
func (f *semFleetRun) nemesis(run time.Duration) {
	h := f.h
	start := time.Now()
	restarted := false
	for time.Since(start) < run-2*ttl {
		<-time.After(400*time.Millisecond + rand.N(600*time.Millisecond))
		if !restarted && time.Since(start) > run/2 {
			restarted = true
			f.restart[0] = serverMs(time.Now())
			h.fault("restart-redis", true)
			h.srv.Kill(h.t)
			<-time.After(ttl) // down for a TTL: every holder's lease has run out
			h.srv.Restart(h.t)
			h.fault("restart-redis", false)
			f.restart[1] = serverMs(time.Now())
			continue
		}
		if rand.IntN(2) == 0 {
			f.killHolder()
		} else {
			f.stopHolder()
		}
	}
	<-time.After(time.Until(start.Add(run))) // the last 2 T: the last dead permits come back
}

// killHolder SIGKILLs a holder and starts a new child in its place.
func (f *semFleetRun) killHolder() {
	c, member := f.holder()
	if c == nil {
		return
	}
	f.h.fault("sigkill-holder", true)
	c.kill()
	f.h.fault("sigkill-holder", false)
	f.died(c.who, "sigkill", member)
	delete(f.byWho, c.who)
	f.spawn(fmt.Sprintf("p%d", f.spawned))
}

// stopHolder SIGSTOPs a holder for T + 300 ms: its lease ends meanwhile.
func (f *semFleetRun) stopHolder() {
	c, member := f.holder()
	if c == nil {
		return
	}
	f.h.fault("sigstop-holder", true)
	c.signal(syscall.SIGSTOP)
	f.died(c.who, "sigstop", member)
	<-time.After(ttl + 300*time.Millisecond)
	c.signal(syscall.SIGCONT)
	f.h.fault("sigstop-holder", false)
}

// holder picks a child that holds a permit now, as Redis says, and its
// member.
func (f *semFleetRun) holder() (*child, string) {
	members, err := f.h.admin.ZRange(context.Background(), f.h.key+":sem", 0, -1).Result()
	if err != nil {
		return nil, ""
	}
	rand.Shuffle(len(members), func(i, j int) { members[i], members[j] = members[j], members[i] })
	for _, m := range members {
		if c := f.byWho[valueOf(m)]; c != nil {
			return c, m
		}
	}
	return nil, ""
}

// died records the end of member's lease once its holder can renew no
// more: its score, read 100 ms after the fault (a renewal already on its
// way lands meanwhile).
func (f *semFleetRun) died(who, how, member string) {
	<-time.After(100 * time.Millisecond)
	end, err := f.h.admin.ZScore(context.Background(), f.h.key+":sem", member).Result()
	if err != nil {
		return // gone already: Redis restarted, or it was given back
	}
	f.dead = append(f.dead, deadPermit{who: who, how: how, member: member, end: end})
}

// valueOf is the value part of a permit's member "<token>\n<fence>\n<value>".
func valueOf(member string) string {
	parts := strings.SplitN(member, "\n", 3)
	if len(parts) < 3 {
		return ""
	}
	return parts[2]
}

// serverMs is t on the redis-server's clock in ms (it runs on this host:
// CLOCK_REALTIME).
func serverMs(t time.Time) float64 { return float64(t.UnixNano()) / 1e6 }

// reclaimNotes measures every dead permit's reclaim on events and adds the
// figures to the line: the next grant after the end of its lease (the
// grant's fence is the server's TIME in µs); masked: a release came
// between, so that grant may have used the released permit instead.
func (f *semFleetRun) reclaimNotes(events []history.Event) {
	h := f.h
	now := time.Now()
	offMs := serverMs(now) - float64(history.Mono(now))/1e6 // CLOCK_MONOTONIC ms → server ms
	var grants, releases []float64
	for _, e := range events {
		switch {
		case e.Kind == history.Acquired:
			grants = append(grants, float64(e.Fence)/1000)
		case e.Kind == history.Ended && e.Reason == "released":
			releases = append(releases, float64(e.Mono)/1e6+offMs)
		}
	}
	slices.Sort(grants)
	var lags []float64
	masked, unmasked := 0, 0
	for _, d := range f.dead {
		if f.restart[1] > 0 && d.end+200 > f.restart[0] && d.end-float64(ttl.Milliseconds()) < f.restart[1] {
			continue // Redis restarted meanwhile: every permit went with it
		}
		i, _ := slices.BinarySearch(grants, d.end)
		if i == len(grants) {
			h.check(false, "%s's permit (%s) was never granted again after its lease ended", d.who, d.how)
			continue
		}
		lag := grants[i] - d.end
		lags = append(lags, lag)
		if slices.ContainsFunc(releases, func(r float64) bool { return r >= d.end-5 && r <= grants[i] }) {
			masked++
		} else {
			unmasked++
		}
		h.check(lag <= 100, "%s's permit (%s) granted again %.1f ms after its lease ended (bound 100 ms)", d.who, d.how, lag)
	}
	slices.Sort(lags)
	h.note("procs_spawned", "%d", f.spawned)
	h.note("dead_permits", "%d", len(lags))
	h.note("reclaim_unmasked", "%d", unmasked)
	h.note("reclaim_masked", "%d", masked)
	if len(lags) > 0 {
		h.note("reclaim_p50_ms", "%.1f", lags[len(lags)/2])
		h.note("reclaim_max_ms", "%.1f", lags[len(lags)-1])
	}
	h.check(unmasked > 0, "no dead permit's reclaim was measured unmasked by a release")
}

// triedHook reports, as history.Tried, every sem_acquire (rw_acquire:
// keys 2) on the set whose reply was not a denial ({0, ...}): the attempt
// may have granted its token (history.CheckShared's lower bound of the
// grant).
type triedHook struct {
	who, set string
	keys     int // the script's keys, 0 for sem_acquire's 3
	emit     func(history.Event)
}

// seen reports cmd, sent at sent, if it was such an attempt; ARGV[1], the
// token, follows the keys.
func (t triedHook) seen(cmd redis.Cmder, sent int64) {
	if !t.attempt(cmd) {
		return
	}
	if c, ok := cmd.(*redis.Cmd); ok && cmd.Err() == nil {
		if r, err := c.Slice(); err == nil && len(r) > 0 && r[0] == int64(0) {
			return // denied: the token was not granted by this attempt
		}
	}
	t.emit(history.Event{Mono: history.Now(), Who: t.who, Kind: history.Tried, Token: fmt.Sprint(cmd.Args()[3+cmp.Or(t.keys, 3)]), Sent: sent})
}

// attempt reports whether cmd is an acquire attempt on t's set: an EVALSHA
// or EVAL with t's keys, the first the set.
func (t triedHook) attempt(cmd redis.Cmder) bool {
	args, keys := cmd.Args(), cmp.Or(t.keys, 3)
	return (cmd.Name() == "evalsha" || cmd.Name() == "eval") && len(args) >= 4+keys && fmt.Sprint(args[2]) == strconv.Itoa(keys) && args[3] == t.set
}

func (t triedHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (t triedHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		sent := history.Now()
		err := next(ctx, cmd)
		t.seen(cmd, sent)
		return err
	}
}
func (t triedHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		sent := history.Now()
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			t.seen(cmd, sent)
		}
		return err
	}
}
