//go:build unix

package main

import (
	"os"
	"syscall"
)

// signalCommand sends sig to p, or with group to p's process group (whose ID
// is p's PID, as newCommand made it). A group with no process left is not
// an error.
func signalCommand(p *os.Process, sig syscall.Signal, group bool) error {
	if !group {
		return p.Signal(sig)
	}
	if err := syscall.Kill(-p.Pid, sig); err != nil && err != syscall.ESRCH {
		return err
	}
	return nil
}
