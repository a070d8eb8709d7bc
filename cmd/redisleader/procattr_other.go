//go:build !linux

package main

import "syscall"

// childProcAttr returns nil: Pdeathsig is Linux-only, so elsewhere a command
// outlives a redisleader that is killed with SIGKILL (it is still stopped
// when redisleader loses leadership or exits in any other way).
func childProcAttr() *syscall.SysProcAttr { return nil }
