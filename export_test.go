package redisleader

import "time"

// The unexported options that set testHooks (testhooks.go): only tests and
// benchmarks use them.

// withRoundHook is an unexported option for tests: f runs on the heartbeat
// goroutine after every slice of renewals that renewed (or tried to renew)
// a live lock, with their number and whether one failed, and after every
// clean-up of stale tokens, with held 0 and whether a slice of its round
// failed.
func withRoundHook(f func(held int, failed bool)) Option {
	return optionFunc(func(c *config) { c.test.round = f })
}

// withAttemptHook is an unexported option for tests and benchmarks: f runs
// after every acquire attempt, on the acquiring goroutine.
func withAttemptHook(f func(name string, err error)) Option {
	return optionFunc(func(c *config) { c.test.attempt = f })
}

// withPauseHook is an unexported option for tests: f runs before every wait
// between acquire attempts, on the acquiring goroutine, with the delay and
// whether an event on the name's channel may end the wait sooner.
func withPauseHook(f func(d time.Duration, follow bool)) Option {
	return optionFunc(func(c *config) { c.test.pause = f })
}

// withArmedHook is an unexported option for tests: f runs in arm between
// registering a fresh lock and starting its deadline timer.
func withArmedHook(f func(*Lock)) Option {
	return optionFunc(func(c *config) { c.test.armed = f })
}
