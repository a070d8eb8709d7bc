package history

import (
	"syscall"
	"unsafe"
)

// clockMonotonic is CLOCK_MONOTONIC from <time.h>, the same on every Linux
// architecture; the syscall package does not export it.
const clockMonotonic = 1

// Now returns CLOCK_MONOTONIC in nanoseconds. On one host the value is
// comparable across processes.
//
// It calls clock_gettime(2) through the standard library's syscall package,
// so test support needs no golang.org/x/sys (whose newer releases would raise
// the module's go line for every importer of the library).
func Now() int64 {
	var ts syscall.Timespec
	if _, _, errno := syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, clockMonotonic, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		panic("history: clock_gettime(CLOCK_MONOTONIC): " + errno.Error())
	}
	return ts.Nano()
}
