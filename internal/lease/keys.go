package lease

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

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
// "\n<fence>\n<successor's value>" (no token), with a PX TTL.
type Keys struct {
	Name, Lock, Fence string
	// Channel is the pub/sub channel of the name's changes.
	Channel string
	// Queue and Leases are the keys of the name's waiters in fair mode;
	// Candidates and CandidateLeases those of its candidates with a
	// priority. Derived with the others, they are ready for the scripts
	// that take them (a Transfer's hand-off takes all four).
	Queue, Leases, Candidates, CandidateLeases string
}

const (
	keyPrefix     = "redisleader:{"
	fenceSuffix   = ":fence"
	seqSuffix     = ":seq"
	channelSuffix = ":ch" // appended to the lock key in the scripts too
	queueSuffix   = ":queue"
	leasesSuffix  = ":leases"
	wakeSuffix    = ":w:" // appended to the lock key, then a session id, in the scripts too
	candSuffix    = ":cand"
	candLeaseSuf  = ":candlease"
)

// MaxNameLen bounds a name.
const MaxNameLen = 512

// KeysOf checks name against the naming rule (CheckName) and derives its
// keys.
func KeysOf(name string) (Keys, error) {
	if err := CheckName(name); err != nil {
		return Keys{}, err
	}
	return NewKeys(name), nil
}

// NewKeys derives the keys of a name, and its channel, with one allocation:
// each is the lock key and a suffix, laid end to end in one string (the
// lock key is a prefix of the fence key, the candidates' of their leases').
func NewKeys(name string) Keys {
	all := keyPrefix + name + "}" + fenceSuffix + keyPrefix + name + "}" + channelSuffix +
		keyPrefix + name + "}" + queueSuffix + keyPrefix + name + "}" + leasesSuffix +
		keyPrefix + name + "}" + candLeaseSuf
	lock := len(keyPrefix) + len(name) + 1
	next := func(suffix string) string {
		k := all[:lock+len(suffix)]
		all = all[len(k):]
		return k
	}
	fence, channel, queue, leases, candLeases := next(fenceSuffix), next(channelSuffix), next(queueSuffix), next(leasesSuffix), next(candLeaseSuf)
	return Keys{Name: name, Lock: fence[:lock], Fence: fence, Channel: channel, Queue: queue, Leases: leases,
		Candidates: candLeases[:lock+len(candSuffix)], CandidateLeases: candLeases}
}

// Seq is the key of the sequence number of the name's last Proclaim.
func (k Keys) Seq() string { return k.Lock + seqSuffix }

// WakeChannel is the channel on which the session with id sessionID is
// told that its waiter for the name is at the head of the queue.
func (k Keys) WakeChannel(sessionID string) string { return k.Lock + wakeSuffix + sessionID }

// CheckName enforces the naming rule: 1 to 512 bytes of UTF-8, without '{' or
// '}' (they would break the cluster hash tag) and without control characters
// (they would forge lines in logs and terminals).
func CheckName(name string) error {
	switch {
	case name == "":
		return Invalidf("name must not be empty")
	case len(name) > MaxNameLen:
		return Invalidf("name is %d bytes long; it must be at most %d", len(name), MaxNameLen)
	case strings.ContainsAny(name, "{}"):
		return Invalidf("name %q must not contain '{' or '}' (they would break the Redis Cluster hash tag)", name)
	case !utf8.ValidString(name):
		return Invalidf("name %q must be valid UTF-8", name)
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return Invalidf("name %q must not contain control characters", name)
	}
	return nil
}
