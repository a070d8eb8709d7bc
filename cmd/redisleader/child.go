package main

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/redisleader/redisleader"
)

// commandResult is how one run of the command ended.
type commandResult struct {
	state      *os.ProcessState // nil if it did not start
	startErr   error            // why it did not start
	notStarted bool             // a signal arrived before it could start
	lost       error            // why leadership ended while it ran; nil if it did not
	yielded    bool             // it was stopped to yield to a candidate with a higher priority
	transferTo string           // it was stopped to hand leadership over to this value (a transfer)
}

// movedOn reports whether the command was stopped to move leadership on
// purpose: to yield it, or to hand it over.
func (res *commandResult) movedOn() bool { return res.yielded || res.transferTo != "" }

// runCommand starts the command and waits for it to exit. If the term ends
// meanwhile (leadership lost, or yielded to a candidate with a higher
// priority) or a transfer is requested (requests), the command gets
// SIGTERM, then SIGKILL after the grace period; a forwarded signal is
// followed by SIGKILL after the grace period too. Signals go to the
// command's process group unless --no-process-group, and what is left of
// the group when the command exits is killed.
func (r *runner) runCommand(t *tenure, requests <-chan string) commandResult {
	var res commandResult
	c, exited, err := r.startCommand(t.lead)
	switch {
	case err == errNotStarted:
		res.notStarted = true
		return res
	case err == errLeaseEnding:
		res.lost = cmp.Or(t.lead.Err(), err)
		return res
	case err != nil:
		res.startErr = err
		return res
	}

	ended := t.ended
	var g grace
	defer g.stop()
	for {
		select {
		case <-exited:
			res.state = c.ProcessState
			r.stoppedBySupervisor(t, &res, g.killed)
			return res
		case <-r.renewed:
			r.tellLease(t.lead)
		case <-ended:
			ended = nil
			r.termEnded(t, &res)
			r.signalChild(syscall.SIGTERM)
			g.start(syscall.SIGTERM, r.f.grace)
		case to := <-requests:
			requests = nil
			r.transferRequested(to, &res)
			r.signalChild(syscall.SIGTERM)
			g.start(syscall.SIGTERM, r.f.grace)
		case <-r.forwarded:
			g.start(r.signalled(), r.f.grace)
		case <-g.over():
			g.killed = true
			r.log.errorf("%s still runs %v after %s; sending SIGKILL", r.display, r.f.grace, signalName(g.sig))
			r.signalChild(syscall.SIGKILL)
		}
	}
}

// A grace is the time the command has to exit after the first SIGTERM or
// forwarded signal, before SIGKILL.
type grace struct {
	timer  *time.Timer    // nil until it starts
	sig    syscall.Signal // the signal that began it
	killed bool           // it is over: run sent SIGKILL
}

// start starts the grace period d, for sig, unless it has started already.
func (g *grace) start(sig syscall.Signal, d time.Duration) {
	if g.timer == nil {
		g.sig, g.timer = sig, time.NewTimer(d)
	}
}

// over returns the channel that says when the grace period is over; nil
// before it starts and once run has sent SIGKILL.
func (g *grace) over() <-chan time.Time {
	if g.timer == nil || g.killed {
		return nil
	}
	return g.timer.C
}

func (g *grace) stop() {
	if g.timer != nil {
		g.timer.Stop()
	}
}

// signalChild signals the command unless it has exited.
func (r *runner) signalChild(sig syscall.Signal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc != nil {
		r.proc.signal(sig)
	}
}

// termEnded records in res why term t ended while the command ran, and
// says so.
func (r *runner) termEnded(t *tenure, res *commandResult) {
	why := t.cause()
	if to := requestedOf(why); to != "" { // Election.Run took a transfer request
		r.transferRequested(to, res)
		return
	}
	if errors.Is(why, redisleader.ErrPreempted) {
		res.yielded = true
		r.log.warnf("yielding %s to a candidate with a higher priority; stopping %s (SIGTERM, SIGKILL after %v)",
			r.f.name, r.display, r.f.grace)
		return
	}
	res.lost = cmp.Or(t.lead.Err(), why)
	r.log.errorf("%s lost (%s); stopping %s (SIGTERM, SIGKILL after %v)",
		r.holding(), lossReason(res.lost), r.display, r.f.grace)
}

// errLeaseEnding is why a term ended whose lease was about to expire
// unrenewed when the supervisor stopped COMMAND (stoppedBySupervisor).
var errLeaseEnding = errors.New("the lease was about to expire unrenewed")

// stoppedBySupervisor says so, and records in res as a loss, if the
// command's supervisor stopped it on its own because the lease was about to
// end (deadman_linux.go): it was killed by a SIGKILL that run did not send
// (runKilled), with less than stopBudget left on the lease. run may have
// been stopped meanwhile (Ctrl-Z, SIGSTOP) or unable to renew; once it runs
// again, it may see the lease end before the command's exit.
func (r *runner) stoppedBySupervisor(t *tenure, res *commandResult, runKilled bool) {
	sig, killed := killedBy(res.state)
	if superviseArg == "" || r.f.noProcessGroup || !killed || sig != syscall.SIGKILL || runKilled ||
		res.movedOn() || r.signalled() != 0 || time.Now().Before(t.lead.Deadline().Add(-r.stopBudget())) {
		return
	}
	if res.lost != nil { // said already
		r.log.errorf("the supervisor had stopped %s by the lease's deadline", r.display)
		return
	}
	res.lost = cmp.Or(t.lead.Err(), errLeaseEnding)
	r.log.errorf("%s lost (%s); the supervisor stopped %s by the lease's deadline",
		r.holding(), lossReason(res.lost), r.display)
}

// transferRequested records in res that a transfer to value to was
// requested while the command ran, and says so.
func (r *runner) transferRequested(to string, res *commandResult) {
	res.transferTo = to
	r.log.warnf("transfer of %s to %s requested; stopping %s (SIGTERM, SIGKILL after %v)",
		r.f.name, printable(to), r.display, r.f.grace)
}

var errNotStarted = errors.New("a signal arrived before the command started")

// leaseLeft reports whether lead is held with more than stopBudget left:
// the command starts only then, as its supervisor checks again just before
// it execs COMMAND (supervise_linux.go).
func (r *runner) leaseLeft(lead *redisleader.Lock) bool {
	return lead.Held() && time.Now().Before(lead.Deadline().Add(-r.stopBudget()))
}

// startCommand starts the command, unless a stop signal has arrived, and
// publishes it to r.signal (as r.proc). exited is closed once it has exited
// and what was left of its process group has been killed.
func (r *runner) startCommand(lead *redisleader.Lock) (c *exec.Cmd, exited chan struct{}, err error) {
	group := !r.f.noProcessGroup
	c, ctl, err := newCommand(r.command, group)
	if err != nil {
		return nil, nil, err
	}
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, r.stdout, r.stderr
	c.Env = append(os.Environ(),
		"REDISLEADER_NAME="+r.f.name,
		"REDISLEADER_VALUE="+r.f.value,
		r.f.fenceEnv+"="+strconv.FormatInt(lead.Fence(), 10))
	c.WaitDelay = time.Second // when stdout or stderr is not a file: don't hang on pipes held by grandchildren

	ch := &child{group: group, ctl: ctl}
	ch.tellLease(lead.Deadline(), r.stopBudget()) // first: the supervisor starts COMMAND only once it has a lease
	started := make(chan error, 1)
	exited = make(chan struct{})
	go func() {
		// Pdeathsig fires when the OS thread that started the child exits:
		// keep this goroutine on its thread until the child has exited.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if ctl != nil {
			defer ctl.Close() // after the supervisor has exited: it reads EOF only if run dies
		}
		r.mu.Lock()
		err := errNotStarted
		switch {
		case r.sig != 0:
		case !r.leaseLeft(lead): // run was not scheduled since it was elected
			err = errLeaseEnding
		default:
			err = c.Start()
		}
		closeAll(c.ExtraFiles) // the supervisor's end of ctl, which has its own copy
		if err == nil {
			ch.proc = c.Process
			r.proc = ch
		}
		r.mu.Unlock()
		started <- err
		if err != nil {
			return
		}
		_ = c.Wait() // the exit status is in c.ProcessState
		r.mu.Lock()
		r.proc = nil
		if group {
			// Nothing of the command outlives it: another host may start
			// the job as soon as this one resigns.
			_ = signalCommand(c.Process, syscall.SIGKILL, true)
		}
		r.mu.Unlock()
		close(exited)
	}()
	return c, exited, <-started
}

func closeAll(files []*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}

// child is the command while it runs, as run signals it.
type child struct {
	proc  *os.Process
	group bool      // signals go to its process group
	ctl   *os.File  // the pipe to the supervisor (see newCommand), or nil
	told  time.Time // the last lease deadline told the supervisor (tellLease)
}

// stopBudget is how long before the lease's deadline the supervisor begins
// to stop COMMAND on its own (deadman_linux.go): --grace, but at most a
// quarter of the TTL, so that a lease renewed on time never comes close.
func (r *runner) stopBudget() time.Duration { return min(r.f.grace, r.f.ttl/4) }

// tellLease tells the command's supervisor, if it runs, the lease's new
// deadline after a renewal.
func (r *runner) tellLease(lead *redisleader.Lock) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc != nil {
		r.proc.tellLease(lead.Deadline(), r.stopBudget())
	}
}

// renewalRound is the session's RenewalRound hook: it wakes runCommand,
// which tells the supervisor the new deadline. It never blocks.
func (r *runner) renewalRound(redisleader.RenewalEvent) {
	select {
	case r.renewed <- struct{}{}:
	default:
	}
}

// signal sends sig to the command: through its supervisor if it has one
// (which delivers it once COMMAND has started), otherwise, and for
// SIGKILL, straight to the command's process or process group.
func (c *child) signal(sig syscall.Signal) {
	if c.ctl != nil && sig != syscall.SIGKILL {
		if _, err := c.ctl.Write([]byte{byte(sig)}); err == nil {
			return
		}
		// The supervisor has exited: what is left of the group gets sig.
	}
	_ = signalCommand(c.proc, sig, c.group)
}

// startFailure maps an error starting the command to the shell's exit
// status: 127 for not found, 126 otherwise.
func startFailure(err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		return exitNotFound
	}
	return exitCannotExec
}

// exitStatus is the command's exit status as a shell reports it: 128+n when
// signal n killed it.
func exitStatus(state *os.ProcessState) int {
	if sig, ok := killedBy(state); ok {
		return 128 + int(sig)
	}
	if code := state.ExitCode(); code >= 0 {
		return code
	}
	return exitError
}

// describeExit says how the command ended: "exited with status N" or
// "was killed by SIGTERM".
func describeExit(state *os.ProcessState) string {
	if sig, ok := killedBy(state); ok {
		return "was killed by " + signalName(sig)
	}
	return fmt.Sprintf("exited with status %d", state.ExitCode())
}

// killedBy returns the signal that killed the process, if one did.
func killedBy(state *os.ProcessState) (syscall.Signal, bool) {
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return ws.Signal(), true
	}
	return 0, false
}

func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGQUIT:
		return "SIGQUIT"
	}
	return "signal " + strconv.Itoa(int(s))
}
