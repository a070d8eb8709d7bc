package redisleader

import "github.com/redisleader/redisleader/internal/lease"

// keys are a name's keys, as the lease floor lays them out (lease.Keys,
// where the layout is written down); the root reads their names, never
// their byte layout.
type keys struct {
	name, lock, fence string
}

// The bounds of a name and of the value an election candidate publishes.
const (
	maxNameLen  = lease.MaxNameLen
	maxValueLen = lease.MaxValueLen
)

// keysOf checks name against the naming rule (lease.CheckName) and derives
// its keys.
func keysOf(name string) (keys, error) {
	k, err := lease.KeysOf(name)
	return keys{name: k.Name, lock: k.Lock, fence: k.Fence}, err
}

// newKeys derives the keys of a name.
func newKeys(name string) keys {
	k := lease.NewKeys(name)
	return keys{name: k.Name, lock: k.Lock, fence: k.Fence}
}

// lease is k as the lease floor's Keys.
func (k keys) lease() lease.Keys { return lease.Keys{Name: k.name, Lock: k.lock, Fence: k.fence} }

// channel is the pub/sub channel of the name's changes.
func (k keys) channel() string { return k.lease().Channel() }

// seq is the key of the sequence number of the name's last Proclaim.
func (k keys) seq() string { return k.lease().Seq() }

// queue and leases are the keys of the name's waiters in fair mode.
func (k keys) queue() string  { return k.lease().Queue() }
func (k keys) leases() string { return k.lease().Leases() }

// candidates and candidateLeases are the keys of the name's candidates with
// a priority.
func (k keys) candidates() string      { return k.lease().Candidates() }
func (k keys) candidateLeases() string { return k.lease().CandidateLeases() }

// wakeChannel is the channel on which the session with id sessionID is
// told that its waiter for the name is at the head of the queue.
func (k keys) wakeChannel(sessionID string) string { return k.lease().WakeChannel(sessionID) }

func checkName(name string) error   { return lease.CheckName(name) }
func checkValue(value string) error { return lease.CheckValue(value) }

// holder is what a lock key says about its owner (lease.Holder).
type holder struct {
	token string
	fence int64
	value string
}

// parseHolder reads a stored lock value with the lease floor's one parser.
func parseHolder(stored string) (holder, bool) {
	h, ok := lease.ParseHolder(stored)
	return holder{token: h.Token, fence: h.Fence, value: h.Value}, ok
}
