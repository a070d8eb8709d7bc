// Package wire is redisleader's transport floor: how a call travels to
// Redis and back. It knows nothing of locks, key layouts or Lua contents,
// and imports nothing of this module; the floors above send their scripts
// and wait for their channels through it.
//
// The seam is a small set of types:
//
//   - Script (NewScript: a SHA written out and its source) and its
//     argument vector {cmd, sha, numkeys, KEYS..., ARGV...}, whose KEYS[1]
//     is the key the call is about (ArgKey; the lock key above): Script.Run
//     sends one call, RunCalls a pipeline of Calls (per master on a
//     Cluster), with the WAIT of Acks at its end.
//   - Transport (Init with a Config: the client, the call timeout, the TTL
//     that paces the watcher, the retry delay, the logger, the done
//     channel): Bound and Unbind (per-call deadlines), Combiner (calls
//     sharing pipelines; NewCombiner for other servers), Subscribe (the one
//     pub/sub connection, with a payload filter), Drain and StopWatcher.
//   - OnUnwind, ExecPipeline and the errors (HookPanicError,
//     ErrHookGoexit, ACLError, ScriptError, ErrReplication, ErrClosed):
//     a hook's panic or Goexit on the user's client, and the replies
//     rewritten so that they quote no tokens.
//   - Kind and KindOf: what the client is (plain, Cluster, Ring).
//
// One call reads in one file, call.go: Combiner.Call (a lone call sent at
// once), its deadline, Script.Run, the rewritten errors, Unbind and its
// slot passed on; a renewal round's Bound, RunCalls and Unbind are there
// too. The Combiner and its coalescing are in combine.go; calls that wait
// for a slot, and their batches, in queue.go; several calls in one round
// trip in pipeline.go.
//
// Replies are go-redis's *redis.Cmd, and Client is go-redis's method set.
// A second client library (valkey-go, rueidis) would be an adapter behind
// this seam: a Client of its own kind for which Script.Run, RunCalls (its
// pipelines, EVAL on NOSCRIPT, the Cluster grouping), the Combiner's
// batches and the watcher's subscribe/receive loop are implemented over
// its API, and whose replies and errors are delivered as the *redis.Cmd
// values (or a Reply type standing in for them) the floors above decode.
// Nothing above this package would change but the constructor that picks
// the adapter; one such step left is to replace *redis.Cmd in the
// signatures by a reply type of this package.
package wire
