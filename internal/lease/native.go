package lease

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisleader/redisleader/internal/wire"
)

// native.go: a plain lease's renewal and release in the server's own
// commands, where the server has them; the scripts (lua/renew.lua,
// lua/release.lua) stay the contract and the fallback. A renewal is
// SET lock v IFEQ v PX ttl (Valkey 8.1, Redis 8.4), where v is the whole
// value Redis holds for the lease, "<token>\n<fence>\n<value>" (Held); a
// release is MULTI, DELIFEQ lock v (Valkey 9.0) or DELEX lock IFEQ v
// (Redis 8.4, Valkey 9.2), PUBLISH <lock>:ch R, EXEC: the delete and its
// wake-up stay atomic. The reply contract is the script's: a renewal that
// finds another value is "not owner" (0), a release deletes (1) or finds
// the key missing or another's (0). Unlike release.lua, the transaction
// publishes "R" also when it deleted nothing; whoever hears it reads the
// key again.
//
// Whether the server has a command is learnt from its own reply, never
// from a version string (Valkey 8 reports redis_version 7.2.4), and kept
// per node (Native). While unknown, a call is a probe: the native form
// with the script right behind it in the same round trip (probeScript),
// whose reply is the call's. "unknown command", "syntax error" (SET
// without IFEQ), "unknown subcommand" or a NOPERM for the command (a user
// whose ACL predates it) turns it off for the node; any other reply turns
// it on. Once on, such a refusal (a failover to an older server) turns it
// off and that same call is sent again at once as the script, so its
// caller never sees it. A native call that did nothing (a renewal's nil,
// a release's 0) is sent again as the script, which compares the token
// alone and says: the key may hold our token with another value (a
// Proclaim in flight, or one whose write Redis lost in a failover), and
// only a loss or a retried release pays the second round trip. A release
// sent again so comes after the calls its first pipeline took along, which
// may still see the name held (as a read racing any release may). A
// release's commands come from a kit the node reuses once the server
// answered its EXEC (releaseKit, answered). A lease without a
// known value (not acquired, Leftover, a Proclaim's outcome unknown), a
// lease of another protocol, a hand-off and a Cluster client's release
// take the scripts (go-redis does not keep a keyless MULTI on the key's
// node). A Cluster client renews natively: the one failing run of scenario
// CL1 on record (locks on a stopped master kept past their TTL) has the
// numbers of a master that was never stopped, and CL1 now checks that its
// stop held; the one way the two paths' verdicts differed (a SET back
// with neither a reply nor an error was "renewed") is closed
// (renewVerdict).

// A command's state on a node.
const (
	capUnknown int32 = iota // not asked yet: the next call asks
	capYes                  // the server answered it
	capNo                   // it did not know it or refused it: scripts only
)

// Native is what one node learnt of the server's native commands, one
// state each (capUnknown, capYes, capNo), read and written atomically.
// Its zero value knows nothing. A Cluster client's release takes the script.
type Native struct {
	ifeq    atomic.Int32 // SET ... IFEQ
	delifeq atomic.Int32 // DELIFEQ
	delex   atomic.Int32 // DELEX ... IFEQ
	cluster atomic.Int32 // capYes: the client is a Cluster's, whose MULTI go-redis does not keep on one node
	kits    sync.Pool    // idle *releaseKits (nativeRelease)
}

// Has reports what the node learnt of cmd ("ifeq", "delifeq" or "delex"):
// known is false until a reply said; has is true if it is used.
func (nv *Native) Has(cmd string) (has, known bool) {
	s := nv.state(cmd).Load()
	return s == capYes, s != capUnknown
}

// Off turns every native command off: the scripts only (a benchmark
// comparing the two paths on one server).
func (nv *Native) Off() {
	for _, c := range []*atomic.Int32{&nv.ifeq, &nv.delifeq, &nv.delex} {
		c.Store(capNo)
	}
}

func (nv *Native) state(cmd string) *atomic.Int32 {
	switch cmd {
	case "ifeq":
		return &nv.ifeq
	case "delifeq":
		return &nv.delifeq
	}
	return &nv.delex
}

// unsupported reports whether err, a native command's, says the server
// does not have it or this user may not run it.
func unsupported(err error) bool {
	return err != nil && (redis.HasErrorPrefix(err, "unknown command") || redis.HasErrorPrefix(err, "syntax error") ||
		redis.HasErrorPrefix(err, "unknown subcommand") || redis.HasErrorPrefix(err, "NOPERM"))
}

// A Held is the value Redis holds for a lease, "<token>\n<fence>\n<value>";
// known is false while it is not known (a Proclaim's outcome is unknown).
// Every change is a new Held, so a call can tell whether the lease's
// changed while it was out. A renewal passes it to go-redis as a string
// (str), made once; a release writes it into its kit's buffer as go-redis
// writes the command (heldValue), and makes no string.
type Held struct {
	value string
	known bool
	once  sync.Once // makes s
	s     string
}

// str returns h, a Held of l, as a string, made the first time (&s: no
// boxing).
func (h *Held) str(l *Lease) *string {
	h.once.Do(func() { h.s = l.heldString(h.value) })
	return &h.s
}

// held returns l's Held, made from its token, fence and value the first
// time; nil if l has none (no fence yet).
func (l *Lease) held() *Held {
	if h := l.hold.Load(); h != nil {
		return h
	}
	if l.Fence == 0 {
		return nil
	}
	l.firstOnce.Do(func() { // the lease's own first Held: no allocation
		l.first.value, _ = l.Args.Value.(string)
		l.first.known = true
		l.hold.CompareAndSwap(nil, &l.first) // unless a Proclaim came first
	})
	return l.hold.Load()
}

// heldFor is the Held of l storing value (a Proclaim's).
func (l *Lease) heldFor(value string) *Held { return &Held{value: value, known: true} }

// appendHeld appends the value Redis holds for l storing value to b, the
// bytes heldString makes.
func (l *Lease) appendHeld(b []byte, value string) []byte {
	b = append(append(b, l.Token...), '\n')
	return append(append(strconv.AppendInt(b, l.Fence, 10), '\n'), value...)
}

// A heldValue is a release's Held h of l as its delete's argument: go-redis
// writes what MarshalBinary returns, l's Held appended to buf, a buffer of
// the release's kit, as it writes the command (encoding.BinaryMarshaler),
// and keeps nothing of it.
type heldValue struct {
	l   *Lease
	h   *Held
	buf []byte
}

// MarshalBinary is the Held's bytes, in v's buffer.
func (v *heldValue) MarshalBinary() ([]byte, error) {
	v.buf = v.l.appendHeld(v.buf[:0], v.h.value)
	return v.buf, nil
}

// String keeps the Held (a token) out of a hook's or log's rendering of
// the command, as the *string it replaces did.
func (v *heldValue) String() string { return "(the lease's value)" }

// heldString is the value Redis holds for l storing value, made with one
// allocation.
func (l *Lease) heldString(value string) string {
	var fence [20]byte
	var b strings.Builder
	f := strconv.AppendInt(fence[:0], l.Fence, 10)
	b.Grow(len(l.Token) + len(f) + len(value) + 2)
	b.WriteString(l.Token)
	b.WriteByte('\n')
	b.Write(f)
	b.WriteByte('\n')
	b.WriteString(value)
	return b.String()
}

// native returns the value a native call of l compares with, or nil when
// l takes the scripts.
func (l *Lease) native() *Held {
	if _, plain := l.Proto.(Plain); !plain || l.Leftover {
		return nil
	}
	if h := l.held(); h != nil && h.known {
		return h
	}
	return nil
}

var multiArgs, execArgs = []any{"multi"}, []any{"exec"}

// nativeRenew makes cl, l's renewal, native if it can be; it returns the
// Held it compares with (nil: the script).
func (n *Node) nativeRenew(ctx context.Context, l *Lease, cl *wire.Call) *Held {
	if n.Native.ifeq.Load() == capNo {
		return nil
	}
	h := l.native()
	if h == nil {
		return nil
	}
	s := h.str(l)
	cl.Native = []redis.Cmder{redis.NewCmd(ctx, "set", l.Args.Lock, s, "ifeq", s, "px", l.Args.TTL)}
	if n.Native.ifeq.Load() == capUnknown {
		cl.Native = append(cl.Native, probeScript(ctx, *cl))
	}
	return h
}

// nativeRenewals makes the renewals among calls (of leases) native where
// they can be (nativeRenew); it returns what each compares with, nil if
// none is native.
func (n *Node) nativeRenewals(ctx context.Context, leases []*Lease, calls []wire.Call) []*Held {
	var held []*Held
	for i, l := range leases {
		if h := n.nativeRenew(ctx, l, &calls[i]); h != nil {
			if held == nil {
				held = make([]*Held, len(leases))
			}
			held[i] = h
		}
	}
	return held
}

// releaseNative is Node.Release where the server may have the native
// release: r's release in native form if it can be (releaseCall), judged,
// and sent again as the script if the server did not do it.
func (n *Node) releaseNative(ctx context.Context, r Ending) Deleted {
	c, h, kit := n.releaseCall(ctx, r, true)
	cmd := n.T.Combiner().SendNow(ctx, time.Time{}, c)
	if h == nil || !judged(c, cmd) {
		return DecodeRelease(cmd)
	}
	cmd, again := n.judgeRelease(c)
	if again {
		cmd = n.T.Combiner().CallNow(ctx, time.Time{}, c.Script, c.Argv)
	}
	d := DecodeRelease(cmd)
	if kit.answered() { // EXEC's reply read: nothing of the kit's is still to be sent or read
		n.Native.reuse(kit)
	}
	return d
}

// answered reports whether the server answered k's EXEC (a reply, or its
// refusal): a context's, a connection's or a hook's error, or no reply at
// all (a hook that sends on after it returned), may leave k's commands
// still to be written or read, and k is then never reused.
func (k *releaseKit) answered() bool {
	err := k.exec.Err()
	return err == nil && len(k.exec.Val()) == 2 || isRedisError(err)
}

// probeScript is the script of cl as one more native command, EVAL of its
// source (never NOSCRIPT): a probe (a native call while the server's
// answer is unknown) carries it right behind, in the same round trip, and
// its reply is the call's whatever the server answers to the native form.
// A server without the form costs no second round trip, and what is taken
// along with the call, or sent after it, comes after the script as before;
// where the native form did the work, the script finds nothing to do.
func probeScript(ctx context.Context, cl wire.Call) *redis.Cmd {
	return redis.NewCmd(ctx, append([]any{"eval", cl.Script.Src()}, cl.Argv[2:]...)...)
}

// probed returns the reply of a probe's script, or nil when the script is
// to be sent again by the runner (it failed, with an error the runner
// words, such as an ACL denial).
func probed(cl wire.Call) *redis.Cmd {
	if cmd := cl.Native[len(cl.Native)-1].(*redis.Cmd); cmd.Err() == nil {
		return cmd
	}
	return nil
}

// releaseHeld returns the value the native release of r compares with, or
// nil when r takes the script.
func (n *Node) releaseHeld(r Ending) *Held {
	if n.Native.delifeq.Load() == capNo && n.Native.delex.Load() == capNo || r.Heir != "" || n.isCluster() {
		return nil
	}
	return r.Lease.native()
}

// nativeRelease returns the release of r in native form, with the Held it
// compares with and the kit that holds its commands; a nil Held when r
// takes its protocol's script (then the call is not made). The kit is
// the node's (Native.kits) when pooled, else the caller's alone.
func (n *Node) nativeRelease(ctx context.Context, r Ending, pooled bool) (wire.Call, *Held, *releaseKit) {
	h := n.releaseHeld(r)
	if h == nil {
		return wire.Call{}, nil, nil
	}
	del, state := "delifeq", n.Native.delifeq.Load()
	if state == capNo {
		del, state = "delex", n.Native.delex.Load()
	}
	k := newReleaseKit
	if pooled {
		k = n.Native.kit
	}
	kit := k().fill(del, r.Lease, h)
	cl := wire.Call{Script: ReleaseRun, Argv: kit.argv[:], Native: kit.native[:4], Reply: kit.reply} // Plain's: releaseHeld
	if state == capUnknown {
		kit.native[4] = probeScript(ctx, cl)
		cl.Native = kit.native[:5]
	}
	return cl, h, kit
}

// releaseCall is r's release: native where it can be (nativeRelease: h
// and kit not nil), else its protocol's script.
func (n *Node) releaseCall(ctx context.Context, r Ending, pooled bool) (cl wire.Call, h *Held, kit *releaseKit) {
	if cl, h, kit = n.nativeRelease(ctx, r, pooled); h == nil {
		cl = r.Lease.Proto.ReleaseCall(r.Lease, r.Heir)
	}
	return cl, h, kit
}

// A releaseKit is a native release's commands (MULTI, the delete,
// PUBLISH, EXEC) and their argument vectors, made once and kept by the
// node (Native.kits) for its next release: a release takes one (kit),
// fills in its lease's key, channel and value, and gives it back (reuse)
// only once the server's reply to its EXEC has been read (answered). A
// kit whose caller gave up first, whose pipeline failed or a hook ended,
// may still be on the wire: it is never given back. So no two releases share
// one, and a retried release takes another.
type releaseKit struct {
	multi, del, pub *redis.StatusCmd // replies +OK, +QUEUED: a string each, not boxed too
	exec            *redis.SliceCmd  // its array read as such, not boxed too
	reply           *redis.Cmd       // the call's (wire.Call.Reply), made from them
	delArgs         [4]any           // DELIFEQ key v, or DELEX key IFEQ v
	val             heldValue        // v
	pubArgs         [3]any           // PUBLISH channel R
	argv            [5]any           // the script's (Args.Release): the call's key, a probe's and a fallback's
	native          [5]redis.Cmder   // the four, and a probe's script
}

// newReleaseKit makes a kit; the delete is made by fill.
func newReleaseKit() *releaseKit {
	k := &releaseKit{pubArgs: [3]any{"publish", nil, "R"}}
	k.multi = redis.NewStatusCmd(context.Background(), multiArgs...)
	k.pub = redis.NewStatusCmd(context.Background(), k.pubArgs[:]...)
	k.exec = redis.NewSliceCmd(context.Background(), execArgs...)
	k.reply = redis.NewCmd(context.Background(), execArgs...)
	return k
}

// kit returns a kit of the node's, or a new one.
func (nv *Native) kit() *releaseKit {
	if k, ok := nv.kits.Get().(*releaseKit); ok {
		return k
	}
	return newReleaseKit()
}

// reuse gives k back to the node once its release is done with it.
func (nv *Native) reuse(k *releaseKit) {
	k.delArgs[1], k.delArgs[len(k.del.Args())-1], k.pubArgs[1] = nil, nil, nil // keys, tokens and values
	k.val.l, k.val.h = nil, nil
	clear(k.val.buf)
	clear(k.argv[:])
	k.native[4] = nil
	nv.kits.Put(k)
}

// fill readies k for the release of l, whose value is h, with the delete
// del ("delifeq" or "delex"): no reply, no error.
func (k *releaseKit) fill(del string, l *Lease, h *Held) *releaseKit {
	if k.del == nil || k.delArgs[0] != del {
		k.delArgs = [4]any{del}
		args := k.delArgs[:3] // DELIFEQ key v
		if del == "delex" {
			k.delArgs[2] = "ifeq"
			args = k.delArgs[:] // DELEX key IFEQ v
		}
		k.del = redis.NewStatusCmd(context.Background(), args...)
	}
	k.val.l, k.val.h = l, h
	k.delArgs[1], k.delArgs[len(k.del.Args())-1], k.pubArgs[1] = l.Args.Lock, &k.val, &l.Keys.Channel
	k.argv = l.Args.release()
	k.native = [5]redis.Cmder{k.multi, k.del, k.pub, k.exec}
	for _, cmd := range [...]*redis.StatusCmd{k.multi, k.del, k.pub} {
		cmd.SetErr(nil)
		cmd.SetVal("")
	}
	k.exec.SetErr(nil)
	k.exec.SetVal(nil)
	k.reply.SetErr(nil)
	k.reply.SetVal(nil)
	return k
}

// scriptsAgain appends to idx and again, as scripts, the native calls
// among calls (those with a Held in held, whose replies are cmds) that
// judge says are to be sent again so.
func scriptsAgain(held []*Held, calls []wire.Call, cmds []*redis.Cmd, judge func(i int) bool, idx []int, again []wire.Call) ([]int, []wire.Call) {
	for i, h := range held {
		if h != nil && judged(calls[i], cmds[i]) && judge(i) {
			calls[i].Native = nil // the script, with the same vector
			idx, again = append(idx, i), append(again, calls[i])
		}
	}
	return idx, again
}

// judged reports whether cmd, the reply to the native call cl, is its
// last command's, whose replies the judges read; not when its caller gave
// up first (a command of the context's error: cl's may still be on the
// wire) or a hook ended its pipeline: then it is the call's error.
func judged(cl wire.Call, cmd *redis.Cmd) bool {
	return cmd == cl.Reply || redis.Cmder(cmd) == cl.Native[len(cl.Native)-1] // cl.NativeReply(), read here
}

// isCluster reports whether n's client is a Cluster's, asked once.
func (n *Node) isCluster() bool {
	s := n.Native.cluster.Load()
	if s == capUnknown {
		s = capNo
		if wire.KindOf(n.C) == wire.KindCluster { // a wrapper too, as the combiner counts it
			s = capYes
		}
		n.Native.cluster.Store(s)
	}
	return s == capYes
}

// judgeRenew reads the reply of the native renewal cl into the script's (1
// renewed) in place, learning from it; again: the server did not take it,
// or its nil is ambiguous, so the script is to be sent instead. A probe's
// reply is its script's (probed).
func (n *Node) judgeRenew(l *Lease, cl wire.Call) (again bool) {
	again = n.renewVerdict(cl.Native[0].(*redis.Cmd))
	if again && errors.Is(cl.Native[0].Err(), redis.Nil) {
		// Our value is not what Redis holds (a Proclaim's write lost, or
		// one in flight): the scripts renew until a Proclaim stores one.
		l.forgetValue()
	}
	if len(cl.Native) == 2 {
		return probed(cl) == nil
	}
	return again
}

// errRenewReply fails a native renewal whose SET came back with neither
// an error nor its "OK": it did not renew (the script's reply, read as a
// number, fails the same way).
var errRenewReply = errors.New("redisleader: a renewal's SET … IFEQ came back without its OK reply (nor an error); not renewed")

// renewVerdict is judgeRenew's reading of the native command cmd: "OK"
// renewed, nil the script's to say (not ours, or ours with another value);
// anything else, or nothing, failed.
func (n *Node) renewVerdict(cmd *redis.Cmd) (again bool) {
	err := cmd.Err()
	switch {
	case unsupported(err):
		n.Native.ifeq.Store(capNo)
		return true
	case err == nil && cmd.Val() == "OK":
		cmd.SetVal(int64(1))
	case err == nil: // no reply (a Cluster pipeline's node part may end so), or not SET's
		cmd.SetErr(errRenewReply)
		return false // failed, retried, as the script's unreadable reply
	case errors.Is(err, redis.Nil):
		n.Native.ifeq.Store(capYes)
		return true
	default:
		return false // as the script's error: failed, retried
	}
	n.Native.ifeq.Store(capYes)
	return false
}

// judgeRelease reads the replies of the native release cl (MULTI, the
// delete, PUBLISH, EXEC, and a probe's script), learning from them. It returns the command that holds the release's
// reply (1 deleted, 0 missing or another's): the call's Reply, made the
// script's from EXEC's, or a probe's script's where the transaction did
// not do it; again: the script is still to be sent.
func (n *Node) judgeRelease(cl wire.Call) (cmd *redis.Cmd, again bool) {
	again = n.releaseVerdict(cl)
	if len(cl.Native) == 5 && again { // a probe: its script ran right behind
		if cmd := probed(cl); cmd != nil {
			return cmd, false
		}
	}
	return cl.Reply, again
}

// releaseVerdict is judgeRelease's reading of the transaction: again, the
// server did not do it, or deleted nothing (ambiguous: the key may hold
// our token with another value), so the script is to.
func (n *Node) releaseVerdict(cl wire.Call) (again bool) {
	multi, del, pub, exec := cl.Native[0], cl.Native[1].(*redis.StatusCmd), cl.Native[2], cl.Native[3]
	c := n.Native.state(del.Args()[0].(string))
	switch {
	case unsupported(del.Err()):
		// Nothing was deleted: the transaction was discarded (or MULTI
		// refused, below). A server that ran the rest (miniredis) only
		// published a spurious wake-up.
		c.Store(capNo)
		return true
	case exec.Err() == nil:
		return n.execDeleted(c, exec.(*redis.SliceCmd), cl.Reply)
	case isRedisError(multi.Err()):
		// MULTI refused: the delete ran on its own. Its reply is the
		// outcome; after an ACL's refusal later releases take the script.
		if unsupported(multi.Err()) {
			n.transactionsOff()
		}
		deleted, err := strconv.ParseInt(del.Val(), 10, 64) // a status command reads ":1" as "1"
		if del.Err() != nil || err != nil || deleted == 0 {
			return true
		}
		cl.Reply.SetErr(nil)
		cl.Reply.SetVal(deleted)
		return false
	case isRedisError(pub.Err()):
		return true // the channel denied: nothing ran, and the script names the denial
	case isRedisError(exec.Err()):
		// EXEC refused (its own NOPERM, READONLY, LOADING, ...): nothing
		// ran; the script says what the server refuses, and an ACL that
		// denies EXEC turns the transaction off.
		if strings.Contains(exec.Err().Error(), "NOPERM") {
			n.transactionsOff()
		}
		return true
	}
	cl.Reply.SetErr(exec.Err()) // EXEC's error is the release's: failed, retried
	return false
}

// execDeleted reads EXEC's reply, {deleted, subscribers}, into reply, the
// delete's (again as judgeRelease); c, the delete's state, learns it.
func (n *Node) execDeleted(c *atomic.Int32, exec *redis.SliceCmd, reply *redis.Cmd) (again bool) {
	res := exec.Val()
	if len(res) != 2 {
		reply.SetErr(errors.New("redisleader: unexpected reply to a release's EXEC"))
		return false
	}
	if err, ok := res[0].(error); ok {
		reply.SetErr(err)
		return false
	}
	c.Store(capYes)
	if deleted, _ := res[0].(int64); deleted != 1 {
		return true
	}
	reply.SetErr(nil) // a pipeline's error (another command's) is not the release's
	reply.SetVal(int64(1))
	return false
}

// transactionsOff turns the native release off: the server (or the ACL)
// refused MULTI or EXEC.
func (n *Node) transactionsOff() {
	n.Native.delifeq.Store(capNo)
	n.Native.delex.Store(capNo)
}

// isRedisError reports whether err is a reply of the server (not a
// connection's or a context's error).
func isRedisError(err error) bool {
	var re redis.Error
	return err != nil && !errors.Is(err, redis.Nil) && errors.As(err, &re)
}

// forgetValue marks l's value unknown (a Proclaim of it is out, or Redis
// holds another): its native calls take the scripts until proclaimed
// records the value Redis stored.
func (l *Lease) forgetValue()            { l.hold.Store(&Held{}) }
func (l *Lease) proclaimed(value string) { l.hold.Store(l.heldFor(value)) }
