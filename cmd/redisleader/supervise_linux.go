package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"time"
	"unsafe"
)

// superviseArg, as the first argument, makes redisleader the supervisor of
// one COMMAND instead of a command of its own. run starts it; it is not a
// command for people, so neither the help nor the completion shows it.
const superviseArg = "__redisleader_supervise"

// parentDeathSignal is what the kernel sends the supervisor when run dies:
// a signal that run never forwards, so that the supervisor can tell the two
// apart.
const parentDeathSignal = syscall.SIGUSR1

// newCommand makes the exec.Cmd that runs COMMAND (args) for run.
//
// With group, run starts a supervisor (this binary, through /proc/self/exe,
// which works even if the file was replaced since) that leads a new process
// group and starts COMMAND in that group. When run dies, even by SIGKILL,
// the kernel sends the supervisor parentDeathSignal, and it SIGKILLs the
// whole group, itself included: nothing of COMMAND outlives run's lease,
// not even a grandchild. Pdeathsig alone could not do this: it reaches only
// the process it is set on. But the supervisor can die first (kill -9 of
// both, pkill -9 -f redisleader), and then COMMAND would run on: it gets
// Pdeathsig SIGKILL, so it dies with the supervisor, however that dies.
// When only the supervisor dies, run (while it runs) kills the rest of the
// group; that rest outlives them only if both die by SIGKILL before either
// could act, or if it left the group (setsid, a daemon). run signals the
// group as before (the supervisor ignores what run forwards; COMMAND gets
// it), and the supervisor exits as COMMAND did, so run sees COMMAND's
// status.
//
// Without group (--no-process-group), COMMAND is run's direct child and
// Pdeathsig SIGKILLs it when run dies: its own process only, not what it
// started.
//
// Pdeathsig is sent when the OS thread that started the child exits, so
// the caller keeps that thread locked until the child has been waited for
// (see runCommand).
func newCommand(args []string, group bool) *exec.Cmd {
	if !group {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.SysProcAttr = childProcAttr(false)
		return cmd
	}
	cmd := &exec.Cmd{
		Path: "/proc/self/exe",
		Args: append([]string{os.Args[0], superviseArg, strconv.Itoa(os.Getpid()), "--"}, args...),
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: parentDeathSignal}
	return cmd
}

// supervise is the supervisor's main: args are "RUN_PID -- COMMAND
// [ARGS...]". It returns only COMMAND's exit status; when COMMAND was
// killed by a signal, the supervisor dies of the same signal.
func supervise(args []string) int {
	if len(args) < 3 || args[1] != "--" {
		fmt.Fprintln(os.Stderr, "redisleader: internal supervisor mode: started by redisleader run only")
		return exitUsage
	}
	parent, err := strconv.Atoi(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "redisleader: internal supervisor mode: started by redisleader run only")
		return exitUsage
	}
	command := args[2:]

	died := make(chan os.Signal, 1)
	signal.Notify(died, parentDeathSignal)
	// run signals the whole group, COMMAND included: the supervisor only
	// has to survive it. A signal ignored at start (nohup) stays ignored,
	// for COMMAND too.
	forwarded := make(chan os.Signal, 4)
	catchSignals(forwarded)
	// run may have died before the handler above was installed: its
	// parentDeathSignal then went unseen (or killed this process before
	// it could start anything).
	if os.Getppid() != parent {
		return exitError
	}

	// Pdeathsig follows the thread that starts COMMAND: this one, locked
	// to this goroutine for good, lives as long as the process.
	runtime.LockOSThread()
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
	for {
		select {
		case <-died:
			_ = syscall.Kill(0, syscall.SIGKILL) // this process group: COMMAND, what it started, and this process
		case <-forwarded:
		case <-exited:
			ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
			if ws.Signaled() {
				dieOf(ws.Signal())
			}
			return cmd.ProcessState.ExitCode()
		}
	}
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
