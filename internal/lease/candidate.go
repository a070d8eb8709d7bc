package lease

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisleader/redisleader/internal/wire"
)

// candidate.go: the candidate protocol as Redis sees it (the candidacy,
// its policy and preemption, is the root's: priority.go there). Preferred
// candidates (WithPriority; the model is in the root's doc.go, section
// Choosing the leader):
//
// A candidate that declares a priority is enlisted in two sorted sets in the
// name's slot: the candidates (member: its value → priority) and their
// leases (member → end, server ms). Every acquire attempt of the candidate
// enlists it again (the attempt a follower makes anyway: no command of its
// own) until its next attempt can have come, plus its TTL: a follower
// attempts within its TTL or, waiting for the holder, once the holder's
// lease can have expired, which the attempt reads (PTTL), so an entry
// outlives its candidate's own TTL when the leader's is longer. The
// leader's renewal enlists it for one TTL (a leader that dies leaves with
// its lease), and returns the best live candidate above its priority. The
// leader's Run then yields to it (ErrPreempted), once its term has lasted
// its minimum term, and its release hands the name to the best candidate
// above it (lua/hand_off.lua). An entry whose lease passed is
// skipped and pruned; one left by a candidate that died lives until its
// next attempt would have come, plus a TTL, and a hand-over to it costs one
// reservation (a TTL), never an overlap, and takes it out of the candidates.
//
// The lease is the fact and the candidates a hint: a leader's renewal that
// Redis refuses for its candidate keys (TRYAGAIN while a Cluster slot
// migrates with the keys split between two nodes, or a value someone else
// wrote in a candidate key) renews the lease alone at once
// (leasesAlone in node.go), so a leader with a priority keeps every lease a plain
// leader keeps. Every other script that needs the candidates fails, before
// any write, with an error that names the foreign key (candidateKeys).

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

// Withdraw takes the candidate out of the candidates through t, best
// effort: an entry left behind lives until the candidate's next attempt
// would have come, plus a TTL.
func (c *Candidate) Withdraw(ctx context.Context, t *wire.Combiner) {
	_ = t.Call(ctx, time.Time{}, WithdrawRun, c.withdrawArgs())
}

// A Ranked is a live candidate as the candidates set holds it.
type Ranked struct {
	Value    string
	Priority int64
}

// ReadCandidates returns the live candidates of k's election, best first
// (up to 100), with one call through t; none when there are none. An entry
// this package cannot have written (a priority beyond ±MaxPriority, a
// value over MaxValue) is left out, not reported as a candidate.
func ReadCandidates(ctx context.Context, t *wire.Combiner, k Keys) ([]Ranked, error) {
	res, err := t.Call(ctx, time.Time{}, CandidatesRun, CandidatesArgs(k)).Slice()
	if err != nil && err != redis.Nil {
		return nil, err
	}
	out := make([]Ranked, 0, len(res)/2)
	for i := 0; i+1 < len(res); i += 2 {
		v, _ := res[i].(string)
		p, err := strconv.ParseInt(fmt.Sprint(res[i+1]), 10, 64)
		if err != nil || p > MaxPriority || p < -MaxPriority || len(v) > MaxValue {
			continue
		}
		out = append(out, Ranked{Value: v, Priority: p})
	}
	return out, nil
}

// MaxValue bounds the value an election candidate publishes (redisleader's
// checkValue), which the candidates set also holds.
const MaxValue = 64 << 10
