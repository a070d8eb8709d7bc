package wire

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// One script call: how it reaches Redis (EVALSHA, EVAL on NOSCRIPT) and
// within which deadline (Bound, Unbind and the bound context). A lone call
// of a Combiner reads here from its entry (Combiner.Call) through its
// deadline and its reply (run) to its slot's return (passSlot), and
// so does a renewal round (Bound, RunCalls, Unbind); the Combiner and its
// coalescing are in combine.go, a queued call in queue.go, several calls in
// one round trip in pipeline.go. It knows nothing of locks; the scripts
// are defined by the floors above, which hand NewScript their source and
// SHA.

// A script call's argument vector is {command, SHA or source, numkeys,
// KEYS..., ARGV...}, boxed once where it can be (by the caller) and
// filled in by Script.Run. ArgKey is the slot of KEYS[1], the key a call
// is about (the floors above put the lock key there): the Combiner orders
// a session's calls by it, and RunCalls groups Cluster pipelines by it.
const ArgKey = 3

// KeyOf is KEYS[1] of a script call's argument vector.
func KeyOf(argv []any) any { return argv[ArgKey] }

// Script is a Lua script run as EVALSHA, falling back to EVAL when the server
// does not have it cached (NOSCRIPT: after SCRIPT FLUSH, a restart or a
// failover), exactly as go-redis's Script.Run does, so a flushed script cache
// costs one extra round trip and is never mistaken for a lost lock. Unlike
// go-redis's Script.Run it takes the whole argument vector, so the hot path
// reuses arguments it boxed once: go-redis's boxes the command name, the SHA and
// every key again on every call, four or more allocations that were a sixth
// of an acquire+release pair.
type Script struct {
	src any // the source, boxed once
	sha any // its hex SHA-1, boxed once
}

// scripts lists every script NewScript made (Scripts).
var scripts []*Script

// Scripts returns every script NewScript made, for a test that checks
// their SHAs.
func Scripts() []*Script { return slices.Clone(scripts) }

// SHA is the script's hex SHA-1, as given to NewScript.
func (s *Script) SHA() string { return s.sha.(string) }

// Src is the script's source.
func (s *Script) Src() string { return s.src.(string) }

// NewScript returns the script src, run as EVALSHA sha. sha is src's hex
// SHA-1, written out next to each script rather than computed: hashing here,
// at start-up, panics under GODEBUG=fips140=only (SHA-1 is not FIPS 140
// approved), which regulated users run. TestScriptSHAs checks every script's
// SHA and prints the right one for a script that changed; a wrong one would
// make every call fall back to EVAL, costing a round trip.
func NewScript(sha, src string) *Script {
	s := &Script{src: src, sha: sha}
	scripts = append(scripts, s)
	return s
}

// Combiner returns the main client's combiner.
func (t *Transport) Combiner() *Combiner { return &t.combine }

// Call runs one script on the Combiner's server, bounded as Transport.Bound
// says: at once on the caller's goroutine, or in a batch with other calls
// of the session (see Coalescing in combine.go). It first waits until no earlier
// call on the same key, given up while its batch was on the wire, can still
// reach Redis.
func (c *Combiner) Call(ctx context.Context, deadline time.Time, sc *Script, argv []any) *redis.Cmd {
	return c.send(ctx, deadline, Call{Script: sc, Argv: argv}, true)
}

// CallNow runs a script that frees a name (a release or a give-back) as
// call does, but at once, never queued behind other calls and not counted on
// the wire: on the caller's goroutine, or ahead of the queued calls, which it
// takes along in its pipeline (see Coalescing). The sessions waiting for the
// name (and this one's own contenders, whose tries fill the queue) should
// not wait for it longer than one round trip.
func (c *Combiner) CallNow(ctx context.Context, deadline time.Time, sc *Script, argv []any) *redis.Cmd {
	return c.send(ctx, deadline, Call{Script: sc, Argv: argv}, false)
}

// SendNow is CallNow for cl, which may carry its native form (Call.Native):
// the command it returns is the last native command's, unless its caller
// gave up first (then one of its own, with the context's error).
func (c *Combiner) SendNow(ctx context.Context, deadline time.Time, cl Call) *redis.Cmd {
	return c.send(ctx, deadline, cl, false)
}

// send is Call, or with coalesce false CallNow. A lone call (no call
// queued, a slot free, no call given up on the wire that could still reach
// Redis) runs at once on the caller's goroutine; any other goes through
// enqueue (queue.go), which decides again under c.mu.
func (c *Combiner) send(ctx context.Context, deadline time.Time, cl Call, coalesce bool) *redis.Cmd {
	c.mu.Lock()
	counted := coalesce && !c.closed // a Call takes a slot on the wire until it returns
	if len(c.unsettled) > 0 || !c.closed && len(c.queue) > 0 || counted && c.onWire >= MaxOnWire {
		c.mu.Unlock()
		return c.enqueue(ctx, deadline, cl, coalesce)
	}
	if counted {
		c.onWire++
		defer c.passSlot() // also when a hook on the client ends the goroutine
	}
	c.mu.Unlock()
	callCtx := c.t.Bound(ctx, deadline)
	defer Unbind(callCtx)
	return c.run(callCtx, cl)
}

// passSlot frees the slot of a call that returned: to a flusher when calls
// are queued, else for the next caller.
func (c *Combiner) passSlot() {
	c.mu.Lock()
	if len(c.queue) == 0 {
		c.freeSlotLocked()
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	go c.flush()
}

// freeSlotLocked gives a slot on the wire back, and tells a waiting Close
// once the last one is free.
func (c *Combiner) freeSlotLocked() {
	c.onWire--
	c.drainedLocked()
}

// drainedLocked tells a waiting Close when nothing is left on the wire.
func (c *Combiner) drainedLocked() {
	if c.onWire == 0 && c.carried == 0 && c.closed {
		c.drained.Broadcast()
	}
}

// run sends cl alone, a Combiner's lone call on its caller's goroutine:
// its script (Script.Run), or its native form as one pipeline (runNative).
func (c *Combiner) run(ctx context.Context, cl Call) *redis.Cmd {
	switch {
	case cl.Native == nil:
		return cl.Script.Run(ctx, c.client, cl.Argv)
	case c.cluster:
		cmds, _ := RunCalls(ctx, c.client, []Call{cl}, Acks{}, nil)
		return cmds[0]
	}
	return c.runNative(ctx, cl)
}

// runNative is RunCalls for cl alone, a native form on a client that is
// not a Cluster's, without its slices: in a pipeline of c's that the last
// such call left (go-redis's Exec leaves it empty), so that a native
// release costs the allocations of its commands' replies alone.
func (c *Combiner) runNative(ctx context.Context, cl Call) *redis.Cmd {
	pipe, _ := c.pipes.Get().(redis.Pipeliner)
	if pipe == nil {
		pipe = c.client.Pipeline()
	}
	cmd, err := cl.runNative(ctx, pipe)
	// Only go-redis's own pipeline is kept: its Exec empties it, which the
	// Pipeliner interface does not promise (a wrapper's may send its earlier
	// commands again).
	if _, own := pipe.(*redis.Pipeline); own {
		if _, panicked := err.(*HookPanicError); !panicked {
			c.pipes.Put(pipe)
		}
	}
	return cmd
}

// runNative sends cl, a native form, alone in pipe, an empty pipeline,
// and returns its command (NativeReply) and the pipeline's error.
func (cl Call) runNative(ctx context.Context, pipe redis.Pipeliner) (*redis.Cmd, error) {
	_ = pipe.BatchProcess(ctx, cl.Native...)
	err := ExecPipeline(ctx, pipe)
	if err != nil {
		cl.failNative(err)
	}
	return cl.NativeReply(), err
}

// Run executes the script once. argv is {_, _, numkeys, keys..., args...};
// Run fills the first two slots.
func (s *Script) Run(ctx context.Context, c Client, argv []any) (cmd *redis.Cmd) {
	argv[0], argv[1] = "evalsha", s.sha
	cmd = redis.NewCmd(ctx, argv...)
	defer func() {
		if v := recover(); v != nil {
			cmd.SetErr(&HookPanicError{v})
		}
	}()
	_ = c.Process(ctx, cmd)
	// HasErrorPrefix allocates even for a nil error: test for nil first.
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		argv[0], argv[1] = "eval", s.src
		cmd = redis.NewCmd(ctx, argv...)
		_ = c.Process(ctx, cmd)
	}
	denied(cmd, argv)
	return cmd
}

// denied rewrites two errors of a script call: a server without the
// command ("unknown command", whose text would quote the call's arguments:
// tokens, values) says only which command; and an ACL denial becomes an
// *ACLError that says what was denied. A denial inside the script already names the command and
// its key or channel (see internal/lease/lua/prelude.lua); any other (of the EVALSHA or EVAL, of
// one of its keys, or of a command the client sent for it, such as CLUSTER
// SLOTS) comes with the script call's command and keys, and Redis's text
// says which it was.
func denied(cmd *redis.Cmd, argv []any) {
	err := cmd.Err()
	if err == nil {
		return
	}
	if redis.HasErrorPrefix(err, "unknown command") { // HasErrorPrefix drops a leading "ERR "
		// Redis quotes the first arguments, which hold tokens and values.
		cmd.SetErr(&ScriptError{Msg: fmt.Sprintf("ERR unknown command '%s': scripting is disabled or renamed on this server",
			strings.ToUpper(fmt.Sprint(argv[0])))})
		return
	}
	if !redis.HasErrorPrefix(err, "NOPERM") {
		return
	}
	msg := err.Error()
	if what, ok := strings.CutPrefix(msg, "NOPERM redisleader: "); ok {
		cmd.SetErr(&ACLError{Msg: what})
		return
	}
	n, _ := argv[2].(int)
	keys := make([]string, 0, n)
	for _, k := range argv[3 : 3+n] {
		keys = append(keys, fmt.Sprint(k))
	}
	cmd.SetErr(&ACLError{Msg: fmt.Sprintf("permission denied running %s on keys %s (ACL): %s",
		strings.ToUpper(fmt.Sprint(argv[0])), strings.Join(keys, " "), msg)})
}

// ErrCmd is a command that failed with err before, or without, a reply.
func ErrCmd(ctx context.Context, argv []any, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx, argv...)
	cmd.SetErr(err)
	return cmd
}

// RunAll executes the script once per argument vector in one round trip; see
// RunCalls.
func (s *Script) RunAll(ctx context.Context, c Client, argvs [][]any, acks Acks) ([]*redis.Cmd, error) {
	calls := make([]Call, len(argvs))
	for i, argv := range argvs {
		calls[i] = Call{Script: s, Argv: argv}
	}
	return RunCalls(ctx, c, calls, acks, nil)
}

// Call is one script call of a pipeline: the script and its argument
// vector; or, with Native, the same call in the server's own commands.
type Call struct {
	Script *Script
	Argv   []any // also with Native: its key (KeyOf) places the call
	// Native, if not nil, is sent in place of the script, as they are: its
	// last command, a *redis.Cmd, is the call's (RunCalls returns it), and
	// the caller reads the others' replies itself. Neither a NOSCRIPT
	// re-send nor denied's rewording applies to them: the caller judges
	// their errors.
	Native []redis.Cmder
	// Reply, if not nil, is the call's command in place of Native's last
	// (NativeReply): never sent, the caller fills it from Native's replies.
	// A pipeline that fails as a whole gives it its error too.
	Reply *redis.Cmd
}

// NativeReply is the command that RunCalls returns for cl, a native form:
// Reply, or Native's last.
func (cl Call) NativeReply() *redis.Cmd {
	if cl.Reply != nil {
		return cl.Reply
	}
	return cl.Native[len(cl.Native)-1].(*redis.Cmd)
}

// failNative is failUnsent for the commands of cl, a native form.
func (cl Call) failNative(err error) {
	failUnsent(cl.Native, err)
	if cl.Reply != nil {
		failUnsent([]*redis.Cmd{cl.Reply}, err)
	}
}

// RunCalls executes every call in one round trip (a pipeline), and re-sends
// as EVAL, in a second round trip, those that met a server without their
// script. Replies and errors are read from the returned commands, in the
// order of calls. With acks on (n > 0) each pipeline ends with WAIT on the
// same connection, and RunCalls returns an error unless enough replicas
// acknowledged every write (see Acks.check). A single call without acks
// is sent as a plain command, or as its native form alone. On Redis
// Cluster the calls are sent per master (byNode), and ready, if not nil,
// is told each master's calls as soon as their commands are final.
func RunCalls(ctx context.Context, c Client, calls []Call, acks Acks, ready func(idx []int, cmds []*redis.Cmd)) ([]*redis.Cmd, error) {
	if len(calls) == 1 && acks.N == 0 {
		if calls[0].Native == nil {
			return []*redis.Cmd{calls[0].Script.Run(ctx, c, calls[0].Argv)}, nil
		}
		cmd, _ := calls[0].runNative(ctx, c.Pipeline()) // its caller judges its replies
		return []*redis.Cmd{cmd}, nil
	}
	cmds := make([]*redis.Cmd, len(calls))
	if cc := ClusterOf(c); cc != nil {
		if groups := byNode(ctx, cc, calls); len(groups) > 1 {
			return cmds, runGroups(ctx, c, calls, cmds, groups, acks, ready)
		}
	}
	return cmds, runPipeline(ctx, c, calls, cmds, acks)
}

// RunCallsBound is RunCalls bounded as Bound says (by ctx, the call
// timeout and deadline), and unbound once it has returned; until is when
// the bound ended the calls, for a call that must end with them (a
// re-send of some: pass until as its deadline).
func (t *Transport) RunCallsBound(ctx context.Context, deadline time.Time, c Client, calls []Call, acks Acks) (cmds []*redis.Cmd, until time.Time, err error) {
	callCtx := t.Bound(ctx, deadline)
	defer Unbind(callCtx)
	until, _ = callCtx.Deadline()
	cmds, err = RunCalls(callCtx, c, calls, acks, nil)
	return cmds, until, err
}

// Bound bounds one Redis call by the call timeout and, when deadline is not
// zero, by a lease's local deadline. It returns ctx itself when ctx already
// ends sooner. Once the call has returned, the caller passes the result to
// Unbind, which ends it and keeps its timer for the next call; a context that
// is never unbound ends at its deadline all the same. ctx must not itself
// come from Bound.
func (t *Transport) Bound(ctx context.Context, deadline time.Time) context.Context {
	d := t.CallDeadline(deadline)
	if cur, ok := ctx.Deadline(); ok && !cur.After(d) {
		return ctx
	}
	return &boundCtx{Context: ctx, deadline: d, states: &t.dones}
}

// CallDeadline is when a call that starts now must end: after the call
// timeout, or at deadline (a lease's local deadline) when that is sooner
// and not zero.
func (t *Transport) CallDeadline(deadline time.Time) time.Time {
	d := time.Now().Add(t.cfg.CallTimeout)
	if !deadline.IsZero() && deadline.Before(d) {
		d = deadline
	}
	return d
}

// Unbind ends a context from Bound once its call has returned: its Done
// channel closes, Err returns context.Canceled unless the context had already
// ended, and its timer goes back to the session for the next call. Any other
// context is left alone.
func Unbind(ctx context.Context) {
	c, ok := ctx.(*boundCtx)
	if !ok {
		return
	}
	c.mu.Lock()
	if c.err == nil {
		c.err = context.Canceled
	}
	if c.done == nil {
		c.done = ClosedChan
	}
	st := c.st
	c.st = nil
	if st != nil {
		st.closeDone()
	}
	c.mu.Unlock()
	if st != nil {
		st.recycle(c.states)
	}
}

// boundCtx is a context with an earlier deadline than its parent, made for
// one go-redis call. go-redis bounds socket reads and writes by Deadline
// (with ContextTimeoutEnabled), checks Err, and selects on Done while it
// waits for a pool connection, for a dial, or between its own retries, so
// each of these waits ends at the deadline or when the parent is done. Done,
// Deadline and Err keep the context.Context contract exactly: Done returns
// one channel, closed at the deadline, when the parent is done, or by Unbind;
// Err is non-nil from that moment (from the deadline on, by the clock, even
// before the timer has run) and does not change afterwards. A context derived
// from it is cancelled at the deadline too. One wait in go-redis does not use
// it: a *redis.ClusterClient loads the server's command table (COMMAND) when
// a single command (not a pipeline) first needs it, on a context of its own
// with a 5s timeout, and until one load has succeeded every such command
// waits for it.
//
// Every go-redis command calls Done, so its cost is on the hot path. The
// channel is made on the first call to Done, with a timer at the deadline
// and, only for a parent that can be cancelled, a context.AfterFunc on the
// parent; the timer and its callback come from a per-session list of idle
// doneStates, so a call costs the context and the channel, two allocations
// (context.WithDeadline costs about ten). Unbind returns the doneState to the
// list when neither its timer nor the parent's callback has started. A
// context that is never unbound (the pub/sub calls) ends at its deadline:
// the timer closes the channel and unregisters the parent's callback, so
// nothing stays registered on a long-lived parent. The channel itself is
// never reused: whoever still holds it after the call (a hook's goroutine,
// say) sees it closed. Only go-redis, and hooks on the user's client, see a
// boundCtx.
type boundCtx struct {
	context.Context
	deadline time.Time
	states   *doneStates // where the timer comes from and goes back to

	mu   sync.Mutex    // protects done, err and st; Done may be called from several goroutines
	done chan struct{} // made by the first Done
	err  error         // why the context ended, once it has
	st   *doneState    // closes done at the deadline or when the parent is done; nil after Unbind
}

func (c *boundCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		if c.errLocked() != nil {
			c.done = ClosedChan
		} else {
			c.done = make(chan struct{})
			c.st = c.states.get()
			c.st.arm(c.Context, c.done, c.deadline)
		}
	}
	return c.done
}

func (c *boundCtx) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *boundCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.errLocked()
}

// errLocked returns why the context ended, recording it the first time it
// sees the parent done or the deadline passed, and then closes Done at once
// rather than when the timer or the parent's callback runs. c.mu must be held.
func (c *boundCtx) errLocked() error {
	if c.err != nil {
		return c.err
	}
	if err := c.Context.Err(); err != nil {
		c.err = err
	} else if !time.Now().Before(c.deadline) {
		c.err = context.DeadlineExceeded
	} else {
		return nil
	}
	if c.st != nil {
		c.st.closeDone()
	}
	return c.err
}

// A doneState closes one boundCtx's Done channel at its deadline or when its
// parent is done. It is reused, for another channel, once Unbind has stopped
// both callbacks before they started.
type doneState struct {
	fireFunc func()      // fire, as a func value made once
	timer    *time.Timer // runs fire at the deadline

	mu    sync.Mutex    // protects ch, stop and fired
	ch    chan struct{} // the channel to close; nil once closed
	stop  func() bool   // unregisters fire from the parent; nil when not registered
	fired bool          // a callback ran: the state is not reused
}

// arm makes the state close ch at deadline or when parent is done.
func (st *doneState) arm(parent context.Context, ch chan struct{}, deadline time.Time) {
	st.mu.Lock()
	st.ch = ch
	st.mu.Unlock()
	if parent.Done() != nil {
		// Registered before the timer is armed, so that the timer always
		// finds it to unregister.
		stop := context.AfterFunc(parent, st.fireFunc)
		st.mu.Lock()
		st.stop = stop
		st.mu.Unlock()
	}
	if st.timer == nil {
		st.timer = time.AfterFunc(time.Until(deadline), st.fireFunc)
	} else {
		st.timer.Reset(time.Until(deadline))
	}
}

// fire runs on the timer or on the parent's AfterFunc: it closes the channel
// and unregisters the parent's callback (a no-op when that is the caller).
func (st *doneState) fire() {
	st.mu.Lock()
	st.fired = true
	st.closeDoneLocked()
	stop := st.stop
	st.stop = nil
	st.mu.Unlock()
	if stop != nil {
		stop()
	}
}

func (st *doneState) closeDone() {
	st.mu.Lock()
	st.closeDoneLocked()
	st.mu.Unlock()
}

func (st *doneState) closeDoneLocked() {
	if st.ch != nil {
		close(st.ch)
		st.ch = nil
	}
}

// recycle stops the callbacks of a state whose channel Unbind has closed,
// and returns it to the list unless one of them has started (it may still be
// running; the state is then left to the garbage collector).
func (st *doneState) recycle(states *doneStates) {
	reusable := st.timer.Stop()
	st.mu.Lock()
	stop := st.stop
	st.stop = nil
	if st.fired {
		reusable = false
	}
	st.mu.Unlock()
	if stop != nil && !stop() {
		reusable = false
	}
	if reusable {
		states.put(st)
	}
}

// maxIdleDoneStates bounds the idle doneStates a session keeps: about the
// number of its Redis calls in flight at once that it expects.
const maxIdleDoneStates = 64

// doneStates is a session's list of idle doneStates.
type doneStates struct {
	mu   sync.Mutex
	idle []*doneState
}

func (d *doneStates) get() *doneState {
	d.mu.Lock()
	if n := len(d.idle); n > 0 {
		st := d.idle[n-1]
		d.idle[n-1] = nil
		d.idle = d.idle[:n-1]
		d.mu.Unlock()
		return st
	}
	d.mu.Unlock()
	st := &doneState{}
	st.fireFunc = st.fire
	return st
}

func (d *doneStates) put(st *doneState) {
	d.mu.Lock()
	if len(d.idle) < maxIdleDoneStates {
		d.idle = append(d.idle, st)
	}
	d.mu.Unlock()
}

// ClosedChan is a closed channel: the Done channel of what ended before
// anyone asked.
var ClosedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// UntilDone runs call on a goroutine of its own and returns its result, or
// ctx's error once ctx has ended first: a bound for calls without a session
// on a client that may not honour ctx (go-redis without ContextTimeoutEnabled
// waits for a reply until its ReadTimeout, for ever with -1). A call left
// behind runs on until the client ends it (at that timeout, or when it is
// closed); nothing waits for it. A call whose goroutine a hook on the client
// ends (runtime.Goexit) fails with ErrHookGoexit.
func UntilDone(ctx context.Context, call func() (any, error)) (any, error) {
	type result struct {
		v   any
		err error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		OnUnwind(func() { r.v, r.err = call() }, func() { done <- result{err: ErrHookGoexit} })
		done <- r
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
	}
	select {
	case r := <-done: // the reply came as ctx ended: take it
		return r.v, r.err
	default:
		return nil, ctx.Err()
	}
}

// DeadlineOnly returns a context with ctx's values and deadline that is not
// cancelled with ctx.
func DeadlineOnly(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok {
		return context.WithDeadline(context.WithoutCancel(ctx), d)
	}
	return context.WithoutCancel(ctx), func() {}
}
