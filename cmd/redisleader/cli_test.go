//go:build unix

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redisleader/redisleader/internal/redisserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests below run the redisleader binary as real processes against a
// private redis-server, send them real signals, and watch what the commands
// they supervise do through a marker file.

const (
	cliTimeout = 15 * time.Second // bound on every wait for a process or a line
	pollEvery  = 10 * time.Millisecond
)

var (
	cliBinOnce sync.Once
	cliBinDir  string
	cliBinPath string
	cliBinErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if cliBinDir != "" {
		_ = os.RemoveAll(cliBinDir)
	}
	os.Exit(code)
}

// cliBinary builds the redisleader binary once per test run.
func cliBinary(t *testing.T) string {
	t.Helper()
	cliBinOnce.Do(func() {
		cliBinDir, cliBinErr = os.MkdirTemp("", "redisleader-cli-test-")
		if cliBinErr != nil {
			return
		}
		cliBinPath = filepath.Join(cliBinDir, "redisleader")
		out, err := exec.Command("go", "build", "-o", cliBinPath, ".").CombinedOutput()
		if err != nil {
			cliBinErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if cliBinErr != nil {
		t.Fatal(cliBinErr)
	}
	return cliBinPath
}

// syncBuffer collects a process's output; changed is signalled on every
// write, so one waiter at a time can wait for a line without polling.
type syncBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{changed: make(chan struct{}, 1)} }

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	n, err := b.buf.Write(p)
	b.mu.Unlock()
	select {
	case b.changed <- struct{}{}:
	default:
	}
	return n, err
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// lines returns the complete lines written so far.
func (b *syncBuffer) lines() []string {
	s := b.String()
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return strings.Split(s[:i], "\n")
	}
	return nil
}

// waitLines waits until at least n complete lines have been written and
// returns them.
func (b *syncBuffer) waitLines(t *testing.T, n int, what string) []string {
	t.Helper()
	deadline := time.NewTimer(cliTimeout)
	defer deadline.Stop()
	for {
		if l := b.lines(); len(l) >= n {
			return l
		}
		select {
		case <-b.changed:
		case <-deadline.C:
			t.Fatalf("timed out after %v waiting for %s; output so far:\n%s", cliTimeout, what, b.String())
		}
	}
}

// waitContains waits until the output contains s.
func (b *syncBuffer) waitContains(t *testing.T, s string) {
	t.Helper()
	deadline := time.NewTimer(cliTimeout)
	defer deadline.Stop()
	for !strings.Contains(b.String(), s) {
		select {
		case <-b.changed:
		case <-deadline.C:
			t.Fatalf("timed out after %v waiting for %q; output so far:\n%s", cliTimeout, s, b.String())
		}
	}
}

// cliProc is one redisleader process.
type cliProc struct {
	name   string
	cmd    *exec.Cmd
	stdout *syncBuffer
	stderr *syncBuffer
	done   chan struct{} // closed when the process has exited
}

// startCLI starts redisleader with args and extra environment variables. The
// process is killed when the test ends, if it still runs.
func startCLI(t *testing.T, name string, env []string, args ...string) *cliProc {
	t.Helper()
	return startProc(t, name, exec.Command(cliBinary(t), args...), env)
}

// startShellCLI starts "sh -c script sh redisleader args...": script starts
// redisleader as "$@" the way a shell script would (nohup, "&").
func startShellCLI(t *testing.T, name, script string, env []string, args ...string) *cliProc {
	t.Helper()
	return startProc(t, name, exec.Command("sh", append([]string{"-c", script, "sh", cliBinary(t)}, args...)...), env)
}

// startProc starts cmd with extra environment variables, as startCLI does.
func startProc(t *testing.T, name string, cmd *exec.Cmd, env []string) *cliProc {
	t.Helper()
	p := &cliProc{
		name:   name,
		cmd:    cmd,
		stdout: newSyncBuffer(),
		stderr: newSyncBuffer(),
		done:   make(chan struct{}),
	}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	p.cmd.SysProcAttr = childProcAttr(false) // no stray process if the test binary dies
	p.cmd.WaitDelay = 5 * time.Second
	require.NoError(t, p.cmd.Start())
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s (%v) stderr:\n%s", p.name, p.cmd.Args[1:], p.stderr.String())
		}
	})
	return p
}

func (p *cliProc) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(sig), "signal %s", p.name)
}

// wait waits for the process to exit and returns its exit status (-1 when a
// signal killed it).
func (p *cliProc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(cliTimeout):
		t.Fatalf("%s did not exit within %v; stderr:\n%s", p.name, cliTimeout, p.stderr.String())
		return 0
	}
}

func (p *cliProc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// runCLI runs redisleader to completion and returns its exit status and output.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	p := startCLI(t, strings.Join(args, " "), nil, args...)
	code = p.wait(t)
	return code, p.stdout.String(), p.stderr.String()
}

// childScript writes the command the run tests supervise. It appends
// "VALUE PID start FENCE" to $MARKER. With CHILD_MODE=exec it then becomes
// "sleep 60" (same PID, default signal handling; no trap, since a trapped
// signal that arrives just before exec would be lost). Otherwise it waits
// for SIGTERM and appends "VALUE PID term" when it gets it; it waits in short
// foreground sleeps (the trap runs when one ends), because a background
// "sleep 60 & wait" can miss a kill sent while it forks and outlive the test.
func childScript(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "child.sh")
	script := `#!/bin/sh
if [ "$CHILD_MODE" = exec ]; then
	echo "$REDISLEADER_VALUE $$ start $REDISLEADER_FENCE" >> "$MARKER"
	exec sleep 60
fi
trap 'echo "$REDISLEADER_VALUE $$ term" >> "$MARKER"; exit 0' TERM
echo "$REDISLEADER_VALUE $$ start $REDISLEADER_FENCE" >> "$MARKER"
while :; do sleep 0.05; done
`
	require.NoError(t, os.WriteFile(path, []byte(script), 0o755))
	return path
}

// markerLine is one line of the marker file.
type markerLine struct {
	value, event string
	pid          int
	fence        int64
}

func readMarker(t *testing.T, path string) []markerLine {
	t.Helper()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(t, err)
	var out []markerLine
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) < 3 {
			continue // empty, or a line being written
		}
		m := markerLine{value: f[0], event: f[2]}
		m.pid, err = strconv.Atoi(f[1])
		require.NoError(t, err, "marker line %q", l)
		if len(f) > 3 {
			m.fence, err = strconv.ParseInt(f[3], 10, 64)
			require.NoError(t, err, "marker line %q", l)
		}
		out = append(out, m)
	}
	return out
}

// pollUntil polls cond, which looks at other processes, until it holds.
func pollUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		<-time.After(pollEvery)
	}
}

// waitMarker waits until the marker file has at least n lines.
func waitMarker(t *testing.T, path string, n int) []markerLine {
	t.Helper()
	var lines []markerLine
	pollUntil(t, cliTimeout, fmt.Sprintf("%d lines in the marker file", n), func() bool {
		lines = readMarker(t, path)
		return len(lines) >= n
	})
	return lines
}

// processGone reports whether pid has exited (a zombie waiting for its new
// parent to reap it counts as exited).
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	if runtime.GOOS != "linux" {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// "pid (comm) S ...": the state follows the last ')'.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && (s[i+2] == 'Z' || s[i+2] == 'X')
}

type runSetup struct {
	url    string
	marker string
	script string
}

// quietRedisServer starts a redis-server with AOF on, so that run has no
// warning to print about lost persistence.
func quietRedisServer(t *testing.T) *redisserver.Server {
	t.Helper()
	return redisserver.Start(t, redisserver.Options{Persistence: true, Args: []string{"--appendonly", "yes", "--save", ""}})
}

func newRunSetup(t *testing.T) runSetup {
	srv := quietRedisServer(t)
	dir := t.TempDir()
	return runSetup{url: "redis://" + srv.Addr(), marker: filepath.Join(dir, "marker"), script: childScript(t, dir)}
}

// candidate starts "redisleader run" with value as its --value.
func (s runSetup) candidate(t *testing.T, mode, value string, flags ...string) *cliProc {
	t.Helper()
	args := append([]string{"run", "--verbose", "--redis", s.url, "--name", "job", "--value", value}, flags...)
	args = append(args, "--", s.script)
	return startCLI(t, "run "+value, []string{"MARKER=" + s.marker, "CHILD_MODE=" + mode}, args...)
}

// statusLine runs "status" and returns its one line of output.
func statusLine(t *testing.T, url string, args ...string) string {
	t.Helper()
	code, out, errOut := runCLI(t, append([]string{"status", "--redis", url}, args...)...)
	require.Equal(t, exitOK, code, "status stderr: %s", errOut)
	return strings.TrimSuffix(out, "\n")
}

type statusJSON struct {
	Name   string `json:"name"`
	Leader *struct {
		Value string `json:"value"`
		Fence int64  `json:"fence"`
		TTLms int64  `json:"ttl_ms"`
	} `json:"leader"`
}

func statusAsJSON(t *testing.T, url string, args ...string) statusJSON {
	t.Helper()
	var st statusJSON
	line := statusLine(t, url, args...)
	require.NoError(t, json.Unmarshal([]byte(line), &st), "status --json printed %q", line)
	return st
}

// Two candidates, one command: exactly one runs. When the leader is killed
// with SIGKILL (no chance to resign), its command dies with it (Pdeathsig)
// and the other candidate starts its command once the lease has expired.
func TestRunOneLeaderThenTakeoverAfterSIGKILL(t *testing.T) {
	t.Parallel()
	s := newRunSetup(t)
	cands := map[string]*cliProc{
		"A": s.candidate(t, "exec", "A", "--ttl", "1s"),
		"B": s.candidate(t, "exec", "B", "--ttl", "1s"),
	}
	first := waitMarker(t, s.marker, 1)[0]
	require.Equal(t, "start", first.event)
	leader := cands[first.value]
	other := cands[map[string]string{"A": "B", "B": "A"}[first.value]]
	other.stderr.waitContains(t, "campaigning for leadership of job")

	// For 1.5 TTLs the other candidate keeps trying (it re-reads when the
	// lease could have expired) and must not start its command.
	window := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(window) {
		require.Len(t, readMarker(t, s.marker), 1, "a second command started while the first ran")
		require.True(t, leader.running() && other.running(), "a candidate exited")
		<-time.After(pollEvery)
	}
	assert.Regexp(t, `^leader `+first.value+` \(fence `+strconv.FormatInt(first.fence, 10)+`, ttl [0-9.]+m?s\)$`, statusLine(t, s.url, "job"))

	killed := time.Now()
	require.NoError(t, leader.cmd.Process.Kill())
	leader.wait(t)
	lines := waitMarker(t, s.marker, 2)
	took := time.Since(killed)
	second := lines[1]
	assert.Equal(t, "start", second.event)
	assert.NotEqual(t, first.value, second.value)
	assert.Greater(t, second.fence, first.fence)
	t.Logf("takeover %v after SIGKILL of the leader (TTL 1s)", took)
	// The lease was renewed at most TTL/3 before the kill; the other waited
	// for it to expire (nobody resigned).
	assert.GreaterOrEqual(t, took, 500*time.Millisecond, "took over before the lease could have expired")
	assert.Less(t, took, 5*time.Second)

	if runtime.GOOS == "linux" {
		pollUntil(t, 5*time.Second, fmt.Sprintf("the killed leader's command (pid %d) to die", first.pid), func() bool {
			return processGone(first.pid)
		})
	}
	require.Len(t, readMarker(t, s.marker), 2)

	other.signal(t, syscall.SIGTERM)
	assert.Equal(t, 128+int(syscall.SIGTERM), other.wait(t))
	assert.Equal(t, "no leader", statusLine(t, s.url, "job"))
}

// SIGTERM to the leader is forwarded to its command, which stops; the leader
// resigns and the other candidate takes over at once, long before the TTL.
func TestRunSIGTERMIsForwardedAndHandsOver(t *testing.T) {
	t.Parallel()
	s := newRunSetup(t)
	cands := map[string]*cliProc{
		"A": s.candidate(t, "trap", "A", "--ttl", "5s"),
		"B": s.candidate(t, "trap", "B", "--ttl", "5s"),
	}
	first := waitMarker(t, s.marker, 1)[0]
	leader := cands[first.value]
	other := cands[map[string]string{"A": "B", "B": "A"}[first.value]]
	other.stderr.waitContains(t, "campaigning for leadership of job")

	sent := time.Now()
	leader.signal(t, syscall.SIGTERM)
	lines := waitMarker(t, s.marker, 3)
	took := time.Since(sent)
	t.Logf("takeover %v after SIGTERM to the leader (TTL 5s)", took)
	assert.Less(t, took, 2*time.Second)
	// The command got the signal and finished before the next one started.
	assert.Equal(t, markerLine{value: first.value, pid: first.pid, event: "term"}, lines[1])
	assert.Equal(t, "start", lines[2].event)
	assert.NotEqual(t, first.value, lines[2].value)
	assert.Greater(t, lines[2].fence, first.fence)

	assert.Equal(t, 128+int(syscall.SIGTERM), leader.wait(t))
	errOut := leader.stderr.String()
	assert.Contains(t, errOut, "redisleader: received SIGTERM; forwarding it to")
	assert.Contains(t, errOut, "exited with status 0; resigned")

	other.signal(t, syscall.SIGTERM)
	assert.Equal(t, 128+int(syscall.SIGTERM), other.wait(t))
	lines = readMarker(t, s.marker)
	require.Len(t, lines, 4)
	assert.Equal(t, "term", lines[3].event)
}

// A signal while waiting to lead ends the campaign, with 128+signo.
func TestRunSignalWhileNotLeading(t *testing.T) {
	t.Parallel()
	s := newRunSetup(t)
	leader := s.candidate(t, "exec", "A")
	waitMarker(t, s.marker, 1)
	waiting := s.candidate(t, "exec", "B")
	waiting.stderr.waitContains(t, "campaigning for leadership of job")

	waiting.signal(t, syscall.SIGINT)
	assert.Equal(t, 128+int(syscall.SIGINT), waiting.wait(t))
	assert.Contains(t, waiting.stderr.String(), "redisleader: received SIGINT while not leading job; stopped campaigning")
	assert.Len(t, readMarker(t, s.marker), 1)
	assert.True(t, leader.running())

	leader.signal(t, syscall.SIGINT)
	assert.Equal(t, 128+int(syscall.SIGINT), leader.wait(t))
}

// A command that exits by itself: run exits with its status and resigns.
func TestRunExitsWithCommandStatus(t *testing.T) {
	t.Parallel()
	srv := redisserver.Start(t)
	url := "redis://" + srv.Addr()
	code, out, errOut := runCLI(t, "run", "--verbose", "--redis", url, "--name", "job", "--",
		"sh", "-c", `echo "fence=$REDISLEADER_FENCE name=$REDISLEADER_NAME"; exit 7`)
	assert.Equal(t, 7, code, "stderr: %s", errOut)
	m := regexp.MustCompile(`elected leader of job \(fence (\d+)\); starting sh -c`).FindStringSubmatch(errOut)
	require.NotNil(t, m, "stderr: %s", errOut)
	assert.Equal(t, "fence="+m[1]+" name=job\n", out)
	assert.Contains(t, errOut, "exited with status 7; resigned")
	assert.Equal(t, "no leader", statusLine(t, url, "job"))
	assert.Nil(t, srv.Do(t, "GET", "redisleader:{job}"))
}

// A command killed by a signal it did not get from run: run reports the
// signal, as a shell would, through the supervisor that leads the group
// (which dies of the same signal; SIGQUIT is the case the Go runtime would
// otherwise turn into exit 2).
func TestRunCommandKilledBySignal(t *testing.T) {
	t.Parallel()
	srv := redisserver.Start(t)
	for _, sig := range []syscall.Signal{syscall.SIGQUIT, syscall.SIGTERM} {
		code, _, errOut := runCLI(t, "run", "--verbose", "--redis", "redis://"+srv.Addr(), "--name", "job", "--",
			"sh", "-c", "kill -"+strings.TrimPrefix(signalName(sig), "SIG")+" $$")
		assert.Equal(t, 128+int(sig), code, "stderr: %s", errOut)
		assert.Contains(t, errOut, "was killed by "+signalName(sig))
	}
}

// Leadership lost while the command runs (here the key is deleted): the
// command gets SIGTERM, then SIGKILL after --grace since it ignores SIGTERM,
// and run exits 3.
func TestRunLeadershipLost(t *testing.T) {
	t.Parallel()
	srv := redisserver.Start(t)
	dir := t.TempDir()
	marker := filepath.Join(dir, "marker")
	p := startCLI(t, "run", []string{"MARKER=" + marker},
		"run", "--redis", "redis://"+srv.Addr(), "--name", "job", "--value", "A", "--ttl", "3s", "--grace", "300ms", "--",
		"sh", "-c", `trap "" TERM; echo "$REDISLEADER_VALUE $$ start" >> "$MARKER"; exec sleep 60`)
	child := waitMarker(t, marker, 1)[0]
	srv.Do(t, "DEL", "redisleader:{job}")
	assert.Equal(t, exitLost, p.wait(t))
	errOut := p.stderr.String()
	assert.Contains(t, errOut, "redisleader: leadership of job lost (the key was deleted")
	assert.Contains(t, errOut, "still runs 300ms after SIGTERM; sending SIGKILL")
	assert.Contains(t, errOut, "was killed by SIGKILL; not leading any more")
	assert.True(t, processGone(child.pid))
}

// --again campaigns again after the command exits, until a signal.
func TestRunAgain(t *testing.T) {
	t.Parallel()
	srv := redisserver.Start(t)
	dir := t.TempDir()
	marker := filepath.Join(dir, "marker")
	p := startCLI(t, "run --again", []string{"MARKER=" + marker},
		"run", "--redis", "redis://"+srv.Addr(), "--name", "job", "--value", "A", "--again", "--",
		"sh", "-c", `echo "$REDISLEADER_VALUE $$ start $REDISLEADER_FENCE" >> "$MARKER"`)
	lines := waitMarker(t, marker, 2)
	assert.Greater(t, lines[1].fence, lines[0].fence)
	p.signal(t, syscall.SIGINT)
	assert.Equal(t, 128+int(syscall.SIGINT), p.wait(t))
	assert.Equal(t, "no leader", statusLine(t, "redis://"+srv.Addr(), "job"))
}

var (
	watchLeaderRE   = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z leader (\S+) \(fence (\d+)\)$`)
	watchNoLeaderRE = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z no leader$`)
)

// status reports the leader or "no leader", as text and JSON; watch prints a
// line for every change: no leader, elected, vacancy, the next leader.
func TestStatusAndWatch(t *testing.T) {
	t.Parallel()
	s := newRunSetup(t)
	w := startCLI(t, "watch", nil, "watch", "--redis", s.url, "job")
	lines := w.stdout.waitLines(t, 1, "watch's first line")
	assert.Regexp(t, watchNoLeaderRE, lines[0])

	assert.Equal(t, "no leader", statusLine(t, s.url, "job"))
	st := statusAsJSON(t, s.url, "--json", "job")
	assert.Equal(t, "job", st.Name)
	assert.Nil(t, st.Leader)

	a := s.candidate(t, "exec", "A", "--ttl", "5s")
	lines = w.stdout.waitLines(t, 2, "watch to see A elected")
	m := watchLeaderRE.FindStringSubmatch(lines[1])
	require.NotNil(t, m, "watch line %q", lines[1])
	assert.Equal(t, "A", m[1])
	fenceA := m[2]
	started := waitMarker(t, s.marker, 1)[0]
	assert.Equal(t, fenceA, strconv.FormatInt(started.fence, 10))

	assert.Regexp(t, `^leader A \(fence `+fenceA+`, ttl [0-9.]+m?s\)$`, statusLine(t, s.url, "job"))
	st = statusAsJSON(t, s.url, "job", "--json") // flags after NAME work too
	require.NotNil(t, st.Leader)
	assert.Equal(t, "job", st.Name)
	assert.Equal(t, "A", st.Leader.Value)
	assert.Equal(t, fenceA, strconv.FormatInt(st.Leader.Fence, 10))
	assert.Greater(t, st.Leader.TTLms, int64(0))
	assert.LessOrEqual(t, st.Leader.TTLms, int64(5000))

	a.signal(t, syscall.SIGTERM)
	assert.Equal(t, 128+int(syscall.SIGTERM), a.wait(t))
	lines = w.stdout.waitLines(t, 3, "watch to see the vacancy")
	assert.Regexp(t, watchNoLeaderRE, lines[2])

	b := s.candidate(t, "exec", "B", "--ttl", "5s")
	lines = w.stdout.waitLines(t, 4, "watch to see B elected")
	m = watchLeaderRE.FindStringSubmatch(lines[3])
	require.NotNil(t, m, "watch line %q", lines[3])
	assert.Equal(t, "B", m[1])
	fenceB, _ := strconv.ParseInt(m[2], 10, 64)
	fA, _ := strconv.ParseInt(fenceA, 10, 64)
	assert.Greater(t, fenceB, fA)
	st = statusAsJSON(t, s.url, "--json", "job")
	require.NotNil(t, st.Leader)
	assert.Equal(t, "B", st.Leader.Value)

	w.signal(t, syscall.SIGINT)
	assert.Equal(t, exitOK, w.wait(t))
	assert.Len(t, w.stdout.lines(), 4, "watch printed more lines than changes")
	assert.NotContains(t, w.stdout.String(), "\x1b[", "colour on a pipe")
	assert.Empty(t, w.stderr.String())

	b.signal(t, syscall.SIGTERM)
	assert.Equal(t, 128+int(syscall.SIGTERM), b.wait(t))
}

// closedPort returns a loopback port nobody listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	return port
}

// Bad usage exits 2 and unreachable Redis exits 1, each with one clear line
// (a bad flag also prints the command's usage after its line).
func TestUsageAndConnectionErrors(t *testing.T) {
	t.Parallel()
	down := fmt.Sprintf("redis://127.0.0.1:%d", closedPort(t))
	tests := []struct {
		name    string
		args    []string
		code    int
		message string
	}{
		{"run without --name", []string{"run", "--", "true"}, exitUsage, "redisleader run: --name is required"},
		{"run without command", []string{"run", "--name", "job"}, exitUsage, "redisleader run: no command: give it after --"},
		{"run without command after --", []string{"run", "--name", "job", "--"}, exitUsage, "redisleader run: no command"},
		{"run unknown flag", []string{"run", "--name", "job", "--bogus", "--", "true"}, exitUsage, "flag provided but not defined: --bogus"},
		{"run bad name", []string{"run", "--name", "a{b}", "--", "true"}, exitUsage, "redisleader run: invalid --name: name \"a{b}\" must not contain"},
		{"run bad ttl", []string{"run", "--name", "job", "--ttl", "1ms", "--", "true"}, exitUsage, "redisleader run: invalid --ttl 1ms"},
		{"run negative grace", []string{"run", "--name", "job", "--grace", "-1s", "--", "true"}, exitUsage, "redisleader run: invalid --grace -1s: must not be negative"},
		{"run command not found", []string{"run", "--name", "job", "--", "/nonexistent/command"}, exitNotFound, "redisleader: cannot run /nonexistent/command"},
		{"status without name", []string{"status"}, exitUsage, "redisleader status: missing NAME"},
		{"status two names", []string{"status", "a", "b"}, exitUsage, "redisleader status: expected one NAME, got 2: a b"},
		{"status unknown flag", []string{"status", "--bogus", "job"}, exitUsage, "flag provided but not defined: --bogus"},
		{"status unknown flag after name", []string{"status", "job", "--bogus"}, exitUsage, "flag provided but not defined: --bogus"},
		{"status bad name", []string{"status", "a}"}, exitUsage, "redisleader status: invalid NAME"},
		{"watch without name", []string{"watch"}, exitUsage, "redisleader watch: missing NAME"},
		{"watch unknown flag", []string{"watch", "--bogus", "job"}, exitUsage, "flag provided but not defined: --bogus"},
		{"run unreachable", []string{"run", "--redis", down, "--name", "job", "--", "true"}, exitError, "redisleader: cannot reach Redis at " + down},
		{"status unreachable", []string{"status", "--redis", down, "job"}, exitError, "redisleader: cannot reach Redis at"},
		{"watch unreachable", []string{"watch", "--redis", down, "job"}, exitError, "redisleader: cannot reach Redis at"},
		{"transfer unreachable", []string{"transfer", "--redis", down, "job", "--to", "B"}, exitError, "redisleader: cannot reach Redis at"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := runCLI(t, tt.args...)
			assert.Equal(t, tt.code, code, "stderr: %s", errOut)
			assert.Empty(t, out)
			first, rest, _ := strings.Cut(errOut, "\n")
			assert.Contains(t, first, tt.message)
			assert.Empty(t, rest, "more than one line on stderr")
			if code == exitUsage && strings.HasPrefix(first, "redisleader "+tt.args[0]+":") {
				assert.Contains(t, first, "(see redisleader "+tt.args[0]+" --help)")
			}
		})
	}
}

// --help prints the synopsis, the flags (as --name) and the exit status to
// stdout, and exits 0.
func TestHelp(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"run", "status", "watch", "transfer", "demo", "completion"} {
		code, out, errOut := runCLI(t, cmd, "--help")
		assert.Equal(t, exitOK, code)
		assert.Empty(t, errOut)
		assert.Contains(t, out, "Usage: redisleader "+cmd)
		assert.Contains(t, out, "Exit status")
		assert.NotRegexp(t, `(?m)^\s+-[a-z]`, out, "a flag shown with one dash")
		if cmd != "completion" {
			assert.Contains(t, out, "\n  --")
		}
	}
}
