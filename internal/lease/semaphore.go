package lease

import (
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisleader/redisleader/internal/wire"
)

// semaphore.go: a semaphore's permits as Redis sees them, each a lease
// kept by the PermitProtocol (the handle and its API are the root's:
// semaphore.go there).
//
// Key layout of a semaphore named name, all with the hash tag {name} (one
// Cluster slot), beside, never on, a lock's keys of the same name:
//
//	redisleader:{name}:sem        the permits: a sorted set, member
//	                              "<token>\n<fence>\n<value>" -> the end of
//	                              its lease (server TIME in ms); it expires
//	                              with its latest lease
//	redisleader:{name}:sem:limit  N, the name's limit (a decimal; no TTL)
//	redisleader:{name}:sem:ch     channel: "R" on every release, "L" when N changes
//	redisleader:{name}:fence      the last fence handed out, shared with the
//	                              name's lock: fences only grow
//
// A permit's member carries its token, fence and value in a lock value's
// form (ParseHolder), so the set is the one structure: nothing beside it
// can drift from it.

// Limits of a semaphore.
const (
	// MaxPermits bounds N: a limit beyond is a mistake, not a plan (an
	// acquire reads every live permit).
	MaxPermits = 1_000_000
	// MaxLeaseMs is the longest TTL a session may have (its WithTTL rule),
	// in ms: a permit whose lease ends further from now was not written by
	// this package (a forged +inf, say).
	MaxLeaseMs = 24 * 3600 * 1000
)

// SemKeysOf checks name against the naming rule (CheckName) and derives a
// semaphore's keys: Lock is the permits' set, Channel its channel.
func SemKeysOf(name string) (Keys, error) {
	if err := CheckName(name); err != nil {
		return Keys{}, err
	}
	set := keyPrefix + name + "}:sem"
	return Keys{Name: name, Lock: set, Fence: keyPrefix + name + "}" + fenceSuffix, Channel: set + channelSuffix}.withArgs(), nil
}

// Limit is the key of a semaphore's limit; k is SemKeysOf's.
func (k Keys) Limit() string { return k.Lock + ":limit" }

// CheckLimit enforces the rule of a semaphore's limit: 1 to MaxPermits.
func CheckLimit(n int) error {
	if n < 1 || n > MaxPermits {
		return Invalidf("semaphore limit %d must be between 1 and %d", n, MaxPermits)
	}
	return nil
}

// Scripts of a semaphore, as the transport runs them.
var (
	SemAcquireRun = runner(SemAcquire)
	SemRenewRun   = runner(SemRenew)
	SemReleaseRun = runner(SemRelease)
	SemHoldersRun = runner(SemHolders)
	SemLimitRun   = runner(SemLimit)
)

// Permits are a semaphore handle's arguments, boxed once: its limit key,
// its limit N and the longest lease.
type Permits struct {
	LimitKey, N, MaxLease any
}

// NewPermits boxes the arguments of k's semaphore with limit n.
func NewPermits(k Keys, n int) *Permits {
	return &Permits{LimitKey: k.Limit(), N: strconv.Itoa(n), MaxLease: strconv.Itoa(MaxLeaseMs)}
}

// A PermitProtocol is one acquisition of a semaphore's permit: its lease
// is a member of the name's set (sem_acquire, sem_renew, sem_release).
// Many leases hold the name at once: it is Shared.
type PermitProtocol struct {
	P *Permits
	// argv is the buffer of sem_acquire's argument vector; only the
	// acquiring goroutine uses it.
	argv [11]any
}

// AcquireCall is sem_acquire with l's and the semaphore's arguments.
func (p *PermitProtocol) AcquireCall(l *Lease) wire.Call {
	a := &l.Args
	p.argv = [11]any{nil, nil, 3, a.Lock, a.Fence, p.P.LimitKey, a.Token, a.TTL, a.Value, p.P.N, p.P.MaxLease}
	return wire.Call{Script: SemAcquireRun, Argv: p.argv[:]}
}

// RenewCall is sem_renew of l's member.
func (p *PermitProtocol) RenewCall(l *Lease) wire.Call { return memberRenew(l, l.Args.Value) }

// ReleaseCall is sem_release of l's member: a permit has no heir.
func (p *PermitProtocol) ReleaseCall(l *Lease, _ string) wire.Call {
	return memberRelease(l, l.Args.Value)
}

// memberRenew and memberRelease are sem_renew and sem_release of l's
// member in a sorted set of leases, whose last part is v (a permit's
// value; a read-write lease's role and value).
func memberRenew(l *Lease, v any) wire.Call {
	return wire.Call{Script: SemRenewRun, Argv: []any{nil, nil, 1, l.Args.Lock, l.Args.Token, l.Fence, v, l.Args.TTL}}
}

func memberRelease(l *Lease, v any) wire.Call {
	return wire.Call{Script: SemReleaseRun, Argv: []any{nil, nil, 1, l.Args.Lock, l.Args.Token, l.Fence, v}}
}

// Shared says that a permit shares its name with others: a session may
// hold several, so the root's registry never files one as the name's only
// holder.
func (p *PermitProtocol) Shared() {}

// HoldersCall reads k's permits and limit (sem_holders).
func HoldersCall(k Keys) wire.Call {
	return wire.Call{Script: SemHoldersRun, Argv: []any{nil, nil, 2, k.Lock, k.Limit()}}
}

// A Permit is one live permit as Holders reads it: never its token.
type Permit struct {
	Value string
	Fence int64
	TTL   time.Duration // left on its lease, by the server's clock
}

// DecodeHolders decodes cmd, a sem_holders call on k's keys: the live
// permits, ordered as the set (by end), and N (0: none stored). A member
// or score this package could not have written is an error naming the
// key, and never printed.
func DecodeHolders(k Keys, cmd *redis.Cmd) (permits []Permit, n int, err error) {
	res, now, err := holdersReply(cmd)
	if err != nil {
		return nil, 0, err
	}
	if raw, ok := res[1].(string); ok {
		if n, err = strconv.Atoi(raw); err != nil || CheckLimit(n) != nil {
			return nil, 0, &wire.ScriptError{Msg: fmt.Sprintf("ERR redisleader: limit key %s holds a value this package did not write", k.Limit())}
		}
	}
	ok := eachMember(res, now, func(h Holder, left time.Duration) bool {
		if left > 0 {
			permits = append(permits, Permit{Value: h.Value, Fence: h.Fence, TTL: left})
		}
		return true
	})
	if !ok {
		return nil, n, &wire.ScriptError{Msg: fmt.Sprintf("ERR redisleader: semaphore key %s holds a member or score this package did not write", k.Lock)}
	}
	return permits, n, nil
}

// holdersReply checks cmd, a sem_holders call, and returns its reply and
// the server's time in ms.
func holdersReply(cmd *redis.Cmd) (res []any, now int64, err error) {
	if res, err = cmd.Slice(); err != nil {
		return nil, 0, err
	}
	if len(res) < 2 || len(res)%2 != 0 {
		return nil, 0, fmt.Errorf("unexpected reply of %d elements", len(res))
	}
	now, _ = res[0].(int64)
	return res, now, nil
}

// eachMember calls f with every member of res, a sem_holders reply read
// at now, and the time left on its lease (<= 0: passed), until f returns
// false; it reports false then, or for a member or score this package
// could not have written (never printed).
func eachMember(res []any, now int64, f func(h Holder, left time.Duration) bool) bool {
	for i := 2; i < len(res); i += 2 {
		m, _ := res[i].(string)
		s, _ := res[i+1].(string)
		h, ok := ParseHolder(m)
		end, err := strconv.ParseInt(s, 10, 64)
		if !ok || h.Token == "" || err != nil || end < 0 || end > now+MaxLeaseMs || !f(h, time.Duration(end-now)*time.Millisecond) {
			return false
		}
	}
	return true
}

// LimitCall sets k's limit to n (sem_limit), which the caller checked.
func LimitCall(k Keys, n int) wire.Call {
	return wire.Call{Script: SemLimitRun, Argv: []any{nil, nil, 2, k.Limit(), k.Lock, strconv.Itoa(n)}}
}
