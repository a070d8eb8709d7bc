//go:build linux || darwin || freebsd || openbsd || dragonfly

package history

import "golang.org/x/sys/unix"

// Now returns CLOCK_MONOTONIC in nanoseconds. On one host the value is
// comparable across processes.
func Now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("history: clock_gettime(CLOCK_MONOTONIC): " + err.Error())
	}
	return ts.Nano()
}
