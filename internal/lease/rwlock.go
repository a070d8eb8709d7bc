package lease

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisleader/redisleader/internal/wire"
)

// rwlock.go: a read-write lock's leases as Redis sees them, each kept by
// an RWProtocol (the handle and its API are the root's: rwlock.go there).
//
// Key layout of a read-write lock named name, all with the hash tag
// {name} (one Cluster slot), beside, never on, a lock's or a semaphore's
// keys of the same name:
//
//	redisleader:{name}:rw     the holders: a sorted set, member
//	                          "<token>\n<fence>\n<role><value>" -> the end
//	                          of its lease (server TIME in ms); role "r" a
//	                          reader, "w" the writer, "i" a waiting
//	                          writer's intent (fence 0: it holds nothing);
//	                          it expires with its latest lease
//	redisleader:{name}:rw:ch  channel: "R" on every release and withdrawn intent
//	redisleader:{name}:fence  the last fence handed out, shared with the
//	                          name's lock and semaphore: fences only grow
//
// One set holds every role, so nothing beside it can drift from it. A
// member is a lock value's form (ParseHolder) whose value starts with the
// role, so a semaphore's renewal and release (sem_renew, sem_release) keep
// a read or write lease as they keep a permit, and a give-back by token
// (fence 0) removes an intent as well as a lease.

// RWKeysOf checks name against the naming rule (CheckName) and derives a
// read-write lock's keys: Lock is the holders' set, Channel its channel.
func RWKeysOf(name string) (Keys, error) {
	if err := CheckName(name); err != nil {
		return Keys{}, err
	}
	set := keyPrefix + name + "}:rw"
	return Keys{Name: name, Lock: set, Fence: keyPrefix + name + "}" + fenceSuffix, Channel: set + channelSuffix}.withArgs(), nil
}

// RWAcquireRun is rw_acquire, as the transport runs it.
var RWAcquireRun = runner(RWAcquire)

// Roles of a read-write lock's members: the first byte of their value.
const (
	RoleRead   = 'r'
	RoleWrite  = 'w'
	RoleIntent = 'i'
)

// rw_acquire's last argument, boxed once.
var postIntent, noIntent any = "1", "0"

// RWArgs are one role's arguments of a read-write lock handle, boxed once:
// the value marked with the role, and the longest lease.
type RWArgs struct {
	Marked, MaxLease any
}

// NewRWArgs boxes the arguments of a read-write lock's role (RoleRead or
// RoleWrite) with value.
func NewRWArgs(role byte, value string) *RWArgs {
	return &RWArgs{Marked: string(role) + value, MaxLease: strconv.Itoa(MaxLeaseMs)}
}

// An RWProtocol is one acquisition of a read-write lock's read or write
// lease: a member of the name's set (rw_acquire; sem_renew, sem_release).
// Many readers hold the name at once: it is Shared.
type RWProtocol struct {
	A *RWArgs
	// Wait: a writer that must wait posts its intent (a blocking Lock;
	// a TryLock does not).
	Wait bool
	// Token is the token of the last acquire call: a writer that gives up
	// withdraws its intent with it. Only the acquiring goroutine uses it,
	// as argv, the buffer of rw_acquire's argument vector.
	Token string
	argv  [10]any
}

// AcquireCall is rw_acquire with l's and the role's arguments.
func (p *RWProtocol) AcquireCall(l *Lease) wire.Call {
	a := &l.Args
	p.Token = l.Token
	post := noIntent
	if p.Wait {
		post = postIntent
	}
	p.argv = [10]any{nil, nil, 2, a.Lock, a.Fence, a.Token, a.TTL, p.A.Marked, p.A.MaxLease, post}
	return wire.Call{Script: RWAcquireRun, Argv: p.argv[:]}
}

// RenewCall is sem_renew of l's member.
func (p *RWProtocol) RenewCall(l *Lease) wire.Call { return memberRenew(l, p.A.Marked) }

// ReleaseCall is sem_release of l's member (fence 0: of any member of l's
// token, an intent too): a read or write lease has no heir.
func (p *RWProtocol) ReleaseCall(l *Lease, _ string) wire.Call { return memberRelease(l, p.A.Marked) }

// Shared says that a read lease shares its name with others: the root's
// registry never files one as the name's only holder.
func (p *RWProtocol) Shared() {}

// Write reports whether p acquires the write lease.
func (p *RWProtocol) Write() bool { return p.A.Marked.(string)[0] == RoleWrite }

// refused words a refusal of p's role by the member of fence and value
// (its role, then the value it published): who holds the name, or that a
// writer is waiting (an intent, fence 0), never a token.
func (p *RWProtocol) refused(fence int64, value string) error {
	switch {
	case value == "":
	case value[0] == RoleIntent && p.Write():
		return rwRefusal("another writer is waiting")
	case value[0] == RoleIntent:
		return rwRefusal("a writer is waiting")
	case value[0] == RoleWrite:
		return rwRefusal(fmt.Sprintf("the writer holds it (fence %d)", fence))
	case value[0] == RoleRead:
		return rwRefusal(fmt.Sprintf("a reader holds it (fence %d)", fence))
	}
	return fmt.Errorf("%w (fence %d)", ErrLocked, fence)
}

// An rwRefusal is a read-write lock's refusal: it matches ErrLocked,
// worded by who refused it (RWProtocol.refused).
type rwRefusal string

func (r rwRefusal) Error() string { return string(r) }
func (rwRefusal) Unwrap() error   { return ErrLocked }

// RWHoldersCall reads k's members and last fence (sem_holders).
func RWHoldersCall(k Keys) wire.Call {
	return wire.Call{Script: SemHoldersRun, Argv: []any{nil, nil, 2, k.Lock, k.Fence}}
}

// An RWMember is one live member of a read-write lock as RWHolders reads
// it: never its token.
type RWMember struct {
	Role  byte // RoleRead, RoleWrite or RoleIntent
	Value string
	Fence int64         // 0 for an intent
	TTL   time.Duration // left on its lease, by the server's clock
}

// DecodeRWHolders decodes cmd, a RWHoldersCall on k's keys: the live
// members, ordered as the set (by end). A member or score this package
// could not have written is an error naming the key, and never printed.
func DecodeRWHolders(k Keys, cmd *redis.Cmd) (out []RWMember, err error) {
	res, now, err := holdersReply(cmd)
	if err != nil {
		return nil, err
	}
	ok := eachMember(res, now, func(h Holder, left time.Duration) bool {
		if h.Value == "" || !strings.ContainsRune("rwi", rune(h.Value[0])) || (h.Value[0] == RoleIntent) != (h.Fence == 0) {
			return false
		}
		if left > 0 {
			out = append(out, RWMember{Role: h.Value[0], Value: h.Value[1:], Fence: h.Fence, TTL: left})
		}
		return true
	})
	if !ok {
		return nil, &wire.ScriptError{Msg: fmt.Sprintf("ERR redisleader: rwlock key %s holds a member or score this package did not write", k.Lock)}
	}
	return out, nil
}
