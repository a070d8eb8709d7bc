//go:build unix && !linux

package main

import (
	"os"
	"os/exec"
	"syscall"
	"time"
)

// childProcAttr puts the command in a new process group with group. There
// is no Pdeathsig outside Linux, so a command outlives a redisleader that is
// killed with SIGKILL (it is still stopped when redisleader loses leadership
// or exits in any other way).
func childProcAttr(group bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: group}
}

// newCommand runs COMMAND directly, in its own process group with group.
// There is no supervisor, hence no pipe to it.
func newCommand(args []string, group bool) (*exec.Cmd, *os.File, error) {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.SysProcAttr = childProcAttr(group)
	return cmd, nil, nil
}

// superviseArg is unused here: the supervisor needs Linux's Pdeathsig.
const superviseArg = ""

func supervise([]string) int { return exitUsage }

// tellLease does nothing: there is no supervisor here.
func (c *child) tellLease(time.Time, time.Duration) {}

// catchJobControl does nothing: Ctrl-Z stops redisleader (and COMMAND only
// with --no-process-group, in the terminal's process group).
func (r *runner) catchJobControl() (stop func()) { return func() {} }
