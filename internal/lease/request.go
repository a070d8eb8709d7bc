package lease

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisleader/redisleader/internal/wire"
)

// Transfer requests (Election.RequestTransfer): what Redis holds for them.
// One key per name, RequestKey, which is also the channel of the hint that
// a request was stored or moved. It holds "<id> <fence>\n<value>": the
// requester's random id, the fence of the term it addresses, and the value
// of the candidate to transfer to. It lives one TTL of the requester's
// session, which refreshes it while it waits.
//
// The scripts are request_send and request_take (lua/, built in
// scripts.go with the prelude's guard, so that a denial is named like any
// other script's); Requests runs them.

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

// Requests are the transfer requests of one name (Keys) on one server,
// whose calls run through C (the session's combiner; never a Redlock's).
type Requests struct {
	C    *wire.Combiner
	Keys Keys
}

// Send stores q for ttl, replacing any request, and hints the leader.
func (r Requests) Send(ctx context.Context, q Request, ttl time.Duration) error {
	return r.C.Call(ctx, time.Time{}, RequestSendRun, SendArgs(RequestKey(r.Keys.Name), q.String(), ttl, "")).Err()
}

// PutBack stores held, a request a leader took but whose term could not
// honour it, again for ttl, unless the key holds something by now (the
// requester's next step, or another request): its requester then
// addresses it to the next term, as if it had never been taken.
func (r Requests) PutBack(ctx context.Context, held string, ttl time.Duration) error {
	return r.C.Call(ctx, time.Time{}, RequestSendRun, SendArgs(RequestKey(r.Keys.Name), held, ttl, "NX")).Err()
}

// Take is a leader's take of the request addressed to its term (fence):
// it deletes it, while the lock key still holds the term's token; a term
// that has ended in Redis takes nothing.
func (r Requests) Take(ctx context.Context, fence int64, token string) (Taken, error) {
	return r.take(ctx, TakeArgs(RequestKey(r.Keys.Name), r.Keys.Lock, fence, token))
}

// Readdress stores q, for ttl, in place of the request of q's requester,
// whatever term that one addresses, and hints the leader if that changed
// it; moved is false if the key holds no request of q's requester (a
// leader took it).
func (r Requests) Readdress(ctx context.Context, q Request, ttl time.Duration) (moved bool, err error) {
	t, err := r.take(ctx, ReaddressArgs(RequestKey(r.Keys.Name), r.Keys.Lock, q, ttl))
	return err == nil && t.Took, err
}

// Withdraw deletes the request of the requester id, whatever term it
// addresses, and reports whether it was not there (taken: a leader took
// it).
func (r Requests) Withdraw(ctx context.Context, id string) (taken bool, err error) {
	t, err := r.take(ctx, WithdrawArgs(RequestKey(r.Keys.Name), r.Keys.Lock, id))
	return !t.Took, err
}

// take runs request_take.lua with argv.
func (r Requests) take(ctx context.Context, argv []any) (Taken, error) {
	return TakeReply(r.C.Call(ctx, time.Time{}, RequestTakeRun, argv).Slice())
}

// SendArgs stores the request stored for ttl (request_send.lua; mode "NX":
// only if the key does not exist).
func SendArgs(key, stored string, ttl time.Duration, mode string) []any {
	return []any{nil, nil, 1, key, stored, ttl.Milliseconds(), mode}
}

// TakeArgs is the leader's take of the request addressed to fence, while
// the lock key holds token (request_take.lua): it deletes it.
func TakeArgs(key, lock string, fence int64, token string) []any {
	return []any{nil, nil, 2, key, lock, "", strconv.FormatInt(fence, 10), "", "", token}
}

// WithdrawArgs deletes the request of the requester id, whatever term it
// addresses.
func WithdrawArgs(key, lock, id string) []any {
	return []any{nil, nil, 2, key, lock, id, "", "", "", ""}
}

// ReaddressArgs stores q, for ttl, in place of the request of q's
// requester, whatever term that one addresses; it hints the leader if that
// changed the request.
func ReaddressArgs(key, lock string, q Request, ttl time.Duration) []any {
	return []any{nil, nil, 2, key, lock, q.ID, "", q.String(), ttl.Milliseconds(), ""}
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
