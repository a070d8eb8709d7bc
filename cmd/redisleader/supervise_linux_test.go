//go:build linux

package main

import (
	"fmt"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redisleader/redisleader/internal/redisserver"
	"github.com/stretchr/testify/require"
)

// The tests below are about the supervisor that run starts to lead the
// job's process group (see newCommand).

// parentPID is pid's parent, from /proc/PID/status.
func parentPID(t *testing.T, pid int) int {
	t.Helper()
	ppid, err := strconv.Atoi(procStatus(t, pid, "PPid"))
	require.NoError(t, err, "PPid of %d", pid)
	return ppid
}

// When run and its supervisor are both SIGKILLed, in any order, the job dies
// too (Pdeathsig from the supervisor): it does not run on unsupervised while
// the next host, once the lease has expired, starts a second copy. With run
// stopped first, neither redisleader process can act: only the kernel can.
func TestRunJobDiesWithRunAndSupervisor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		kills func(t *testing.T, run, sup int)
	}{
		{"run stopped, supervisor killed, run killed", func(t *testing.T, run, sup int) {
			require.NoError(t, syscall.Kill(run, syscall.SIGSTOP))
			require.NoError(t, syscall.Kill(sup, syscall.SIGKILL))
			require.NoError(t, syscall.Kill(run, syscall.SIGKILL))
		}},
		// The second may have exited by itself already, after the first.
		{"run and supervisor killed at once", func(t *testing.T, run, sup int) {
			require.NoError(t, syscall.Kill(run, syscall.SIGKILL))
			_ = syscall.Kill(sup, syscall.SIGKILL)
		}},
		{"supervisor and run killed at once", func(t *testing.T, run, sup int) {
			require.NoError(t, syscall.Kill(sup, syscall.SIGKILL))
			_ = syscall.Kill(run, syscall.SIGKILL)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redisserver.Start(t)
			pidfile := filepath.Join(t.TempDir(), "pid")
			p := startCLI(t, "run", []string{"PIDFILE=" + pidfile},
				"run", "--redis", "redis://"+srv.Addr(), "--name", "job", "--", "sh", "-c", `echo $$ > "$PIDFILE"; exec sleep 30`)
			job := readPID(t, pidfile)
			t.Cleanup(func() {
				if !processGone(job) {
					_ = syscall.Kill(job, syscall.SIGKILL)
				}
			})
			sup := parentPID(t, job)
			require.Equal(t, p.cmd.Process.Pid, parentPID(t, sup), "the job's parent %d is not run's child", sup)
			tc.kills(t, p.cmd.Process.Pid, sup)
			p.wait(t)
			pollUntil(t, 5*time.Second, fmt.Sprintf("the job %d to die with run and its supervisor", job), func() bool { return processGone(job) })
		})
	}
}
