package main

// The supervisor's dead-man's switch. run leads only until its lease's
// local deadline D (Lock.Deadline), which moves on with every renewal; a
// run that is not scheduled (Ctrl-Z, SIGSTOP, a host that starves it)
// renews nothing, and from the key's expiry in Redis on another host may
// lead and start COMMAND. So COMMAND must stop by D without run's help.
// run tells the supervisor the lease before it starts COMMAND and again
// after each renewal, over the pipe it already has (ctlFD): a leaseMsg byte
// and two instants on CLOCK_MONOTONIC, which is system-wide on Linux and
// is the clock of Go's timers (time.Time's monotonic reading is not: it
// counts from the process's start). If no newer lease has come by then,
// the supervisor begins stopping COMMAND's group at D − stopBudget
// (SIGTERM, with SIGCONT in case Ctrl-Z stopped it) and SIGKILLs the group,
// itself included, at D; what is left of the group once COMMAND has exited
// is killed at once, since run may not be there to do it (killRest: the
// supervisor leaves the group first, to exit with COMMAND's status). A stop
// once begun runs to its end. The supervisor keeps only the newest lease
// read from the pipe, and a timer that fires takes a newer lease waiting
// before it acts: a lease that has been replaced stops nothing. It starts
// COMMAND only while the newest lease is before its stop time, as run
// checks just before it starts the supervisor (leaseLeft): a supervisor not
// scheduled since run was elected may be past it, another host leading.
// The check and the exec are a few system calls apart: only a supervisor
// stalled between them for longer than stopBudget plus the switch's margin
// (below) can exec COMMAND past the lease, and its switch, set before, then
// kills it as soon as it runs again. That window is left, as a late timer's
// is. D is TTL·drift + margin before the key can expire in
// Redis (the library's local deadline), and the next leader starts COMMAND
// only after it has taken the key: that is the switch's margin. The
// supervisor is a Go program and keeps running while run is stopped, so it
// needs nothing from run; when run dies, the end of the pipe kills the group
// at once (supervise_linux.go).

import (
	"encoding/binary"
	"os"
	"os/signal"
	"syscall"
	"time"
	"unsafe"
)

// leaseMsg, as a byte from run, begins a lease: stop at, kill at, each an
// int64 in nanoseconds of CLOCK_MONOTONIC, little-endian. No signal is 0,
// and the 17 bytes are written at once (a pipe write of at most PIPE_BUF
// bytes is atomic), so signals and leases never interleave.
const (
	leaseMsg    = 0
	leaseMsgLen = 1 + 8 + 8
)

// leaseWriteTimeout bounds a lease's write to the pipe: one that would
// block (a supervisor that has not read for hours: stopped) is dropped.
const leaseWriteTimeout = 100 * time.Millisecond

// monoNow reads CLOCK_MONOTONIC.
func monoNow() int64 {
	var ts syscall.Timespec
	_, _, _ = syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, 1 /* CLOCK_MONOTONIC */, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Nano()
}

// tellLease tells the supervisor, if the command has one, that the lease
// lasts until deadline, and that it should begin to stop COMMAND budget
// before it. It tells nothing older than what it told already.
func (c *child) tellLease(deadline time.Time, budget time.Duration) {
	if c.ctl == nil || !deadline.After(c.told) {
		return
	}
	// CLOCK_MONOTONIC first, so that the instants sent are never later
	// than deadline, only by as long as the two reads take earlier.
	mono := monoNow()
	now := time.Now()
	var msg [leaseMsgLen]byte
	msg[0] = leaseMsg
	binary.LittleEndian.PutUint64(msg[1:], uint64(mono+int64(deadline.Add(-budget).Sub(now))))
	binary.LittleEndian.PutUint64(msg[9:], uint64(mono+int64(deadline.Sub(now))))
	_ = c.ctl.SetWriteDeadline(now.Add(leaseWriteTimeout))
	if _, err := c.ctl.Write(msg[:]); err == nil {
		c.told = deadline
	}
	_ = c.ctl.SetWriteDeadline(time.Time{})
}

// A lease is what run last told the supervisor, on CLOCK_MONOTONIC.
type lease struct{ stopAt, killAt int64 }

func parseLease(b []byte) lease {
	return lease{int64(binary.LittleEndian.Uint64(b)), int64(binary.LittleEndian.Uint64(b[8:]))}
}

// deadman is the supervisor's switch, armed with the last lease.
type deadman struct {
	lease      lease // the one the timers are set for
	stop, kill *time.Timer
	fired      bool // the stop has begun: COMMAND's group got SIGTERM
}

func newDeadman(l lease) *deadman {
	now := monoNow()
	return &deadman{lease: l, stop: time.NewTimer(time.Duration(l.stopAt - now)), kill: time.NewTimer(time.Duration(l.killAt - now))}
}

// arm moves the switch to lease l, unless the stop has begun.
func (d *deadman) arm(l lease) {
	if d.fired {
		return
	}
	now := monoNow()
	d.lease = l
	d.stop.Reset(time.Duration(l.stopAt - now))
	d.kill.Reset(time.Duration(l.killAt - now))
}

// reached reports whether instant at (CLOCK_MONOTONIC) has come.
func reached(at int64) bool { return monoNow() >= at }

// fire begins the stop: SIGTERM to the group (this process catches it),
// and SIGCONT, so that a group stopped by Ctrl-Z acts on it.
func (d *deadman) fire() {
	d.fired = true
	_ = syscall.Kill(0, syscall.SIGTERM)
	_ = syscall.Kill(0, syscall.SIGCONT)
}

// passes reports whether the switch lets a signal from run through: once
// the stop has begun, neither a second SIGTERM nor a SIGTSTP.
func (d *deadman) passes(sig syscall.Signal) bool {
	return !d.fired || (sig != syscall.SIGTERM && sig != syscall.SIGTSTP)
}

// catchJobControl makes Ctrl-Z stop COMMAND with run, as a shell user
// expects, though COMMAND's group is not the terminal's: run passes SIGTSTP
// on to COMMAND, then stops itself (SIGSTOP), and passes SIGCONT (fg, bg)
// on. Neither is a stop signal: neither ends anything. A SIGTSTP ignored
// when run started stays ignored. It returns a function that stops it.
func (r *runner) catchJobControl() (stop func()) {
	if ignoredNow(syscall.SIGTSTP) {
		return func() {}
	}
	c := make(chan os.Signal, 4)
	signal.Notify(c, syscall.SIGTSTP, syscall.SIGCONT)
	go func() {
		for sig := range c {
			r.signalChild(sig.(syscall.Signal))
			if sig == syscall.SIGTSTP {
				_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
			}
		}
	}()
	return func() {
		signal.Stop(c)
		close(c)
	}
}

// catchTSTP makes the supervisor catch SIGTSTP, unless it is ignored, so
// that passing it on to the group stops COMMAND and not the supervisor,
// whose switch must keep running.
func catchTSTP(c chan<- os.Signal) {
	if !ignoredNow(syscall.SIGTSTP) {
		signal.Notify(c, syscall.SIGTSTP)
	}
}

// ignoredNow reports whether sig is ignored (SIG_IGN), from the kernel:
// the Go runtime leaves SIGTSTP alone until Notify, so what it returns
// before that is what this process inherited.
func ignoredNow(sig syscall.Signal) bool {
	var old [8]uint64 // struct sigaction; the handler comes first
	_, _, errno := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), 0, uintptr(unsafe.Pointer(&old)), 8, 0, 0)
	return errno == 0 && old[0] == 1 // SIG_IGN
}
