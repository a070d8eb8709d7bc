package main

import "syscall"

// childProcAttr makes the kernel SIGKILL the command when redisleader dies,
// even by SIGKILL, so that a command never runs on after its supervisor (and
// its lease) are gone. The signal is sent when the OS thread that started the
// child exits, so the caller keeps that thread locked until the child has
// been waited for (see runCommand).
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
