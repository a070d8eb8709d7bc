//go:build !unix

package main

import (
	"os"
	"os/exec"
	"syscall"
	"time"
)

// childProcAttr returns nil: neither Pdeathsig nor process groups exist here.
func childProcAttr(bool) *syscall.SysProcAttr { return nil }

// newCommand runs COMMAND directly, without a supervisor.
func newCommand(args []string, _ bool) (*exec.Cmd, *os.File, error) {
	return exec.Command(args[0], args[1:]...), nil, nil
}

// signalCommand sends sig to p's process only.
func signalCommand(p *os.Process, sig syscall.Signal, _ bool) error { return p.Signal(sig) }

// superviseArg is unused here: the supervisor needs Linux's Pdeathsig.
const superviseArg = ""

func supervise([]string) int { return exitUsage }

// tellLease does nothing: there is no supervisor here.
func (c *child) tellLease(time.Time, time.Duration) {}

// catchJobControl does nothing: Ctrl-Z stops redisleader, as the shell does.
func (r *runner) catchJobControl() (stop func()) { return func() {} }
