// Package redisgocron runs gocron v2 jobs on one of several schedulers with
// redisleader: a Locker (gocron.WithDistributedLocker) takes each run's lock
// with one TryLock and holds it at least a minimum time, so that schedulers
// whose timers for the same tick fire a little apart run it once; an Elector
// (gocron.WithDistributedElector) runs every job on the elected leader, and
// its IsLeader does no I/O. See the README for how to choose the minimum
// hold, and for the limits.
//
// Import it under a name that does not clash with gocron's:
//
//	import redisgocron "github.com/redisleader/redisleader/adapters/gocron"
package redisgocron

import "github.com/go-co-op/gocron/v2"

var (
	_ gocron.Locker  = (*Locker)(nil)
	_ gocron.Elector = (*Elector)(nil)
)
