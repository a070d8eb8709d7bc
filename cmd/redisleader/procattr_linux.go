package main

import "syscall"

// childProcAttr makes the kernel SIGKILL the child when redisleader dies,
// even by SIGKILL (the child's process only; see newCommand). With group,
// the child also leads a new process group.
func childProcAttr(group bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: group}
}
