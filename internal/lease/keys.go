package lease

// Key layout. Every key of one name carries the same hash tag {name}, so a
// script that touches the lock key and the fence key never fails with
// CROSSSLOT on Redis Cluster, and the change channel maps to the same slot
// for sharded pub/sub.
//
//	redisleader:{name}        the lock: "<token>\n<fence>\n<value>", with a PX TTL
//	redisleader:{name}:fence  the last fence handed out (no TTL)
//	redisleader:{name}:seq    the last Proclaim's "<token>\n<sequence>" (no TTL; see lua/proclaim.lua)
//	redisleader:{name}:ch     channel: "A" on every acquire and proclaim, "R" on every release
//	redisleader:{name}:queue  fair mode: waiters (ZSET member → arrival, server µs)
//	redisleader:{name}:leases fair mode: waiters' leases (ZSET member → end, server ms)
//	redisleader:{name}:w:<session>  fair mode: channel that wakes that session's head waiter
//	redisleader:{name}:cand   candidates with a priority (ZSET value → priority)
//	redisleader:{name}:candlease  their leases (ZSET value → end, server ms)
//
// While a transfer is under way the lock key holds a Reservation,
// "\n<fence>\n<successor's value>" (no token), with a PX TTL. A name is
// checked, and its keys derived, where its lease is made (KeysOf, node.go).
type Keys struct {
	Name, Lock, Fence string
	// Channel is the pub/sub channel of the name's changes.
	Channel string
	// Queue and Leases are the keys of the name's waiters in fair mode;
	// Candidates and CandidateLeases those of its candidates with a
	// priority. Derived with the others, they are ready for the scripts
	// that take them (a Transfer's hand-off takes all four).
	Queue, Leases, Candidates, CandidateLeases string
	// lockArg and fenceArg are Lock and Fence boxed once, by the
	// constructor (withArgs, node.go), for every lease made with these keys
	// (New).
	lockArg, fenceArg any
}

// The suffixes of the keys that the modes add to a plain lease's (see
// NewKeys, in node.go, for the lock and fence keys and the channel).
const (
	seqSuffix    = ":seq"
	queueSuffix  = ":queue"
	leasesSuffix = ":leases"
	wakeSuffix   = ":w:" // appended to the lock key, then a session id, in the scripts too
	candSuffix   = ":cand"
	candLeaseSuf = ":candlease"
)

// Seq is the key of the sequence number of the name's last Proclaim.
func (k Keys) Seq() string { return k.Lock + seqSuffix }

// WakeChannel is the channel on which the session with id sessionID is
// told that its waiter for the name is at the head of the queue.
func (k Keys) WakeChannel(sessionID string) string { return k.Lock + wakeSuffix + sessionID }
