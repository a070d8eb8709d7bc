//go:build unix

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// slotHolder starts "redisleader run --slots n" on the semaphore job with
// value as its --value, NAME given as the first argument.
func (s runSetup) slotHolder(t *testing.T, mode, value string, n int, flags ...string) *cliProc {
	t.Helper()
	args := append([]string{"run", "--verbose", "--redis", s.url, "--slots", strconv.Itoa(n), "--value", value}, flags...)
	args = append(args, "job", "--", s.script)
	return startCLI(t, "run --slots "+value, []string{"MARKER=" + s.marker, "CHILD_MODE=" + mode}, args...)
}

// maxOverlap is the most intervals open at once among the lines "start NS"
// and "end NS" of a timeline file; an end sorts before a start at the same
// instant.
func maxOverlap(t *testing.T, path string) (most, starts int) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	type event struct {
		at    int64
		delta int
	}
	var events []event
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(l)
		require.Len(t, f, 2, "timeline line %q", l)
		at, err := strconv.ParseInt(f[1], 10, 64)
		require.NoError(t, err, "timeline line %q", l)
		e := event{at: at, delta: -1}
		if f[0] == "start" {
			e.delta, starts = 1, starts+1
		}
		events = append(events, e)
	}
	sort.Slice(events, func(i, j int) bool {
		return events[i].at < events[j].at || events[i].at == events[j].at && events[i].delta < events[j].delta
	})
	open := 0
	for _, e := range events {
		open += e.delta
		most = max(most, open)
	}
	return most, starts
}

// Five "run --slots 2" on one semaphore, each running a command that
// writes its start and end times (ns) to a timeline: never more than two
// commands at once, every one runs once, and their fences are distinct.
func TestRunSlotsAtMostN(t *testing.T) {
	t.Parallel()
	srv := quietRedisServer(t)
	url := "redis://" + srv.Addr()
	timeline := filepath.Join(t.TempDir(), "timeline")
	script := `echo "start $(date +%s%N)" >> "$TIMELINE"; echo "$REDISLEADER_FENCE"; sleep 0.4; echo "end $(date +%s%N)" >> "$TIMELINE"`
	var procs []*cliProc
	for i := range 5 {
		procs = append(procs, startCLI(t, fmt.Sprintf("run --slots %d", i), []string{"TIMELINE=" + timeline},
			"run", "--redis", url, "--slots", "2", "--value", fmt.Sprint("w", i), "jobs", "--", "sh", "-c", script))
	}
	fences := map[string]bool{}
	for _, p := range procs {
		require.Equal(t, exitOK, p.wait(t), "stderr: %s", p.stderr.String())
		fences[strings.TrimSpace(p.stdout.String())] = true
	}
	most, starts := maxOverlap(t, timeline)
	t.Logf("max overlap %d of 5 commands on --slots 2", most)
	assert.Equal(t, 5, starts)
	assert.LessOrEqual(t, most, 2, "more commands at once than permits")
	assert.Equal(t, 2, most, "the two permits were never used at once")
	assert.Len(t, fences, 5)
	lines := statusLines(t, url, "jobs")
	assert.Equal(t, []string{"semaphore 0 of 2 permits held"}, lines, "every run released its permit")
}

// A holder killed by SIGKILL (no release): its command dies with it, and
// the waiting run takes its permit once its lease ends, within the TTL (1s)
// and a margin of 1s for a loaded machine, while the other holder runs on.
func TestRunSlotsSIGKILLedHolderSlotReused(t *testing.T) {
	t.Parallel()
	s := newRunSetup(t)
	holders := map[string]*cliProc{
		"A": s.slotHolder(t, "exec", "A", 2, "--ttl", "1s"),
		"B": s.slotHolder(t, "exec", "B", 2, "--ttl", "1s"),
	}
	first := waitMarker(t, s.marker, 2)
	c := s.slotHolder(t, "exec", "C", 2, "--ttl", "1s")
	c.stderr.waitContains(t, "waiting for one of 2 permits of job as C")
	assert.Len(t, readMarker(t, s.marker), 2, "a third command started on two permits")

	killed := time.Now()
	require.NoError(t, holders[first[0].value].cmd.Process.Kill())
	holders[first[0].value].wait(t)
	lines := waitMarker(t, s.marker, 3)
	took := time.Since(killed)
	t.Logf("slot reused %v after SIGKILL of its holder (TTL 1s, margin 1s)", took)
	assert.Equal(t, markerLine{value: "C", pid: lines[2].pid, event: "start", fence: lines[2].fence}, lines[2])
	assert.Greater(t, lines[2].fence, max(first[0].fence, first[1].fence))
	assert.GreaterOrEqual(t, took, 500*time.Millisecond, "reused before the lease could have ended")
	assert.Less(t, took, 2*time.Second, "not reused within TTL + margin")
	pollUntil(t, 5*time.Second, "the killed holder's command to die", func() bool { return processGone(first[0].pid) })
	assert.True(t, holders[first[1].value].running())

	stopAll(t, holders[first[1].value], c)
	assert.Len(t, readMarker(t, s.marker), 3, "a command ran twice")
}

// A forwarded SIGTERM stops the command, and run releases its permit at
// once: a waiter starts long before the TTL; --try on a full semaphore
// exits 75 without running anything; status shows the holders.
func TestRunSlotsSignalTryAndStatus(t *testing.T) {
	t.Parallel()
	s := newRunSetup(t)
	a := s.slotHolder(t, "trap", "A", 1, "--ttl", "5s")
	first := waitMarker(t, s.marker, 1)[0]
	b := s.slotHolder(t, "trap", "B", 1, "--ttl", "5s")
	b.stderr.waitContains(t, "waiting for the permit of job as B")
	c := s.slotHolder(t, "trap", "C", 1, "--ttl", "5s")
	c.stderr.waitContains(t, "waiting for the permit of job as C")
	c.signal(t, syscall.SIGINT)
	assert.Equal(t, 128+int(syscall.SIGINT), c.wait(t))
	assert.Contains(t, c.stderr.String(), "redisleader: received SIGINT while waiting for a permit of job; stopped waiting")

	code, out, errOut := runCLI(t, "run", "--redis", s.url, "--slots", "1", "--try", "--verbose", "job", "--", "true")
	assert.Equal(t, exitBusy, code)
	assert.Empty(t, out)
	assert.Contains(t, errOut, "redisleader: the permit of job was held; not running true (--try)")

	lines := statusLines(t, s.url, "job")
	require.Len(t, lines, 2, "%q", lines)
	assert.Equal(t, "semaphore 1 of 1 permits held", lines[0])
	assert.Regexp(t, `^permit A \(fence `+strconv.FormatInt(first.fence, 10)+`, ttl [0-9.]+m?s\)$`, lines[1])
	st := statusAsJSON(t, s.url, "--json", "job")
	assert.Nil(t, st.Leader)
	var sem struct {
		Semaphore struct {
			Limit   int `json:"limit"`
			Holders []struct {
				Value string `json:"value"`
				Fence int64  `json:"fence"`
				TTLms int64  `json:"ttl_ms"`
			} `json:"holders"`
		} `json:"semaphore"`
	}
	require.NoError(t, json.Unmarshal([]byte(statusLine(t, s.url, "--json", "job")), &sem))
	assert.Equal(t, 1, sem.Semaphore.Limit)
	require.Len(t, sem.Semaphore.Holders, 1)
	assert.Equal(t, "A", sem.Semaphore.Holders[0].Value)
	assert.Equal(t, first.fence, sem.Semaphore.Holders[0].Fence)
	assert.Positive(t, sem.Semaphore.Holders[0].TTLms)
	code, _, _ = runCLI(t, "status", "--check", "--redis", s.url, "job")
	assert.Equal(t, exitOK, code, "a permit held counts for --check")

	sent := time.Now()
	a.signal(t, syscall.SIGTERM)
	got := waitMarker(t, s.marker, 3)
	t.Logf("next holder started %v after SIGTERM (TTL 5s)", time.Since(sent))
	assert.Less(t, time.Since(sent), 2*time.Second, "the permit was not released at once")
	assert.Equal(t, markerLine{value: "A", pid: first.pid, event: "term"}, got[1])
	assert.Equal(t, "B", got[2].value)
	assert.Equal(t, 128+int(syscall.SIGTERM), a.wait(t))
	assert.Contains(t, a.stderr.String(), "exited with status 0; released the permit")
	assert.NotContains(t, a.stderr.String(), "leading")
	assert.NotContains(t, a.stderr.String(), "resign")

	b.signal(t, syscall.SIGTERM)
	assert.Equal(t, 128+int(syscall.SIGTERM), b.wait(t))
	assert.Len(t, readMarker(t, s.marker), 4, "a command ran twice")
	code, out, _ = runCLI(t, "status", "--check", "--redis", s.url, "job")
	assert.Equal(t, exitNoLeader, code)
	assert.Equal(t, "semaphore 0 of 1 permits held\n", out)
}

// A permit lost while the command runs (the set deleted): the command is
// stopped as on lost leadership (SIGTERM, SIGKILL after --grace) and run
// exits 3.
func TestRunSlotsPermitLost(t *testing.T) {
	t.Parallel()
	s, srv := newRunServer(t)
	p := startCLI(t, "run", []string{"MARKER=" + s.marker},
		"run", "--redis", s.url, "--slots", "3", "--value", "A", "--ttl", "3s", "--grace", "300ms", "job", "--",
		"sh", "-c", `trap "" TERM; echo "$REDISLEADER_VALUE $$ start" >> "$MARKER"; exec sleep 60`)
	child := waitMarker(t, s.marker, 1)[0]
	srv.Do(t, "DEL", "redisleader:{job}:sem")
	assert.Equal(t, exitLost, p.wait(t))
	errOut := p.stderr.String()
	assert.Contains(t, errOut, "redisleader: the permit of job lost (")
	assert.Contains(t, errOut, "still runs 300ms after SIGTERM; sending SIGKILL")
	assert.Contains(t, errOut, "; not holding the permit any more")
	assert.NotContains(t, errOut, "leading")
	assert.True(t, processGone(child.pid))
	assert.Len(t, readMarker(t, s.marker), 1)
}

// Bad --slots input is a usage error naming the rule, before any I/O.
func TestRunSlotsUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args    []string
		message string
	}{
		{[]string{"--slots", "0", "job"}, "invalid --slots 0: want the number of permits, at least 1"},
		{[]string{"--slots", "-2", "job"}, "invalid --slots -2: want the number of permits, at least 1"},
		{[]string{"--slots", "two", "job"}, `invalid value "two" for flag --slots: want an integer`},
		{[]string{"--slots", "1000001", "job"}, "invalid --slots 1000001: semaphore limit 1000001 must be between 1 and 1000000"},
		{[]string{"--slots", "2", "--priority", "1", "job"}, "--slots excludes --priority"},
		{[]string{"--slots", "2", "--min-term", "1s", "job"}, "--slots excludes --min-term"},
		{[]string{"--slots", "2", "a{b}"}, `invalid --name: name "a{b}" must not contain`},
	} {
		code, out, errOut := runCLI(t, append(append([]string{"run"}, tt.args...), "--", "true")...)
		assert.Equal(t, exitUsage, code, "%v: %s", tt.args, errOut)
		assert.Empty(t, out)
		assert.True(t, strings.HasPrefix(errOut, "redisleader run: "+tt.message), "%v: %s", tt.args, errOut)
		assert.True(t, strings.HasSuffix(errOut, " (see redisleader run --help)\n"), errOut)
		assert.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
	}
	code, _, errOut := runCLI(t, "run", "--slots", "2", "job", "true")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "--name is required, or NAME as the first argument with COMMAND after --")
	code, out, _ := runCLI(t, "run", "--help")
	assert.Equal(t, exitOK, code)
	assert.Regexp(t, regexp.MustCompile(`(?m)^  --slots N$`), out)
	assert.Contains(t, out, "run --slots N [flags] NAME -- COMMAND")
}
