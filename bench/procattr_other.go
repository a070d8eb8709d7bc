//go:build !linux

package main

import "syscall"

// sysProcAttr returns nil: Pdeathsig is Linux-only, so elsewhere a server
// outlives a harness that dies without stopping it.
func sysProcAttr() *syscall.SysProcAttr { return nil }
