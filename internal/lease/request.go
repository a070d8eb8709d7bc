package lease

import (
	_ "embed" // the request scripts
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Transfer requests (Election.RequestTransfer): what Redis holds for them.
// One key per name, RequestKey, which is also the channel of the hint that
// a request was stored or moved. It holds "<id> <fence>\n<value>": the
// requester's random id, the fence of the term it addresses, and the value
// of the candidate to transfer to. It lives one TTL of the requester's
// session, which refreshes it while it waits.
//
// Arguments are in the root's script-runner layout: {nil, nil, numkeys,
// keys..., args...}; the runner fills the first two slots.

// RequestSendSrc stores a request and hints the leader (lua/request_send.lua).
//
//go:embed lua/request_send.lua
var RequestSendSrc string

// RequestTakeSrc takes, withdraws, readdresses or refreshes a request
// (lua/request_take.lua).
//
//go:embed lua/request_take.lua
var RequestTakeSrc string

// The scripts' SHA1s, for EVALSHA; request_test.go checks them.
const (
	RequestSendSHA = "6a98897a660ee987f8b52503704e6bffae940b7d"
	RequestTakeSHA = "1d223a8773c557347ddbc4dfc4d69096e1af12d8"
)

// RequestKey is the key, and the hint's channel, of name's transfer
// requests: in the name's hash slot, under the ACL rule's redisleader:*.
func RequestKey(name string) string { return "redisleader:{" + name + "}:transfer" }

// A Request asks the leader of the term with fence Fence to transfer to
// the candidate whose value is To. ID names the requester.
type Request struct {
	ID    string
	Fence int64
	To    string
}

// String is the request as stored.
func (q Request) String() string {
	return q.ID + " " + strconv.FormatInt(q.Fence, 10) + "\n" + q.To
}

// RequestValue returns the value a stored request asks to transfer to, and
// false if held is no request (of any version: "<id>\n<value>" is one).
func RequestValue(held string) (to string, ok bool) {
	_, to, ok = strings.Cut(held, "\n")
	return to, ok
}

// SendArgs stores q for ttl (request_send.lua).
func SendArgs(key string, q Request, ttl time.Duration) []any {
	return []any{nil, nil, 1, key, q.String(), ttl.Milliseconds()}
}

// TakeArgs is the leader's take of the request addressed to fence
// (request_take.lua): it deletes it.
func TakeArgs(key string, fence int64) []any {
	return []any{nil, nil, 1, key, "", strconv.FormatInt(fence, 10), "", ""}
}

// WithdrawArgs deletes the request of the requester id, whatever term it
// addresses.
func WithdrawArgs(key, id string) []any {
	return []any{nil, nil, 1, key, id, "", "", ""}
}

// ReaddressArgs stores q, for ttl, in place of the request of q's
// requester, whatever term that one addresses; it hints the leader if that
// changed the request.
func ReaddressArgs(key string, q Request, ttl time.Duration) []any {
	return []any{nil, nil, 1, key, q.ID, "", q.String(), ttl.Milliseconds()}
}

// Taken is the reply of request_take.lua.
type Taken struct {
	Present bool   // the key existed
	Took    bool   // the request was the one asked for, and was deleted or replaced
	Held    string // what the key held
}

// TakeReply decodes the reply of request_take.lua.
func TakeReply(res []any, err error) (Taken, error) {
	switch {
	case errors.Is(err, redis.Nil): // no key
		return Taken{}, nil
	case err != nil:
		return Taken{}, err
	}
	if len(res) == 2 {
		n, ok := res[0].(int64)
		if held, isString := res[1].(string); ok && isString {
			return Taken{Present: true, Took: n == 1, Held: held}, nil
		}
	}
	return Taken{}, fmt.Errorf("unexpected reply to the transfer request script: %d elements", len(res))
}
