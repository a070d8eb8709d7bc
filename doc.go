// Package redisleader provides leader election and distributed locks on
// Redis, built only on the safe primitives: an atomic SET key value NX PX ttl
// inside a script, a unique random token per acquisition, compare-and-pexpire
// renewal and compare-and-delete release, and fencing tokens that strictly
// increase across owners.
//
// # Model
//
// A Session is one participant's lease: a random owner ID, a TTL, and one
// heartbeat goroutine that renews every key the session holds in one
// pipelined round trip per renewal round. A Lock is one acquisition of one
// name; it ends exactly once (Done is closed) and says why (Err): released,
// lost (ErrNotOwner, ErrExpired), or the session closed.
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
// while this process leads with a context cancelled the moment leadership is
// lost, resigns only after the function returns, and campaigns again.
// Election.Campaign blocks until this candidate leads and returns the
// leadership as a Lock; Election.Resign (or the Lock's Release) resigns, and
// Election.Proclaim changes the leader's value without a new term (the
// fence stays); Election.Leader reads who leads; Election.Observe streams
// the changes. A Run term that is resigned ends at once (onElected's context
// is cancelled), but its key is deleted only once onElected has returned.
// Waiting candidates and observers share the session's one pub/sub
// connection: a resignation wakes them at once, and otherwise they wake only
// when the leader's lease can have expired, about one command per TTL. A
// pub/sub message is only ever a hint to read Redis: what Leader and Observe
// report, and what a waiter acts on,
// is read from the lock key, so anyone who may publish on the channel can
// at most make them read sooner.
//
// Locks are not reentrant, and a session never waits for itself: Lock,
// TryLock and Campaign on a name the session holds return at once an error
// matching ErrLocked. Use one session per independent contender.
//
// # Topologies
//
// NewSession works with one Redis (*redis.Client), Sentinel
// (redis.NewFailoverClient) and Redis Cluster (*redis.ClusterClient: every
// key of a name shares one hash slot). WithReplicaAcks adds a WAIT safety
// level for primaries with replicas: an acquire or renewal counts only once
// enough replicas acknowledged it, so a failover to one of them cannot hand
// the name to a second owner while the first still believes. NewRedlockSession
// holds names on a majority of independent Redis servers (Redlock). The
// README compares them with measurements; docs/RELIABILITY.md has the fault
// scenarios.
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
//     redis.Options.ContextTimeoutEnabled = true; set it (NewSession logs a
//     warning when it is off). Safety does not depend on it, only how quickly
//     blocking calls and Close return.
//   - Acquisition is idempotent: every attempt of one acquisition uses the
//     same token, and a key that already holds that token is confirmed, not
//     reported as held by someone else. go-redis's own retries of a command
//     whose reply was lost (MaxRetries) are therefore safe. When an
//     acquisition gives up after an attempt whose outcome is unknown, its
//     token is deleted within the caller's context (in the background once
//     that has ended), and the heartbeat keeps deleting it until it must
//     have expired, in case the attempt reaches Redis later.
//
// # Fencing tokens
//
// Each acquisition gets a fence = max(last fence + 1, Redis server TIME in
// microseconds), computed in the acquire script before the key is set. Fences
// strictly increase across owners of a name, even when Redis loses its data
// (restart without persistence, restore of an old snapshot), unless the Redis
// server's clock also steps back. A resource that rejects writes whose fence
// is lower than the highest it has seen is protected from a former owner that
// acts late.
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
// WithTakeoverDelay narrows the first two: a new owner holds the key for the
// delay before it starts, so a former owner whose key Redis dropped early has
// stepped down first. docs/RELIABILITY.md lists the fault scenarios behind
// every guarantee and limit, with their measured results.
//
// # Keys
//
// A name maps to redisleader:{name} (the lock, with a TTL),
// redisleader:{name}:fence (the last fence, no TTL) and the pub/sub channel
// redisleader:{name}:ch. The hash tag keeps them in one Redis Cluster slot.
// Names are 1 to 512 bytes of UTF-8 without '{', '}' or control characters.
//
// # ACL
//
// A Redis user needs read and write access to the keys redisleader:* and the
// channels redisleader:*, and the commands EVALSHA and EVAL; GET, SET,
// PEXPIRE, PTTL, TIME, DEL and PUBLISH, which the scripts call; SUBSCRIBE,
// UNSUBSCRIBE and PING, for the session's pub/sub connection; WAIT with
// WithReplicaAcks; CLUSTER SLOTS and COMMAND with a *redis.ClusterClient;
// and, optionally, CONFIG GET and INFO for the check of server settings
// (without them a session warns once that it could not check). A command or
// channel the user may not use is a permanent error that names it
// ("permission denied for PUBLISH redisleader:{name}:ch (ACL): …"):
// blocking calls return it instead of retrying, and the denied attempt has
// written nothing. The README gives the tested ACL SETUSER rule.
package redisleader
