//go:build !linux

package history

import "time"

var base = time.Now()

// Now returns a monotonic reading in nanoseconds. Off Linux it is
// process-local (not comparable across processes).
func Now() int64 { return int64(time.Since(base)) + 1 }
