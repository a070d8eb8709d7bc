// Command bench compares redisleader with the raw go-redis floor, bsm/redislock
// and go-redsync/redsync on private redis-servers, measures its elections and
// how it scales, and writes a markdown report:
//
//	cd bench && go run . -rounds 5
//
// It starts its own redis-servers on free loopback ports, runs every scenario
// once per round with the contenders' order rotated each round, takes every
// ratio within a round, reports median [min–max] over rounds, stops the
// servers, and exits non-zero if any contender failed. The latency run
// (-only latency) also measures etcd's lock and election recipes on a
// private etcd when one is installed (etcd.go).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader/bench/internal/latency"
)

// config is what one run does; quick shrinks everything for CI.
type config struct {
	rounds int
	quick  bool
	// only (-only) runs and reports the lock scenarios ("locks") or the
	// election scenarios ("elections") alone, and so on (see main); "":
	// everything.
	only string
	// samples (-samples) is the file the latency distributions go to; "": none.
	samples string

	warmup, seqPairs int           // (a)
	etcdPairs        int           // (a) for etcd, whose pairs are raft writes
	goroutines       int           // (b), (c)
	window           time.Duration // (b), (c)
	allocIters       int           // (d)

	handovers int // graceful handovers per mechanism per round
	polls     int // handovers of the polling follower per round
	crashes   int // crash takeovers per round
	crashTTL  time.Duration

	electionTTL time.Duration // follower load and candidates
	followers   int
	loadWindow  time.Duration

	scaleSizes  []int
	scaleTTL    time.Duration
	renewEvery  time.Duration // the renew interval while renewal rounds are timed
	renewRounds int           // renewal rounds timed per size
	candidates  int

	pingLeases int           // leases one Session holds under the renewal load
	pingTTL    time.Duration // their TTL
	pingEvery  time.Duration // their renew interval
	pingRounds int           // renewal rounds the PING latency is measured over
}

func newConfig(rounds int, quick bool) config {
	c := config{
		rounds: rounds, warmup: 500, seqPairs: 20000, etcdPairs: 2000, goroutines: 16, window: 2 * time.Second, allocIters: 5000,
		handovers: 40, polls: 40, crashes: 20, crashTTL: 200 * time.Millisecond,
		electionTTL: time.Second, followers: 10, loadWindow: 3 * time.Second,
		scaleSizes: []int{1, 100, 1000, 10000}, scaleTTL: 30 * time.Second, renewEvery: 100 * time.Millisecond,
		renewRounds: 15, candidates: 200,
		pingLeases: 50000, pingTTL: 10 * time.Second, pingEvery: time.Second, pingRounds: 10,
	}
	if quick {
		c.rounds, c.quick = 1, true
		c.warmup, c.seqPairs, c.etcdPairs, c.window, c.allocIters = 100, 1000, 200, 300*time.Millisecond, 500
		c.handovers, c.polls, c.crashes = 20, 5, 5
		c.loadWindow, c.renewRounds = time.Second, 4
		c.pingLeases, c.pingRounds = 5000, 3
	}
	return c
}

func main() {
	flags := flag.NewFlagSet("bench", flag.ExitOnError)
	rounds := flags.Int("rounds", 5, "rounds; every scenario runs once per round with the contenders' order rotated")
	quick := flags.Bool("quick", false, "one short round (under a minute) for CI; its numbers mean little")
	out := flags.String("out", "RESULTS.md", "file the markdown report is written to (it is printed too); with -only, only when -out is given, so that a partial run does not overwrite the full run's RESULTS.md")
	only := flags.String("only", "", `"locks": run only the lock scenarios (a)-(d), a few minutes instead of the full run; "elections": only the election scenarios (handovers, crash takeover, follower load); "renewal": only the renewal load (other clients' PING while one Session renews its leases); "latency": only sequential pairs, handovers and crash takeovers, and etcd's pairs and handovers if an etcd binary is installed, for -samples (the report is printed, not written); "semaphores": only the semaphore scenarios beside their lock baselines (semaphores.go)`)
	samples := flags.String("samples", "", "also write the latency distributions of the pairs and handovers measured to this JSON file (cmd/figures plots it)")
	pingAddr := flags.String("pinger", "", "internal: run as the renewal load's pinger against this address")
	pingFor := flags.Duration("ping-for", 0, "internal: how long the pinger runs")
	_ = flags.Parse(os.Args[1:])
	if *pingAddr != "" {
		os.Exit(pinger(*pingAddr, *pingFor))
	}
	if *rounds < 1 {
		fmt.Fprintln(os.Stderr, "bench: -rounds must be at least 1")
		os.Exit(2)
	}
	if !slices.Contains([]string{"", "locks", "elections", "renewal", "latency", "semaphores"}, *only) {
		fmt.Fprintf(os.Stderr, "bench: -only %q: the choices are \"locks\", \"elections\", \"renewal\", \"latency\" and \"semaphores\"\n", *only)
		os.Exit(2)
	}
	cfg := newConfig(*rounds, *quick)
	cfg.only, cfg.samples = *only, *samples
	os.Exit(run(cfg, reportFile(flags, *out, *only)))
}

// reportFile is the file the report is written to: out, except for a
// partial run (-only) whose -out was not given, whose report is only
// printed ("").
func reportFile(flags *flag.FlagSet, out, only string) string {
	given := false
	flags.Visit(func(f *flag.Flag) { given = given || f.Name == "out" })
	if only != "" && !given {
		return ""
	}
	return out
}

// run runs every round, writes the report and returns the exit code.
func run(cfg config, out string) int {
	// testing.Benchmark takes its iteration count from the test flags.
	testing.Init()
	if err := flag.Set("test.benchtime", fmt.Sprintf("%dx", cfg.allocIters)); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	start := time.Now()
	e, err := startEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	defer e.stop()
	contenders, closeContenders, err := e.contenders()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	defer closeContenders()
	var topo *topoEnv
	if cfg.only == "" {
		topo, err = e.topologies()
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		defer topo.close()
	}
	var etcd *etcdServer // the latency run's etcd rows, if etcd is installed
	if cfg.only == "latency" {
		if etcd, err = startEtcdIfInstalled(); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		if etcd != nil {
			defer etcd.stop()
		}
	}

	res := runRounds(cfg, e, contenders, topo, etcd)
	report := render(cfg, contenders, res, time.Since(start))
	fmt.Print(report)
	if err := writeOut(cfg, res, report, out); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	if n := len(res.errs.list); n > 0 {
		fmt.Fprintf(os.Stderr, "bench: %d errors (see the report)\n", n)
		return 1
	}
	return 0
}

// writeOut writes the report to out, if any (not for -only latency, whose
// report has no tables), and the latency distributions to cfg.samples.
func writeOut(cfg config, res *results, report, out string) error {
	if out != "" && cfg.only != "latency" {
		if err := os.WriteFile(out, []byte(report), 0o644); err != nil {
			return err
		}
		progress("report written to %s", out)
	}
	if cfg.samples == "" {
		return nil
	}
	m := describeMachine()
	servers := "Redis " + serverVersion(m.redis)
	if len(res.locks.pairs.all(etcdRow)) > 0 {
		servers += ", etcd " + etcdVersion()
	}
	f := &latency.File{
		Run: fmt.Sprintf("go run . %s on %d× %s, %s, %s", strings.Join(os.Args[1:], " "),
			m.online, m.cpu, servers, time.Now().UTC().Format("2006-01-02")),
		Pairs: map[string]latency.Dist{}, Handovers: map[string]latency.Dist{},
	}
	for row := range res.locks.pairs.rows {
		f.Pairs[row] = latency.Of(res.locks.pairs.all(row))
	}
	for row := range res.elections.handover.rows {
		f.Handovers[row] = latency.Of(res.elections.handover.all(row))
	}
	if lags := res.elections.crash.all(crashRow); len(lags) > 0 {
		f.Handovers["crash"] = latency.Of(lags)
	}
	if err := f.Write(cfg.samples); err != nil {
		return err
	}
	progress("latency distributions written to %s", cfg.samples)
	return nil
}

// serverVersion picks the version (v=7.0.15) out of redis-server --version.
func serverVersion(s string) string {
	for _, f := range strings.Fields(s) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return v
		}
	}
	return s
}

// runRounds runs every round of the scenarios cfg selects (-only), and the
// etcd rows of the latency run when etcd is not nil.
func runRounds(cfg config, e *env, contenders []contender, topo *topoEnv, etcd *etcdServer) *results {
	ctx := context.Background()
	res := newResults(cfg.rounds)
	for round := range cfg.rounds {
		if cfg.only == "latency" {
			progress("round %d/%d: sequential pairs, handovers", round+1, cfg.rounds)
			runSequential(ctx, cfg, rotate(contenders, round), round, res.locks, &res.errs)
			runHandovers(ctx, e, cfg, round, res.elections, &res.errs)
			if etcd != nil {
				runEtcd(ctx, etcd, cfg, round, res)
			}
			continue
		}
		if cfg.only == "renewal" {
			progress("round %d/%d: renewal load", round+1, cfg.rounds)
			runPings(ctx, e, cfg, round, res.pings, &res.errs)
			continue
		}
		if cfg.only == "" || cfg.only == "semaphores" {
			progress("round %d/%d: semaphores", round+1, cfg.rounds)
			runSemaphores(ctx, e, cfg, round, res.sems, &res.errs)
		}
		if cfg.only == "semaphores" {
			continue
		}
		if cfg.only != "elections" {
			progress("round %d/%d: locks", round+1, cfg.rounds)
			runLocks(ctx, cfg, rotate(contenders, round), round, res.locks, &res.errs)
		}
		if cfg.only != "locks" {
			progress("round %d/%d: elections", round+1, cfg.rounds)
			runElections(ctx, e, cfg, round, res.elections, &res.errs)
		}
		if cfg.only != "" {
			continue
		}
		progress("round %d/%d: scale", round+1, cfg.rounds)
		runScale(ctx, e, cfg, round, res.scale, &res.errs)
		progress("round %d/%d: renewal load", round+1, cfg.rounds)
		runPings(ctx, e, cfg, round, res.pings, &res.errs)
		progress("round %d/%d: topologies", round+1, cfg.rounds)
		runTopologies(ctx, topo, cfg, round, res.topo, &res.errs)
	}
	return res
}

// results is everything measured in a run.
type results struct {
	locks     *lockResults
	elections *electionResults
	scale     *scaleResults
	pings     *pingResults
	topo      *topoResults
	sems      *semResults
	errs      errorLog
}

func newResults(rounds int) *results {
	return &results{locks: newLockResults(rounds), elections: newElectionResults(rounds), scale: newScaleResults(rounds), pings: newPingResults(rounds), topo: newTopoResults(rounds), sems: newSemResults(rounds)}
}

// env is the run's redis-servers and the client that inspects the first.
type env struct {
	servers []*server // servers[0] serves every scenario; all three serve redsync-3
	admin   *redis.Client
}

// startEnv starts three redis-servers.
func startEnv() (*env, error) {
	e := &env{}
	for range 3 {
		s, err := startServer()
		if err != nil {
			e.stop()
			return nil, err
		}
		e.servers = append(e.servers, s)
	}
	e.admin = e.client()
	return e, nil
}

// stop closes the admin client and stops the servers.
func (e *env) stop() {
	if e.admin != nil {
		_ = e.admin.Close()
	}
	for _, s := range e.servers {
		s.stop()
	}
}

// mainAddr is the address of the server every scenario but redsync-3 uses.
func (e *env) mainAddr() string { return e.servers[0].addr() }

// client returns a new go-redis client for the main server.
func (e *env) client() *redis.Client { return redis.NewClient(clientOptions(e.mainAddr())) }

// clientOptions are the options every client of the run gets.
// ContextTimeoutEnabled is what redisleader asks for (calls end with their
// context); it costs the others nothing.
func clientOptions(addr string) *redis.Options {
	return &redis.Options{Addr: addr, ContextTimeoutEnabled: true}
}

// rotate returns list rotated left by round, so every entry runs first in
// some round.
func rotate[T any](list []T, round int) []T {
	k := round % len(list)
	return append(append([]T(nil), list[k:]...), list[:k]...)
}

// progress reports on stderr, so that stdout carries only the report.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

// errorLog collects the errors of a run; any error makes the run fail.
type errorLog struct {
	mu   sync.Mutex // protects list
	list []string
}

// add records err, if any, for a scenario and row and reports whether there
// was one.
func (l *errorLog) add(scenario, row string, err error) bool {
	if err == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.list = append(l.list, fmt.Sprintf("%s, %s: %s", scenario, row, strings.ReplaceAll(err.Error(), "\n", " ")))
	progress("error: %s", l.list[len(l.list)-1])
	return true
}
