package main

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// report builds the markdown report.
type report struct {
	strings.Builder
	cfg config
	m   machine
}

func (r *report) printf(format string, args ...any) { fmt.Fprintf(r, format, args...) }

// render writes the whole report.
func render(cfg config, contenders []contender, res *results, took time.Duration) string {
	r := &report{cfg: cfg, m: describeMachine()}
	r.header(took)
	switch r.cfg.only {
	case "locks":
		r.locks(contenders, res.locks)
		r.errors(res.errs.list)
		return r.String()
	case "elections":
		r.elections(res.elections)
		r.errors(res.errs.list)
		return r.String()
	case "latency": // the numbers go to -samples
		r.errors(res.errs.list)
		return r.String()
	case "semaphores":
		r.semaphores(res.sems)
		r.errors(res.errs.list)
		return r.String()
	case "renewal":
		r.pingTargets(res.pings)
		r.pings(res.pings)
		r.errors(res.errs.list)
		return r.String()
	}
	r.targets(res)
	r.locks(contenders, res.locks)
	r.elections(res.elections)
	r.scale(res.scale)
	r.pings(res.pings)
	r.topologies(res.topo)
	r.semaphores(res.sems)
	r.errors(res.errs.list)
	return r.String()
}

func (r *report) header(took time.Duration) {
	kind := "full run"
	if r.cfg.quick {
		kind = "quick run (-quick: short scenarios, one round; its numbers mean little)"
	}
	if r.cfg.only != "" {
		kind = fmt.Sprintf("%s scenarios only (-only %s)", strings.TrimSuffix(r.cfg.only, "s"), r.cfg.only)
	}
	if r.cfg.only == "renewal" {
		kind = "renewal load only (-only renewal)"
	}
	pinning := "not pinned"
	if r.m.pinned {
		pinning = "PINNED with taskset; the redis-servers inherit the pinning"
	}
	r.printf("# redisleader comparison benchmarks\n\n")
	r.printf("%s, %d round(s), %s, took %s.\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), r.cfg.rounds, kind, took.Round(time.Second))
	r.printf("Rerun: `%s`\n\n", r.m.rerun())
	r.printf("## Machine and versions\n\n")
	r.printf("- CPU: %s; %d online, this process may use CPUs %s (%s); GOMAXPROCS=%d, NumCPU=%d\n",
		r.m.cpu, r.m.online, r.m.allowed, pinning, runtime.GOMAXPROCS(0), runtime.NumCPU())
	r.printf("- Go: %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	r.printf("- redis-server: %s (three servers on free loopback ports, `--save \"\" --appendonly no`)\n", r.m.redis)
	for _, mod := range r.m.modules {
		r.printf("- %s\n", mod)
	}
	r.printf("- library checkout: %s\n\n", r.m.commit)
	r.printf("On a 2-vCPU machine, sequential latency is dominated by cross-CPU wake-ups: the client and redis-server")
	r.printf(" sleep and wake each other on different CPUs every round trip; on an idle machine unpinned p50s come out about 3× the pinned ones, and on a busy one the spread between rounds grows.")
	r.printf(" For the client-side cost, run pinned to one CPU: `cd bench && taskset -c 0 go run . -rounds 5`.\n\n")
	r.printf("## Method\n\n")
	r.printf("- Every round runs every scenario once per contender, with the contenders' order rotated by one each round.\n")
	r.printf("- Cells are median [min–max] over rounds. A × column is the median [min–max] of per-round ratios to the baseline measured in the same round, so drift between rounds hits both sides of each ratio.\n")
	r.printf("- Latency pools (handover, crash) give percentiles over all samples of all rounds, and the per-round p50 as median [min–max].\n")
	r.printf("- etcd is measured only by the latency run (`-only latency`, when an etcd binary is installed): its Mutex pairs and Resign → Campaign handovers go to `-samples` and the plot, not to these tables.\n\n")
}

// verdict marks a measured value against its target.
func verdict(ok bool, s summary) string {
	switch {
	case s.n == 0:
		return "n/a"
	case ok:
		return "✓"
	}
	return "✗"
}

func (r *report) targets(res *results) {
	l, el, sc := res.locks, res.elections, res.scale
	r.printf("## Targets\n\n| target | measured (redisleader) | met |\n|---|---|---|\n")
	p50 := l.seqP50.ratio("redisleader", baseline)
	note := ""
	if !r.m.pinned {
		note = " (this run was not pinned: see the note above)"
	}
	r.ratioRow("acquire+release p50 ≤ 1.10× raw (pinned)", p50, p50.med <= 1.10, note)
	par := l.parRate.ratio("redisleader", baseline)
	r.ratioRow("16 goroutines, own keys: pairs/s ≥ 1.2× raw", par, par.med >= 1.2, "")
	acq := l.conAcq.ratio("redisleader", baseline)
	r.ratioRow("16 goroutines, one key: acquisitions/s ≥ 1.0× raw", acq, acq.med >= 1.0, "")
	fail := l.conFail.ratio("redisleader", baseline)
	r.ratioRow("16 goroutines, one key: failed tries/s ≥ 1.0× raw", fail, fail.med >= 1.0, "")
	allocs := l.allocs.of("redisleader")
	r.printf("| ≤ 25 allocs per acquire+release pair | %s | %s |\n", cell(allocs, "%.0f"), verdict(allocs.max <= 25, allocs))
	seq3 := l.seqRate.ratio(rowRedlock3, rowRedsync3)
	r.ratioRow("Redlock-3 sequential pairs/s ≥ redsync-3's", seq3, seq3.med >= 1.0, " (× redsync-3)")
	par3 := l.parRate.ratio(rowRedlock3, rowRedsync3)
	r.ratioRow("Redlock-3 parallel pairs/s ≥ redsync-3's", par3, par3.med >= 1.0, " (× redsync-3)")
	// Auto-pipelining moves the floor: these rows say by how much, what the
	// library keeps of it, and what the Session's coalescing adds there.
	apFloor, apFloorFull := l.parRate.ratio(rowRawAP, baseline), l.parRate.ratio(rowRawAPFull, baseline)
	r.printf("| (reference) 16 goroutines, own keys: the floor auto-pipelined, half / full duplex | %s / %s (× raw) | |\n", ratioCell(apFloor), ratioCell(apFloorFull))
	apLib, apLibFull := l.parRate.ratio(rowLeaderAP, rowRawAP), l.parRate.ratio(rowLeaderAPFull, rowRawAPFull)
	r.printf("| (reference) 16 goroutines, own keys: redisleader auto-pipelined, half / full duplex | %s / %s (× the same floor) | |\n", ratioCell(apLib), ratioCell(apLibFull))
	apGain, apGainFull := l.parRate.ratio(rowLeaderAP, "redisleader"), l.parRate.ratio(rowLeaderAPFull, "redisleader")
	r.printf("| (reference) 16 goroutines, own keys: redisleader auto-pipelined, half / full duplex | %s / %s (× redisleader plain) | |\n", ratioCell(apGain), ratioCell(apGainFull))
	coalPlain, coalAP := l.parRate.ratio("redisleader", rowLeaderSessions), l.parRate.ratio(rowLeaderAP, rowLeaderAPSessions)
	coalAPFull := l.parRate.ratio(rowLeaderAPFull, rowLeaderAPFullSess)
	r.printf("| (reference) 16 goroutines, own keys: one coalescing Session × 16 Sessions, plain / auto-pipelined half / full duplex | %s / %s / %s | |\n", ratioCell(coalPlain), ratioCell(coalAP), ratioCell(coalAPFull))
	lib3, rs3 := l.seqRate.ratio(rowRedlock3, rowRaw3), l.seqRate.ratio(rowRedsync3, rowRaw3)
	r.printf("| (reference) sequential pairs/s × raw-3, Redlock-3 / redsync-3 | %s / %s | |\n", ratioCell(lib3), ratioCell(rs3))
	a3, r3 := l.allocs.of(rowRedlock3), l.allocs.of(rowRedsync3)
	r.printf("| Redlock-3 allocs per pair ≤ redsync-3's | %s vs %s | %s |\n", cell(a3, "%.0f"), cell(r3, "%.0f"), verdict(a3.max <= r3.min, summary{n: min(a3.n, r3.n)}))

	r.electionTargets(el, sc)
	r.pingRows(res.pings)
	r.printf("\n")
}

// ratioRow is a targets' row for a ratio.
func (r *report) ratioRow(what string, s summary, ok bool, note string) {
	r.printf("| %s | %s%s | %s |\n", what, ratioCell(s), note, verdict(ok, s))
}

// electionTargets are the targets' rows for elections and scale.
func (r *report) electionTargets(el *electionResults, sc *scaleResults) {
	h := describe(el.handover.all("redisleader"))
	hs := summary{n: h.n}
	r.printf("| graceful handover p50 ≤ 0.15 ms | %.3f ms | %s |\n", ms(h.p50), verdict(h.p50 <= 150*time.Microsecond, hs))
	r.printf("| graceful handover p99 ≤ 0.30 ms | %.3f ms | %s |\n", ms(h.p99), verdict(h.p99 <= 300*time.Microsecond, hs))
	hr := el.handover.p50s().ratio("redisleader", "raw-push")
	r.ratioRow("graceful handover p50 ≤ 1.10× raw-push p50 (same rounds)", hr, hr.med <= 1.10, "")
	c := describe(el.crash.all(crashRow))
	r.printf("| crash takeover lag p99 ≤ 5 ms | %.3f ms | %s |\n", ms(c.p99), verdict(c.p99 <= 5*time.Millisecond, summary{n: c.n}))
	load := scaled(el.attempts.plus(el.pubsub).of("redisleader"), r.cfg.electionTTL.Seconds())
	r.printf("| ≤ 1 command per waiting follower per TTL (%d followers) | %s | %s |\n", r.cfg.followers, cell(load, "%.2f"), verdict(load.med <= 1, load))
	prio := scaled(el.attempts.plus(el.pubsub).of("redisleader-priority"), r.cfg.electionTTL.Seconds())
	r.printf("| ≤ 1 command per waiting follower per TTL, with priorities (%d followers) | %s | %s |\n", r.cfg.followers, cell(prio, "%.2f"), verdict(prio.med <= 1, prio))
	cand := sc.candAttempts.plus(sc.candPubsub).of(strconv.Itoa(r.cfg.candidates))
	r.printf("| ≤ 1 command per waiting follower per TTL (%d candidates) | %s | %s |\n", r.cfg.candidates, cell(cand, "%.2f"), verdict(cand.med <= 1, cand))

	small, large := strconv.Itoa(r.cfg.scaleSizes[0]), strconv.Itoa(r.cfg.scaleSizes[len(r.cfg.scaleSizes)-1])
	g0, g1 := sc.goroutines.of(small), sc.goroutines.of(large)
	r.printf("| %s leases: goroutines O(1) (same Δ as with %s) | Δ %s vs Δ %s | %s |\n", large, small,
		cell(g1, "%.0f"), cell(g0, "%.0f"), verdict(g1.max <= g0.min, summary{n: min(g0.n, g1.n)}))
	heap := sc.heapPerLock.of(large)
	r.printf("| %s leases: ≤ 4 KB heap per lease | %s B | %s |\n", large, cell(heap, "%.0f"), verdict(heap.med <= 4096, heap))
}

// pingTargets is the targets table of a run of the renewal load alone.
func (r *report) pingTargets(p *pingResults) {
	r.printf("## Targets\n\n| target | measured (redisleader) | met |\n|---|---|---|\n")
	r.pingRows(p)
	r.printf("\n")
}

// pingRows are the renewal load's rows of the targets table.
func (r *report) pingRows(p *pingResults) {
	what := fmt.Sprintf("%d leases renewed every %v", r.cfg.pingLeases, r.cfg.pingEvery)
	p99 := p.p99.ratio("redisleader", rowIdle)
	r.printf("| %s: other clients' PING p99 ≤ 2× idle (same round) | %s (idle p99 %s ms) | %s |\n", what, ratioCell(p99),
		cell(p.p99.of(rowIdle), "%.3f"), verdict(p99.med <= 2, p99))
	mx := p.max.of("redisleader")
	r.printf("| %s: other clients' PING max ≤ 2 ms | %s ms per round (idle: %s) | %s |\n", what, cell(mx, "%.2f"),
		cell(p.max.of(rowIdle), "%.2f"), verdict(mx.med <= 2, mx))
	per := p.perLease.of("redisleader")
	r.printf("| %s: 1 command per lease per round | %s | %s |\n", what, cell(per, "%.2f"), verdict(per.med <= 1.01, per))
}

// pings reports the renewal load.
func (r *report) pings(p *pingResults) {
	cfg := r.cfg
	r.printf("## Renewal load: other clients' latency\n\n")
	r.printf("A child process (another client, one connection) sends PING every millisecond for %d renew intervals (%v each) and records each reply's latency: with the server idle, while one Session holds %d locks (TTL %v) and renews them every %v, and while raw go-redis renews as many keys every %v in one pipeline of compare-and-PEXPIRE scripts (the shape of the library's rounds before they were sliced). Loads in an order rotated by round. Percentiles pool every sample of every round; the × column is the per-round p99 over the same round's idle p99. Round trips per round: Hooks.RenewalRound calls (the raw load: pipelines). Commands per lease per round: PEXPIRE counted by the server.\n\n",
		cfg.pingRounds, cfg.pingEvery, cfg.pingLeases, cfg.pingTTL, cfg.pingEvery, cfg.pingEvery)
	r.printf("| during | samples | PING p50 ms | p99 ms | max ms | per-round p99 ms | per-round max ms | p99 × idle | round trips per round | commands per lease per round |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, row := range []string{rowIdle, "redisleader", rowOnePerRound} {
		d := describe(p.lat.all(row))
		r.printf("| %s | %d | %.3f | %.3f | %.3f | %s | %s | %s | %s | %s |\n", row, d.n, ms(d.p50), ms(d.p99), ms(d.max),
			cell(p.p99.of(row), "%.3f"), cell(p.max.of(row), "%.2f"), ratioCell(p.p99.ratio(row, rowIdle)),
			cell(p.trips.of(row), "%.0f"), cell(p.perLease.of(row), "%.2f"))
	}
	r.printf("\n")
}

// scaled multiplies a summary by k.
func scaled(s summary, k float64) summary {
	s.med, s.min, s.max = s.med*k, s.min*k, s.max*k
	return s
}

// cell formats a summary as "median [min–max]", or just the value when
// every round agrees, or "—" when nothing was measured.
func cell(s summary, format string) string {
	if s.n == 0 {
		return "—"
	}
	med, lo, hi := fmt.Sprintf(format, s.med), fmt.Sprintf(format, s.min), fmt.Sprintf(format, s.max)
	if lo == hi {
		return med
	}
	return med + " [" + lo + "–" + hi + "]"
}

// ratioCell formats a summary of ratios.
func ratioCell(s summary) string {
	if s.n == 0 {
		return "—"
	}
	return "×" + cell(s, "%.2f")
}

func (r *report) locks(contenders []contender, l *lockResults) {
	r.printf("## Locks\n\nContenders (every one generates a fresh 128-bit random token per acquisition; lock TTL %v):\n\n", lockTTL)
	for _, c := range contenders {
		r.printf("- `%s`: %s\n", c.name, c.desc)
	}
	rows := func(cols ...func(name string) string) {
		for _, c := range contenders {
			r.printf("| %s |", c.name)
			for _, col := range cols {
				r.printf(" %s |", col(c.name))
			}
			r.printf("\n")
		}
		r.printf("\n")
	}
	value := func(s *series, format string) func(string) string {
		return func(name string) string { return cell(s.of(name), format) }
	}
	ratio := func(s *series) func(string) string {
		return func(name string) string { return ratioCell(s.ratio(name, baseline)) }
	}
	cfg := r.cfg
	r.printf("\n### (a) Sequential: 1 goroutine, 1 key, %d acquire+release pairs after %d warm-up pairs\n\n", cfg.seqPairs, cfg.warmup)
	r.printf("| contender | pairs/s | × raw | p50 µs | × raw | p99 µs | × raw |\n|---|---|---|---|---|---|---|\n")
	rows(value(l.seqRate, "%.0f"), ratio(l.seqRate), value(l.seqP50, "%.1f"), ratio(l.seqP50), value(l.seqP99, "%.1f"), ratio(l.seqP99))
	r.printf("### (b) Parallel: %d goroutines, each on its own key, %v\n\n", cfg.goroutines, cfg.window)
	r.printf("| contender | pairs/s | × raw |\n|---|---|---|\n")
	rows(value(l.parRate, "%.0f"), ratio(l.parRate))
	r.printf("### (c) Contended: %d goroutines on one key, non-blocking try (released at once on success), %v\n\n", cfg.goroutines, cfg.window)
	r.printf("A failed try is the library's \"held by someone else\" answer: raw SET NX nil, redisleader `ErrLocked`, redislock `ErrNotObtained`, redsync `*ErrTaken`.\n\n")
	r.printf("| contender | acquisitions/s | × raw | failed tries/s | × raw |\n|---|---|---|---|---|\n")
	rows(value(l.conAcq, "%.0f"), ratio(l.conAcq), value(l.conFail, "%.0f"), ratio(l.conFail))
	r.printf("### (d) Allocations per acquire+release pair (testing.Benchmark, ReportAllocs, %dx, 1 goroutine)\n\n", cfg.allocIters)
	r.printf("| contender | allocs | × raw | bytes | × raw | ns/pair | × raw |\n|---|---|---|---|---|---|---|\n")
	rows(value(l.allocs, "%.0f"), ratio(l.allocs), value(l.bytes, "%.0f"), ratio(l.bytes), value(l.ns, "%.0f"), ratio(l.ns))
}

func (r *report) elections(el *electionResults) {
	cfg := r.cfg
	r.printf("## Elections\n\n### Graceful handover (ms)\n\n")
	r.printf("From just before the leader's release call to the waiting follower's acquire returning, on this process's clock; the follower is known to wait (it has failed once) before the release. %d samples per round (%d for the polling follower).\n\n", cfg.handovers, cfg.polls)
	for _, m := range handoverMechanisms {
		r.printf("- `%s`: %s\n", m.name, m.desc)
	}
	p50s := el.handover.p50s()
	r.printf("\n| mechanism | n | p50 | p99 | mean | min | max | per-round p50 | × raw-push p50 |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, m := range handoverMechanisms {
		r.latencyRow(m.name, el.handover, p50s, "raw-push")
	}
	r.printf("\nTransfer × Release, per-round p50s: %s.\n", ratioCell(p50s.ratio("transfer", "redisleader")))
	c := describe(el.crash.all(crashRow))
	r.printf("\n### Crash takeover lag (ms, Redis server clock)\n\n")
	r.printf("A leader Session (TTL %v, renewing every TTL/3) is cut off at a random point of its renewal cycle while a candidate of another Session waits: it connects as its own ACL user, and `ACL DELUSER` closes its connections and refuses new ones atomically. The lag runs from the dead leader's key expiry (`PEXPIRETIME`, read after the cut) to the new leader's acquisition (its fence, the server's `TIME` in µs). %d samples per round.\n\n", cfg.crashTTL, cfg.crashes)
	r.printf("| n | p50 | p99 | mean | min | max |\n|---|---|---|---|---|---|\n")
	if c.n == 0 {
		r.printf("| 0 | — | — | — | — | — |\n\n")
	} else {
		r.printf("| %d | %.3f | %.3f | %.3f | %.3f | %.3f |\n\n", c.n, ms(c.p50), ms(c.p99), ms(c.mean), ms(c.min), ms(c.max))
	}
	r.printf("### Follower load while a healthy leader holds\n\n")
	r.printf("%d followers wait for %v while a leader holds (lease TTL %v); the server counts the commands (INFO commandstats).\n\n", cfg.followers, cfg.loadWindow, cfg.electionTTL)
	for _, f := range followerKinds {
		r.printf("- `%s`: %s\n", f.name, f.desc)
	}
	total := el.attempts.plus(el.pubsub)
	r.printf("\n| follower | attempts/s | pub/sub commands/s | all commands/s | × poll-100ms | all commands per TTL (%v) |\n|---|---|---|---|---|---|\n", cfg.electionTTL)
	for _, f := range followerKinds {
		r.printf("| %s | %s | %s | %s | %s | %s |\n", f.name, cell(el.attempts.of(f.name), "%.2f"), cell(el.pubsub.of(f.name), "%.2f"),
			cell(total.of(f.name), "%.2f"), ratioCell(total.ratio(f.name, "poll-100ms")), cell(scaled(total.of(f.name), cfg.electionTTL.Seconds()), "%.2f"))
	}
	r.printf("\nWith priorities × without, all commands per follower: %s.\n\n", ratioCell(total.ratio("redisleader-priority", "redisleader")))
}

// latencyRow writes row's line of a latency table: n, p50, p99, mean, min,
// max over all samples, the per-round p50s, and their ratio to base's.
func (r *report) latencyRow(row string, samples *pooled, p50s *series, base string) {
	d := describe(samples.all(row))
	if d.n == 0 {
		r.printf("| %s | 0 | — | — | — | — | — | — | — |\n", row)
		return
	}
	r.printf("| %s | %d | %.3f | %.3f | %.3f | %.3f | %.3f | %s | %s |\n", row, d.n, ms(d.p50), ms(d.p99), ms(d.mean), ms(d.min), ms(d.max),
		cell(p50s.of(row), "%.3f"), ratioCell(p50s.ratio(row, base)))
}

func (r *report) scale(sc *scaleResults) {
	cfg := r.cfg
	r.printf("## Scale\n\n### One Session holding N locks (TTL %v)\n\n", cfg.scaleTTL)
	r.printf("- Footprint: `runtime.NumGoroutine()` and `HeapAlloc` after `runtime.GC()` with the locks held minus with none held, in the same Session after its connection pool has grown; heap per lock. A Session itself runs one goroutine (the heartbeat), plus a pub/sub reader once something waits. Default renew interval (TTL/3), so no round runs meanwhile.\n")
	r.printf("- Renewal: a second Session holding as many locks, renewing every %v, %d consecutive rounds recorded by a go-redis hook on its client (only renewals use it meanwhile). A round renews every lock once, in slices of up to 100 (one pipeline each, a single EVALSHA for one lock) spread over the first half of the interval. Slice: the median round trip of one. Drift: the mean interval between a lock's renewals minus the renew interval (the schedule does not drift). Commands: EVALSHA/EVAL counted by the server, per second; per lease per round from the hook, over whole rounds.\n\n", cfg.renewEvery, cfg.renewRounds)
	r.printf("| locks | Δ goroutines | heap B/lock | slices per round | slice ms | drift ms | commands/s (every %v) | commands per lease per round |\n|---|---|---|---|---|---|---|---|\n", cfg.renewEvery)
	for _, n := range cfg.scaleSizes {
		row := strconv.Itoa(n)
		r.printf("| %d | %s | %s | %s | %s | %s | %s | %s |\n", n, cell(sc.goroutines.of(row), "%.0f"), cell(sc.heapPerLock.of(row), "%.0f"),
			cell(sc.slices.of(row), "%.1f"), cell(sc.rtt.of(row), "%.3f"), cell(sc.drift.of(row), "%.3f"),
			cell(sc.cmdsPerSec.of(row), "%.0f"), cell(sc.perLease.of(row), "%.2f"))
	}
	row := strconv.Itoa(cfg.candidates)
	r.printf("\n### %d candidates on one election (%d Sessions, one client, TTL %v)\n\n", cfg.candidates, cfg.candidates, cfg.electionTTL)
	r.printf("All start Campaign at once (each Session opens its pub/sub connection and subscribes first). Elected: until the first Campaign returns. Then, once every other candidate has failed once, the server counts the commands for %v (all of them: the leader's renewals and pub/sub PINGs too; the per-candidate columns leave out the renewals only).\n\n", cfg.loadWindow)
	r.printf("| candidates | elected after ms | commands/s while the leader holds | attempts per waiting candidate per TTL | pub/sub commands per candidate per TTL |\n|---|---|---|---|---|\n")
	r.printf("| %d | %s | %s | %s | %s |\n\n", cfg.candidates, cell(sc.electMs.of(row), "%.1f"), cell(sc.candCmdsPerSec.of(row), "%.1f"),
		cell(sc.candAttempts.of(row), "%.2f"), cell(sc.candPubsub.of(row), "%.2f"))
}

func (r *report) errors(list []string) {
	r.printf("## Errors\n\n")
	if len(list) == 0 {
		r.printf("None: every uncontended acquisition succeeded, and every contended failure was \"held by someone else\".\n")
		return
	}
	r.printf("The run failed (exit status 1):\n\n")
	for _, e := range list {
		r.printf("- %s\n", e)
	}
}
