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

// The script runner: how a script call reaches Redis (EVALSHA, EVAL on
// NOSCRIPT), alone or in a pipeline, with the replica acknowledgements'
// WAIT at its end. It knows nothing of locks; the scripts are defined by
// the floors above, which hand NewScript their source and SHA.

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

// RunAll executes the script once per argument vector in one round trip; see
// RunCalls.
func (s *Script) RunAll(ctx context.Context, c Client, argvs [][]any, acks Acks) ([]*redis.Cmd, error) {
	calls := make([]Call, len(argvs))
	for i, argv := range argvs {
		calls[i] = Call{s, argv}
	}
	return RunCalls(ctx, c, calls, acks, nil)
}

// Call is one script call of a pipeline: the script and its argument vector.
type Call struct {
	Script *Script
	Argv   []any
}

// RunCalls executes every call in one round trip (a pipeline), and re-sends
// as EVAL, in a second round trip, those that met a server without their
// script. Replies and errors are read from the returned commands, in the
// order of calls. With acks on (n > 0) each pipeline ends with WAIT on the
// same connection, and RunCalls returns an error unless enough replicas
// acknowledged every write (see Acks.check). A single call without
// acks is sent as a plain command. On Redis Cluster the calls are sent per
// master (byNode), and ready, if not nil, is told each master's calls as
// soon as their commands are final.
func RunCalls(ctx context.Context, c Client, calls []Call, acks Acks, ready func(idx []int, cmds []*redis.Cmd)) ([]*redis.Cmd, error) {
	if len(calls) == 1 && acks.N == 0 {
		return []*redis.Cmd{calls[0].Script.Run(ctx, c, calls[0].Argv)}, nil
	}
	cmds := make([]*redis.Cmd, len(calls))
	if cc := ClusterOf(c); cc != nil {
		if groups := byNode(ctx, cc, calls); len(groups) > 1 {
			return cmds, runGroups(ctx, c, calls, cmds, groups, acks, ready)
		}
	}
	return cmds, runPipeline(ctx, c, calls, cmds, acks)
}

// runPipeline is RunCalls's round trip (and its NOSCRIPT re-send) for
// calls, whose commands it stores in cmds.
func runPipeline(ctx context.Context, c Client, calls []Call, cmds []*redis.Cmd, acks Acks) error {
	pipe := c.Pipeline()
	for i, cl := range calls {
		cl.Argv[0], cl.Argv[1] = "evalsha", cl.Script.sha
		cmds[i] = redis.NewCmd(ctx, cl.Argv...)
		_ = pipe.Process(ctx, cmds[i])
	}
	wait := acks.queue(ctx, pipe)
	failUnsent(cmds, ExecPipeline(ctx, pipe))
	// Scan every reply: Exec reports only the first error, and on Cluster
	// one node may have lost the script while another timed out.
	var (
		retry   redis.Pipeliner
		retried []*redis.Cmd
	)
	for i, cl := range calls {
		if err := cmds[i].Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			if retry == nil {
				retry = c.Pipeline()
			}
			cl.Argv[0], cl.Argv[1] = "eval", cl.Script.src
			cmds[i] = redis.NewCmd(ctx, cl.Argv...)
			_ = retry.Process(ctx, cmds[i])
			retried = append(retried, cmds[i])
		}
	}
	var wait2 *redis.IntCmd
	if retry != nil {
		wait2 = acks.queue(ctx, retry)
		failUnsent(retried, ExecPipeline(ctx, retry))
	}
	for i, cl := range calls {
		denied(cmds[i], cl.Argv)
	}
	return acks.check(wait, wait2)
}

// Per master on Redis Cluster. go-redis splits a Cluster pipeline by node
// and runs the nodes' parts concurrently, but as one operation: it returns
// once every node has answered or failed, and when a node's part times out
// as the context ends, the error goes to every command of the pipeline that
// has none, also those whose replies healthy masters had already sent
// (ClusterClient.processPipeline: setCmdsErr after its retry sleep). One
// silent master then failed every renewal of a slice, and a session lost
// all its locks. So RunCalls groups the calls itself, by the master that
// serves their first key's slot in the client's slot map (the key is
// KEYS[1]; every key of a call shares its hash tag), and sends each group
// as a pipeline of its own through c, concurrently, each bounded by ctx:
// a call's outcome depends only on its own master, a healthy master's
// replies are final as soon as they arrive (ready), and go-redis still
// follows MOVED and ASK per command inside each group. Every caller of
// RunCalls (renewal slices, the stale-token clean-up, Close's deletes, the
// Combiner's batches) gets this. A plain client keeps one pipeline.

// group is the calls of one pipeline on Redis Cluster: their indexes, and
// the master that serves them (nil: unknown, left to go-redis's routing).
type group struct {
	node *redis.Client
	idx  []int
}

// byNode groups calls by the master that serves their first key's slot, in
// cc's slot map now. A key it cannot place (no slot map yet) goes to the
// nil group, which go-redis routes as it routes any pipeline.
func byNode(ctx context.Context, cc *redis.ClusterClient, calls []Call) []group {
	var groups []group
	for i, cl := range calls {
		var node *redis.Client
		if key, ok := KeyOf(cl.Argv).(string); ok {
			node = masterFor(ctx, cc, key)
		}
		j := slices.IndexFunc(groups, func(g group) bool { return g.node == node })
		if j < 0 {
			j = len(groups)
			groups = append(groups, group{node: node})
		}
		groups[j].idx = append(groups[j].idx, i)
	}
	return groups
}

// masterFor returns the master that serves key's slot, or nil if it is
// unknown. Without a slot map, MasterForKey loads one, which runs the node
// clients' hooks outside ExecPipeline: a hook's panic there leaves the key
// unplaced (nil), and go-redis's own routing inside ExecPipeline then meets
// it as the batch's error (hookfaults.go).
func masterFor(ctx context.Context, cc *redis.ClusterClient, key string) (node *redis.Client) {
	defer func() {
		if recover() != nil {
			node = nil
		}
	}()
	node, _ = cc.MasterForKey(ctx, key)
	return node
}

// runGroups runs each group as its own pipeline (runPipeline), on a
// goroutine of its own, and returns once all have ended (each by ctx's
// end), with the first error of their WAITs. A group whose goroutine a
// hook ended (runtime.Goexit) fails with ErrHookGoexit where it has no
// reply.
func runGroups(ctx context.Context, c Client, calls []Call, cmds []*redis.Cmd, groups []group, acks Acks, ready func([]int, []*redis.Cmd)) error {
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for gi, g := range groups {
		Go(&wg, func() {
			sub := make([]Call, len(g.idx))
			for j, i := range g.idx {
				sub[j] = calls[i]
			}
			out := make([]*redis.Cmd, len(sub))
			returned := false
			defer func() { // also when a hook ends the goroutine
				for j, i := range g.idx {
					if out[j] == nil {
						out[j] = ErrCmd(ctx, calls[i].Argv, ErrHookGoexit)
					} else if !returned {
						failUnsent(out[j:j+1], ErrHookGoexit)
					}
					cmds[i] = out[j]
				}
				if ready != nil {
					ready(g.idx, cmds)
				}
			}()
			errs[gi] = runPipeline(ctx, c, sub, out, acks)
			returned = true
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Acks is the replica-acknowledgement safety level: how many replicas must
// acknowledge a write, and how long WAIT may wait for them. N == 0: off.
type Acks struct {
	N       int
	Timeout time.Duration
}

// queue adds WAIT to a pipeline, if the safety level is on.
func (a Acks) queue(ctx context.Context, pipe redis.Pipeliner) *redis.IntCmd {
	if a.N == 0 {
		return nil
	}
	cmd := redis.NewIntCmd(ctx, "wait", a.N, a.Timeout.Milliseconds())
	_ = pipe.Process(ctx, cmd)
	return cmd
}

// check returns nil if every WAIT saw enough acknowledgements, else an
// error that says how many replicas acknowledged.
func (a Acks) check(waits ...*redis.IntCmd) error {
	for _, w := range waits {
		if w == nil {
			continue
		}
		got, err := w.Result()
		if err != nil {
			return fmt.Errorf("WAIT for %d replicas: %w", a.N, err)
		}
		if got < int64(a.N) {
			return fmt.Errorf("%w: %d of %d replicas acknowledged within %v", ErrReplication, got, a.N, a.Timeout)
		}
	}
	return nil
}
