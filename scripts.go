package redisleader

import (
	"github.com/redisleader/redisleader/internal/lease"
	"github.com/redisleader/redisleader/internal/wire"
)

// The scripts the package runs, each a script of the lease floor
// (internal/lease/lua, where their contracts are), boxed once for the
// runner (internal/wire).
var (
	acquireScript          = leaseScript(lease.Acquire)
	acquireCandidateScript = leaseScript(lease.AcquireCandidate)
	renewScript            = leaseScript(lease.Renew)
	releaseScript          = leaseScript(lease.Release)
	proclaimScript         = leaseScript(lease.Proclaim)
	inspectScript          = leaseScript(lease.Inspect)
	fairAcquireScript      = leaseScript(lease.FairAcquire)
	leaveScript            = leaseScript(lease.Leave)
	fairReleaseScript      = leaseScript(lease.FairRelease)
	withdrawScript         = leaseScript(lease.Withdraw)
	preferRenewScript      = leaseScript(lease.PreferRenew)
	candidatesScript       = leaseScript(lease.Candidates)
	handOffScript          = leaseScript(lease.HandOff)
	redlockRenewScript     = leaseScript(lease.RedlockRenew)
	redlockReleaseScript   = leaseScript(lease.RedlockRelease)
	fencedScript           = leaseScript(lease.Fenced)
)

// leaseScript is ls, to be run by the transport (wire.Script).
func leaseScript(ls *lease.Script) *wire.Script { return wire.NewScript(ls.SHA, ls.Src) }

// proclaimArgs returns the proclaim script's arguments for the seq'th
// Proclaim of l's term, of value.
func proclaimArgs(l *Lock, seq int64, value string) []any {
	return l.args.Proclaim(l.keys.Seq(), seq, value)
}
