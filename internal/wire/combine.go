package wire

import "sync"

// Coalescing (flat combining). A session's single script calls on one server
// (acquire attempts, inspections, proclamations, a waiter leaving its queue,
// a Redlock fence write-back) share pipelines when they overlap, in that
// server's Combiner (a Redlock session has one per node); a release or
// give-back is never queued (CallNow), renewals are already one pipeline
// per round, and an acquire with WithReplicaAcks (followed by its WAIT) is
// sent alone. While fewer than MaxOnWire calls or
// batches of the session are on the wire, a caller sends its own command at
// once, on its own goroutine and context, as it would without coalescing. A
// call that arrives when MaxOnWire are on the wire joins a queue instead;
// when one of them returns, a flusher goroutine takes the slot over and
// sends what is queued as one pipeline, batch after batch, until the queue
// is empty. So a lone caller pays nothing, and concurrent callers pay one
// round trip and one read and write system call per batch instead of per
// command. A release or give-back sent while calls are queued takes them
// along (up to maxBatch in all; on a Cluster, whose other nodes could hold
// the release up, only the oldest call on its own name), right behind itself
// in one pipeline, sent at once and, like a release alone, not counted on
// the wire: the queue leaves a round trip sooner, with no slot to wait for,
// and on one name tried by many of the session's goroutines each round trip
// hands the name on (an acquisition needs the last release to have landed,
// and its holder releases only once it has learnt that it holds); without
// WithFairness, the session's own contenders so try ahead of other
// sessions' waiters, whom the release wakes. Should the
// release meet a server without its script, its re-send runs after the calls
// taken along, of which one on its name then finds the name still held, as
// it would have just before: that call was made first.
//
// What stays exactly as without coalescing:
//   - Each caller waits for its own reply until its own context or call
//     deadline (Transport.Bound) ends, and not longer. The batch is bounded by
//     the latest of its callers' deadlines, on a context no caller cancels,
//     so one caller's cancellation or timeout never fails another caller's
//     command.
//   - A caller that gives up before its command was sent takes it out of
//     the queue: it never reaches Redis. One that gives up after gets its
//     context's error, which for an acquire is "unknown outcome", never
//     "held by another": the attempt's token is given back as always. Its
//     command may still reach Redis, surely until the batch ends, so until
//     then it holds its key (unsettled): every later call of the session on
//     that lock key (the acquisition's next attempt or give-back, a
//     Proclaim, a delete by Close or the stale-token cleanup) waits for it,
//     bounded by its own deadline. So a session's calls on one key are sent
//     in the order its callers made them, except that a release or give-back
//     goes ahead of calls still queued; but that is all the client can
//     order. A batch that ends at its deadline, without replies, can still
//     reach Redis after the next call, as can a call sent at once whose
//     caller gave up (it holds nothing). What such a late command could
//     undo is guarded where Redis runs it: an acquire's token is deleted
//     until it must have expired, and a Proclaim carries its term's sequence
//     number (the lease floor's proclaim script).
//   - Replies are matched to commands one by one; RunCalls re-sends a
//     command that met a server without its script (NOSCRIPT) as EVAL, and
//     rewrites denied commands, per command. On a Cluster, RunCalls sends a
//     batch as one pipeline per master, concurrently (pipeline.go), go-redis
//     follows redirections per command, and each caller has its reply as
//     soon as its own master's pipeline has ended: a master that stopped
//     answering fails and delays only its own calls of the batch.
//
// What changes: a batched command (a release with calls taken along too)
// runs on a context without its caller's values (hooks on the user's client
// see one ProcessPipelineHook call with the batch's context, on a Cluster
// one per master, on goroutines of the session), and a server that stops
// answering holds up the session's queued calls, each until its own
// deadline, once MaxOnWire calls are stuck on it. On a Cluster, calls for a
// name on a healthy node can so wait in the queue behind a node that
// stopped answering (not in a batch); a Redlock node holds up only its
// own queue, which no operation waits for once a quorum answered. A release
// that took calls along runs first in Redis, but its caller has its reply
// only with the whole pipeline's (go-redis reads them all): its context can
// end first (Release then reports an error, and the delete, already done,
// is retried in the background). A hook fault (hookfaults.go) fails every
// call of its pipeline.
//
// No goroutine is left: a flusher ends when the queue is empty, and Close
// waits until nothing is on the wire.

// MaxOnWire is how many calls or batches of one session may be on the wire
// at once, besides releases (alone or with the calls they take along);
// maxBatch bounds the commands in one batch.
const (
	MaxOnWire = 2
	maxBatch  = 128
)

// Combiner is the queue of a session's calls to one server waiting for a
// batch: the main client's (Transport.Combiner), and in Redlock mode
// each node's.
type Combiner struct {
	t       *Transport
	client  Client
	cluster bool // client is a Cluster's: a release takes only a call on its own name along
	mu      sync.Mutex
	onWire  int        // calls and flushers on the wire, at most MaxOnWire
	carried int        // releases' pipelines with calls taken along, on the wire (not counted in onWire)
	closed  bool       // after Close: calls go straight to Redis, uncounted
	queue   []*pending // waiting to be sent, oldest first
	idle    []*pending // pendings for reuse
	drained sync.Cond  // signalled when onWire and carried drop to 0 after closed
	// unsettled holds, per key (KeyOf), the calls whose callers gave up while
	// their batches were on the wire, each until its batch has ended: the
	// command may still reach Redis, and no later call on the key is sent
	// before then.
	unsettled map[any][]*pending
	pipes     sync.Pool // idle redis.Pipeliners of client for a lone native call (runNative)
}

// NewCombiner makes c the combiner of t's calls through client (another
// server's than Config.Client's: a Redlock node's) and returns it; Drain
// waits for it.
func (t *Transport) NewCombiner(c *Combiner, client Client) *Combiner {
	c.t, c.client, c.cluster = t, client, KindOf(client) == KindCluster
	c.drained.L = &c.mu
	t.combiners = append(t.combiners, c)
	return c
}

// drain makes later calls go straight to Redis and waits until no call or
// batch of c is on the wire (each ends by its deadline).
func (c *Combiner) drain() {
	c.mu.Lock()
	c.closed = true
	for c.onWire > 0 || c.carried > 0 {
		c.drained.Wait()
	}
	c.mu.Unlock()
}
