//go:build unix

package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
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

// The tests below cover the operators' items of issue 13: cron jobs run
// once per tick, process groups, signals, TLS, Sentinel and Cluster,
// secrets, and the scripting habits.

// A cron-like tick: three hosts start "run --try --hold" 50ms apart for a
// job that takes a few milliseconds. Exactly one runs it per tick; the
// others exit 75 at once and print nothing. The hold (3s) is far longer than
// the spread so that a loaded machine, where starting a process can take a
// second, does not make a host arrive after it. Without --hold, the same tick
// runs the job on the late hosts too (logged as the baseline, not asserted:
// it depends on how fast the job ends).
func TestRunTryHoldOncePerTick(t *testing.T) {
	t.Parallel()
	srv := quietRedisServer(t)
	url := "redis://" + srv.Addr()
	const hosts, ticks, spread = 3, 3, 50 * time.Millisecond
	cliBinary(t) // built before the first tick, not during it

	tick := func(t *testing.T, marker string, flags ...string) (runs int, codes []int, stderr []string, startSpread time.Duration) {
		t.Helper()
		before := len(readMarker(t, marker))
		first := time.Now()
		procs := make([]*cliProc, hosts)
		// Timers that fire 50ms apart, as the hosts' cron daemons would:
		// this spaces the starts, it does not wait for anything.
		starts := time.NewTicker(spread)
		defer starts.Stop()
		for i := range procs {
			if i > 0 {
				<-starts.C
			}
			args := append([]string{"run", "--redis", url, "--name", "tick", "--value", fmt.Sprintf("host%d", i)}, flags...)
			args = append(args, "--", "sh", "-c", `echo "$REDISLEADER_VALUE $$ start $REDISLEADER_FENCE" >> "$MARKER"`)
			procs[i] = startCLI(t, fmt.Sprintf("host%d", i), []string{"MARKER=" + marker}, args...)
		}
		startSpread = time.Since(first)
		for _, p := range procs {
			codes = append(codes, p.wait(t))
			stderr = append(stderr, p.stderr.String())
		}
		return len(readMarker(t, marker)) - before, codes, stderr, startSpread
	}

	dir := t.TempDir()
	marker := filepath.Join(dir, "marker")
	var figures []string
	for i := range ticks {
		runs, codes, stderr, spreadSeen := tick(t, marker, "--try", "--hold", "3s")
		figures = append(figures, fmt.Sprintf("tick %d: %d run(s), exit statuses %v, processes started within %v", i+1, runs, codes, spreadSeen.Round(time.Millisecond)))
		assert.Equal(t, 1, runs, "tick %d: the job ran %d times", i+1, runs)
		busy, ok := 0, 0
		for j, c := range codes {
			switch c {
			case exitOK:
				ok++
			case exitBusy:
				busy++
			}
			assert.Empty(t, stderr[j], "host%d printed something in tick %d", j, i+1)
		}
		assert.Equal(t, 1, ok, "tick %d: exit statuses %v", i+1, codes)
		assert.Equal(t, hosts-1, busy, "tick %d: exit statuses %v", i+1, codes)
	}
	lines := readMarker(t, marker)
	for i := 1; i < len(lines); i++ {
		assert.Greater(t, lines[i].fence, lines[i-1].fence, "fences must grow from tick to tick")
	}

	baseline := filepath.Join(dir, "baseline")
	runs, codes, _, spreadSeen := tick(t, baseline, "--try")
	figures = append(figures, fmt.Sprintf("baseline without --hold: %d run(s), exit statuses %v, processes started within %v", runs, codes, spreadSeen.Round(time.Millisecond)))
	t.Logf("%d hosts started %v apart, job of a few ms, --try --hold 3s:\n  %s", hosts, spread, strings.Join(figures, "\n  "))
}

// --try while another process leads: exit 75 at once, silent unless
// --verbose; --wait gives up after its duration with 75 too.
func TestRunTryAndWaitWhenLed(t *testing.T) {
	t.Parallel()
	s := newRunSetup(t)
	holder := s.candidate(t, "exec", "A")
	waitMarker(t, s.marker, 1)

	start := time.Now()
	code, out, errOut := runCLI(t, "run", "--redis", s.url, "--name", "job", "--try", "--", "true")
	assert.Equal(t, exitBusy, code)
	assert.Empty(t, out)
	assert.Empty(t, errOut)
	t.Logf("--try answered in %v", time.Since(start))

	code, _, errOut = runCLI(t, "run", "--redis", s.url, "--name", "job", "--try", "--verbose", "--", "true")
	assert.Equal(t, exitBusy, code)
	assert.Contains(t, errOut, "redisleader: job is led by another process; not running true (--try)")

	// Hosts need not have distinct values: one that uses the leader's own
	// value gives up at once too (it used to wait, told apart by value).
	code, _, _ = runCLI(t, "run", "--redis", s.url, "--name", "job", "--value", "A", "--try", "--", "true")
	assert.Equal(t, exitBusy, code)

	start = time.Now()
	code, _, errOut = runCLI(t, "run", "--redis", s.url, "--name", "job", "--wait", "300ms", "--", "true")
	took := time.Since(start)
	assert.Equal(t, exitBusy, code)
	assert.Empty(t, errOut)
	assert.GreaterOrEqual(t, took, 300*time.Millisecond)
	assert.Len(t, readMarker(t, s.marker), 1, "the job ran although the name was led")
	assert.True(t, holder.running())

	// Once the holder is gone, --try leads at once.
	holder.signal(t, syscall.SIGTERM)
	assert.Equal(t, 128+int(syscall.SIGTERM), holder.wait(t))
	code, out, errOut = runCLI(t, "run", "--redis", s.url, "--name", "job", "--try", "--", "echo", "ran")
	assert.Equal(t, exitOK, code, "stderr: %s", errOut)
	assert.Equal(t, "ran\n", out)
	assert.Empty(t, errOut, "run is quiet by default")
}

// A signal during --hold ends the hold: run resigns at once and exits with
// the command's status, since the command had finished.
func TestRunSignalDuringHold(t *testing.T) {
	t.Parallel()
	srv := quietRedisServer(t)
	p := startCLI(t, "run --hold", nil,
		"run", "--redis", "redis://"+srv.Addr(), "--name", "job", "--hold", "30s", "--verbose", "--", "sh", "-c", "exit 4")
	p.stderr.waitContains(t, "holding leadership of job for 30s (--hold)")
	assert.NotNil(t, srv.Do(t, "GET", "redisleader:{job}"), "not held after the command exited")
	p.signal(t, syscall.SIGTERM)
	assert.Equal(t, 4, p.wait(t))
	assert.Nil(t, srv.Do(t, "GET", "redisleader:{job}"), "run did not resign")
}

// groupScript starts a grandchild "sleep 30" in the background, writes its
// PID to $PIDFILE and waits. With IGNORE=TERM it ignores SIGTERM, and so
// does the grandchild (an ignored signal stays ignored across exec).
const groupScript = `trap "" $IGNORE; sleep 30 & echo $! > "$PIDFILE"; wait`

// readPID waits for the grandchild's PID file.
func readPID(t *testing.T, path string) int {
	t.Helper()
	var pid int
	pollUntil(t, cliTimeout, "the PID file "+path, func() bool {
		data, err := os.ReadFile(path)
		if err != nil || !strings.HasSuffix(string(data), "\n") {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(data)))
		return err == nil
	})
	return pid
}

// Leadership lost while a shell script runs whose background grandchild
// ignores SIGTERM: the whole process group gets SIGTERM, then SIGKILL after
// --grace, and the grandchild is gone, not only the shell.
func TestRunLossKillsProcessGroup(t *testing.T) {
	t.Parallel()
	srv := redisserver.Start(t)
	pidfile := filepath.Join(t.TempDir(), "pid")
	p := startCLI(t, "run", []string{"PIDFILE=" + pidfile, "IGNORE=TERM"},
		"run", "--redis", "redis://"+srv.Addr(), "--name", "job", "--grace", "300ms", "--", "sh", "-c", groupScript)
	grandchild := readPID(t, pidfile)
	t.Cleanup(func() { _ = syscall.Kill(grandchild, syscall.SIGKILL) })
	srv.Do(t, "DEL", "redisleader:{job}")
	assert.Equal(t, exitLost, p.wait(t))
	errOut := p.stderr.String()
	assert.Contains(t, errOut, "leadership of job lost")
	assert.Contains(t, errOut, "still runs 300ms after SIGTERM; sending SIGKILL")
	pollUntil(t, 5*time.Second, fmt.Sprintf("grandchild %d to be gone", grandchild), func() bool { return processGone(grandchild) })
}

// SIGTERM, SIGHUP and SIGQUIT sent to run are forwarded to the command's
// process group; a command that ignores it is SIGKILLed (the group) after
// --grace; run resigns (the key is deleted, not left to expire) and exits
// 128+n. The grandchild is gone.
func TestRunForwardedSignalBoundedByGrace(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT} {
		t.Run(signalName(sig), func(t *testing.T) {
			t.Parallel()
			srv := redisserver.Start(t)
			pidfile := filepath.Join(t.TempDir(), "pid")
			p := startCLI(t, "run", []string{"PIDFILE=" + pidfile, "IGNORE=" + strings.TrimPrefix(signalName(sig), "SIG")},
				"run", "--redis", "redis://"+srv.Addr(), "--name", "job", "--ttl", "30s", "--grace", "300ms", "--", "sh", "-c", groupScript)
			grandchild := readPID(t, pidfile)
			t.Cleanup(func() { _ = syscall.Kill(grandchild, syscall.SIGKILL) })
			sent := time.Now()
			p.signal(t, sig)
			assert.Equal(t, 128+int(sig), p.wait(t))
			took := time.Since(sent)
			assert.GreaterOrEqual(t, took, 300*time.Millisecond, "killed before --grace")
			assert.Less(t, took, 5*time.Second)
			assert.Contains(t, p.stderr.String(), "still runs 300ms after "+signalName(sig)+"; sending SIGKILL")
			pollUntil(t, 5*time.Second, fmt.Sprintf("grandchild %d to be gone", grandchild), func() bool { return processGone(grandchild) })
			assert.Nil(t, srv.Do(t, "GET", "redisleader:{job}"), "run did not resign")
		})
	}
}

// A command that handles SIGHUP gets it, cleans up and exits; run resigns
// and exits 129.
func TestRunSIGHUPForwardedAndResigns(t *testing.T) {
	t.Parallel()
	srv := redisserver.Start(t)
	marker := filepath.Join(t.TempDir(), "marker")
	p := startCLI(t, "run", []string{"MARKER=" + marker},
		"run", "--redis", "redis://"+srv.Addr(), "--name", "job", "--ttl", "30s", "--", "sh", "-c",
		`trap 'echo "x $$ hup" >> "$MARKER"; exit 0' HUP; echo "x $$ start" >> "$MARKER"; while :; do sleep 0.05; done`)
	waitMarker(t, marker, 1)
	p.signal(t, syscall.SIGHUP)
	assert.Equal(t, 128+int(syscall.SIGHUP), p.wait(t))
	lines := readMarker(t, marker)
	require.Len(t, lines, 2)
	assert.Equal(t, "hup", lines[1].event)
	assert.Nil(t, srv.Do(t, "GET", "redisleader:{job}"), "run did not resign")
}

// --no-process-group signals the command's process only: its background
// grandchild survives a forwarded SIGTERM.
func TestRunNoProcessGroup(t *testing.T) {
	t.Parallel()
	srv := redisserver.Start(t)
	pidfile := filepath.Join(t.TempDir(), "pid")
	p := startCLI(t, "run", []string{"PIDFILE=" + pidfile, "IGNORE=USR2"},
		"run", "--redis", "redis://"+srv.Addr(), "--name", "job", "--no-process-group", "--", "sh", "-c", groupScript)
	grandchild := readPID(t, pidfile)
	t.Cleanup(func() { _ = syscall.Kill(grandchild, syscall.SIGKILL) })
	p.signal(t, syscall.SIGTERM)
	assert.Equal(t, 128+int(syscall.SIGTERM), p.wait(t))
	assert.False(t, processGone(grandchild), "the grandchild was signalled despite --no-process-group")
}

// --fence-env names the variable the fence is exported under; --verbose
// shows every step, the default none, --quiet not even warnings.
func TestRunFenceEnvAndVerbosity(t *testing.T) {
	t.Parallel()
	srv := quietRedisServer(t)
	url := "redis://" + srv.Addr()
	code, out, errOut := runCLI(t, "run", "--redis", url, "--name", "job", "--fence-env", "MY_FENCE", "--verbose", "--",
		"sh", "-c", `echo "$MY_FENCE ${REDISLEADER_FENCE:-unset}"`)
	require.Equal(t, exitOK, code, errOut)
	f := strings.Fields(out)
	require.Len(t, f, 2, "output %q", out)
	assert.Contains(t, errOut, "elected leader of job (fence "+f[0]+")")
	assert.Equal(t, "unset", f[1])
	for _, line := range strings.Split(strings.TrimSpace(errOut), "\n") {
		assert.True(t, strings.HasPrefix(line, "redisleader: "), "line %q", line)
	}

	for _, quiet := range []string{"", "--quiet"} {
		args := []string{"run", "--redis", url, "--name", "job"}
		if quiet != "" {
			args = append(args, quiet)
		}
		code, _, errOut := runCLI(t, append(args, "--", "true")...)
		assert.Equal(t, exitOK, code)
		assert.Empty(t, errOut, "run %s printed routine lines", quiet)
	}
	code, _, errOut = runCLI(t, "run", "--redis", url, "--name", "job", "--fence-env", "1BAD", "--", "true")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, `invalid --fence-env "1BAD"`)
}

// Messages speak flags, not library options.
func TestRunMessagesNameFlags(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ args []string }{
		{[]string{"--ttl", "0s"}},
		{[]string{"--takeover-delay", "1ns"}},
	} {
		args := append([]string{"run", "--name", "job"}, tt.args...)
		code, _, errOut := runCLI(t, append(args, "--", "true")...)
		assert.Equal(t, exitUsage, code)
		assert.NotContains(t, errOut, "With")
		assert.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
	}
	code, _, errOut := runCLI(t, "run", "--name", "job", "--ttl", "0s", "--", "true")
	assert.Equal(t, exitUsage, code)
	assert.Equal(t, "redisleader run: invalid --ttl 0s: must be at least 10ms (see redisleader run --help)\n", errOut)
	assert.Equal(t, "warning: see --takeover-delay; --ttl 5s must", cliWords("warning: see WithTakeoverDelay; WithTTL(5s) must"))

	// The library warns about a Redis without persistence and points to its
	// option: run names the flag.
	// The check runs once the session holds the name, so the command waits.
	srv := redisserver.Start(t)
	p := startCLI(t, "run", nil, "run", "--redis", "redis://"+srv.Addr(), "--name", "job", "--", "sh", "-c", "while :; do sleep 0.05; done")
	p.stderr.waitContains(t, "--takeover-delay")
	p.signal(t, syscall.SIGTERM)
	assert.Equal(t, 128+int(syscall.SIGTERM), p.wait(t))
	assert.Contains(t, p.stderr.String(), "Redis persistence is off")
	assert.NotContains(t, p.stderr.String(), "With")
}

// A Redis that accepts connections and never answers is one clear line.
func TestNoReplyFromRedis(t *testing.T) {
	t.Parallel()
	url := silentRedis(t)
	for _, args := range [][]string{
		{"status", "--redis", url, "job"},
		{"run", "--redis", url, "--name", "job", "--", "true"},
	} {
		start := time.Now()
		code, out, errOut := runCLI(t, args...)
		took := time.Since(start)
		assert.Equal(t, exitError, code)
		assert.Empty(t, out)
		assert.Equal(t, "redisleader: no reply from Redis at "+url+" within 5s\n", errOut)
		assert.GreaterOrEqual(t, took, 5*time.Second, "said no reply within 5s after waiting %v", took)
	}
}

// --wait D bounds the wait for Redis's first reply too: run --wait 1s gives
// up on a Redis that accepts connections and never answers after 1s, not
// after the 5s that bound it without --wait.
func TestRunWaitBoundsFirstReply(t *testing.T) {
	t.Parallel()
	url := silentRedis(t)
	start := time.Now()
	code, out, errOut := runCLI(t, "run", "--redis", url, "--name", "job", "--wait", "1s", "--", "true")
	took := time.Since(start)
	assert.Equal(t, exitError, code)
	assert.Empty(t, out)
	assert.Equal(t, "redisleader: no reply from Redis at "+url+" within 1s\n", errOut)
	assert.GreaterOrEqual(t, took, time.Second, "gave up before --wait")
	assert.Less(t, took, 2500*time.Millisecond, "run --wait 1s took %v", took)
}

// A Sentinel that accepts and never answers is the same one line as a data
// node that does, not go-redis's "all sentinels ... are unreachable: i/o
// timeout" (the Sentinel client flattens the timeout into a plain error).
func TestNoReplyFromSentinel(t *testing.T) {
	t.Parallel()
	url := silentRedis(t)
	code, _, errOut := runCLI(t, "status", "--redis", url, "--sentinel-master", "m", "job")
	assert.Equal(t, exitError, code)
	assert.Equal(t, "redisleader: no reply from Redis at master m via Sentinel "+url+" within 5s\n", errOut)
}

// status --check exits 3 without a leader and 0 with one; watch --json
// prints one JSON object per line.
func TestStatusCheckAndWatchJSON(t *testing.T) {
	t.Parallel()
	s := newRunSetup(t)
	w := startCLI(t, "watch --json", nil, "watch", "--json", "--redis", s.url, "job")
	w.stdout.waitLines(t, 1, "watch's first line")

	code, out, _ := runCLI(t, "status", "--check", "--redis", s.url, "job")
	assert.Equal(t, exitNoLeader, code)
	assert.Equal(t, "no leader\n", out)

	a := s.candidate(t, "exec", "A", "--ttl", "5s")
	waitMarker(t, s.marker, 1)
	code, out, _ = runCLI(t, "status", "--check", "--json", "--redis", s.url, "job")
	assert.Equal(t, exitOK, code)
	assert.Contains(t, out, `"value":"A"`)

	lines := w.stdout.waitLines(t, 2, "watch to see A elected")
	type event struct {
		Time   string `json:"time"`
		Name   string `json:"name"`
		Leader *struct {
			Value string `json:"value"`
			Fence int64  `json:"fence"`
		} `json:"leader"`
	}
	var e0, e1 event
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &e0), lines[0])
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &e1), lines[1])
	assert.Equal(t, "job", e0.Name)
	assert.Nil(t, e0.Leader)
	require.NotNil(t, e1.Leader)
	assert.Equal(t, "A", e1.Leader.Value)
	assert.Equal(t, waitMarker(t, s.marker, 1)[0].fence, e1.Leader.Fence)
	_, err := time.Parse(time.RFC3339Nano, e1.Time)
	assert.NoError(t, err)

	a.signal(t, syscall.SIGTERM)
	a.wait(t)
	w.signal(t, syscall.SIGHUP)
	assert.Equal(t, exitOK, w.wait(t))
}

// version and --version print the build info's version.
func TestVersion(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"version", "--version"} {
		code, out, errOut := runCLI(t, arg)
		assert.Equal(t, exitOK, code)
		assert.Empty(t, errOut)
		assert.Regexp(t, `^redisleader \S+ .*go1\.\d+`, out)
	}
}

// Colour only on a terminal, never with NO_COLOR or TERM=dumb; nothing the
// commands print to a pipe has an escape sequence (see TestStatusAndWatch).
func TestColourRules(t *testing.T) {
	t.Parallel()
	assert.True(t, wantColour(true, "", "xterm"))
	assert.False(t, wantColour(true, "1", "xterm"))
	assert.False(t, wantColour(true, "", "dumb"))
	assert.False(t, wantColour(false, "", "xterm"))
}

// Every flag of every command is in every completion script, in the form
// that shell completes, for that command.
func TestCompletionHasEveryFlag(t *testing.T) {
	t.Parallel()
	for _, shell := range completionShells {
		code, out, errOut := runCLI(t, "completion", shell)
		require.Equal(t, exitOK, code, errOut)
		n := 0
		for _, c := range commandFlags {
			assert.Contains(t, out, c.name, "%s: command %s", shell, c.name)
			if c.flags == nil {
				continue
			}
			c.flags().VisitAll(func(f *flag.Flag) {
				n++
				var want string
				switch shell {
				case "bash":
					want = regexp.QuoteMeta("--"+f.Name) + `[ "]`
					want = `(?m)^\t` + c.name + `\) flags="[^"]*` + want
				case "zsh":
					want = `'\*?--` + regexp.QuoteMeta(f.Name) + `\[`
				case "fish":
					want = `subcommand_from ` + c.name + `' -l ` + regexp.QuoteMeta(f.Name) + ` `
				}
				assert.Regexp(t, want, out, "%s: %s --%s", shell, c.name, f.Name)
			})
		}
		assert.Greater(t, n, 20)
		// The script parses in its shell, where that shell is installed.
		if sh, err := exec.LookPath(shell); err == nil {
			script := filepath.Join(t.TempDir(), "completion."+shell)
			require.NoError(t, os.WriteFile(script, []byte(out), 0o644))
			syntax := exec.Command(sh, "-n", script)
			if shell == "fish" {
				syntax = exec.Command(sh, "--no-execute", script)
			}
			msg, err := syntax.CombinedOutput()
			assert.NoError(t, err, "%s -n: %s", shell, msg)
		}
	}
	code, _, errOut := runCLI(t, "completion", "tcsh")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, `unknown shell "tcsh"`)
}

// silentRedis listens on a port, accepts connections and never answers, like
// a Redis that hangs; it returns its redis:// URL.
func silentRedis(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				_ = c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c) // never read, never answered
		}
	}()
	return "redis://" + l.Addr().String()
}

// A key under the election's name that redisleader did not write (a string
// left by an older tool or a typo'd SET) is an error for run as for status
// (exit 1, naming the key), not another's lease: --try and --wait would
// exit 75 in silence and plain run would wait for ever, and a cron job would
// never run again without anybody being told.
func TestRunForeignKeyIsAnError(t *testing.T) {
	t.Parallel()
	srv := quietRedisServer(t)
	url := "redis://" + srv.Addr()
	srv.Do(t, "SET", "redisleader:{job}", "not a lock")
	code, _, errOut := runCLI(t, "status", "--redis", url, "job")
	require.Equal(t, exitError, code, "status: %s", errOut)
	require.Contains(t, errOut, "holds a value this package did not write")

	for _, flags := range [][]string{{"--try"}, {"--wait", "200ms"}, {}} {
		args := append([]string{"run", "--redis", url, "--name", "job"}, flags...)
		code, _, errOut := runCLI(t, append(args, "--", "true")...)
		assert.Equal(t, exitError, code, "run %v: a foreign key was taken for a leader", flags)
		assert.Contains(t, errOut, "holds a value this package did not write", "run %v said nothing", flags)
	}
}

// Every status line is one line with the "redisleader: " prefix, also for a
// library warning whose error is a joined error (the settings check when the
// ACL denies CONFIG GET and INFO): a log shipper or cron mail filter keyed on
// the prefix sees no stray line.
func TestRunWarningIsOneLine(t *testing.T) {
	t.Parallel()
	srv := quietRedisServer(t)
	srv.Do(t, "ACL", "SETUSER", "limited", "on", ">lpw", "~*", "&*", "+@all", "-config", "-info")
	dir := t.TempDir()
	marker := filepath.Join(dir, "marker")
	p := startCLI(t, "run", []string{"MARKER=" + marker, "CHILD_MODE=exec"},
		"run", "--redis", "redis://limited:lpw@"+srv.Addr(), "--name", "job", "--", childScript(t, dir))
	waitMarker(t, marker, 1)
	// The denied INFO, however the server words it (7.0: "NOPERM this user
	// has no permissions…", 7.2+ and Valkey: "NOPERM User limited has…").
	p.stderr.waitContains(t, "INFO replication: NOPERM")
	p.signal(t, syscall.SIGTERM)
	p.wait(t)
	for _, l := range p.stderr.lines() {
		assert.True(t, strings.HasPrefix(l, "redisleader: "), "status line without the prefix (a multi-line message): %q", l)
	}
}

// A negative --takeover-delay is a usage error, like a negative --grace,
// --wait or --hold (it used to mean "off" in silence).
func TestRunNegativeTakeoverDelay(t *testing.T) {
	t.Parallel()
	code, _, errOut := runCLI(t, "run", "--redis", "redis://127.0.0.1:"+strconv.Itoa(closedPort(t)), "--name", "job", "--takeover-delay", "-5s", "--", "true")
	assert.Equal(t, exitUsage, code, "stderr: %s", errOut)
	assert.Contains(t, errOut, "--takeover-delay")
}
