package redisserver

import "syscall"

// sysProcAttr makes the kernel SIGKILL redis-server if the test binary dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
