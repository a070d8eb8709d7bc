package lease

import "github.com/redisleader/redisleader/internal/wire"

// The scripts as the transport runs them (wire.Script), each boxed once.
var (
	AcquireRun          = runner(Acquire)
	AcquireCandidateRun = runner(AcquireCandidate)
	RenewRun            = runner(Renew)
	ReleaseRun          = runner(Release)
	ProclaimRun         = runner(Proclaim)
	InspectRun          = runner(Inspect)
	FairAcquireRun      = runner(FairAcquire)
	LeaveRun            = runner(Leave)
	FairReleaseRun      = runner(FairRelease)
	WithdrawRun         = runner(Withdraw)
	PreferRenewRun      = runner(PreferRenew)
	CandidatesRun       = runner(Candidates)
	HandOffRun          = runner(HandOff)
	RedlockRenewRun     = runner(RedlockRenew)
	RedlockReleaseRun   = runner(RedlockRelease)
	FencedRun           = runner(Fenced)
	RequestSendRun      = runner(RequestSend)
	RequestTakeRun      = runner(RequestTake)
)

// runner is s, to be run by the transport.
func runner(s *Script) *wire.Script { return wire.NewScript(s.SHA, s.Src) }
