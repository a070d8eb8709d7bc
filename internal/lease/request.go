package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
// other script's); Requests runs them, a Requester asks with them and a
// Watch takes with them.

// ErrNotTaken: no leader took a transfer request before its requester
// gave up; it was withdrawn (the root exports it as
// redisleader.ErrNotTaken).
var ErrNotTaken = errors.New("redisleader: no leader took the transfer request")

// ErrNoSuccessor: the named successor did not take leadership (the root
// exports it as redisleader.ErrNoSuccessor).
var ErrNoSuccessor = errors.New("redisleader: the successor did not take leadership")

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

// A Requester is one RequestTransfer's request, addressed to the term whose
// fence is Fence, stored for TTL at a time; Log is told what it cannot do.
type Requester struct {
	Request
	Requests
	TTL time.Duration
	Log *slog.Logger
}

// Changed acts on a leader change to the term with fence (0: nobody leads)
// and value: done when To leads (err nil) or another candidate leads after
// the request was taken (ErrNoSuccessor).
func (q *Requester) Changed(ctx context.Context, fence int64, value string) (done bool, err error) {
	switch {
	case fence != 0 && value == q.To:
		_, _ = q.Withdraw(ctx) // if not taken, its term has ended: nobody would take it
		return true, nil
	case fence == 0 || fence == q.Fence:
		return false, nil // the hand-over under way, or the same term
	}
	// Another term: the one addressed ended, and took the request (then it
	// handed over to another candidate) or not (then it goes to this term).
	switch moved, err := q.Readdress(ctx, fence); {
	case err != nil && ctx.Err() == nil:
		q.Log.Warn("redisleader: cannot address a transfer request to the new term",
			"election", q.Keys.Name, "fence", fence, "err", err)
	case err == nil && !moved:
		return true, q.Errorf("%w; %q leads (fence %d)", ErrNoSuccessor, value, fence)
	}
	return false, nil
}

// Readdress stores the request, addressed to the term with fence, for one
// TTL, if the key still holds this request (for any term), and the script
// hints the leader; moved is false if it does not (a leader took it).
func (q *Requester) Readdress(ctx context.Context, fence int64) (moved bool, err error) {
	next := q.Request
	next.Fence = fence
	moved, err = q.Requests.Readdress(ctx, next, q.TTL)
	if moved {
		q.Fence = fence
	}
	return moved, err
}

// Withdraw deletes the request if the key still holds it, whatever term it
// addresses (also once ctx has ended), and reports whether it did not
// (taken: a leader took it).
func (q *Requester) Withdraw(ctx context.Context) (taken bool, err error) {
	return q.Requests.Withdraw(context.WithoutCancel(ctx), q.ID)
}

// GiveUp withdraws the request unless a leader has taken it, once ctx has
// ended or the session closed, and says which (and why it gave up, also
// when it cannot withdraw).
func (q *Requester) GiveUp(ctx context.Context) error {
	taken, err := q.Withdraw(ctx)
	why := ctx.Err()
	if why == nil {
		why = wire.ErrClosed
	}
	switch {
	case err != nil:
		return q.Errorf("%w; cannot withdraw it (it expires within the TTL): %w", why, err)
	case ctx.Err() == nil:
		return q.Errorf("%w", why)
	case !taken:
		return q.Errorf("%w; withdrawn: %w", ErrNotTaken, ctx.Err())
	}
	return q.Errorf("the leader took it, and %q does not lead yet: %w", q.To, ctx.Err())
}

// Errorf is an error of the request, naming its election and successor.
func (q *Requester) Errorf(format string, a ...any) error {
	return fmt.Errorf("redisleader: transfer request %q to %q: "+format, append([]any{q.Keys.Name, q.To}, a...)...)
}

// A Watch takes the requests addressed to one term: the one with Fence,
// whose lease holds Token. Held tells whether the term still holds (by the
// clock), Own whether to is its own value, and Claim whether it can still
// honour a request to to that it took; if not, the request is put back.
type Watch struct {
	Requests
	T     *wire.Transport // its pub/sub hints and its end (Done)
	TTL   time.Duration
	Log   *slog.Logger
	Fence int64
	Token string
	Held  func() bool
	Own   func(to string) bool
	Claim func(to string) bool

	warned  bool // a key that is no request was reported
	ignored bool // a request for another term was reported
	failing bool // reading the requests failed, and was reported
}

// Await takes the request addressed to the term at once, then on every
// hint and once per TTL, until the term has claimed one (its value), it
// does not hold any more ("", nil) or ctx ends or the transport closes. The
// takes run on call: ctx, or one that outlives ctx, so that a take whose
// reply comes after ctx has ended still puts back a request that the term
// no longer honours.
func (w *Watch) Await(ctx, call context.Context) (string, error) {
	sub, err := w.T.Subscribe(ctx, RequestKey(w.Keys.Name), nil)
	if err != nil {
		return "", err
	}
	defer sub.Close()
	for w.Held() { // lost by the clock only: a term that cannot hand over takes none
		if to := w.take(call); to != "" {
			return to, nil
		}
		if err := w.T.Wait(ctx, sub, w.TTL); err != nil {
			return "", err
		}
	}
	return "", nil
}

// take takes the request addressed to the term, if any, and returns its
// value once the term has claimed it, or "" if there is none to act on
// (none, one for another term, one for the leader's own value, one the
// term could no longer honour, put back, or an error, logged once until a
// read succeeds again).
func (w *Watch) take(ctx context.Context) string {
	t, err := w.Take(ctx, w.Fence, w.Token)
	name := w.Keys.Name
	switch {
	case err != nil && !w.failing && ctx.Err() == nil:
		w.failing = true
		w.Log.Warn("redisleader: cannot read transfer requests; they are not honoured until this is fixed", "election", name, "err", err)
		return ""
	case err != nil || !t.Present:
		w.failing = w.failing && err != nil
		return ""
	}
	w.failing = false
	to, ok := RequestValue(t.Held)
	switch {
	case !ok && !w.warned:
		w.warned = true
		w.Log.Warn(fmt.Sprintf("redisleader: %s holds %d bytes that are no transfer request; left as they are", RequestKey(name), len(t.Held)))
	case !ok:
	case !t.Took && !w.ignored:
		w.ignored = true
		w.Log.Warn(fmt.Sprintf("redisleader: ignoring a request to transfer %s made for another term (not for fence %d); left as it is", name, w.Fence))
	case !t.Took:
	case w.Own(to):
		w.Log.Info("redisleader: transfer requested to the leader's own value: it leads already", "election", name)
	case !w.Claim(to):
		// Taken as the term ended: its requester addresses it to the next.
		if err := w.PutBack(context.WithoutCancel(ctx), t.Held, w.TTL); err != nil {
			w.Log.Warn("redisleader: cannot put back a transfer request its term did not honour; its requester sees it taken",
				"election", name, "err", err)
		}
	default:
		return to
	}
	return ""
}
