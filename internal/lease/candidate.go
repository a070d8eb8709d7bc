package lease

import "github.com/redisleader/redisleader/internal/wire"

// candidate.go: the candidate protocol as Redis sees it (the candidacy,
// its policy and preemption, is the root's: priority.go there).

// A CandidateProtocol is the protocol of a candidate with a priority, over
// Base (Plain or a *FairProtocol): every acquire attempt enlists it, its
// renewal also enlists it and reports the best candidate above it, and its
// release hands the name to its heir or to the best candidate above it.
type CandidateProtocol struct {
	Base Protocol
	C    *Candidate
}

// AcquireCall is Base's acquire, enlisting the candidate.
func (p *CandidateProtocol) AcquireCall(l *Lease) wire.Call {
	cl := p.Base.AcquireCall(l)
	if cl.Script == AcquireRun {
		cl.Script = AcquireCandidateRun // fair_acquire enlists by itself when given the keys
	}
	cl.Argv = p.C.Enlist(cl.Argv)
	return cl
}

// RenewCall is prefer_renew.
func (p *CandidateProtocol) RenewCall(l *Lease) wire.Call {
	return wire.Call{Script: PreferRenewRun, Argv: l.Args.PreferRenew(p.C)}
}

// ReleaseCall is hand_off, to heir or the best candidate above ours.
func (p *CandidateProtocol) ReleaseCall(l *Lease, heir string) wire.Call {
	return l.HandOffCall(heir, p.C.Prio)
}

// WithdrawCall takes the candidate out of the candidates.
func (c *Candidate) WithdrawCall() wire.Call {
	return wire.Call{Script: WithdrawRun, Argv: c.Withdraw()}
}
