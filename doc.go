// Package redisleader provides leader election and distributed locks on
// Redis, built only on the safe primitives: an atomic SET key value NX PX ttl
// inside a script, a unique random token per acquisition, compare-and-pexpire
// renewal and compare-and-delete release, and fencing tokens that strictly
// increase across owners.
//
// # Model
//
// A Session is one participant's lease: a TTL and one heartbeat goroutine
// that renews every key the session holds in one pipelined round trip per
// renewal round. A Lock is one acquisition of one name, with its own random
// token and fence; it ends exactly once (Done is closed) and says why (Err):
// released, lost (ErrNotOwner, ErrExpired), or the session closed. Ownership
// ends at a local deadline (see Timing).
//
//	s, err := redisleader.NewSession(client, redisleader.WithTTL(10*time.Second))
//	...
//	defer s.Close(context.Background())
//	lock, err := s.Lock(ctx, "nightly-report")
//	...
//	defer lock.Release(context.Background())
//	select {
//	case <-lock.Done(): // lost: stop working, lock.Err() says why
//	case <-work():
//	}
//
// # Elections
//
// An Election is a named lock whose holder publishes a value (its identity).
// Election.Run is what most services want: it campaigns, calls a function
// for each term it wins, and campaigns again. Election.Campaign blocks until
// this candidate leads and returns the leadership as a Lock;
// Election.Resign (or the Lock's Release) resigns, and Election.Proclaim
// changes the leader's value without a new term (the fence stays);
// Election.Leader reads who leads; Election.Observe streams the changes.
//
// A leadership won by Run is a term, and Run, not Release, Resign or Close,
// deletes its key, once onElected has returned, so that one term's work
// never overlaps the next leader's. Release, Resign and Close end a term at
// once (Done closes, onElected's context is cancelled) and the key is no
// longer renewed: it expires after the TTL if onElected takes longer.
// Release does not wait for Run's delete, so it may be called from
// onElected; Resign and Close wait for it until their ctx ends. From inside
// onElected, pass them onElected's context (or one derived from it, also
// through nested Runs): they then wait for everything but the onElected
// calls they were called from, which cannot return meanwhile; with another
// context they would wait for those until that context ends.
//
// Locks are not reentrant, and a session never waits for itself: Lock,
// TryLock and Campaign on a name the session holds return at once an error
// matching ErrLocked, and so does one already waiting when the session
// takes the name. Use one session per independent contender.
//
// # Waiting
//
// A blocking Lock, Campaign or Run, and Observe, wait on the session's one
// pub/sub connection, subscribed to the name's channel before their first
// attempt or read, so that no release is missed: a release wakes them at
// once. Otherwise they try (or read) again when the holder's lease can have
// expired, which they know from the remaining TTL they last read: about one
// command per TTL while a healthy holder renews, and a try within
// milliseconds of a crashed holder's expiry. Lock, Campaign and Run poll at
// the retry interval instead while their subscription is not confirmed or
// the key has no TTL, and after an attempt that failed for another reason
// than the name being held (an error, a Redlock split vote) they wait the
// random retry delay, whatever is released meanwhile (a queued fair waiter
// still hears its wake-up).
//
// A pub/sub message is only ever a hint to read Redis: what Leader and
// Observe report, and what a waiter acts on, is read from the lock key, so
// anyone who may publish on the channel can at most make them read sooner,
// and a lost message delays them by at most the holder's remaining TTL.
//
// # Fairness
//
// By default a release wakes every waiter and the first to ask again wins,
// often the session that just released. With WithFairness, blocking
// acquisitions (Lock, Campaign, Run) are served first come, first served,
// in the order Redis saw their first attempts, and a release wakes only the
// first waiter (a message addressed to it, on its session's channel): one
// attempt per handover instead of one per waiter. TryLock then succeeds only if the name is free
// and nobody waits for it. In Run, a resigned leader campaigns again at the
// back of the queue, so leadership passes around rather than back.
//
// A waiter's place is a lease, like a lock: it lasts one TTL from the
// waiter's last attempt or from the last renewal by its session's heartbeat
// (in the same pipelined round trip as the session's locks). Every script
// that reads the queue skips and prunes waiters whose leases have passed,
// so a waiter that dies, pauses, is cut off from Redis or whose context
// ends holds the others up for at most one TTL (its own session's, where
// sessions of different TTLs share a name); one whose context ends
// also takes its place out at once (best effort), leaving a tombstone for
// a TTL so that an attempt of its still on its way cannot queue it again.
// A waiter that lost its place (it paused past its TTL, say) joins again,
// at the back. Wake-ups are hints: the first waiter also tries again when
// the holder's lease can have expired, the others when the holder's or the
// first waiter's lease can have (either may have died), and an attempt
// that finds the name free while an earlier waiter is queued wakes that
// waiter again. A lost queue (a restart without
// persistence) is rebuilt by the waiters' next attempts, in their order.
//
// Fairness holds among the fair sessions of a name: a default session
// ignores the queue, so use one mode per name. It is not available with
// NewRedlockSession: independent nodes would each keep a queue, and no
// order of arrival across them is defined. It costs a few more commands
// inside each script (the queue's sorted sets), two keys per name with
// waiters, which expire with the last waiter's lease, and about four
// commands per waiter per TTL instead of one: its place is renewed every
// renew interval (TTL/3 by default), besides its re-check.
//
// # Topologies
//
// NewSession works with one Redis (*redis.Client), Sentinel
// (redis.NewFailoverClient) and Redis Cluster (*redis.ClusterClient: every
// key of a name shares one hash slot). WithReplicaAcks adds a WAIT safety
// level for primaries with replicas: an acquire or renewal counts only once
// n replicas acknowledged it, so a failover to one of them cannot hand the
// name to a second owner while the first still believes. WAIT is not a
// consensus protocol: with more replicas than n, the promoted replica may
// be one that did not acknowledge. NewRedlockSession holds names on a
// majority of independent Redis servers (see Redlock). The README compares
// the topologies with measurements; docs/RELIABILITY.md has the fault
// scenarios.
//
// # Redlock
//
// On a session from NewRedlockSession an acquisition holds while a quorum
// of len(clients)/2+1 nodes hold its token. Everything else is as with
// NewSession (the same options but WithReplicaAcks, and every method but
// Election.Proclaim); the quorum changes each operation:
//
//   - Acquire runs the acquire script on every node in parallel. It succeeds
//     when a quorum took the key and the replies came before the local
//     deadline, which is measured from before the first send, as always (see
//     Timing). Otherwise the key is released on every node and the acquire
//     fails: ErrLocked if enough nodes are held by others that no quorum is
//     possible, else an error. Blocking acquisitions retry an error, and an
//     ErrLocked where the attempt had taken nodes too (a split vote), after
//     the random retry delay. After a split vote that left the outcome to
//     nodes that did not answer, they add a random part of a window that
//     starts at two attempts' length and doubles with each such split in a
//     row, up to a TTL: such attempts last until the call timeout when a
//     node never answers, and contenders split again and again under the
//     retry delay alone.
//   - Renewal rounds run on every node in parallel and extend the deadline
//     when a quorum renewed. When so many nodes answer "not owner" that no
//     quorum is possible, the lock ends at once with ErrNotOwner; errors are
//     retried until the deadline, where it ends with ErrExpired.
//   - Release deletes the token on every node. A delete that failed or went
//     unanswered on a minority of nodes is retried in the background and
//     does not fail Release.
//   - No acquire, renewal round or release waits for a node that is down or
//     hangs once its outcome is known: the other nodes then get a grace
//     period as long as the operation has taken so far (at least a tenth of
//     the call timeout), and what is still unanswered counts as failed; our
//     token is then deleted again until it must have expired, in case the
//     unanswered request lands later. go-redis cannot cut short a read, so
//     these calls go on until the call timeout in the background; Close
//     waits for every node of its own releases, and then for those calls,
//     after which it deletes such tokens once more. (A node that runs a
//     request later still, after a pause, leaves that token until it
//     expires.)
//   - Fences: each node issues max(its last fence + 1, its clock in µs) and
//     reports the reading t of its clock from which its key's TTL runs (the
//     key expires when the node's clock passes t + TTL); the acquisition's
//     fence F is the largest of its quorum. When F < t + TTL on every node
//     that took the key, the acquire writes nothing more: on each such node
//     the key lasts until the node's own clock has passed F, so whoever
//     takes the node after the key expired gets a larger fence from that
//     clock, and before that only the holder's release frees it, which
//     raises the node's fence key to F before it deletes unless the node's
//     clock has passed F. Otherwise (a node's fence key ahead of its clock,
//     or node clocks that disagree, by about a TTL) F is written back to the
//     fence key of every node that holds the lock, and the acquire succeeds
//     only once a quorum stored it: one more round trip. Every renewal
//     writes F back too, to the fence key and the lock value of every node
//     that holds the token. Any later acquisition's quorum shares a node with
//     this one, so fences strictly increase across owners as long as no
//     node loses its data (the same condition as the lock itself; see
//     below) and no node's clock steps back. The skip needs no agreement
//     between the nodes' clocks: each node's condition is on its own clock.
//   - Election.Leader (and Observe) reads every node, waiting for each up to
//     the call timeout, and reports the holder found on a quorum, with the
//     largest fence stored with its token among the nodes that answered:
//     the holder's own, except before its first renewal, when each node
//     holds the fence it issued itself. Then a node that took the token
//     outside the acquisition's quorum (its reply lost or too late) can hold
//     a larger fence, which Leader reports, and if the node that issued the
//     holder's fence does not answer (down, or slower than the call
//     timeout), Leader reports a smaller one.
//     Pub/sub notifications come from the first node only; while it is down,
//     waiters poll at the retry interval and Observe reads the quorum when a
//     lease can have expired.
//
// Redlock tolerates a minority of nodes being down or unreachable. It does
// not tolerate what breaks a single Redis on a node of a quorum: a forward
// step of a node's wall clock, or a node that restarts without persistence,
// can let two owners hold quorums that overlap only on that node (Martin
// Kleppmann's scenarios). Restart crashed nodes only after the TTL (Redis's
// own advice), keep their clocks slewed, or use WithTakeoverDelay;
// docs/RELIABILITY.md has the measurements.
//
// # Timing
//
// Let T be the TTL, ρ the drift factor and m the margin. For each successful
// acquire or renew sent at local monotonic time s, the lock is held until the
// local deadline D = s + T·(1−ρ) − m. Because s is taken before the request is
// sent, Redis keeps the key at least until s + T by its own clock, which (with
// clock rates within ρ) is later than D: this process stops believing it
// holds the key before Redis can hand it to anyone else.
//
//   - A timer at D closes Done. The heartbeat is not needed for the loss
//     signal, so a stuck Redis call, a slow network or a starved goroutine
//     cannot extend ownership.
//   - Lock.Held compares against the clock on every call.
//   - A renewal whose reply arrives after D is ignored: ownership never
//     resurrects; a new acquisition (and a new fence) is needed.
//   - A renewal that Redis answers with "not owner" ends the lock at once with
//     ErrNotOwner. Redis errors (timeouts, LOADING, READONLY, OOM, NOSCRIPT,
//     ...) are retried until D and are never reported as a loss by themselves.
//   - Every call is bounded by min(call timeout, D − now) through its context.
//     go-redis honours context deadlines on sockets only with
//     redis.Options.ContextTimeoutEnabled = true (ClusterOptions for a
//     cluster client); set it. Without it a call may block up to the client's
//     own ReadTimeout, and NewSession logs a warning. Safety does not depend
//     on it, only how quickly blocking calls and Close return.
//   - Acquisition is idempotent: every attempt of one acquisition uses the
//     same token, and a key that already holds that token is confirmed, not
//     reported as held by someone else. go-redis's own retries of a command
//     whose reply was lost (MaxRetries) are therefore safe. An attempt that
//     did not count (WithReplicaAcks, Redlock) is given back, and the
//     acquisition goes on with a new token: the give-back's request may still
//     reach Redis after the next attempt took the key. When an
//     acquisition gives up after an attempt whose outcome is unknown, its
//     token is deleted within the caller's context (in the background once
//     that has ended), and the heartbeat keeps deleting it until it must
//     have expired, in case the attempt reaches Redis later. Such deletes
//     never delay a renewal round: they get only the time until the next.
//
// # Coalescing
//
// A session's calls on one server (with NewRedlockSession, on each node)
// share pipelines when they overlap: while two of its calls are waiting for
// that server, the next ones (acquire attempts, Leader reads, Proclaim)
// queue and go together in the next pipeline, one round trip for all. A lone
// call is sent at once, as it would be without coalescing, and so is every
// call that frees a name (a release, an attempt's give-back): those waiting
// for the name never wait for the queue as well, and the session's queued
// calls (on Redis Cluster, the oldest on its name) go right behind it, in
// its pipeline, so that the queue leaves a round trip sooner and the
// session's own contenders try as the name is freed (without WithFairness,
// ahead of other sessions' waiters, whom the release wakes). Each call still
// ends with its own context and call timeout, and one caller's cancellation
// or timeout never fails another's command; a call cancelled before it was
// sent never reaches Redis. One given up while on its way can still reach
// Redis after a later call of the session on the same name: that call waits
// only until the batch of the given-up one has ended (with its replies, or
// at its deadline without them), and a call sent at once holds nothing up.
// What such a late request could undo is guarded in Redis instead: an
// acquire attempt's token is deleted until it must have expired (see
// Timing), and a Proclaim never overwrites a later Proclaim's value (see
// Election.Proclaim). Renewals are already one pipeline per round. What
// changes for hooks on the client: a
// shared pipeline (a release and the calls it takes along too) is one
// ProcessPipelineHook call, on a context without the callers' values, run by a
// goroutine of the session. Shared or not, a hook that panics while this
// package sends a command fails the command, and every other command of its
// pipeline, with an error that says so (not the panic value, which can quote
// tokens): the package sends commands on goroutines of its own too, where a
// panic would end the process. A hook that ends the goroutine instead
// (runtime.Goexit) fails a shared pipeline's calls the same way; the
// heartbeat and an Observe reader go on on a new goroutine after the retry
// delay; and a caller's goroutine so ended (in TryLock, Release, Close, Run)
// leaves nothing behind that the heartbeat does not delete or the TTL does
// not end. What go-redis runs on goroutines of its own is out of reach: a
// panic in a hook of a Cluster node's client (ClusterClient.OnNewNode), run
// on go-redis's goroutine for that node, ends the process; a panic or Goexit
// in a dial or connection handshake costs the client's pool a connection for
// good (go-redis keeps the pool turn), and on the pub/sub connection that
// wakes waiters leaves go-redis's PubSub locked, so such a hook ends the
// process there, or hangs Close. A release's caller waits for the replies of
// the calls its pipeline took along (the release runs first, so the name is
// free and its waiters are woken before that). A server that stops answering
// holds up the calls queued behind the two on the wire, each until its own
// deadline (the call timeout): with Redis Cluster, a session's calls for a
// name on a healthy node can wait behind a node that stopped answering; a
// Redlock node that stops answering holds up only its own queue, which no
// operation waits for once a quorum has answered. Acquires with
// WithReplicaAcks (each followed by its WAIT) do not coalesce.
//
// # Fencing tokens
//
// Each acquisition gets a fence = max(last fence + 1, Redis server TIME in
// microseconds), computed in the acquire script before the key is set. Fences
// strictly increase across owners of a name, even when Redis loses its data
// (restart without persistence, restore of an old snapshot), unless the Redis
// server's clock also steps back (or a failover promotes a replica without
// the last fence whose clock is far behind: README, Guarantees and limits).
// A resource that rejects writes whose fence is lower than the highest it has
// seen is protected from a former owner that acts late.
//
// # Guarantees
//
// With a single Redis that does not fail or lose data, whose wall clock does
// not step, that does not evict our keys, and with clock rates within ρ:
// at most one owner believes it holds a name at any real instant; loss is
// signalled at D at the latest; renew and release never touch a key that
// holds another token; fences strictly increase; blocking calls end with their
// context or their session, whatever Redis does (refuses, hangs, or the
// client's pool is exhausted); no goroutine outlives Session.Close.
//
// # Limits
//
// No lease-based lock can promise more than that, and these are not promised:
//
//   - Side effects after the check: a process can pause (GC, SIGSTOP, VM
//     steal) after checking Held and act late. Only a resource that checks the
//     fence stops that.
//   - Forward steps of the Redis host's wall clock expire keys early.
//   - Data loss: a Redis restart without persistence or a restore drops or
//     brings back keys.
//   - Failover with asynchronous replication (Sentinel, Cluster, managed
//     replicas) can lose the key.
//   - Eviction under maxmemory with a volatile-* or allkeys-* policy can
//     remove the key or the fence counter: use noeviction.
//   - Host suspend: Go's monotonic clock stops while the host is suspended.
//
// WithTakeoverDelay narrows clock steps and restarts without persistence: a
// new owner holds the key for the delay before it starts, so a former owner
// whose key Redis dropped early has stepped down first. WithReplicaAcks
// narrows failovers (see Topologies). docs/RELIABILITY.md lists the fault
// scenarios behind every guarantee and limit, with their measured results.
//
// # Keys
//
// A name maps to redisleader:{name} (the lock, with a TTL),
// redisleader:{name}:fence (the last fence, no TTL), once a leader has
// called Election.Proclaim redisleader:{name}:seq (its term's token and the
// sequence number of its last Proclaim, no TTL), and the pub/sub channel
// redisleader:{name}:ch; in fair mode also redisleader:{name}:queue and
// redisleader:{name}:leases (sorted sets of waiters, which expire with the
// last waiter's lease) and the channels redisleader:{name}:w:<session>.
// The hash tag keeps them in one Redis Cluster slot.
// Names are 1 to 512 bytes of UTF-8 without '{', '}' or control characters.
//
// # ACL
//
// A Redis user needs read and write access to the keys redisleader:* and the
// channels redisleader:*, and the commands EVALSHA and EVAL; GET, SET,
// PEXPIRE, PTTL, TIME, DEL and PUBLISH, which the scripts call (in fair
// mode also EXISTS, PEXPIREAT, ZADD, ZCARD, ZRANGE, ZRANGEBYSCORE, ZRANK,
// ZREM and ZSCORE); SUBSCRIBE,
// UNSUBSCRIBE and PING, for the session's pub/sub connection; WAIT with
// WithReplicaAcks; CLUSTER SLOTS and COMMAND with a *redis.ClusterClient;
// and, optionally, CONFIG GET and INFO for the check of server settings
// (without them a session warns once that it could not check). A command or
// channel the user may not use is a permanent error that names it
// ("permission denied for PUBLISH redisleader:{name}:ch (ACL): …"):
// blocking calls return it instead of retrying, and the denied attempt has
// written nothing. The README gives the tested ACL SETUSER rule.
package redisleader
