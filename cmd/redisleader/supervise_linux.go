package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"
	"time"
	"unsafe"
)

// superviseArg, as the first argument, makes redisleader the supervisor of
// one COMMAND instead of a command of its own. run starts it; it is not a
// command for people, so neither the help nor the completion shows it.
const superviseArg = "__redisleader_supervise"

// ctlFD is the supervisor's end of the pipe from run (ExtraFiles[0]).
const ctlFD = 3

// envTestHold, for tests only, names a FIFO that the supervisor reads to
// its end before it starts COMMAND, which holds open the moment when run
// has started the supervisor and COMMAND does not run yet.
const envTestHold = "REDISLEADER_TEST_HOLD_START"

// newCommand makes the exec.Cmd that runs COMMAND (args) for run, and with
// group the write end of the pipe to its supervisor (ctl), which run keeps
// open until the supervisor has exited and closes then.
//
// With group, run starts a supervisor (this binary, through /proc/self/exe,
// which works even if the file was replaced since) that leads a new process
// group and starts COMMAND in that group. run writes to ctl the signals it
// sends the command (a byte each), and the lease before the supervisor
// starts and after each renewal (deadman_linux.go: the supervisor stops
// COMMAND by the lease's deadline on its own, should run stop or hang). It
// never closes the pipe early: the supervisor reads end-of-file only when
// run has died, even by SIGKILL, and then SIGKILLs the whole group, itself
// included. Nothing else can make it do that: a signal can come from
// anyone (kill -USR1 0 in the job). The supervisor sends run's signals to
// the group once COMMAND has started, not before, and COMMAND gets
// Pdeathsig SIGKILL: it dies with the supervisor, however the supervisor
// dies. When only the supervisor dies, run (while it runs) kills the rest
// of the group. So COMMAND never outlives run or the supervisor; the rest
// of the group outlives them only if both die by SIGKILL before either
// could act (kill -9 of both, pkill -9 -f redisleader) or if it left the
// group (setsid, a daemon). The supervisor exits as COMMAND did, so run
// sees COMMAND's status.
//
// Without group (--no-process-group), COMMAND is run's direct child and
// Pdeathsig SIGKILLs it when run dies: its own process only, not what it
// started. Pdeathsig is sent when the OS thread that started the child
// exits, so the caller keeps that thread locked until the child has been
// waited for (see startCommand).
func newCommand(args []string, group bool) (cmd *exec.Cmd, ctl *os.File, err error) {
	if !group {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.SysProcAttr = childProcAttr(false)
		return cmd, nil, nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	cmd = &exec.Cmd{
		Path:        "/proc/self/exe",
		Args:        append([]string{os.Args[0], superviseArg, "--"}, args...),
		ExtraFiles:  []*os.File{r}, // ctlFD
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	return cmd, w, nil
}

// supervise is the supervisor's main: args are "-- COMMAND [ARGS...]". It
// returns only COMMAND's exit status; when COMMAND was killed by a signal,
// the supervisor dies of the same signal. It starts COMMAND once run has
// told it the lease, and stops COMMAND by the lease's deadline unless run
// tells it a later one (deadman_linux.go).
func supervise(args []string) int {
	if len(args) < 2 || args[0] != "--" || !startedByRun() {
		fmt.Fprintln(os.Stderr, "redisleader: internal supervisor mode: started by redisleader run only")
		return exitUsage
	}
	command := args[1:]
	// Anyone may signal the group (run, the job itself, an operator): the
	// supervisor survives it and COMMAND gets it. The stop signals are
	// caught, as in run, and SIGTSTP; the others do not end or stop a Go
	// program.
	caught := make(chan os.Signal, 4)
	catchSignals(caught)
	catchTSTP(caught)
	ctl := os.NewFile(ctlFD, "run")
	syscall.CloseOnExec(ctlFD) // between run and the supervisor only: not for COMMAND
	from := &fromRun{signals: make(chan syscall.Signal, 64), leases: make(chan lease, 1), gone: make(chan struct{})}
	go from.read(ctl)
	holdForTest()

	// Pdeathsig follows the thread that starts COMMAND: this one, locked
	// to this goroutine for good, lives as long as the process.
	runtime.LockOSThread()
	var sw *deadman
	select {
	case <-from.gone:
		return exitError // run died before COMMAND started
	case l := <-from.leases: // run writes it before it starts this process; the newest told
		sw = newDeadman(l)
	}
	if reached(sw.lease.stopAt) { // not scheduled since: another host may lead by now
		fmt.Fprintf(os.Stderr, "redisleader: the lease had ended before %s could start; not starting it\n", printable(command[0]))
		_ = syscall.Kill(0, syscall.SIGKILL) // as the switch would have: run reports the loss
		return exitError
	}
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "redisleader: cannot start %s: %v\n", printable(command[0]), err)
		return startFailure(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	return from.supervise(cmd, exited, sw, caught)
}

// supervise passes run's signals on to COMMAND's group, moves the switch to
// each lease run tells, and kills the group when run dies or the switch
// says so, until COMMAND has exited (exited); it returns COMMAND's status.
func (from *fromRun) supervise(cmd *exec.Cmd, exited <-chan struct{}, sw *deadman, caught <-chan os.Signal) int {
	for {
		select {
		case <-from.gone:
			_ = syscall.Kill(0, syscall.SIGKILL) // this process group: COMMAND, what it started, and this process
		case sig := <-from.signals: // sent before COMMAND started too: it gets it now
			if sw.passes(sig) {
				_ = syscall.Kill(0, sig) // this process catches it (SIGCONT does nothing to it)
			}
		case l := <-from.leases:
			sw.arm(l)
		case <-sw.stop.C:
			if from.newest(sw); reached(sw.lease.stopAt) {
				sw.fire()
			}
		case <-sw.kill.C:
			if from.newest(sw); reached(sw.lease.killAt) {
				_ = syscall.Kill(0, syscall.SIGKILL) // the lease's deadline: nothing of the group outlives it
			}
		case <-caught:
		case <-exited:
			if sw.fired { // what COMMAND left dies now, with this process: run sees the switch's SIGKILL
				_ = syscall.Kill(0, syscall.SIGKILL)
			}
			killRest() // run may be stopped: it cannot kill what COMMAND left
			ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
			if ws.Signaled() {
				dieOf(ws.Signal())
			}
			return cmd.ProcessState.ExitCode()
		}
	}
}

// startedByRun reports whether this process looks started by run's
// newCommand: it leads its own process group (so that killing the group
// cannot hit its caller's) and ctlFD is a pipe.
func startedByRun() bool {
	var st syscall.Stat_t
	return syscall.Getpgrp() == os.Getpid() &&
		syscall.Fstat(ctlFD, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFIFO
}

// fromRun is what the supervisor reads from run.
type fromRun struct {
	signals chan syscall.Signal // to pass on to the group
	leases  chan lease          // the newest lease run told, not yet taken (capacity 1)
	gone    chan struct{}       // closed when run has died
}

// newest arms sw with the lease waiting in from.leases, if one is: a timer
// that fires is checked against the newest lease read from the pipe, not
// one it has replaced (a supervisor not scheduled for a while).
func (from *fromRun) newest(sw *deadman) {
	select {
	case l := <-from.leases:
		sw.arm(l)
	default:
	}
}

// tell puts l in from.leases in place of an older lease not yet taken, so
// that reading the pipe never waits for the supervisor's loop.
func (from *fromRun) tell(l lease) {
	for {
		select {
		case from.leases <- l:
			return
		default:
		}
		select {
		case <-from.leases:
		default:
		}
	}
}

// read passes on the signals and leases that run writes to ctl, and closes
// gone when run has died (end of file: no process holds the write end any
// more).
func (from *fromRun) read(ctl *os.File) {
	defer close(from.gone)
	in := bufio.NewReader(ctl)
	var msg [leaseMsgLen - 1]byte
	for {
		b, err := in.ReadByte()
		if err != nil {
			return
		}
		if b != leaseMsg {
			if sig := syscall.Signal(b); forwardable(sig) {
				from.signals <- sig
			}
			continue
		}
		if _, err := io.ReadFull(in, msg[:]); err != nil {
			return
		}
		from.tell(parseLease(msg[:]))
	}
}

// forwardable reports whether sig is a signal that run passes on: a stop
// signal the supervisor catches, or SIGTSTP and SIGCONT (job control).
func forwardable(sig syscall.Signal) bool {
	if sig == syscall.SIGTSTP || sig == syscall.SIGCONT {
		return true
	}
	for _, s := range stopSignals {
		if s == sig {
			return !ignoredAtStart(s)
		}
	}
	return false
}

// holdForTest waits, if envTestHold names a FIFO, until a test has opened
// it, written what it wants and closed it.
func holdForTest() {
	fifo := os.Getenv(envTestHold)
	if fifo == "" {
		return
	}
	_ = os.Unsetenv(envTestHold)
	if f, err := os.Open(fifo); err == nil {
		_, _ = io.Copy(io.Discard, f)
		_ = f.Close()
	}
}

// killRest SIGKILLs what is left of this process group once COMMAND has
// exited, but not this process, which must exit with COMMAND's status: it
// first moves into run's process group (its parent's, in the same session),
// so that its own group holds only what COMMAND left. The kernel kills a
// group atomically with respect to fork. If it cannot move (run has died:
// its parent is another process), it kills the group with itself.
func killRest() {
	if pg, err := syscall.Getpgid(os.Getppid()); err == nil && syscall.Setpgid(0, pg) == nil {
		_ = syscall.Kill(-os.Getpid(), syscall.SIGKILL)
		return
	}
	_ = syscall.Kill(0, syscall.SIGKILL)
}

// dieOf ends this process by sig, with the signal's default action (and no
// core dump), so that run's wait status is COMMAND's. If it cannot, it
// returns and the caller exits 128+sig, as a shell would report it.
func dieOf(sig syscall.Signal) {
	_ = syscall.Setrlimit(syscall.RLIMIT_CORE, &syscall.Rlimit{})
	signal.Reset(sig)
	// The Go runtime keeps its own handler even after Reset (for SIGQUIT
	// it would print goroutines and exit 2): set the default action.
	var act [8]uint64 // struct sigaction, all zero: SIG_DFL, no flags
	_, _, _ = syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0)
	// To this thread, where it is taken on the way back from the system
	// call: sent to the process, it could go to another thread and lose
	// the race with os.Exit.
	runtime.LockOSThread()
	_ = syscall.Tgkill(os.Getpid(), syscall.Gettid(), sig)
	time.Sleep(time.Second) // not reached unless the signal could not be raised
	os.Exit(128 + int(sig))
}
