package main

import "syscall"

// sysProcAttr makes the kernel kill redis-server if this process dies
// without stopping it (a panic on another goroutine, a SIGKILL).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
