package redisleader

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The script runner: how a script call reaches Redis (EVALSHA, EVAL on
// NOSCRIPT), alone or in a pipeline, with the WithReplicaAcks WAIT at its
// end. It knows nothing of locks; the scripts are in the files of their
// concepts (scripts.go, fair.go, redlock.go, fenced.go).

// A script call's argument vector is {command, SHA or source, numkeys,
// KEYS..., ARGV...}, boxed once per lock where it can be (Lock.argv) and
// filled in by script.run. Every script of ours has the lock key as
// KEYS[1], which the combiner orders calls by, and the scripts that take a
// fence key have it as KEYS[2].
const (
	argLockKey  = 3
	argFenceKey = 4
)

// lockKeyOf is the lock key of a script call's argument vector.
func lockKeyOf(argv []any) any { return argv[argLockKey] }

// processor runs one command: a client, or a pipeline that queues it.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// script is a Lua script run as EVALSHA, falling back to EVAL when the server
// does not have it cached (NOSCRIPT: after SCRIPT FLUSH, a restart or a
// failover), exactly as go-redis's Script.Run does, so a flushed script cache
// costs one extra round trip and is never mistaken for a lost lock. Unlike
// Script.Run it takes the whole argument vector, so the hot path reuses
// arguments it boxed once: Script.Run boxes the command name, the SHA and
// every key again on every call, four or more allocations that were a sixth
// of an acquire+release pair.
type script struct {
	src any // the source, boxed once
	sha any // its hex SHA-1, boxed once
}

// scripts lists every script newScript made, for TestScriptSHAs.
var scripts []*script

// newScript returns the script src, run as EVALSHA sha. sha is src's hex
// SHA-1, written out next to each script rather than computed: hashing here,
// at start-up, panics under GODEBUG=fips140=only (SHA-1 is not FIPS 140
// approved), which regulated users run. TestScriptSHAs checks every script's
// SHA and prints the right one for a script that changed; a wrong one would
// make every call fall back to EVAL, costing a round trip.
func newScript(sha, src string) *script {
	s := &script{src: src, sha: sha}
	scripts = append(scripts, s)
	return s
}

// run executes the script once. argv is {_, _, numkeys, keys..., args...};
// run fills the first two slots.
func (s *script) run(ctx context.Context, c processor, argv []any) (cmd *redis.Cmd) {
	argv[0], argv[1] = "evalsha", s.sha
	cmd = redis.NewCmd(ctx, argv...)
	defer func() {
		if v := recover(); v != nil {
			cmd.SetErr(&hookPanicError{v})
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
// *aclError that says what was denied. A denial inside the script already names the command and
// its key or channel (see guarded); any other (of the EVALSHA or EVAL, of
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
		cmd.SetErr(&scriptError{fmt.Sprintf("ERR unknown command '%s': scripting is disabled or renamed on this server",
			strings.ToUpper(fmt.Sprint(argv[0])))})
		return
	}
	if !redis.HasErrorPrefix(err, "NOPERM") {
		return
	}
	msg := err.Error()
	if what, ok := strings.CutPrefix(msg, "NOPERM redisleader: "); ok {
		cmd.SetErr(&aclError{what})
		return
	}
	n, _ := argv[2].(int)
	keys := make([]string, 0, n)
	for _, k := range argv[3 : 3+n] {
		keys = append(keys, fmt.Sprint(k))
	}
	cmd.SetErr(&aclError{fmt.Sprintf("permission denied running %s on keys %s (ACL): %s",
		strings.ToUpper(fmt.Sprint(argv[0])), strings.Join(keys, " "), msg)})
}

// runAll executes the script once per argument vector in one round trip; see
// runCalls.
func (s *script) runAll(ctx context.Context, c Client, argvs [][]any, acks replicaAcks) ([]*redis.Cmd, error) {
	calls := make([]call, len(argvs))
	for i, argv := range argvs {
		calls[i] = call{s, argv}
	}
	return runCalls(ctx, c, calls, acks)
}

// call is one script call of a pipeline: the script and its argument vector.
type call struct {
	s    *script
	argv []any
}

// runCalls executes every call in one round trip (a pipeline; on Redis
// Cluster one per node), and re-sends as EVAL, in a second round trip, those
// that met a server without their script. Replies and errors are read from
// the returned commands, in the order of calls. With acks on (n > 0) each
// pipeline ends with WAIT on the same connection, and runCalls returns an
// error unless enough replicas acknowledged every write (see
// replicaAcks.check). A single call without acks is sent as a plain command.
func runCalls(ctx context.Context, c Client, calls []call, acks replicaAcks) ([]*redis.Cmd, error) {
	if len(calls) == 1 && acks.n == 0 {
		return []*redis.Cmd{calls[0].s.run(ctx, c, calls[0].argv)}, nil
	}
	cmds := make([]*redis.Cmd, len(calls))
	pipe := c.Pipeline()
	for i, cl := range calls {
		cl.argv[0], cl.argv[1] = "evalsha", cl.s.sha
		cmds[i] = redis.NewCmd(ctx, cl.argv...)
		_ = pipe.Process(ctx, cmds[i])
	}
	wait := acks.queue(ctx, pipe)
	failUnsent(cmds, execPipeline(ctx, pipe))
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
			cl.argv[0], cl.argv[1] = "eval", cl.s.src
			cmds[i] = redis.NewCmd(ctx, cl.argv...)
			_ = retry.Process(ctx, cmds[i])
			retried = append(retried, cmds[i])
		}
	}
	var wait2 *redis.IntCmd
	if retry != nil {
		wait2 = acks.queue(ctx, retry)
		failUnsent(retried, execPipeline(ctx, retry))
	}
	for i, cl := range calls {
		denied(cmds[i], cl.argv)
	}
	return cmds, acks.check(wait, wait2)
}

// replicaAcks is the WithReplicaAcks safety level: how many replicas must
// acknowledge a write, and how long WAIT may wait for them. n == 0: off.
type replicaAcks struct {
	n       int
	timeout time.Duration
}

// queue adds WAIT to a pipeline, if the safety level is on.
func (a replicaAcks) queue(ctx context.Context, pipe redis.Pipeliner) *redis.IntCmd {
	if a.n == 0 {
		return nil
	}
	cmd := redis.NewIntCmd(ctx, "wait", a.n, a.timeout.Milliseconds())
	_ = pipe.Process(ctx, cmd)
	return cmd
}

// check returns nil if every WAIT saw enough acknowledgements, else an
// error that says how many replicas acknowledged.
func (a replicaAcks) check(waits ...*redis.IntCmd) error {
	for _, w := range waits {
		if w == nil {
			continue
		}
		got, err := w.Result()
		if err != nil {
			return fmt.Errorf("WAIT for %d replicas: %w", a.n, err)
		}
		if got < int64(a.n) {
			return fmt.Errorf("%w: %d of %d replicas acknowledged within %v", ErrReplication, got, a.n, a.timeout)
		}
	}
	return nil
}
