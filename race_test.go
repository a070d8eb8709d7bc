//go:build race

package redisleader

// raceEnabled: the race detector is on, and counts of allocations mean
// nothing (it allocates, and sync.Pool drops items at random).
const raceEnabled = true
