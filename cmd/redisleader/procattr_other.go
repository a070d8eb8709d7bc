//go:build !unix

package main

import (
	"os"
	"syscall"
)

// childProcAttr returns nil: neither Pdeathsig nor process groups exist here.
func childProcAttr(bool) *syscall.SysProcAttr { return nil }

// signalCommand sends sig to p's process only.
func signalCommand(p *os.Process, sig syscall.Signal, _ bool) error { return p.Signal(sig) }
