package redisleader

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/redisleader/redisleader/internal/lease"
)

// Preferred candidates (WithPriority; the model is in doc.go, section
// Choosing the leader; the candidates as Redis holds them, and what a
// renewal or release does with them: internal/lease/candidate.go). Here are
// the options, the candidacy, and the preemption of a Run term.

// A CampaignOption sets how a candidate campaigns (Election.Campaign and
// Election.Run). Options are created by WithPriority and WithMinTerm; the
// set is sealed (CampaignOption cannot be implemented outside the package).
// Campaign and Run validate the combined options and report the first
// broken rule.
type CampaignOption interface {
	applyCampaign(*candidacy)
}

type campaignOption func(*candidacy)

func (f campaignOption) applyCampaign(c *candidacy) { f(c) }

// WithPriority declares the candidate's priority p, in [-(2^53-1), 2^53-1]
// (a version, a zone rank): a leader yields to a live candidate with a
// strictly higher one (WithMinTerm says when), and hands the name to the
// best such candidate when it releases it. Equal priorities never move
// leadership. Candidates are told apart by their values: a candidate with
// a priority needs a non-empty one (ErrInvalid otherwise).
func WithPriority(p int64) CampaignOption {
	return campaignOption(func(c *candidacy) { c.priority, c.prioritised = p, true })
}

// NeverYield, given to WithMinTerm, is a minimum term that never passes: a
// leader with a priority keeps leading whatever candidate waits; it still
// hands the name to the best candidate above it when it releases it.
const NeverYield time.Duration = math.MaxInt64

// WithMinTerm sets how long a leader with a priority leads before it yields
// to a better candidate (hysteresis against flapping; default 0: as soon as
// its renewal finds one), or NeverYield; it must not be negative. Only Run
// yields: onElected's context ends with cause ErrPreempted, and once
// onElected has returned Run hands the name over and campaigns again. It
// requires WithPriority.
func WithMinTerm(d time.Duration) CampaignOption {
	return campaignOption(func(c *candidacy) { c.minTerm, c.minTermSet = d, true })
}

// candidacy is a candidate's declared priority and yield policy, shared by
// every acquisition of one Campaign or Run.
type candidacy struct {
	priority    int64
	prioritised bool
	minTerm     time.Duration // NeverYield: never
	minTermSet  bool
	args        lease.Candidate // boxed once
}

// candidacyOf applies opts for value's campaign in an election of k and
// validates them, the one place that does; it returns nil without a
// priority, and an error matching ErrInvalid when they break a rule or the
// session is a Redlock one.
func (s *Session) candidacyOf(k lease.Keys, value string, opts []CampaignOption) (*candidacy, error) {
	if len(opts) == 0 {
		return nil, nil
	}
	c := &candidacy{}
	if err := eachOption("CampaignOption", opts, func(o CampaignOption) error { o.applyCampaign(c); return nil }); err != nil {
		return nil, err
	}
	if err := c.validate(); err != nil || !c.prioritised {
		return nil, err
	}
	if err := s.unsupported[prioritising]; err != nil {
		return nil, err
	}
	if value == "" {
		return nil, invalidf("a candidate with a priority needs a value: candidates are told apart by their values")
	}
	c.args = lease.NewCandidate(k, value, c.priority)
	return c, nil
}

// validate reports the first rule that the options break.
func (c *candidacy) validate() error {
	switch {
	case c.priority > lease.MaxPriority || c.priority < -lease.MaxPriority:
		return invalidf("priority %d is out of range: it must be within ±(2^53-1), exact in a Redis sorted set's score", c.priority)
	case c.minTerm < 0:
		return invalidf("minimum term %v must not be negative (NeverYield: never yield)", c.minTerm)
	case !c.prioritised && c.minTermSet:
		return invalidf("WithMinTerm needs WithPriority")
	}
	return nil
}

// withdraw takes a candidate that gives up out of the candidates, best
// effort (an entry left behind lives until the candidate's next attempt
// would have come, plus a TTL), so that no leader hands the name to it.
func (a *acquisition) withdraw(ctx context.Context) {
	s, c := a.s, a.cand // not a: the closure would move every acquisition to the heap
	s.bestEffortCleanup(ctx, func(ctx context.Context) { c.args.Withdraw(ctx, s.wire.Combiner()) })
}

func (l *Lock) candidateLocked() *candidacy {
	if l.lead == nil {
		return nil
	}
	return l.lead.cand
}

// onPreempt arranges for f to run, once, when a better candidate waits and
// l's minimum term has passed (preferred).
func (l *Lock) onPreempt(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.candidateLocked() != nil {
		l.lead.preempt = f
	}
}

// preferred is told by the heartbeat that a live candidate with a higher
// priority waits: it preempts l's Run term if the policy lets it now.
func (l *Lock) preferred() {
	l.mu.Lock()
	var f func()
	// NeverYield's minimum term never passes.
	if c := l.candidateLocked(); c != nil && l.lead.preempt != nil &&
		l.delivered && time.Since(hookEpoch)-l.deliveredAt >= c.minTerm {
		f, l.lead.preempt = l.lead.preempt, nil
	}
	l.mu.Unlock()
	if f != nil {
		l.s.cfg.logger.Info("redisleader: a candidate with a higher priority waits; yielding", "election", l.lease.Keys.Name, "fence", l.lease.Fence)
		f()
	}
}

// A Candidate is a live candidate that declared a priority (WithPriority).
type Candidate struct {
	Value    string
	Priority int64
}

// Candidates returns the live candidates of the election that declared a
// priority, the leader among them if it did, best first (up to 100), with
// one Redis call. Like Leader's, the answer may be stale when it is used.
// It returns ErrInvalid on a Redlock session.
func (e *Election) Candidates(ctx context.Context) ([]Candidate, error) {
	if e.s.unsupported[prioritising] != nil {
		return nil, invalidf("Candidates: priorities are not supported with Redlock")
	}
	res, err := lease.ReadCandidates(ctx, e.s.wire.Combiner(), e.keys)
	if err != nil {
		return nil, fmt.Errorf("redisleader: candidates of %q: %w", e.keys.Name, err)
	}
	out := make([]Candidate, len(res))
	for i, r := range res {
		out[i] = Candidate(r)
	}
	return out, nil
}
