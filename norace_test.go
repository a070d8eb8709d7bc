//go:build !race

package redisleader

// raceEnabled: the race detector is on (race_test.go).
const raceEnabled = false
