//go:build linux

package main

import (
	"errors"
	"fmt"
	"net"
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

// signalsPending reports whether pid has a signal pending (not yet taken by
// a handler), from /proc/PID/status.
func signalsPending(t *testing.T, pid int) bool {
	t.Helper()
	return strings.Trim(procStatus(t, pid, "SigPnd")+procStatus(t, pid, "ShdPnd"), "0") != ""
}

// procStatus returns the field key of /proc/PID/status, or "" if pid has
// been reaped.
func procStatus(t *testing.T, pid int, key string) string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if errors.Is(err, os.ErrNotExist) {
		return ""
	}
	require.NoError(t, err)
	for _, l := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && k == key {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no %s in /proc/%d/status", key, pid)
	return ""
}

// openFIFO opens fifo for writing, which returns once another process has
// opened it for reading (what), or fails the test after cliTimeout.
func openFIFO(t *testing.T, fifo, what string) *os.File {
	t.Helper()
	opened := make(chan *os.File, 1)
	go func() {
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			close(opened)
			return
		}
		opened <- w
	}()
	select {
	case w := <-opened:
		require.NotNil(t, w, "open %s", fifo)
		return w
	case <-time.After(cliTimeout):
		t.Fatalf("timed out after %v waiting for %s", cliTimeout, what)
		return nil
	}
}

// A SIGTERM that arrives before run campaigns (here while it reads
// --password-file, a FIFO, so the window is held open; in real life while it
// parses flags, reads the file or looks COMMAND up in PATH) is not lost: run
// never starts the job and exits 143.
func TestRunEarlySignalStopsBeforeCampaign(t *testing.T) {
	t.Parallel()
	srv := quietRedisServer(t)
	srv.Do(t, "CONFIG", "SET", "requirepass", "pw")
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pw")
	marker := filepath.Join(dir, "ran")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	p := startCLI(t, "run", []string{"MARKER=" + marker},
		"run", "--redis", "redis://"+srv.Addr(), "--password-file", fifo, "--name", "job", "--",
		"sh", "-c", `echo ran > "$MARKER"`)
	w := openFIFO(t, fifo, "run to open --password-file")
	p.signal(t, syscall.SIGTERM)
	pollUntil(t, cliTimeout, "the SIGTERM to be taken by run's handler", func() bool { return !signalsPending(t, p.cmd.Process.Pid) })
	_, err := w.WriteString("pw\n")
	require.NoError(t, err)
	require.NoError(t, w.Close())
	code := p.wait(t)
	_, statErr := os.Stat(marker)
	assert.True(t, os.IsNotExist(statErr), "the job ran although run had received SIGTERM before campaigning")
	assert.Equal(t, 128+int(syscall.SIGTERM), code, "stderr: %s", p.stderr.String())
}

// When run itself is SIGKILLed (OOM killer, kill -9, a host agent), the
// supervisor that leads COMMAND's process group kills the whole group: a
// grandchild (any "sh -c 'a; b'" job, a script that starts a helper) is gone
// by the time the lease has expired and another host may start the job.
// Pdeathsig alone would kill COMMAND's process only.
func TestRunSIGKILLKillsProcessGroup(t *testing.T) {
	t.Parallel()
	srv := redisserver.Start(t)
	pidfile := filepath.Join(t.TempDir(), "pid")
	p := startCLI(t, "run", []string{"PIDFILE=" + pidfile, "IGNORE=USR2"},
		"run", "--redis", "redis://"+srv.Addr(), "--name", "job", "--ttl", "1s", "--", "sh", "-c", groupScript)
	grandchild := readPID(t, pidfile)
	t.Cleanup(func() { _ = syscall.Kill(grandchild, syscall.SIGKILL) })
	p.signal(t, syscall.SIGKILL)
	p.wait(t)
	pollUntil(t, cliTimeout, "the lease to expire", func() bool { return srv.Do(t, "GET", "redisleader:{job}") == nil })
	deadline := time.Now().Add(3 * time.Second)
	for !processGone(grandchild) && time.Now().Before(deadline) {
		<-time.After(pollEvery)
	}
	assert.True(t, processGone(grandchild),
		"grandchild %d of the SIGKILLed leader still runs after its lease expired: the next leader runs the job alongside it", grandchild)
}

// status and watch stopped (SIGTERM) while connecting do not print "cannot
// reach Redis at ...: context canceled": Redis was not found unreachable,
// the user stopped them.
func TestInterruptWhileConnecting(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"status", "watch"} {
		t.Run(cmd, func(t *testing.T) {
			t.Parallel()
			l, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			t.Cleanup(func() { _ = l.Close() })
			accepted := make(chan net.Conn, 1)
			go func() {
				c, err := l.Accept()
				if err == nil {
					accepted <- c
				}
			}()
			p := startCLI(t, cmd, nil, cmd, "--redis", "redis://"+l.Addr().String(), "job")
			select {
			case c := <-accepted:
				defer c.Close()
			case <-time.After(cliTimeout):
				t.Fatal("no connection")
			}
			p.signal(t, syscall.SIGTERM)
			p.wait(t)
			assert.NotContains(t, p.stderr.String(), "context canceled")
		})
	}
}

// "nohup redisleader run ..." (or a non-interactive shell's "... &", which
// ignores SIGINT and SIGQUIT) starts run with the signal ignored, and it
// stays ignored, for run and for COMMAND (nohup(1), POSIX job control):
// os/signal.Notify would un-ignore it. The terminal's SIGHUP neither stops
// the job nor run, which exits with the job's status.
func TestRunNohupIgnoredSIGHUP(t *testing.T) {
	t.Parallel()
	srv := quietRedisServer(t)
	dir := t.TempDir()
	marker := filepath.Join(dir, "marker")
	goFile := filepath.Join(dir, "go")
	job := `echo "x $$ start" >> "$MARKER"; while [ ! -e "$GOFILE" ]; do sleep 0.05; done; echo "x $$ done" >> "$MARKER"`
	p := startShellCLI(t, "nohup run", `trap "" HUP; exec "$@"`, []string{"MARKER=" + marker, "GOFILE=" + goFile},
		"run", "--redis", "redis://"+srv.Addr(), "--name", "job", "--", "sh", "-c", job)
	waitMarker(t, marker, 1)
	p.signal(t, syscall.SIGHUP)
	pollUntil(t, cliTimeout, "the SIGHUP to be taken", func() bool { return !p.running() || !signalsPending(t, p.cmd.Process.Pid) })
	require.NoError(t, os.WriteFile(goFile, nil, 0o600))
	assert.Equal(t, 0, p.wait(t), "run started under nohup acted on SIGHUP; stderr: %s", p.stderr.String())
	lines := readMarker(t, marker)
	assert.Len(t, lines, 2, "the job did not run to its end: %v", lines)
}

// ignores reports whether pid ignores sig, from SigIgn in /proc/PID/status.
func ignores(t *testing.T, pid int, sig syscall.Signal) bool {
	t.Helper()
	mask, err := strconv.ParseUint(procStatus(t, pid, "SigIgn"), 16, 64)
	require.NoError(t, err, "SigIgn of %d", pid)
	return mask&(1<<(sig-1)) != 0
}

// A script's "run ... &" starts run with SIGINT and SIGQUIT ignored (POSIX,
// without job control), so that ^C and ^\ on the terminal spare it. Both
// stay ignored, for run and for the job, as SIGHUP does under nohup: a
// SIGQUIT neither stops the job nor run, which exits with the job's status.
func TestRunBackgroundedIgnoresSIGQUIT(t *testing.T) {
	t.Parallel()
	srv := quietRedisServer(t)
	dir := t.TempDir()
	runPIDFile, jobPIDFile, goFile := filepath.Join(dir, "run"), filepath.Join(dir, "job"), filepath.Join(dir, "go")
	p := startShellCLI(t, "run &", `"$@" & echo $! > "$RUNPID"; wait $!`,
		[]string{"RUNPID=" + runPIDFile, "PIDFILE=" + jobPIDFile, "GOFILE=" + goFile},
		"run", "--redis", "redis://"+srv.Addr(), "--name", "job", "--", "sh", "-c",
		`echo $$ > "$PIDFILE"; while [ ! -e "$GOFILE" ]; do sleep 0.05; done`)
	run, job := readPID(t, runPIDFile), readPID(t, jobPIDFile)
	assert.True(t, ignores(t, job, syscall.SIGINT), "the job does not ignore SIGINT")
	assert.True(t, ignores(t, job, syscall.SIGQUIT), "the job does not ignore SIGQUIT")
	require.NoError(t, syscall.Kill(run, syscall.SIGQUIT))
	pollUntil(t, cliTimeout, "the SIGQUIT to be taken", func() bool { return !signalsPending(t, run) })
	require.NoError(t, os.WriteFile(goFile, nil, 0o600))
	assert.Equal(t, 0, p.wait(t), "run started by \"&\" acted on SIGQUIT; stderr: %s", p.stderr.String())
}
