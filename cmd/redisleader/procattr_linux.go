package main

import "syscall"

// childProcAttr makes the kernel SIGKILL the command when redisleader dies,
// even by SIGKILL, so that a command never runs on after its supervisor (and
// its lease) are gone. The signal is sent when the OS thread that started the
// child exits, so the caller keeps that thread locked until the child has
// been waited for (see runCommand). Pdeathsig reaches the command's process
// only; with group, the command also leads a new process group, which
// signalCommand signals whole.
func childProcAttr(group bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: group}
}
