//go:build linux

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redisleader/redisleader/internal/redisserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests below are about the supervisor that run starts to lead the
// job's process group (see newCommand).

// parentPID is pid's parent, from /proc/PID/status.
func parentPID(t *testing.T, pid int) int {
	t.Helper()
	ppid, err := strconv.Atoi(procStatus(t, pid, "PPid"))
	require.NoError(t, err, "PPid of %d", pid)
	return ppid
}

// When run and its supervisor are both SIGKILLed, in any order, the job dies
// too (Pdeathsig from the supervisor): it does not run on unsupervised while
// the next host, once the lease has expired, starts a second copy. With run
// stopped first, neither redisleader process can act: only the kernel can.
func TestRunJobDiesWithRunAndSupervisor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		kills func(t *testing.T, run, sup int)
	}{
		{"run stopped, supervisor killed, run killed", func(t *testing.T, run, sup int) {
			require.NoError(t, syscall.Kill(run, syscall.SIGSTOP))
			require.NoError(t, syscall.Kill(sup, syscall.SIGKILL))
			require.NoError(t, syscall.Kill(run, syscall.SIGKILL))
		}},
		// The second may have exited by itself already, after the first.
		{"run and supervisor killed at once", func(t *testing.T, run, sup int) {
			require.NoError(t, syscall.Kill(run, syscall.SIGKILL))
			_ = syscall.Kill(sup, syscall.SIGKILL)
		}},
		{"supervisor and run killed at once", func(t *testing.T, run, sup int) {
			require.NoError(t, syscall.Kill(sup, syscall.SIGKILL))
			_ = syscall.Kill(run, syscall.SIGKILL)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redisserver.Start(t)
			pidfile := filepath.Join(t.TempDir(), "pid")
			p := startCLI(t, "run", []string{"PIDFILE=" + pidfile},
				"run", "--redis", "redis://"+srv.Addr(), "--name", "job", "--", "sh", "-c", `echo $$ > "$PIDFILE"; exec sleep 30`)
			job := readPID(t, pidfile)
			t.Cleanup(func() {
				if !processGone(job) {
					_ = syscall.Kill(job, syscall.SIGKILL)
				}
			})
			sup := parentPID(t, job)
			require.Equal(t, p.cmd.Process.Pid, parentPID(t, sup), "the job's parent %d is not run's child", sup)
			tc.kills(t, p.cmd.Process.Pid, sup)
			p.wait(t)
			pollUntil(t, 5*time.Second, fmt.Sprintf("the job %d to die with run and its supervisor", job), func() bool { return processGone(job) })
		})
	}
}

// A job that signals its own process group (kill -USR1 0: a shell wrapper
// that tells its helpers to reopen their logs) signals the supervisor too,
// which does not take it for run's death: the job runs on, run keeps
// leading and exits with the job's status.
func TestRunJobSignallingItsGroupRunsOn(t *testing.T) {
	t.Parallel()
	srv := quietRedisServer(t)
	dir := t.TempDir()
	marker, goFile := filepath.Join(dir, "marker"), filepath.Join(dir, "go")
	job := `trap 'echo "x $$ usr1" >> "$MARKER"' USR1; echo "x $$ start" >> "$MARKER"; kill -USR1 0
while [ ! -e "$GOFILE" ]; do sleep 0.05; done; echo "x $$ done" >> "$MARKER"`
	p := startCLI(t, "run", []string{"MARKER=" + marker, "GOFILE=" + goFile},
		"run", "--redis", "redis://"+srv.Addr(), "--name", "job", "--", "sh", "-c", job)
	lines := waitMarker(t, marker, 2)
	require.Equal(t, "usr1", lines[1].event)
	assert.NotNil(t, srv.Do(t, "GET", "redisleader:{job}"), "run does not lead after the job's kill -USR1 0")
	require.NoError(t, os.WriteFile(goFile, nil, 0o600))
	assert.Equal(t, 0, p.wait(t), "the job was stopped; stderr: %s", p.stderr.String())
	lines = readMarker(t, marker)
	require.Len(t, lines, 3, "the job did not run to its end: %v", lines)
	assert.Equal(t, "done", lines[2].event)
}

// A stop signal that run forwards while the supervisor is starting COMMAND
// reaches COMMAND once it has started: it is not caught by the supervisor
// and lost, leaving COMMAND to run until SIGKILL after --grace. The test
// hook holds the supervisor just before it starts COMMAND.
func TestRunSignalBeforeCommandStartsReachesIt(t *testing.T) {
	t.Parallel()
	srv := redisserver.Start(t)
	dir := t.TempDir()
	hold, marker := holdFIFO(t, dir), filepath.Join(dir, "marker")
	p := startCLI(t, "run", []string{envTestHold + "=" + hold, "MARKER=" + marker},
		"run", "--verbose", "--redis", "redis://"+srv.Addr(), "--name", "job", "--grace", "5s", "--", "sh", "-c",
		`trap 'echo "x $$ term" >> "$MARKER"; exit 0' TERM; echo "x $$ start" >> "$MARKER"; while :; do sleep 0.05; done`)
	w := openFIFO(t, hold, "the supervisor to reach the hook before COMMAND starts")
	p.signal(t, syscall.SIGTERM)
	p.stderr.waitContains(t, "received SIGTERM; forwarding it to")
	require.NoError(t, w.Close()) // the supervisor goes on and starts COMMAND
	assert.Equal(t, 128+int(syscall.SIGTERM), p.wait(t))
	errOut := p.stderr.String()
	assert.NotContains(t, errOut, "sending SIGKILL", "COMMAND did not get the SIGTERM")
	gotTerm := strings.Contains(errOut, "was killed by SIGTERM") // before its trap was set
	for _, l := range readMarker(t, marker) {
		gotTerm = gotTerm || l.event == "term"
	}
	assert.True(t, gotTerm, "COMMAND neither died of SIGTERM nor trapped it; stderr: %s", errOut)
}
