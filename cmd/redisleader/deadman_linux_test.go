package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redisleader/redisleader/internal/redisserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests below are about the supervisor's dead-man's switch
// (deadman_linux.go) and what Ctrl-Z does to COMMAND.

// fifoJob is the COMMAND of the tests below: it ignores SIGTERM (so only
// SIGKILL ends it, as late as possible), opens $FIFO for writing, writes a
// line and becomes sleep 60, which holds the FIFO open until it dies.
const fifoJob = `trap '' TERM; exec 3>"$FIFO"; echo "$$" >&3; exec sleep 60`

// A jobWatch sees a fifoJob start (its line) and end (end of file: the
// kernel closes the FIFO when the process dies), each as the instant the
// test read it.
type jobWatch struct {
	pid     chan int
	started chan time.Time
	ended   chan time.Time
}

// watchJob makes the FIFO for a fifoJob in dir and watches it.
func watchJob(t *testing.T, dir, name string) (fifo string, w *jobWatch) {
	t.Helper()
	fifo = filepath.Join(dir, name)
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	w = &jobWatch{pid: make(chan int, 1), started: make(chan time.Time, 1), ended: make(chan time.Time, 1)}
	go func() {
		f, err := os.Open(fifo) // until the job opens it, or the clean-up below
		if err != nil {
			return
		}
		defer f.Close()
		in := bufio.NewReader(f)
		if line, err := in.ReadString('\n'); err == nil {
			w.started <- time.Now()
			var pid int
			_, _ = fmt.Sscan(line, &pid)
			w.pid <- pid
		}
		_, _ = io.Copy(io.Discard, in)
		w.ended <- time.Now()
	}()
	t.Cleanup(func() { // a watcher still waiting in open gets an empty job
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			_ = f.Close()
		}
	})
	return fifo, w
}

// receive returns the next value of c, or fails the test after within.
func receive[T any](t *testing.T, c <-chan T, within time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(within):
		t.Fatalf("timed out after %v waiting for %s", within, what)
		var zero T
		return zero
	}
}

// A run stopped past its lease while another run campaigns for the name:
// by SIGSTOP (it cannot act), or by Ctrl-Z (SIGTSTP: COMMAND stops with it).
// Its supervisor stops COMMAND on its own by the lease's deadline, before
// the other run's COMMAND starts. COMMAND ignores SIGTERM, so only the
// switch's SIGKILL ends it. Before the switch, COMMAND ran on (or stayed
// stopped, to run on at fg) and the two jobs overlapped. Once continued,
// the stopped run reports the loss (exit status 3).
func TestRunStoppedPastLeaseStopsCommand(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		sig  syscall.Signal
	}{{"SIGSTOP", syscall.SIGSTOP}, {"Ctrl-Z", syscall.SIGTSTP}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			margin := stopPastLease(t, tc.sig)
			t.Logf("%s: a's COMMAND ended %v before b's started", tc.name, margin)
		})
	}
}

// stopPastLease runs the scenario of TestRunStoppedPastLeaseStopsCommand,
// with sig to stop the first run, and returns the margin: the time from
// the end of its COMMAND to the start of the next leader's.
func stopPastLease(t *testing.T, sig syscall.Signal) time.Duration {
	srv := redisserver.Start(t)
	dir := t.TempDir()
	fifoA, a := watchJob(t, dir, "a")
	fifoB, b := watchJob(t, dir, "b")
	args := []string{"run", "--verbose", "--redis", "redis://" + srv.Addr(), "--name", "job", "--ttl", "1s", "--grace", "1s", "--", "sh", "-c", fifoJob}
	runA := startCLI(t, "run a", []string{"FIFO=" + fifoA}, append([]string{args[0], "--value", "a"}, args[1:]...)...)
	receive(t, a.started, cliTimeout, "a's COMMAND to start")
	pidA := receive(t, a.pid, cliTimeout, "a's COMMAND's PID")
	t.Cleanup(func() { _ = syscall.Kill(pidA, syscall.SIGKILL) })
	runB := startCLI(t, "run b", []string{"FIFO=" + fifoB}, append([]string{args[0], "--value", "b"}, args[1:]...)...)
	runB.stderr.waitContains(t, "campaigning for leadership")

	require.NoError(t, syscall.Kill(runA.cmd.Process.Pid, sig))
	t.Cleanup(func() { _ = syscall.Kill(runA.cmd.Process.Pid, syscall.SIGCONT) })
	startB := receive(t, b.started, 3*time.Second, "b's COMMAND to start once a's lease has expired")
	var endA time.Time
	select {
	case endA = <-a.ended:
	case <-time.After(2 * time.Second):
		t.Fatalf("a's COMMAND (PID %d) still runs 2s after b's started: two jobs at once", pidA)
	}
	margin := startB.Sub(endA)
	require.Positive(t, margin, "a's COMMAND ended %v after b's started: two jobs at once", -margin)

	require.NoError(t, syscall.Kill(runA.cmd.Process.Pid, syscall.SIGCONT))
	assert.Equal(t, exitLost, runA.wait(t), "stderr: %s", runA.stderr.String())
	assert.Contains(t, runA.stderr.String(), "by the lease's deadline")
	runB.signal(t, syscall.SIGTERM)
	runB.wait(t)
	return margin
}

// stopped reports whether pid is stopped (job control), from its State in
// /proc/PID/status.
func stopped(t *testing.T, pid int) bool {
	return strings.HasPrefix(procStatus(t, pid, "State"), "T")
}

// Ctrl-Z (SIGTSTP to run, whose process group is the terminal's, not
// COMMAND's) stops COMMAND with run, as a shell user expects, and fg
// (SIGCONT) continues both: a pause shorter than the lease ends nothing.
// Before, run stopped alone and COMMAND ran on.
func TestRunCtrlZStopsCommandWithRun(t *testing.T) {
	t.Parallel()
	srv := redisserver.Start(t)
	pidfile := filepath.Join(t.TempDir(), "pid")
	p := startCLI(t, "run", []string{"PIDFILE=" + pidfile},
		"run", "--redis", "redis://"+srv.Addr(), "--name", "job", "--ttl", "10s", "--", "sh", "-c", `echo $$ > "$PIDFILE"; exec sleep 30`)
	job, run := readPID(t, pidfile), p.cmd.Process.Pid
	t.Cleanup(func() { _ = syscall.Kill(run, syscall.SIGCONT) })
	p.signal(t, syscall.SIGTSTP)
	pollUntil(t, cliTimeout, "run to stop", func() bool { return stopped(t, run) })
	pollUntil(t, 2*time.Second, "COMMAND to stop with run", func() bool { return stopped(t, job) })
	p.signal(t, syscall.SIGCONT)
	pollUntil(t, 2*time.Second, "COMMAND to continue with run", func() bool { return !stopped(t, job) })
	assert.False(t, stopped(t, run), "run is still stopped")
	assert.NotNil(t, srv.Do(t, "GET", "redisleader:{job}"), "run does not lead after a short Ctrl-Z")
	p.signal(t, syscall.SIGTERM)
	assert.Equal(t, 128+int(syscall.SIGTERM), p.wait(t), "stderr: %s", p.stderr.String())
}
