package lease

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/redisleader/redisleader/internal/wire"
)

// node.go: a lease's calls on one server, each read in one place: a
// name's keys (KeysOf: the naming rule, then every key of the name and its
// channel), the lease its first attempt makes (New), the place (Node), the
// default protocol (Plain), acquire's vector, its reply and the attempt's
// outcome; then a renewal round's call (Renew: vectors, round trip, the
// lease-alone fallback of a candidate, replies), the release's and a
// Transfer's hand-off (the fair and candidate variants are in fair.go,
// candidate.go and args.go), and who leads (Leader: inspect, its reply, and
// ParseHolder, which every decoder of a stored value uses).

// A Node is the place of a session's leases on one Redis server (also a
// primary found through Sentinel, or a Cluster, whose client routes each
// name to its slot's primary): the scripts run through T's combiner. With
// Acks (WithReplicaAcks) every write is followed by WAIT on the same
// connection, and a write too few replicas acknowledged does not count.
type Node struct {
	T    *wire.Transport
	C    wire.Client
	Acks wire.Acks
	Log  *slog.Logger // the session's: a renewal that falls back to the lease alone says so
	// Native is what the server answered to the native commands that a
	// plain lease's renewal and release take where it has them (native.go).
	Native Native
}

// A plain lease's keys: the lock, its fence and the name's channel (the
// layout of every key is in keys.go).
const (
	keyPrefix     = "redisleader:{"
	fenceSuffix   = ":fence"
	channelSuffix = ":ch" // appended to the lock key in the scripts too
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
// lock key is a prefix of the fence key, the candidates' of their leases');
// then it boxes the lock and fence keys for the scripts (two more).
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
		Candidates: candLeases[:lock+len(candSuffix)], CandidateLeases: candLeases}.withArgs()
}

// withArgs boxes k's lock and fence keys for the script arguments of the
// leases made with k: every constructor of Keys ends with it.
func (k Keys) withArgs() Keys {
	k.lockArg, k.fenceArg = k.Lock, k.Fence
	return k
}

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

// New makes a lease of k for value with a fresh token, kept by proto; ttl
// is the session's TTL in ms, boxed once by the session. An acquisition
// makes it at its first attempt with a token, and keeps it for the next.
func New(k Keys, ttl any, value string, proto Protocol) Lease {
	if k.lockArg == nil { // keys not made by a constructor
		k = k.withArgs()
	}
	token := rand.Text()
	args := Args{Lock: k.lockArg, Fence: k.fenceArg, Token: token, TTL: ttl, Value: value}
	return Lease{Keys: k, Token: token, Args: args, Proto: proto}
}

// Acquire makes one acquire attempt for l, bounded by ctx, the call
// timeout and deadline (the local deadline the lease would get).
func (n *Node) Acquire(ctx context.Context, l *Lease, deadline time.Time) Attempt {
	var (
		cmd    *redis.Cmd
		ackErr error
	)
	cl := l.Proto.AcquireCall(l)
	if n.Acks.N == 0 {
		cmd = n.T.Combiner().Call(ctx, deadline, cl.Script, cl.Argv) // the hot path: no slice of commands
	} else {
		callCtx := n.T.Bound(ctx, deadline)
		if err := n.T.Combiner().Await(callCtx, wire.KeyOf(cl.Argv)); err != nil {
			// An earlier call on the key may still reach Redis (internal/wire/combine.go).
			cmd = wire.ErrCmd(ctx, cl.Argv, err)
		} else {
			var cmds []*redis.Cmd
			cmds, ackErr = cl.Script.RunAll(callCtx, n.C, [][]any{cl.Argv}, n.Acks)
			cmd = cmds[0]
		}
		wire.Unbind(callCtx)
	}
	r := l.Outcome(cmd.Result())
	if r.Err == nil && ackErr != nil {
		// Taken on the primary but not seen by enough replicas: a failover
		// could lose it, so it does not count.
		return Attempt{Err: fmt.Errorf("redisleader: acquire %q: %w", l.Keys.Name, ackErr), GiveBack: true}
	}
	return r
}

// Plain is the default protocol.
type Plain struct{}

// AcquireCall is acquire with l's arguments.
func (Plain) AcquireCall(l *Lease) wire.Call {
	return wire.Call{Script: AcquireRun, Argv: l.Args.Acquire(&l.argv)}
}

// RenewCall is renew with l's arguments.
func (Plain) RenewCall(l *Lease) wire.Call { return wire.Call{Script: RenewRun, Argv: l.Args.Renew()} }

// ReleaseCall hands the name to heir, or deletes the key.
func (Plain) ReleaseCall(l *Lease, heir string) wire.Call {
	if heir != "" {
		return l.HandOffCall(heir, "")
	}
	return wire.Call{Script: ReleaseRun, Argv: l.Args.Release()}
}

// HandOffCall is the release of a leadership with a succession: the name
// goes to the heir, or to the best candidate above prio ("": none), or is
// deleted as by the release scripts.
func (l *Lease) HandOffCall(heir string, prio any) wire.Call {
	return wire.Call{Script: HandOffRun, Argv: l.Args.HandOff(l.Keys, heir, prio)}
}

// HandOff is hand_off's vector: to the heir ("": to the best candidate
// above prio, "" for none).
func (a *Args) HandOff(k Keys, heir string, prio any) []any {
	return []any{nil, nil, 5, a.Lock, k.Queue, k.Leases, k.Candidates, k.CandidateLeases,
		a.Token, heir, prio, a.Value, a.TTL}
}

// Acquire fills buf with acquire's vector and returns it.
func (a *Args) Acquire(buf *[8]any) []any {
	*buf = [8]any{nil, nil, 2, a.Lock, a.Fence, a.Token, a.TTL, a.Value}
	return buf[:]
}

// An Attempt is the outcome of an acquire attempt.
type Attempt struct {
	Fence int64         // ours when Err is nil, else the holder's (ErrLocked)
	Left  time.Duration // ErrLocked: the holder's PTTL (-1: no TTL, or no holder)
	Err   error         // nil: acquired; ErrLocked wrapped; or why not
	// GiveBack: the attempt does not count, but may have left our token
	// in Redis; the caller deletes it.
	GiveBack bool
	// Split (Redlock): we took nodes, and other owners held nodes too, so
	// contenders split them; a blocking acquisition retries after its random
	// delay, or, short of ErrLocked, a growing one.
	Split bool
	// Took, with Split: from the attempt's first send to its give-back's
	// end, the unit of the acquisition's backoff.
	Took time.Duration
	// Fair mode, ErrLocked: at most how many live waiters are ahead of us
	// (0: we are the head; -1: not fair mode), and how long the head's
	// lease has left.
	Ahead    int
	HeadLeft time.Duration
	// At is, on success, the server TIME in µs from which the key's TTL
	// runs (the acquire script's third element; 0 if the reply has none).
	At int64
}

// Behind is how long the lease that a blocked attempt waits behind has
// left: the holder's (Left; negative: no TTL), or, behind the head of a
// fair queue (Ahead > 0), the head's or the holder's if that ends first
// (never negative: a renewed lease means sleeping again, a dead head is
// skipped by the next attempt).
func (a Attempt) Behind() time.Duration {
	if a.Ahead <= 0 {
		return a.Left
	}
	wait := a.HeadLeft
	if a.Left >= 0 {
		wait = min(wait, a.Left)
	}
	return max(wait, 0)
}

// Outcome turns one server's reply to l's acquire script into an
// attempt's outcome.
func (l *Lease) Outcome(reply any, err error) Attempt {
	if err != nil {
		return Attempt{Err: fmt.Errorf("redisleader: acquire %q: %w", l.Keys.Name, err)}
	}
	rep, err := DecodeAcquire(reply)
	rf, refuses := l.Proto.(refuser)
	switch {
	case err != nil:
		return Attempt{Err: fmt.Errorf("redisleader: acquire %q: %w", l.Keys.Name, err)}
	case rep.Taken:
		return Attempt{Fence: rep.Fence, At: rep.At}
	case rep.Foreign, !refuses && !rep.Free && rep.Fence == 0:
		// Not another owner's lease: data someone else wrote, which no
		// wait or retry will free (a lock key never holds fence 0, see
		// lockHolder; a refuser's members may: a read-write lock's intents).
		return Attempt{Err: fmt.Errorf("redisleader: acquire %q: %w", l.Keys.Name, ForeignValue(l.Keys))}
	}
	r := Attempt{Fence: rep.Fence, Ahead: rep.Ahead, HeadLeft: time.Duration(rep.HeadLeft) * time.Millisecond, Left: -1}
	if rep.PTTL >= 0 {
		r.Left = Millis(rep.PTTL) // no TTL (-1): nothing to align with
	}
	if refuses && !rep.Free {
		r.Err = rf.refused(rep.Fence, rep.By)
	} else if rep.Free {
		r.Err = fmt.Errorf("%w (free, but waiters came first)", ErrLocked)
	} else {
		r.Err = fmt.Errorf("%w (fence %d)", ErrLocked, r.Fence)
	}
	return r
}

// Millis converts a PTTL in milliseconds, saturating where a Duration ends
// (about 292 years) rather than wrapping to a negative or small wait.
func Millis(ms int64) time.Duration {
	if ms > math.MaxInt64/int64(time.Millisecond) {
		return math.MaxInt64
	}
	return time.Duration(ms) * time.Millisecond
}

// An Acquired is one server's reply to an acquire script (acquire,
// acquire_candidate, fair_acquire).
type Acquired struct {
	Taken bool  // taken now, or already ours
	Fence int64 // taken: ours; not: the holder's (0 when free)
	At    int64 // taken: the server TIME in µs its TTL runs from (0: not told)
	// Not taken:
	Free     bool  // free, but waiters came first (fair)
	Foreign  bool  // the lock key holds a value this package did not write
	PTTL     int64 // the holder's PTTL in ms; -1: none or no TTL; 0: not told
	Ahead    int   // fair: live waiters ahead (0: the head; -2: gave up); -1: not told
	HeadLeft int64 // fair: ms left on the head waiter's lease
	// Not taken: the holder's value (never its token).
	By string
}

// A refuser words its protocol's refusals (matching ErrLocked) from the
// holder's fence and value, which the reply names.
type refuser interface {
	refused(fence int64, value string) error
}

// DecodeAcquire decodes reply, an acquire script's: one integer (taken,
// with a fence that is also the time its TTL runs from) or an array.
func DecodeAcquire(reply any) (Acquired, error) {
	if n, ok := reply.(int64); ok {
		return Acquired{Taken: true, Fence: n, At: n}, nil
	}
	res, ok := reply.([]any)
	if !ok {
		return Acquired{}, fmt.Errorf("unexpected reply %T", reply)
	}
	if len(res) < 2 {
		return Acquired{}, fmt.Errorf("unexpected reply of %d elements", len(res))
	}
	if ok, _ := res[0].(int64); ok == 1 {
		r := Acquired{Taken: true}
		r.Fence, _ = res[1].(int64)
		if len(res) > 2 {
			r.At, _ = res[2].(int64)
		}
		return r, nil
	}
	r := Acquired{Ahead: -1, Free: res[1] == nil}
	if len(res) >= 5 {
		ahead, _ := res[3].(int64)
		r.Ahead = int(ahead)
		r.HeadLeft, _ = res[4].(int64)
	}
	if stored, ok := res[1].(string); ok {
		h, ok := ParseHolder(stored)
		r.Fence, r.Foreign, r.By = h.Fence, !ok, h.Value
	}
	if len(res) > 2 {
		if ms, ok := res[2].(int64); ok && ms >= 0 {
			r.PTTL = ms
		} else {
			r.PTTL = -1
		}
	}
	return r, nil
}

// A Renewal is the outcome of one lease's renewal: renewed when Lost and
// Err are zero. A Quorum (quorum.go) makes the same.
type Renewal struct {
	Lost   bool   // Redis says the key no longer holds the token (for a quorum: no quorum can)
	Err    error  // the renewal failed: retried until the local deadline
	Better string // renewed, and this candidate has a higher priority (candidate.go)
}

// Renew renews every lease once, in one round trip (on a Cluster, one per
// master: wire.RunCalls), bounded by ctx, the call timeout and deadline
// (the earliest of the leases' local deadlines; zero: none). A candidate's
// renewal that Redis refused for its candidate keys is sent again as the
// lease's alone (leasesAlone). A renewal too few replicas
// acknowledged (Acks) failed.
func (n *Node) Renew(ctx context.Context, leases []*Lease, deadline time.Time) []Renewal {
	calls := make([]wire.Call, 0, len(leases))
	for _, l := range leases {
		calls = append(calls, l.Proto.RenewCall(l))
	}
	var held []*Held // per lease, what its native renewal compares with (native.go; nil: the scripts)
	if n.Native.ifeq.Load() != capNo {
		held = n.nativeRenewals(ctx, leases, calls)
	}
	cmds, until, ackErr := n.T.RunCallsBound(ctx, deadline, n.C, calls, n.Acks)
	idx, again := n.leasesAlone(ctx, leases, calls, cmds)
	if held != nil {
		idx, again = scriptsAgain(held, calls, cmds, func(i int) bool { return n.judgeRenew(leases[i], calls[i]) }, idx, again)
	}
	n.sendAgain(ctx, until, idx, again, cmds, n.Acks)
	out := make([]Renewal, len(cmds))
	for i, cmd := range cmds {
		out[i] = DecodeRenew(cmd)
		if !out[i].Lost && out[i].Err == nil && ackErr != nil {
			out[i].Err = ackErr
		}
	}
	return out
}

// leasesAlone returns the renewals among calls (whose replies are cmds, of
// leases) that Redis refused for their candidate keys
// (candidateKeysRefused), as Plain's, to send again, and their indexes.
// The lease is the fact and the candidates a hint: a leader with a
// priority keeps every lease a plain leader keeps; enlisting it and
// hearing of a better candidate wait for a later renewal.
func (n *Node) leasesAlone(ctx context.Context, leases []*Lease, calls []wire.Call, cmds []*redis.Cmd) (idx []int, alone []wire.Call) {
	for i, cl := range calls {
		if cl.Script != PreferRenewRun || !candidateKeysRefused(cmds[i].Err()) {
			continue
		}
		level := slog.LevelInfo // a slot in migration
		if redis.HasErrorPrefix(cmds[i].Err(), "redisleader:") {
			level = slog.LevelWarn // someone else's data, to be removed
		}
		n.Log.Log(ctx, level, "redisleader: renewing the lease alone: the candidate keys refused the renewal",
			"name", leases[i].Keys.Name, "fence", leases[i].Fence, "err", cmds[i].Err())
		idx, alone = append(idx, i), append(alone, Plain{}.RenewCall(leases[i]))
	}
	return idx, alone
}

// sendAgain sends calls, script calls, in one more round trip that ends
// with the first (until), and puts the reply of calls[j] in cmds[idx[j]]:
// a renewal's that Redis refused for its candidate keys (leasesAlone), or
// a native call's that the server did not take (native.go). A write too
// few replicas acknowledged (Acks) failed.
func (n *Node) sendAgain(ctx context.Context, until time.Time, idx []int, calls []wire.Call, cmds []*redis.Cmd, acks wire.Acks) {
	if len(calls) == 0 {
		return
	}
	replies, _, ackErr := n.T.RunCallsBound(ctx, until, n.C, calls, acks)
	for j, i := range idx {
		if ackErr != nil && replies[j].Err() == nil {
			replies[j].SetErr(ackErr) // not acknowledged: it does not count
		}
		cmds[i] = replies[j]
	}
}

// candidateKeysRefused reports whether a renewal's error can be about its
// candidate keys, not its lease: on Redis Cluster, while their slot
// migrates, a call with several keys that are split between the two nodes
// gets TRYAGAIN, or ASK once the client gave up following redirections
// (the lock key alone is served, through an ASK redirection); or a value
// someone else wrote in a candidate key (candidateKeys in prelude.lua's piece cand).
func candidateKeysRefused(err error) bool {
	return err != nil && (redis.HasErrorPrefix(err, "TRYAGAIN") || redis.HasErrorPrefix(err, "ASK ") ||
		redis.HasErrorPrefix(err, "redisleader: candidate key "))
}

// Renew is renew's vector.
func (a *Args) Renew() []any { return []any{nil, nil, 1, a.Lock, a.Token, a.TTL} }

// DecodeRenew turns cmd, a renew script's call (renew, prefer_renew,
// redlock_renew), into a renewal: Lost when the key is missing or holds
// another token; Better, from prefer_renew, a live candidate with a higher
// priority.
func DecodeRenew(cmd *redis.Cmd) Renewal {
	if res, ok := cmd.Val().([]any); ok && len(res) == 2 && cmd.Err() == nil {
		better, _ := res[1].(string)
		return Renewal{Better: better}
	}
	n, err := cmd.Int64()
	return Renewal{Lost: err == nil && n == 0, Err: err}
}

// An Ending is one lease to release, with its succession: the heir that
// ended it (Election.Transfer), or "".
type Ending struct {
	Lease *Lease
	Heir  string
}

// A Deleted is the outcome of one lease's compare-and-delete (or hand-off).
type Deleted struct {
	Err     error // the delete failed (for a quorum: on a quorum of nodes)
	Retry   bool  // it failed somewhere: the token may still be there
	Missing bool  // the key did not hold the token (for a quorum: on a quorum)
}

// Release deletes r's token if the key still holds it, or hands the name
// to r.Heir, with its protocol's release.
func (n *Node) Release(ctx context.Context, r Ending) Deleted {
	if r.Heir == "" && (n.Native.delifeq.Load() != capNo || n.Native.delex.Load() != capNo) {
		return n.releaseNative(ctx, r) // native.go
	}
	c := r.Lease.Proto.ReleaseCall(r.Lease, r.Heir)
	return DecodeRelease(n.T.Combiner().CallNow(ctx, time.Time{}, c.Script, c.Argv))
}

// ReleaseAll is Release for several leases in one round trip, bounded by
// ctx, the call timeout and deadline (zero: none). It first waits until no
// acquire of these leases that a caller gave up on while its batch was on
// the wire can still reach Redis (internal/wire/combine.go), so that the
// delete comes after it.
func (n *Node) ReleaseAll(ctx context.Context, rs []Ending, deadline time.Time) []Deleted {
	calls := make([]wire.Call, len(rs))
	var held []*Held // per lease, what its native release compares with (nil: the script)
	for i, r := range rs {
		var h *Held
		if calls[i], h, _ = n.releaseCall(ctx, r, false); h != nil {
			if held == nil {
				held = make([]*Held, len(rs))
			}
			held[i] = h
		}
	}
	callCtx := n.T.Bound(ctx, deadline)
	defer wire.Unbind(callCtx)
	for _, r := range rs {
		if n.T.Combiner().Await(callCtx, r.Lease.Args.Lock) != nil {
			break // the deletes fail with the context's error
		}
	}
	cmds, _ := wire.RunCalls(callCtx, n.C, calls, wire.Acks{}, nil)
	idx, again := scriptsAgain(held, calls, cmds, func(i int) (again bool) {
		cmds[i], again = n.judgeRelease(calls[i])
		return again
	}, nil, nil)
	until, _ := callCtx.Deadline()
	n.sendAgain(ctx, until, idx, again, cmds, wire.Acks{})
	out := make([]Deleted, len(cmds))
	for i, cmd := range cmds {
		out[i] = DecodeRelease(cmd)
	}
	return out
}

// Release is release's vector.
func (a *Args) Release() []any {
	v := a.release()
	return v[:]
}

// release is release's vector as an array, for a buffer of the caller's.
func (a *Args) release() [5]any { return [5]any{nil, nil, 1, a.Lock, a.Token} }

// DecodeRelease turns cmd, a release script's call (release, fair_release,
// redlock_release, hand_off, whose {2, heir} is a reservation made), into
// its outcome: Missing when the key is missing or held another token, so
// nothing was written.
func DecodeRelease(cmd *redis.Cmd) Deleted {
	if _, reserved := cmd.Val().([]any); reserved && cmd.Err() == nil {
		return Deleted{}
	}
	n, err := cmd.Int64()
	return Deleted{Missing: err == nil && n == 0, Err: err, Retry: err != nil}
}

// Proclaim stores value as l's value, keeping token, fence and TTL, as the
// seq'th Proclaim of l's term (lua/proclaim.lua), bounded by deadline; it
// reports whether the key still held l's token, and ErrSuperseded when a
// later Proclaim of the term is stored already.
func (n *Node) Proclaim(ctx context.Context, l *Lease, seq int64, value string, deadline time.Time) (bool, error) {
	l.forgetValue() // a renewal sent now compares with either value: the script's
	res, err := n.T.Combiner().Call(ctx, deadline, ProclaimRun, l.Args.Proclaim(l.Keys.Seq(), seq, value)).Int()
	if res == 2 {
		return true, ErrSuperseded
	}
	if res == 1 && err == nil {
		l.proclaimed(value)
	}
	return res == 1, err
}

// ErrSuperseded: Redis holds a later Proclaim of the leadership than this
// one, which wrote nothing. Calls run one at a time, so only a request that
// reached Redis after its caller gave up finds that, and its reply goes
// nowhere; a live caller gets it only if something else wrote the term's
// sequence.
var ErrSuperseded = errors.New("redisleader: a later Proclaim of this leadership is stored already; this one wrote nothing")

// Inspect reads who holds k's name on this server, in one call: the
// reply, with a Transfer's reservation judged (Inspected.Reserved).
func (n *Node) Inspect(ctx context.Context, k Keys) (Inspected, error) {
	return DecodeInspect(n.T.Combiner().Call(ctx, time.Time{}, InspectRun, InspectArgs(k.Lock)))
}

// Leader reads who leads k's name on t's server, in one call (inspect),
// judged (Inspected.Leads): r.Holder when it leads. A Transfer reads with
// it: it runs on one server, the session's transport's.
func Leader(ctx context.Context, t *wire.Transport, k Keys) (r Inspected, leads bool, err error) {
	r, err = DecodeInspect(t.Combiner().Call(ctx, time.Time{}, InspectRun, InspectArgs(k.Lock)))
	if err == nil {
		leads, err = r.Leads(k)
	}
	return r, leads, err
}

// InspectArgs is inspect's vector for the lock key lock.
func InspectArgs(lock any) []any { return []any{nil, nil, 1, lock} }

// An Inspected is one server's reply to inspect. A decoder never puts the
// reply itself in an error: it could hold another owner's token.
type Inspected struct {
	Present  bool          // the lock key exists
	Known    bool          // and holds a value this package wrote (Holder)
	Reserved bool          // Known, and a Transfer's reservation: nobody leads
	Holder   Holder        // a reservation is a holder without a token
	TTL      time.Duration // the key's PTTL; 0 when none
}

// Leads reports whether r's holder leads: not when the key is missing or
// holds a Transfer's reservation (nobody leads; it waits for its
// successor), and a value this package did not write is an error
// (ForeignValue).
func (r Inspected) Leads(k Keys) (bool, error) {
	switch {
	case !r.Present || r.Reserved:
		return false, nil
	case !r.Known:
		return false, ForeignValue(k)
	}
	return true, nil
}

// DecodeInspect decodes cmd, an inspect call.
func DecodeInspect(cmd *redis.Cmd) (Inspected, error) {
	res, err := cmd.Slice()
	switch {
	case errors.Is(err, redis.Nil):
		return Inspected{}, nil
	case err != nil:
		return Inspected{}, err
	case len(res) != 2:
		return Inspected{Present: true}, fmt.Errorf("unexpected reply of %d elements", len(res))
	}
	stored, _ := res[0].(string)
	r := Inspected{Present: true}
	r.Holder, r.Known = lockHolder(stored)
	_, reserved := r.Holder.Reserved()
	r.Reserved = r.Known && reserved
	if ms, ok := res[1].(int64); ok && ms > 0 {
		r.TTL = Millis(ms)
	}
	return r, nil
}

// ParseHolder splits a stored lock value "<token>\n<fence>\n<value>" (also
// a semaphore's or read-write lock's member); ok is false when it is not
// one this package wrote, whose fence is a decimal without sign or leading
// zero. A reservation parses as a holder without a token (see
// Holder.Reserved).
func ParseHolder(stored string) (h Holder, ok bool) {
	tok, rest, ok := strings.Cut(stored, "\n")
	if !ok {
		return Holder{}, false
	}
	fs, value, ok := strings.Cut(rest, "\n")
	if !ok || fs == "" || fs[0] < '0' || fs[0] > '9' || fs[0] == '0' && len(fs) > 1 {
		return Holder{}, false
	}
	fence, err := strconv.ParseInt(fs, 10, 64)
	if err != nil {
		return Holder{}, false
	}
	return Holder{Token: tok, Fence: fence, Value: value}, true
}

// lockHolder is ParseHolder for a lock key's value as Leader reads it: its
// fence is never 0 (only a read-write lock's intents have fence 0), which
// stands for "no leader" in Observe.
func lockHolder(stored string) (Holder, bool) {
	h, ok := ParseHolder(stored)
	return h, ok && h.Fence > 0
}

// Reserved returns the reservation h is, if it is one: nobody holds the
// name, which waits for the successor r.For.
func (h Holder) Reserved() (r Reservation, ok bool) {
	if h.Token != "" {
		return Reservation{}, false
	}
	return Reservation{Fence: h.Fence, For: h.Value}, true
}
