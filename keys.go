package redisleader

import (
	"strconv"
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
//	redisleader:{name}:seq    the last Proclaim's "<token>\n<sequence>" (no TTL; see proclaimScript)
//	redisleader:{name}:ch     channel: "A" on every acquire and proclaim, "R" on every release
//	redisleader:{name}:queue  fair mode: waiters (ZSET member → arrival, server µs)
//	redisleader:{name}:leases fair mode: waiters' leases (ZSET member → end, server ms)
//	redisleader:{name}:w:<session>  fair mode: channel that wakes that session's head waiter
//	redisleader:{name}:cand   candidates with a priority (ZSET value → priority)
//	redisleader:{name}:candlease  their leases (ZSET value → end, server ms)
//
// While a transfer (transfer.go) is under way the lock key holds a
// reservation, "\n<fence>\n<successor's value>" (no token), with a PX TTL.
type keys struct {
	name, lock, fence string
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

// keysOf checks name against the naming rule (checkName) and derives its
// keys.
func keysOf(name string) (keys, error) {
	if err := checkName(name); err != nil {
		return keys{}, err
	}
	return newKeys(name), nil
}

// newKeys derives the keys of a name with one allocation: the lock key is a
// prefix of the fence key.
func newKeys(name string) keys {
	fence := keyPrefix + name + "}" + fenceSuffix
	return keys{name: name, lock: fence[:len(fence)-len(fenceSuffix)], fence: fence}
}

// channel is the pub/sub channel of the name's changes.
func (k keys) channel() string { return k.lock + channelSuffix }

// seq is the key of the sequence number of the name's last Proclaim.
func (k keys) seq() string { return k.lock + seqSuffix }

// queue and leases are the keys of the name's waiters in fair mode.
func (k keys) queue() string  { return k.lock + queueSuffix }
func (k keys) leases() string { return k.lock + leasesSuffix }

// candidates and candidateLeases are the keys of the name's candidates with
// a priority.
func (k keys) candidates() string      { return k.lock + candSuffix }
func (k keys) candidateLeases() string { return k.lock + candLeaseSuf }

// wakeChannel is the channel on which the session with id sessionID is
// told that its waiter for the name is at the head of the queue.
func (k keys) wakeChannel(sessionID string) string { return k.lock + wakeSuffix + sessionID }

// maxValueLen bounds the value an election candidate publishes.
const maxValueLen = 64 << 10

// checkName enforces the naming rule: 1 to 512 bytes of UTF-8, without '{' or
// '}' (they would break the cluster hash tag) and without control characters
// (they would forge lines in logs and terminals).
func checkName(name string) error {
	switch {
	case name == "":
		return invalidf("name must not be empty")
	case len(name) > maxNameLen:
		return invalidf("name is %d bytes long; it must be at most %d", len(name), maxNameLen)
	case strings.ContainsAny(name, "{}"):
		return invalidf("name %q must not contain '{' or '}' (they would break the Redis Cluster hash tag)", name)
	case !utf8.ValidString(name):
		return invalidf("name %q must be valid UTF-8", name)
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return invalidf("name %q must not contain control characters", name)
	}
	return nil
}

func checkValue(value string) error {
	if len(value) > maxValueLen {
		return invalidf("value is %d bytes long; it must be at most %d", len(value), maxValueLen)
	}
	return nil
}

// Each acquire, proclaim and release publishes an event on the channel lock
// key + ":ch" (not a key, so it need not be declared). PUBLISH on Redis
// Cluster reaches every node; the channel carries the name's hash tag, so it
// is also ready for sharded pub/sub (SPUBLISH). Events carry no content:
// "A" for an acquisition or a new value, "R" for a release. They are only
// hints to read the state again (pub/sub loses messages, and a script can
// publish and then fail on its first write, under OOM say), and they tell a
// subscriber nothing about the owner: no token, no fence, no value. Expiry
// publishes nothing: waiters re-read the state when a lease can have expired.
//
// The scripts (scripts.go) compare the token as a prefix of the stored
// value: "<token>\n", where the token is 128 random bits in base32
// (crypto/rand.Text) and contains no newline, so no value can fake another
// owner's token.

// holder is what a lock key says about its owner.
type holder struct {
	token string
	fence int64
	value string
}

// parseHolder splits a stored lock value "<token>\n<fence>\n<value>".
func parseHolder(stored string) (holder, bool) {
	tok, rest, ok := strings.Cut(stored, "\n")
	if !ok {
		return holder{}, false
	}
	fs, value, ok := strings.Cut(rest, "\n")
	if !ok {
		return holder{}, false
	}
	fence, err := strconv.ParseInt(fs, 10, 64)
	if err != nil {
		return holder{}, false
	}
	return holder{token: tok, fence: fence, value: value}, true
}
