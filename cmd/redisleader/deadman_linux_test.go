package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader"
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

// leftoverJob starts a fifoJob-like process in the background (same
// process group: sh has no job control here), then exits 0 once $GOFILE
// exists, leaving that process behind.
const leftoverJob = `(trap '' TERM; exec 3>"$FIFO"; echo "$$" >&3; exec sleep 60) &
while [ ! -e "$GOFILE" ]; do sleep 0.05; done; exit 0`

// Run is SIGSTOPped, then COMMAND exits 0 on its own, leaving a process of
// its group behind: the supervisor kills it at once (killRest), since run,
// stopped, cannot, and it dies before the next leader's COMMAND starts.
// Before, the supervisor killed what was left only if the switch had fired,
// and exited: the leftover outlived the lease, two jobs ran at once.
func TestRunStoppedLeftoverDiesWhenCommandExits(t *testing.T) {
	t.Parallel()
	srv := redisserver.Start(t)
	dir := t.TempDir()
	fifoA, a := watchJob(t, dir, "a")
	fifoB, b := watchJob(t, dir, "b")
	goFile := filepath.Join(dir, "go")
	args := []string{"--verbose", "--redis", "redis://" + srv.Addr(), "--name", "job", "--ttl", "1s", "--grace", "1s"}
	runA := startCLI(t, "run a", []string{"FIFO=" + fifoA, "GOFILE=" + goFile},
		append(append([]string{"run", "--value", "a"}, args...), "--", "sh", "-c", leftoverJob)...)
	receive(t, a.started, cliTimeout, "a's leftover to start")
	pidA := receive(t, a.pid, cliTimeout, "a's leftover's PID")
	t.Cleanup(func() { _ = syscall.Kill(pidA, syscall.SIGKILL) })
	runB := startCLI(t, "run b", []string{"FIFO=" + fifoB},
		append(append([]string{"run", "--value", "b"}, args...), "--", "sh", "-c", fifoJob)...)
	runB.stderr.waitContains(t, "campaigning for leadership")

	require.NoError(t, syscall.Kill(runA.cmd.Process.Pid, syscall.SIGSTOP))
	t.Cleanup(func() { _ = syscall.Kill(runA.cmd.Process.Pid, syscall.SIGCONT) })
	require.NoError(t, os.WriteFile(goFile, nil, 0o600)) // COMMAND exits 0, its leftover runs on
	startB := receive(t, b.started, 5*time.Second, "b's COMMAND to start once a's lease has expired")
	select {
	case endA := <-a.ended:
		require.True(t, endA.Before(startB), "a's leftover ended %v after b's COMMAND started", endA.Sub(startB))
	case <-time.After(2 * time.Second):
		t.Fatalf("a's leftover (PID %d, in COMMAND's group) still runs 2s after b's COMMAND started: two jobs at once", pidA)
	}
	require.NoError(t, syscall.Kill(runA.cmd.Process.Pid, syscall.SIGCONT))
	runA.wait(t)
	runB.signal(t, syscall.SIGTERM)
	runB.wait(t)
}

// The supervisor is held (the test hook: a supervisor not scheduled, as on
// a starved host) while run is SIGSTOPped, until a's lease has expired and
// b's COMMAND runs. Released, it does not exec a's COMMAND: the newest lease
// run told it is past its stop time. Before, it execed COMMAND on any first
// lease (then the switch, past due, killed it): COMMAND started while
// another host led. Seen by inotify: exec opens COMMAND's file.
func TestRunSupervisorNeverStartsCommandPastLease(t *testing.T) {
	t.Parallel()
	srv := redisserver.Start(t)
	dir := t.TempDir()
	hold, script := holdFIFO(t, dir), filepath.Join(dir, "job-a.sh")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\nexec sleep 60\n"), 0o755))
	execs := watchExec(t, script)
	fifoB, b := watchJob(t, dir, "b")
	args := []string{"--verbose", "--redis", "redis://" + srv.Addr(), "--name", "job", "--ttl", "1s", "--grace", "1s"}
	runA := startCLI(t, "run a", []string{envTestHold + "=" + hold},
		append(append([]string{"run", "--value", "a"}, args...), "--", script)...)
	w := openFIFO(t, hold, "a's supervisor to reach the hook before COMMAND starts")
	require.NoError(t, syscall.Kill(runA.cmd.Process.Pid, syscall.SIGSTOP))
	t.Cleanup(func() { _ = syscall.Kill(runA.cmd.Process.Pid, syscall.SIGCONT) })
	sup := childOf(t, runA.cmd.Process.Pid)
	runB := startCLI(t, "run b", []string{"FIFO=" + fifoB},
		append(append([]string{"run", "--value", "b"}, args...), "--", "sh", "-c", fifoJob)...)
	receive(t, b.started, 5*time.Second, "b's COMMAND to start once a's lease has expired")
	require.Zero(t, execs(), "a's COMMAND ran before the supervisor was let go")

	require.NoError(t, w.Close()) // a's supervisor goes on, its lease long past
	pollUntil(t, cliTimeout, "a's supervisor to exit", func() bool {
		s := procStatus(t, sup, "State")
		return s == "" || s[0] == 'Z'
	})
	require.Zero(t, execs(), "a's supervisor started COMMAND past its lease's deadline, while b leads and runs its job")
	require.NoError(t, syscall.Kill(runA.cmd.Process.Pid, syscall.SIGCONT))
	runA.wait(t)
	runB.signal(t, syscall.SIGTERM)
	runB.wait(t)
}

// holdFIFO makes in dir the FIFO for envTestHold, which holds the
// supervisor before it starts COMMAND until openFIFO's file is closed.
func holdFIFO(t *testing.T, dir string) string {
	hold := filepath.Join(dir, "hold")
	require.NoError(t, syscall.Mkfifo(hold, 0o600))
	return hold
}

// watchExec watches path for opens (exec opens the file it runs) and
// returns a function that counts those seen since.
func watchExec(t *testing.T, path string) func() int {
	fd, err := syscall.InotifyInit1(syscall.IN_NONBLOCK | syscall.IN_CLOEXEC)
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Close(fd) })
	_, err = syscall.InotifyAddWatch(fd, path, syscall.IN_OPEN)
	require.NoError(t, err)
	return func() int {
		var buf [4096]byte
		n, _ := syscall.Read(fd, buf[:])
		return max(n, 0) / syscall.SizeofInotifyEvent
	}
}

// childOf returns the one child of pid (run's supervisor).
func childOf(t *testing.T, pid int) int {
	var child int
	pollUntil(t, cliTimeout, "run's child", func() bool {
		tasks, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "children"))
		for _, f := range tasks { // the thread that started it, locked to its goroutine, may be any
			data, _ := os.ReadFile(f)
			if _, err := fmt.Sscan(string(data), &child); err == nil {
				return true
			}
		}
		return false
	})
	return child
}

// The supervisor is held before it starts COMMAND for three TTLs while run
// leads and renews: the first lease it was told has expired, newer ones have
// come. Released, it starts COMMAND on the newest lease and leaves it
// running. Before, it read the leases one by one from a queue, and the
// stale first lease's timers, already due, raced the newer leases in its
// select: the switch killed COMMAND on a lease that had been replaced.
func TestRunSupervisorHeldActsOnNewestLease(t *testing.T) {
	t.Parallel()
	srv := redisserver.Start(t)
	dir := t.TempDir()
	hold := holdFIFO(t, dir)
	fifo, job := watchJob(t, dir, "a")
	p := startCLI(t, "run", []string{envTestHold + "=" + hold, "FIFO=" + fifo},
		"run", "--verbose", "--redis", "redis://"+srv.Addr(), "--name", "job", "--ttl", "1s", "--grace", "1s", "--", "sh", "-c", fifoJob)
	w := openFIFO(t, hold, "the supervisor to reach the hook before COMMAND starts")
	<-time.After(3 * time.Second) // the fault: a supervisor not scheduled for three TTLs
	require.NoError(t, w.Close())
	receive(t, job.started, 5*time.Second, "COMMAND to start and report, not killed by the switch of a replaced lease")
	pid := receive(t, job.pid, cliTimeout, "COMMAND's PID")
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	select {
	case <-job.ended:
		t.Fatalf("the switch killed COMMAND on a replaced lease; stderr: %s", p.stderr.String())
	case <-time.After(2 * time.Second): // two TTLs: a stale timer has fired by then
	}
	assert.NotNil(t, srv.Do(t, "GET", "redisleader:{job}"), "run does not lead any more")
	p.signal(t, syscall.SIGTERM)
	p.wait(t)
}

// run does not start COMMAND (nor its supervisor) on a lease that has ended
// since it was elected, as after a run not scheduled in between: it reports
// the loss (errLeaseEnding) and COMMAND never runs. Before, it started it.
func TestRunStartsNoCommandOnEndedLease(t *testing.T) {
	t.Parallel()
	srv := redisserver.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	s, err := redisleader.NewSession(client, redisleader.WithTTL(time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(context.Background()); _ = client.Close() })
	lock, err := s.TryLock(context.Background(), "job")
	require.NoError(t, err)
	require.NoError(t, lock.Release(context.Background()))
	marker := filepath.Join(t.TempDir(), "ran")
	r := &runner{
		f:       &runFlags{name: "job", ttl: time.Second, grace: time.Second, fenceEnv: "REDISLEADER_FENCE", noProcessGroup: true},
		command: []string{"sh", "-c", `touch "$0"`, marker},
		stdout:  io.Discard, stderr: io.Discard,
	}
	_, _, err = r.startCommand(lock)
	require.ErrorIs(t, err, errLeaseEnding, "run started COMMAND on a lease that had ended")
	_, err = os.Stat(marker)
	assert.ErrorIs(t, err, os.ErrNotExist, "COMMAND ran")
}
