// Package redisleader provides leader election and distributed locks on
// Redis, built on an atomic SET NX PX in a script, a random token per
// acquisition, compare-and-pexpire renewal, compare-and-delete release, and
// fencing tokens that strictly increase across owners.
//
// # Model
//
// A Session is one participant's lease: a TTL and one heartbeat goroutine
// that renews every key the session holds once per renew interval. A Lock
// is one acquisition of one name, with its own random token and fence. It
// ends exactly once (Done is closed) and says why (Err): released, lost
// (ErrNotOwner, ErrExpired), or the session closed. Ownership ends at a
// local deadline (see Timing).
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
// Locks are not reentrant, and a session never waits for itself: Lock,
// TryLock and Campaign on a name it holds, or waiting when it takes the
// name, return ErrLocked at once. Use one session per independent contender.
//
// # Elections
//
// An Election is a named lock whose holder publishes a value (its identity).
// Election.Run is what most services want: it campaigns, calls onElected for
// each term it wins, and campaigns again. Campaign blocks until this
// candidate leads and returns the leadership as a Lock; Resign (or the
// Lock's Release) gives it up. Proclaim changes the leader's value without
// a new term. Leader reads who leads; Observe streams the changes.
//
// Release, Resign and Close end a term of Run at once: Done closes and
// onElected's context is cancelled. Only Run deletes the key, once onElected
// has returned, so one term's work never overlaps the next leader's; the
// unrenewed key expires first if onElected outlasts the TTL. Release does
// not wait for that delete, so onElected may call it. Resign and Close wait
// for it, at most until their ctx ends. Inside onElected, pass them its
// context (or one derived from it, also through nested Runs), so they skip
// waiting for the onElected calls they were called from, which cannot return.
//
// # Waiting
//
// A blocking Lock, Campaign or Run, and Observe, subscribe to the name's
// channel before their first attempt or read, so a release wakes them at
// once. Otherwise they try (or read) again when the holder's lease can have
// expired, by the remaining TTL they last read: about one command per TTL
// while a healthy holder renews. After an attempt that failed for another
// reason than the name being held, they wait the random retry delay,
// whatever is released meanwhile. Messages are hints: what they report and
// act on is read from the lock key. A forged message only makes them read
// sooner; a lost one delays them by at most the holder's remaining TTL.
//
// # Fairness
//
// By default a release wakes every waiter and the first to ask again wins,
// often the session that just released. With WithFairness, blocking
// acquisitions are served in the order Redis saw their first attempts, and
// a release wakes only the first waiter; in Run, a resigned leader
// campaigns again at the back, so leadership passes around rather than
// back. A waiter that dies, pauses, is cut off or gives up holds the others
// up for at most one TTL (its own session's). Fairness holds among the fair
// sessions of a name, so use one mode per name; docs/locks.md has the costs.
//
// # Choosing the leader
//
// Election.Transfer hands leadership to the candidate campaigning with a
// given value, nobody else leading in between. A candidate may declare a
// priority (WithPriority): a Run leader yields to a better candidate, and
// any leader with a priority that releases hands the name to the best one.
// A dead or forged candidate costs at most one TTL without a leader, never
// an overlap. Not with Redlock. docs/choosing-the-leader.md says what they
// do, docs/MECHANISMS.md how.
//
// # Topologies and Redlock
//
// NewSession works with one Redis, Sentinel (redis.NewFailoverClient) and
// Redis Cluster: every key of a name shares one hash slot. NewRedlockSession
// holds a name while a quorum of independent servers hold its token, so a
// minority may be down. docs/topologies.md compares the topologies and
// what breaks each; docs/MECHANISMS.md has Redlock's rounds and fences.
//
// # Timing
//
// Let T be the TTL, ρ the drift factor and m the margin. A successful
// acquire or renew sent at local monotonic time s holds the lock until the
// local deadline D = s + T·(1−ρ) − m. Redis keeps the key until at least
// s + T by its own clock, which with clock rates within ρ is later than D:
// this process stops believing before Redis can hand the key to another.
//
//   - A timer at D closes Done, so a stuck call, a slow network or a starved
//     heartbeat cannot extend ownership. Lock.Held reads the clock each time.
//   - A reply that arrives after D is ignored: ownership never resurrects;
//     only a new acquisition, with a new fence, holds again.
//   - A "not owner" reply ends the lock at once with ErrNotOwner. Redis
//     errors (timeouts, LOADING, READONLY, OOM, NOSCRIPT) are retried until
//     D and never count as a loss by themselves.
//   - Every call is bounded by min(call timeout, D − now). go-redis honours
//     that on sockets only with ContextTimeoutEnabled (redis.Options or
//     ClusterOptions); set it, or NewSession warns. Without it, only how
//     quickly calls and Close return suffers, not safety.
//   - Every attempt of one acquisition uses the same token, and a key that
//     holds it is confirmed, so go-redis's retries (MaxRetries) are safe. An
//     attempt that did not count (WithReplicaAcks, Redlock) is given back,
//     and the next uses a new token, which a late give-back cannot delete.
//   - An acquisition that gives up after an attempt of unknown outcome
//     deletes its token, and the heartbeat deletes it again until it must
//     have expired.
//
// # Guarantees
//
// Assume a single Redis that does not fail, lose data, step its wall clock or
// evict our keys, and clock rates within ρ. Then at most one owner believes it
// holds a name at any real instant, and loss is signalled at D at the latest.
// Renew and release never touch a key with another token. Fences strictly
// increase: each is max(last + 1, server TIME in µs), even across a loss of
// Redis's data, unless its clock also steps back. Blocking calls end with their
// context or session, whatever Redis does (without ContextTimeoutEnabled: at
// go-redis's socket timeouts), and no goroutine outlives Session.Close.
//
// # Limits
//
// No lease-based lock promises these:
//
//   - Side effects after the check: a paused process (GC, SIGSTOP, VM steal)
//     can act late. Only a resource that checks the fence stops that.
//   - Forward steps of the Redis host's wall clock expire keys early.
//   - Data loss (a restart without persistence, a restore) drops or revives keys.
//   - Failover with asynchronous replication can lose the key, or hand every
//     later owner a lower or an equal fence (docs/guarantees.md).
//   - Eviction (volatile-* or allkeys-*) of the lock or fence: use noeviction.
//   - Host suspend: Go's monotonic clock stops while the host sleeps.
//
// WithTakeoverDelay narrows clock steps and restarts; WithReplicaAcks narrows
// failovers. docs/RELIABILITY.md has the fault scenarios behind each line.
//
// # Keys and ACL
//
// A name's keys and channels are redisleader:{name} and redisleader:{name}:*
// (keys.go has the layout). Names are 1 to 512 bytes of UTF-8 without '{',
// '}' or control characters. docs/operations.md lists the commands a Redis
// user needs. A denial is a permanent error naming the command or channel,
// and the denied attempt has written nothing.
package redisleader
