//go:build unix

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redisleader/redisleader/internal/redisserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests below cover the CLI's part of issue 30: run --priority (a
// leader yields once to a better candidate), the transfer command, and
// status and watch showing who is preferred.

// newRunServer is newRunSetup that also returns the server.
func newRunServer(t *testing.T) (runSetup, *redisserver.Server) {
	t.Helper()
	srv := quietRedisServer(t)
	dir := t.TempDir()
	return runSetup{url: "redis://" + srv.Addr(), marker: filepath.Join(dir, "marker"), script: childScript(t, dir)}, srv
}

// statusLines runs "status" and returns its lines.
func statusLines(t *testing.T, url string, args ...string) []string {
	t.Helper()
	return strings.Split(statusLine(t, url, args...), "\n")
}

// holdsFor checks, for d, that the marker file keeps n lines and that the
// processes keep running: nothing changes while they run.
func holdsFor(t *testing.T, d time.Duration, marker string, n int, procs ...*cliProc) {
	t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		require.Len(t, readMarker(t, marker), n, "leadership changed")
		for _, p := range procs {
			require.True(t, p.running(), "%s exited", p.name)
		}
		<-time.After(pollEvery)
	}
}

// stopAll sends SIGTERM to each process and checks that it exits 143.
func stopAll(t *testing.T, procs ...*cliProc) {
	t.Helper()
	for _, p := range procs {
		p.signal(t, syscall.SIGTERM)
		assert.Equal(t, 128+int(syscall.SIGTERM), p.wait(t), "%s", p.name)
	}
}

// A rolling deploy: v1 leads with priority 1. A second v1 (priority 1)
// moves nothing. v2 (priority 2) joins: v1 stops its command (SIGTERM)
// before v2's starts, v1 campaigns again, and leadership stays with v2: one
// change.
func TestRunPriorityYieldsOnce(t *testing.T) {
	t.Parallel()
	s := newRunSetup(t)
	v1 := s.candidate(t, "trap", "v1", "--ttl", "1s", "--priority", "1")
	first := waitMarker(t, s.marker, 1)[0]
	require.Equal(t, markerLine{value: "v1", pid: first.pid, event: "start", fence: first.fence}, first)

	v1b := s.candidate(t, "trap", "v1b", "--ttl", "1s", "--priority", "1")
	pollUntil(t, cliTimeout, "v1b to be a candidate", func() bool {
		return strings.Contains(statusLine(t, s.url, "job"), "candidate v1b (priority 1)")
	})
	holdsFor(t, 1500*time.Millisecond, s.marker, 1, v1, v1b) // 4 renewals of v1 that find v1b: equal, no change

	v2 := s.candidate(t, "trap", "v2", "--ttl", "1s", "--priority", "2")
	lines := waitMarker(t, s.marker, 3)
	assert.Equal(t, markerLine{value: "v1", pid: first.pid, event: "term"}, lines[1], "v1's command must stop before v2's starts")
	assert.Equal(t, "v2", lines[2].value)
	assert.Equal(t, "start", lines[2].event)
	assert.Greater(t, lines[2].fence, first.fence)
	v1.stderr.waitContains(t, "exited with status 0; yielded job to a candidate with a higher priority")
	assert.Contains(t, v1.stderr.String(), "redisleader: yielding job to a candidate with a higher priority; stopping")
	pollUntil(t, cliTimeout, "v1 to campaign again", func() bool {
		return strings.Count(v1.stderr.String(), "campaigning for leadership of job as v1 with priority 1") == 2
	})

	holdsFor(t, 1500*time.Millisecond, s.marker, 3, v1, v1b, v2) // one change per deploy
	st := statusLines(t, s.url, "job")
	assert.Regexp(t, `^leader v2 \(fence `+strconv.FormatInt(lines[2].fence, 10)+`, ttl [0-9.]+m?s, priority 2, preferred\)$`, st[0])
	stopAll(t, v1, v1b, v2)
	lines = readMarker(t, s.marker)
	require.Len(t, lines, 4)
	assert.Equal(t, markerLine{value: "v2", pid: lines[2].pid, event: "term"}, lines[3])
	assertOneAtATime(t, lines)
}

// --min-term holds a leader with a priority for that long before it yields.
func TestRunPriorityMinTerm(t *testing.T) {
	t.Parallel()
	s := newRunSetup(t)
	v1 := s.candidate(t, "trap", "v1", "--ttl", "1s", "--priority", "1", "--min-term", "2s")
	waitMarker(t, s.marker, 1)
	elected := time.Now()
	v2 := s.candidate(t, "trap", "v2", "--ttl", "1s", "--priority", "2")
	lines := waitMarker(t, s.marker, 2)
	yielded := time.Since(elected)
	assert.Equal(t, "term", lines[1].event)
	// Seen from here, the term began a little before the command's first
	// line; without --min-term it would yield within a renewal (TTL/3).
	assert.GreaterOrEqual(t, yielded, 1800*time.Millisecond, "yielded before --min-term")
	t.Logf("v1 yielded %v after its command started (--min-term 2s)", yielded.Round(time.Millisecond))
	lines = waitMarker(t, s.marker, 3)
	assert.Equal(t, "v2", lines[2].value)
	stopAll(t, v1, v2)
}

// transfer NAME --to VALUE: the leader (a run without a priority, which
// campaigns with Campaign) stops its command, hands over, and VALUE leads;
// the old leader campaigns again. To the leader itself: nothing to do. To a
// value nobody campaigns with: the name is free again after a TTL and the
// status is 4.
func TestTransferCommand(t *testing.T) {
	t.Parallel()
	s, srv := newRunServer(t)
	a := s.candidate(t, "trap", "A", "--ttl", "1s")
	first := waitMarker(t, s.marker, 1)[0]
	b := s.candidate(t, "trap", "B", "--ttl", "1s")
	b.stderr.waitContains(t, "campaigning for leadership of job as B")

	code, out, errOut := runCLI(t, "transfer", "--redis", s.url, "job", "--to", "B", "--wait", "10s")
	require.Equal(t, exitOK, code, "stderr: %s", errOut)
	lines := waitMarker(t, s.marker, 3)
	require.Len(t, lines, 3)
	assert.Equal(t, markerLine{value: "A", pid: first.pid, event: "term"}, lines[1], "A's command must stop before B's starts")
	assert.Equal(t, "B", lines[2].value)
	assert.Greater(t, lines[2].fence, first.fence)
	assert.Equal(t, fmt.Sprintf("leader B (fence %d)\n", lines[2].fence), out)
	a.stderr.waitContains(t, "exited with status 0; handed job over to B")
	assert.Contains(t, a.stderr.String(), "redisleader: transfer of job to B requested; stopping")
	assert.Nil(t, srv.Do(t, "GET", "redisleader:{job}:transfer"), "the request was not taken")
	pollUntil(t, cliTimeout, "A to campaign again", func() bool {
		return strings.Count(a.stderr.String(), "campaigning for leadership of job as A") == 2
	})
	holdsFor(t, 700*time.Millisecond, s.marker, 3, a, b)

	code, out, _ = runCLI(t, "transfer", "--redis", s.url, "job", "--to", "B")
	assert.Equal(t, exitOK, code)
	assert.Equal(t, fmt.Sprintf("leader B (fence %d)\n", lines[2].fence), out)
	assert.Len(t, readMarker(t, s.marker), 3)

	start := time.Now()
	code, _, errOut = runCLI(t, "transfer", "--redis", s.url, "job", "--to", "nobody", "--wait", "10s")
	took := time.Since(start)
	assert.Equal(t, exitNoSuccessor, code, "stderr: %s", errOut)
	assert.Regexp(t, `^redisleader: nobody did not take leadership of job: [AB] leads \(fence \d+\)\n$`, errOut)
	lines = waitMarker(t, s.marker, 5)
	assert.Equal(t, markerLine{value: "B", pid: lines[2].pid, event: "term"}, lines[3])
	assert.Greater(t, lines[4].fence, lines[2].fence)
	// The reservation for "nobody" kept the name for one TTL (1s).
	assert.GreaterOrEqual(t, took, time.Second, "another leader before the reservation expired")
	b.stderr.waitContains(t, `; hand-over of job to nobody: transfer "job" to "nobody": the successor did not take leadership`)
	stopAll(t, a, b)
	assertOneAtATime(t, readMarker(t, s.marker))
}

// transfer when nobody leads: status 3 and nothing written. When the leader
// takes no requests (a job: run --try): status 5 after --wait, and the
// request is withdrawn.
func TestTransferNoLeaderAndNotTaken(t *testing.T) {
	t.Parallel()
	srv := quietRedisServer(t)
	url := "redis://" + srv.Addr()
	code, out, errOut := runCLI(t, "transfer", "--redis", url, "job", "--to", "B")
	assert.Equal(t, exitNoLeader, code)
	assert.Empty(t, out)
	assert.Equal(t, "redisleader: nobody leads job: there is no leadership to hand over\n", errOut)
	assert.EqualValues(t, 0, srv.Do(t, "DBSIZE"), "transfer wrote something")

	job := startCLI(t, "job", nil, "run", "--redis", url, "--name", "job", "--try", "--hold", "30s", "--verbose", "--", "true")
	job.stderr.waitContains(t, "holding leadership of job for 30s")
	start := time.Now()
	code, _, errOut = runCLI(t, "transfer", "--redis", url, "job", "--to", "B", "--wait", "1s")
	assert.Equal(t, exitNotTaken, code, "stderr: %s", errOut)
	assert.GreaterOrEqual(t, time.Since(start), time.Second)
	assert.Contains(t, errOut, "the leader of job did not take the request within --wait 1s")
	assert.Nil(t, srv.Do(t, "GET", "redisleader:{job}:transfer"), "the request was not withdrawn")
	assert.True(t, job.running())
	job.signal(t, syscall.SIGTERM)
	assert.Equal(t, exitOK, job.wait(t), "a signal during --hold keeps the command's status")
}

// A transfer to a lower-priority candidate: the leader (a run with a
// priority, which campaigns with Election.Run) hands over, then campaigns
// without its priority until it leads again, so the transfer holds; when
// the successor stops, the former leader leads again.
func TestTransferWithPriorities(t *testing.T) {
	t.Parallel()
	s := newRunSetup(t)
	v2 := s.candidate(t, "trap", "v2", "--ttl", "1s", "--priority", "2")
	first := waitMarker(t, s.marker, 1)[0]
	v1 := s.candidate(t, "trap", "v1", "--ttl", "1s", "--priority", "1")
	pollUntil(t, cliTimeout, "v1 to be a candidate", func() bool {
		return strings.Contains(statusLine(t, s.url, "job"), "candidate v1 (priority 1)")
	})

	code, out, errOut := runCLI(t, "transfer", "--redis", s.url, "job", "--to", "v1", "--wait", "10s")
	require.Equal(t, exitOK, code, "stderr: %s", errOut)
	lines := waitMarker(t, s.marker, 3)
	require.Len(t, lines, 3)
	assert.Equal(t, markerLine{value: "v2", pid: first.pid, event: "term"}, lines[1])
	assert.Equal(t, "v1", lines[2].value)
	assert.Equal(t, fmt.Sprintf("leader v1 (fence %d)\n", lines[2].fence), out)
	v2.stderr.waitContains(t, "exited with status 0; handed job over to v1")
	v2.stderr.waitContains(t, "campaigning for leadership of job as v2 without its priority until it leads again")
	holdsFor(t, 1500*time.Millisecond, s.marker, 3, v1, v2) // v1's renewals find nobody above it
	assert.Equal(t, []string{fmt.Sprintf("leader v1 (fence %d, priority 1, preferred)", lines[2].fence), "candidate v1 (priority 1, leader, preferred)"},
		strings.Split(regexp.MustCompile(`, ttl [0-9.]+m?s`).ReplaceAllString(statusLine(t, s.url, "job"), ""), "\n"))

	v1.signal(t, syscall.SIGTERM)
	assert.Equal(t, 128+int(syscall.SIGTERM), v1.wait(t))
	lines = waitMarker(t, s.marker, 5)
	assert.Equal(t, "v2", lines[4].value)
	stopAll(t, v2)
	assertOneAtATime(t, readMarker(t, s.marker))
}

var watchLineRE = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (.*)$`)

// status and watch show the candidates with a priority and who is
// preferred. A leader with --min-term never keeps leading while a better
// candidate waits; when it stops, its release hands the name to that
// candidate, not to a candidate without a priority.
func TestStatusAndWatchShowPreferred(t *testing.T) {
	t.Parallel()
	s := newRunSetup(t)
	w := startCLI(t, "watch", nil, "watch", "--redis", s.url, "job")
	wj := startCLI(t, "watch --json", nil, "watch", "--json", "--redis", s.url, "job")
	w.stdout.waitLines(t, 1, "watch's first line")
	wj.stdout.waitLines(t, 1, "watch --json's first line")
	a := s.candidate(t, "trap", "A", "--ttl", "1s", "--priority", "1", "--min-term", "never")
	fenceA := waitMarker(t, s.marker, 1)[0].fence
	w.stdout.waitLines(t, 2, "watch to see A lead") // before B is a candidate
	wj.stdout.waitLines(t, 2, "watch --json to see A lead")
	b := s.candidate(t, "trap", "B", "--ttl", "1s", "--priority", "2")
	c := s.candidate(t, "trap", "C", "--ttl", "1s")
	c.stderr.waitContains(t, "campaigning for leadership of job as C")
	pollUntil(t, cliTimeout, "B to be a candidate", func() bool {
		return strings.Contains(statusLine(t, s.url, "job"), "candidate B")
	})
	holdsFor(t, time.Second, s.marker, 1, a, b, c) // --min-term never

	st := statusLines(t, s.url, "job")
	require.Len(t, st, 3, "%q", st)
	assert.Regexp(t, fmt.Sprintf(`^leader A \(fence %d, ttl [0-9.]+m?s, priority 1\); preferred B \(priority 2\)$`, fenceA), st[0])
	assert.Equal(t, []string{"candidate B (priority 2, preferred)", "candidate A (priority 1, leader)"}, st[1:])
	var js struct {
		Leader     *struct{ Value string } `json:"leader"`
		Candidates []candidateJSON         `json:"candidates"`
	}
	require.NoError(t, json.Unmarshal([]byte(statusLine(t, s.url, "--json", "job")), &js))
	assert.Equal(t, []candidateJSON{{Value: "B", Priority: 2, Preferred: true}, {Value: "A", Priority: 1, Leader: true}}, js.Candidates)

	a.signal(t, syscall.SIGTERM)
	assert.Equal(t, 128+int(syscall.SIGTERM), a.wait(t))
	lines := waitMarker(t, s.marker, 3)
	assert.Equal(t, "B", lines[2].value, "A's release hands the name to the best candidate")
	got := w.stdout.waitLines(t, 4, "watch to see B lead")
	// While the name is reserved for B, B is out of the candidates (it
	// enlists again as it takes the name).
	want := []string{"no leader", fmt.Sprintf("leader A (fence %d, priority 1, preferred)", fenceA),
		"no leader", fmt.Sprintf("leader B (fence %d, priority 2, preferred)", lines[2].fence)}
	for i, l := range got {
		m := watchLineRE.FindStringSubmatch(l)
		require.NotNil(t, m, "watch line %q", l)
		if i == 2 && m[1] == "no leader; preferred B (priority 2)" {
			continue // the candidates were read after B took the name: two reads
		}
		assert.Equal(t, want[i], m[1])
	}
	jl := wj.stdout.waitLines(t, 4, "watch --json to see B lead")
	var ev struct {
		Leader     *struct{ Value string } `json:"leader"`
		Candidates []candidateJSON         `json:"candidates"`
	}
	require.NoError(t, json.Unmarshal([]byte(jl[3]), &ev))
	require.NotNil(t, ev.Leader)
	assert.Equal(t, "B", ev.Leader.Value)
	assert.Equal(t, []candidateJSON{{Value: "B", Priority: 2, Leader: true, Preferred: true}}, ev.Candidates)
	stopAll(t, b, c)
	w.signal(t, syscall.SIGINT)
	wj.signal(t, syscall.SIGINT)
	assert.Equal(t, exitOK, w.wait(t))
	assert.Equal(t, exitOK, wj.wait(t))
	assertOneAtATime(t, readMarker(t, s.marker))
}

// Bad --priority, --min-term and transfer input: one line naming the rule,
// exit status 2, and nothing written to Redis (which is up).
func TestPriorityAndTransferBadInput(t *testing.T) {
	t.Parallel()
	srv := quietRedisServer(t)
	url := "redis://" + srv.Addr()
	run := []string{"run", "--redis", url, "--name", "job"}
	tests := []struct {
		name    string
		env     []string
		args    []string
		message string
	}{
		{"priority not a number", nil, append(run, "--priority", "high", "--", "true"), `redisleader run: invalid value "high" for flag --priority: want an integer`},
		{"priority out of range", nil, append(run, "--priority", "9007199254740992", "--", "true"), "redisleader run: invalid --priority: priority 9007199254740992 is out of range: it must be within ±(2^53-1)"},
		{"negative min-term", nil, append(run, "--priority", "1", "--min-term", "-1ns", "--", "true"), `invalid value "-1ns" for flag --min-term: must not be negative (never: never yield)`},
		{"min-term not a duration", nil, append(run, "--priority", "1", "--min-term", "soon", "--", "true"), `invalid value "soon" for flag --min-term: want a duration such as 30s, or never`},
		{"min-term without priority", nil, append(run, "--min-term", "5s", "--", "true"), "redisleader run: --min-term needs --priority (or $REDISLEADER_PRIORITY)"},
		{"priority with try", nil, append(run, "--priority", "1", "--try", "--", "true"), "redisleader run: --priority excludes --try and --wait"},
		{"env priority", []string{"REDISLEADER_PRIORITY=high"}, append(run, "--", "true"), `redisleader run: invalid $REDISLEADER_PRIORITY "high": want an integer`},
		{"env priority with wait", []string{"REDISLEADER_PRIORITY=2"}, append(run, "--wait", "1s", "--", "true"), "redisleader run: $REDISLEADER_PRIORITY excludes --try and --wait"},
		{"env min-term", []string{"REDISLEADER_PRIORITY=2", "REDISLEADER_MIN_TERM=-5s"}, append(run, "--", "true"), `redisleader run: invalid $REDISLEADER_MIN_TERM "-5s": must not be negative`},
		{"env min-term without priority", []string{"REDISLEADER_MIN_TERM=5s"}, append(run, "--", "true"), "redisleader run: $REDISLEADER_MIN_TERM needs --priority"},
		{"value too long", nil, append(run, "--value", strings.Repeat("v", 70000), "--priority", "1", "--", "true"), "redisleader run: invalid --value: value is 70000 bytes long; it must be at most 65536"},
		{"transfer without --to", nil, []string{"transfer", "--redis", url, "job"}, "redisleader transfer: --to is required"},
		{"transfer without name", nil, []string{"transfer", "--redis", url, "--to", "B"}, "redisleader transfer: missing NAME"},
		{"transfer bad wait", nil, []string{"transfer", "--redis", url, "job", "--to", "B", "--wait", "0s"}, "redisleader transfer: invalid --wait 0s: must be positive"},
		{"transfer long value", nil, []string{"transfer", "--redis", url, "job", "--to", strings.Repeat("v", 70000)}, "redisleader transfer: invalid --to: value is 70000 bytes long; it must be at most 65536"},
		{"transfer bad name", nil, []string{"transfer", "--redis", url, "a{b}", "--to", "B"}, "redisleader transfer: invalid NAME"},
	}
	for _, tt := range tests {
		p := startCLI(t, tt.name, tt.env, tt.args...)
		assert.Equal(t, exitUsage, p.wait(t), "%s: stderr: %s", tt.name, p.stderr.String())
		first, rest, _ := strings.Cut(p.stderr.String(), "\n")
		assert.Contains(t, first, tt.message, tt.name)
		assert.Empty(t, rest, "%s: more than one line", tt.name)
		assert.Empty(t, p.stdout.String(), tt.name)
	}
	assert.EqualValues(t, 0, srv.Do(t, "DBSIZE"), "bad input wrote to Redis")
}

// ACL rules of docs/operations.md (section ACL), as the library's acl_test.go has
// them, with what the settings check and priorities and transfers add.
const (
	cliACLRule  = "on >secret resetkeys resetchannels ~redisleader:* &redisleader:* -@all +evalsha +eval +get +set +pexpire +pttl +time +del +publish +subscribe +unsubscribe +ping +multi +exec +config|get +info"
	aclPriority = "+pexpireat +zadd +zrange +zrangebyscore +zrem +zscore"
)

// aclUser makes an ACL user with rules (and CLIENT SETINFO where the
// server has it, which go-redis sends), and returns its URL.
func aclUser(t *testing.T, srv *redisserver.Server, name string, rules ...string) string {
	t.Helper()
	args := []any{"ACL", "SETUSER", name}
	if v := srv.Version(t); v.Name == "valkey" || v.AtLeast("redis", 7, 2) {
		rules = append(rules, "+client|setinfo")
	}
	for _, r := range rules {
		for _, f := range strings.Fields(r) {
			args = append(args, f)
		}
	}
	srv.Do(t, args...)
	return "redis://" + name + ":secret@" + srv.Addr()
}

// A database other than 0 needs SELECT (go-redis sends it on every new
// connection), which the least-privilege rule has not: the CLI says that
// Redis rejected the user and where the rules are, not that it cannot
// reach Redis; with +select (docs/operations.md) it works.
func TestACLDatabaseNeedsSelect(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../docs/operations.md")
	require.NoError(t, err)
	assert.True(t, strings.Contains(string(readme), "`+select`"), "docs/operations.md names +select")
	srv := quietRedisServer(t)
	plain := aclUser(t, srv, "plain", cliACLRule) + "/1"
	code, _, errOut := runCLI(t, "status", "--redis", plain, "job")
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "rejected by Redis at redis://plain:xxxxx@"+srv.Addr()+"/1: NOPERM")
	assert.Contains(t, errOut, "select")
	assert.Contains(t, errOut, "see docs/operations.md, ACL")
	assert.NotContains(t, errOut, "secret")
	assert.Equal(t, "no leader", statusLine(t, aclUser(t, srv, "db", cliACLRule, "+select")+"/1", "job"))
}

// The least-privilege user of docs/operations.md, with aclPriority, runs
// candidates with priorities, a transfer, and status, and Redis logs no
// denial. Without aclPriority, status still works: it shows no candidates.
func TestACLPriorityAndTransfer(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../docs/operations.md")
	require.NoError(t, err)
	assert.Contains(t, string(readme), "`"+aclPriority+"` for `WithPriority` and `Transfer`")
	s, srv := newRunServer(t)
	s.url = aclUser(t, srv, "prio", cliACLRule, aclPriority)
	plain := aclUser(t, srv, "plain", cliACLRule)
	srv.Do(t, "ACL", "LOG", "RESET")

	v1 := s.candidate(t, "trap", "v1", "--ttl", "1s", "--priority", "1")
	waitMarker(t, s.marker, 1)
	v2 := s.candidate(t, "trap", "v2", "--ttl", "1s", "--priority", "2")
	w := waitMarker(t, s.marker, 3)
	require.Equal(t, "v2", w[2].value, "v1 yields to v2")
	v0 := s.candidate(t, "trap", "v0", "--ttl", "1s", "--priority", "0", "--min-term", "1m")
	pollUntil(t, cliTimeout, "v0 to be a candidate", func() bool {
		return strings.Contains(statusLine(t, s.url, "job"), "candidate v0 (priority 0)")
	})
	code, _, errOut := runCLI(t, "transfer", "--redis", s.url, "job", "--to", "v0", "--wait", "10s")
	require.Equal(t, exitOK, code, "stderr: %s", errOut)
	pollUntil(t, cliTimeout, "status to show v1 preferred", func() bool { // v2 stepped back
		return regexp.MustCompile(`^leader v0 .*; preferred v1 \(priority 1\)$`).MatchString(statusLines(t, s.url, "job")[0])
	})
	assert.Empty(t, srv.Do(t, "ACL", "LOG"), "denials with the documented rule")

	var js struct {
		Leader     *struct{ Value string } `json:"leader"`
		Candidates []candidateJSON         `json:"candidates"`
	}
	require.NoError(t, json.Unmarshal([]byte(statusLine(t, plain, "--json", "job")), &js))
	require.NotNil(t, js.Leader)
	assert.Equal(t, "v0", js.Leader.Value)
	assert.Nil(t, js.Candidates, "a user that may not read the candidates")
	assert.Equal(t, []string{"leader", "v0"}, strings.Fields(statusLine(t, plain, "job"))[:2])
	stopAll(t, v0, v1, v2)
	for _, p := range []*cliProc{v0, v1, v2} {
		assert.NotContains(t, p.stderr.String(), "permission", p.name)
	}
}

// stubbornChild is a command that ignores SIGTERM and appends
// "VALUE PID start FENCE" to $MARKER: it is still stopping (--grace) when
// the test acts.
const stubbornChild = `trap "" TERM; echo "$REDISLEADER_VALUE $$ start $REDISLEADER_FENCE" >> "$MARKER"; while :; do sleep 0.05; done`

// The leader is SIGKILLed mid-transfer, while its command ignores the
// SIGTERM: the command dies with it (the supervisor), the successor leads
// only once the lease has expired, and transfer reports it (the only other
// candidate is the successor).
func TestTransferLeaderKilledMidTransfer(t *testing.T) {
	t.Parallel()
	s := newRunSetup(t)
	a := startCLI(t, "run A", []string{"MARKER=" + s.marker}, "run", "--verbose", "--redis", s.url, "--name", "job",
		"--value", "A", "--ttl", "1s", "--grace", "30s", "--", "sh", "-c", stubbornChild)
	first := waitMarker(t, s.marker, 1)[0]
	b := s.candidate(t, "trap", "B", "--ttl", "1s")
	b.stderr.waitContains(t, "campaigning for leadership of job as B")
	tr := startCLI(t, "transfer", nil, "transfer", "--redis", s.url, "job", "--to", "B", "--wait", "10s")
	a.stderr.waitContains(t, "transfer of job to B requested; stopping")
	killed := time.Now()
	require.NoError(t, a.cmd.Process.Kill())
	a.wait(t)
	lines := waitMarker(t, s.marker, 2)
	took := time.Since(killed)
	assert.True(t, processGone(first.pid), "A's command outlived A into B's term")
	assert.Equal(t, "B", lines[1].value)
	assert.Greater(t, lines[1].fence, first.fence)
	// A renewed at most TTL/3 before it was killed; nobody resigned.
	assert.GreaterOrEqual(t, took, 500*time.Millisecond, "B led before A's lease could have expired")
	assert.Less(t, took, 5*time.Second)
	assert.Equal(t, exitOK, tr.wait(t), "transfer: %s", tr.stderr.String())
	t.Logf("B led %v after the SIGKILL of A mid-transfer (TTL 1s)", took.Round(time.Millisecond))
	stopAll(t, b)
}

// slowChild appends "VALUE PID start FENCE" to $MARKER, and on SIGTERM
// appends "VALUE PID term" and takes 300ms more to exit.
const slowChild = `trap 'echo "$REDISLEADER_VALUE $$ term" >> "$MARKER"; sleep 0.3; exit 0' TERM; echo "$REDISLEADER_VALUE $$ start $REDISLEADER_FENCE" >> "$MARKER"; while :; do sleep 0.05; done`

// assertOneAtATime checks the marker file: every command started after the
// previous one stopped, with a higher fence. A command stopped between
// setting its trap and writing its start line leaves only its term line:
// nothing else may run then either.
func assertOneAtATime(t *testing.T, lines []markerLine) {
	t.Helper()
	running, fence := 0, int64(0)
	started := map[int]bool{}
	for i, l := range lines {
		switch l.event {
		case "start":
			assert.Equal(t, 0, running, "line %d: %v started while another command ran: %v", i, l, lines)
			assert.Greater(t, l.fence, fence, "line %d: fence", i)
			running, fence = l.pid, l.fence
			started[l.pid] = true
		case "term":
			if started[l.pid] {
				assert.Equal(t, running, l.pid, "line %d: %v", i, l)
			} else {
				assert.Equal(t, 0, running, "line %d: %v (stopped before its start line) while another command ran: %v", i, l, lines)
			}
			running = 0
		}
	}
}

// Redis is paused (SIGSTOP) for 1.5 TTLs mid-transfer, while the leader's
// command stops (or, if the hand-over came first, right after it): no two
// commands run at once, a leader's lease that the pause outlived ends at
// its local deadline, someone leads within a TTL and a margin after Redis
// resumes, and transfer sees B lead (A does not campaign after a loss).
func TestTransferRedisPausedMidTransfer(t *testing.T) {
	t.Parallel()
	s, srv := newRunServer(t)
	a := startCLI(t, "run A", []string{"MARKER=" + s.marker}, "run", "--verbose", "--redis", s.url, "--name", "job",
		"--value", "A", "--ttl", "1s", "--", "sh", "-c", slowChild)
	waitMarker(t, s.marker, 1)
	b := s.candidate(t, "trap", "B", "--ttl", "1s", "--again")
	b.stderr.waitContains(t, "campaigning for leadership of job as B")
	tr := startCLI(t, "transfer", nil, "transfer", "--redis", s.url, "job", "--to", "B", "--wait", "15s")
	a.stderr.waitContains(t, "transfer of job to B requested; stopping")
	srv.Pause(t)
	<-time.After(1500 * time.Millisecond) // the length of the pause; the test waits for the processes below
	before := len(readMarker(t, s.marker))
	srv.Resume(t)
	resumed := time.Now()
	waitMarker(t, s.marker, before+1)
	took := time.Since(resumed)
	assert.Less(t, took, 3*time.Second, "nobody led %v after Redis resumed (TTL 1s)", took)
	assert.Equal(t, exitOK, tr.wait(t), "transfer: %s", tr.stderr.String())
	t.Logf("a leader %v after Redis resumed; A said:\n%s", took.Round(time.Millisecond), a.stderr.String())
	stopAll(t, b)
	a.signal(t, syscall.SIGTERM) // if it handed over before the pause, it campaigns still
	a.wait(t)
	assertOneAtATime(t, readMarker(t, s.marker))
}

// On Redis Cluster the request key and channel share the election's slot:
// run --priority yields, and transfer hands over, through any seed.
func TestTransferAndPriorityOnCluster(t *testing.T) {
	t.Parallel()
	c := redisserver.StartCluster(t, 3)
	addrs := c.Addrs()
	seeds := []string{"--cluster", "--redis", "redis://" + addrs[0], "--redis", "redis://" + addrs[1]}
	dir := t.TempDir()
	s := runSetup{marker: filepath.Join(dir, "marker"), script: childScript(t, dir)}
	cand := func(value string, flags ...string) *cliProc {
		args := append([]string{"run", "--verbose", "--name", "job", "--value", value, "--ttl", "1s"}, seeds...)
		args = append(append(args, flags...), "--", s.script)
		return startCLI(t, "run "+value, []string{"MARKER=" + s.marker, "CHILD_MODE=trap"}, args...)
	}
	v1 := cand("v1", "--priority", "1")
	waitMarker(t, s.marker, 1)
	v2 := cand("v2", "--priority", "2")
	lines := waitMarker(t, s.marker, 3)
	assert.Equal(t, "v2", lines[2].value, "v1 yields to v2")
	v0 := cand("v0", "--priority", "0", "--min-term", "1m")
	v0.stderr.waitContains(t, "campaigning for leadership of job as v0")
	code, out, errOut := runCLI(t, "transfer", "--cluster", "--redis", "redis://"+addrs[2], "job", "--to", "v0", "--wait", "10s")
	require.Equal(t, exitOK, code, "stderr: %s", errOut)
	lines = waitMarker(t, s.marker, 5)
	assert.Equal(t, fmt.Sprintf("leader v0 (fence %d)\n", lines[4].fence), out)
	stopAll(t, v0, v1, v2)
	assertOneAtATime(t, readMarker(t, s.marker))
}
