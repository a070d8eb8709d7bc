package redisleader

import "time"

// testHooks are the points where tests and benchmarks watch or steer a
// session. All are nil in production; the options in export_test.go set
// them.
type testHooks struct {
	round   func(held int, failed bool)        // heartbeat goroutine, after each slice of renewals and each clean-up of stale tokens (held 0)
	attempt func(name string, err error)       // acquiring goroutine, after each acquire attempt
	pause   func(d time.Duration, follow bool) // acquiring goroutine, before it waits to retry
	armed   func(*Lock)                        // in arm, between registering the lock and its timer
}
