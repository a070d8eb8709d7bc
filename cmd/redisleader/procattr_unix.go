//go:build unix && !linux

package main

import "syscall"

// childProcAttr puts the command in a new process group with group. There
// is no Pdeathsig outside Linux, so a command outlives a redisleader that is
// killed with SIGKILL (it is still stopped when redisleader loses leadership
// or exits in any other way).
func childProcAttr(group bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: group}
}
