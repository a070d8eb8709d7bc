package wire

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Several script calls in one round trip (RunCalls, call.go): a pipeline,
// EVAL on NOSCRIPT per command, the replica acknowledgements' WAIT at its
// end, and on Redis Cluster one pipeline per master.

// runPipeline is RunCalls's round trip (and its NOSCRIPT re-send) for
// calls, whose commands it stores in cmds.
func runPipeline(ctx context.Context, c Client, calls []Call, cmds []*redis.Cmd, acks Acks) error {
	pipe := c.Pipeline()
	for i, cl := range calls {
		if cl.Native != nil {
			_ = pipe.BatchProcess(ctx, cl.Native...)
			cmds[i] = cl.NativeReply()
			continue
		}
		cl.Argv[0], cl.Argv[1] = "evalsha", cl.Script.sha
		cmds[i] = redis.NewCmd(ctx, cl.Argv...)
		_ = pipe.Process(ctx, cmds[i])
	}
	wait := acks.queue(ctx, pipe)
	err := ExecPipeline(ctx, pipe)
	failUnsent(cmds, err)
	for _, cl := range calls {
		if cl.Native != nil {
			cl.failNative(err) // the caller reads them all
		}
	}
	// Scan every reply: Exec reports only the first error, and on Cluster
	// one node may have lost the script while another timed out.
	var (
		retry   redis.Pipeliner
		retried []*redis.Cmd
	)
	for i, cl := range calls {
		if err := cmds[i].Err(); err != nil && cl.Native == nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
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
		if cl.Native == nil {
			denied(cmds[i], cl.Argv)
		}
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
