package redisleader

import (
	"github.com/redisleader/redisleader/internal/lease"
)

// The scripts the package runs, each a script of the lease floor
// (internal/lease/lua, where their contracts are) as the transport runs
// it (internal/lease/run.go).
var (
	acquireScript        = lease.AcquireRun
	renewScript          = lease.RenewRun
	releaseScript        = lease.ReleaseRun
	proclaimScript       = lease.ProclaimRun
	fairAcquireScript    = lease.FairAcquireRun
	leaveScript          = lease.LeaveRun
	fairReleaseScript    = lease.FairReleaseRun
	candidatesScript     = lease.CandidatesRun
	handOffScript        = lease.HandOffRun
	redlockRenewScript   = lease.RedlockRenewRun
	redlockReleaseScript = lease.RedlockReleaseRun
	fencedScript         = lease.FencedRun
)

// proclaimArgs returns the proclaim script's arguments for the seq'th
// Proclaim of l's term, of value.
func proclaimArgs(l *Lock, seq int64, value string) []any {
	return l.lease.Args.Proclaim(l.lease.Keys.Seq(), seq, value)
}
