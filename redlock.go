package redisleader

import (
	"sync"

	"github.com/redisleader/redisleader/internal/lease"
	"github.com/redisleader/redisleader/internal/wire"
)

// NewRedlockSession creates a session whose locks and elections live on a
// majority of independent Redis servers (the Redlock algorithm): an
// acquisition holds while a quorum of len(clients)/2+1 nodes hold its token.
// clients must be an odd number, at least 3, of clients for distinct,
// independent servers (not replicas of each other, not one Cluster). The
// session works as one from NewSession, except that WithReplicaAcks,
// WithFairness and Election.Proclaim are not available. docs/MECHANISMS.md
// says how each operation uses the quorum, and why these three are not.
//
// Bad input (too few or an even number of clients, a nil, repeated, Ring or
// cluster client, or an option refused or breaking a rule) returns an error
// matching ErrInvalid. It does no I/O; the caller must call Close.
func NewRedlockSession(clients []Client, opts ...Option) (*Session, error) {
	nodes := make([]wire.Client, len(clients))
	for i, c := range clients {
		nodes[i] = c
	}
	if err := lease.CheckNodes(nodes); err != nil {
		return nil, err
	}
	cfg, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	if cfg.Acks.N > 0 {
		return nil, invalidf("NewRedlockSession: WithReplicaAcks is not available in Redlock mode")
	}
	if cfg.fair {
		return nil, invalidf("NewRedlockSession: WithFairness is not available in Redlock mode: each node would keep its own queue, and no arrival order across independent nodes is defined")
	}
	return startSession(nodes[0], cfg, func(s *Session) place {
		return &quorum{lease.NewQuorum(&s.wire, nodes, cfg.TTL, cfg.CallTimeout, s.detach)}
	}), nil
}

// quorum is the place of a Redlock session: lease.Quorum (Acquire, Renew,
// Release, ReleaseAll, Inspect, Proclaim, and the rest of place through
// it), which knows of the session only its detach.
type quorum struct {
	*lease.Quorum
}

func (q *quorum) each(f func(c Client)) { q.Each(func(c wire.Client) { f(c) }) }

// errRedlockPriority refuses WithPriority on a Redlock session.
var errRedlockPriority = invalidf("priorities are not supported with Redlock (a reservation or a candidate list on a majority of nodes is not one fact)")

func (q *quorum) supports(f feature) error {
	switch f {
	case proclaiming:
		return lease.ErrQuorumProclaim
	case transferring:
		return errRedlockTransfer
	case permitting:
		return errRedlockSemaphore // RWLock says its own
	}
	return errRedlockPriority
}

// leftCalls counts the node calls that their operation stopped waiting for
// (lease.Quorum's rounds); Close waits for them. ever: there ever were some (under
// Session.mu).
type leftCalls struct {
	wg   sync.WaitGroup
	ever bool
}

// detach registers n goroutines that may outlive the operation that starts
// them, so that Close waits for them, and returns the WaitGroup each is
// Done with (lease.Quorum.Detach), unless the session is closed: it then
// returns nil, and the operation must wait for them itself.
func (s *Session) detach(n int) *sync.WaitGroup {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil
	}
	s.left.wg.Add(n) // under mu, so never concurrently with Close's Wait
	s.left.ever = true
	return &s.left.wg
}

// againLocked returns the locks whose tokens a call left behind (detach)
// may set after Close's deletes: Close deletes them once more when every
// call has ended (stopped). Run's terms are not among them: Run deletes
// those after onElected returned. s.mu must be held.
func (s *Session) againLocked(held []*Lock) []*Lock {
	if !s.left.ever {
		return nil
	}
	var again []*Lock
	for _, l := range held {
		if _, term := s.reg.terms[l]; l.lease.Leftover && !term {
			again = append(again, l)
		}
	}
	for l, st := range s.hb.stale {
		if st.Repeat {
			again = append(again, l)
		}
	}
	return again
}
