//go:build !linux

package redisserver

import "syscall"

// sysProcAttr returns nil: Pdeathsig is Linux-only, so elsewhere a server
// outlives a test binary that dies without running its cleanups.
func sysProcAttr() *syscall.SysProcAttr { return nil }
