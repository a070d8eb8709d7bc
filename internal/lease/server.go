package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redisleader/redisleader/internal/wire"
)

// server.go: the settings of a Redis server under which it can lose what
// it holds for a lease, read and warned about.

// CheckServers warns on log about settings under which Redis itself can
// lose a lease, on every server that each gives: an eviction policy that
// can evict lock keys (volatile-*) or even fence keys (allkeys-*), and no
// persistence, so that a restart loses every lock at once; and a primary
// with replicas without replica acknowledgements (acks false:
// WithReplicaAcks), where a failover can lose a lock. It reads CONFIG GET
// and INFO replication in one round trip per node, and uses each reply
// that came: a user whose ACL denies CONFIG (managed Redis, -@dangerous)
// still gets the replica check. What could not be read is itself a
// warning, one for all servers (with every node's reasons), since it hides
// those settings. The reads end with ctx or after callTimeout.
func CheckServers(ctx context.Context, each func(check func(c wire.Client)), callTimeout time.Duration, log *slog.Logger, acks bool) {
	callCtx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var (
		mu        sync.Mutex
		unchecked []error
	)
	each(func(c wire.Client) {
		errs := checkNode(callCtx, c, log, acks)
		mu.Lock()
		defer mu.Unlock()
		unchecked = append(unchecked, errs...)
	})
	if len(unchecked) > 0 && ctx.Err() == nil {
		log.Warn("redisleader: could not check the Redis server's settings (eviction policy, persistence, replicas), so a setting under which Redis can lose locks would go unnoticed; allow this user CONFIG GET and INFO (see docs/operations.md, ACL), or check them yourself",
			"err", errors.Join(unchecked...))
	}
}

// checkNode runs CheckServers's checks on one node and returns why a part
// of them could not run: CONFIG GET's error, INFO's error, or both.
func checkNode(ctx context.Context, c wire.Client, log *slog.Logger, acks bool) []error {
	pipe := c.Pipeline()
	policy := pipe.ConfigGet(ctx, "maxmemory-policy")
	aof := pipe.ConfigGet(ctx, "appendonly")
	save := pipe.ConfigGet(ctx, "save")
	repl := pipe.Info(ctx, "replication")
	// Errors are per command, but for a hook's panic.
	if err, panicked := wire.ExecPipeline(ctx, pipe).(*wire.HookPanicError); panicked {
		return []error{err}
	}
	var unchecked []error
	if err := cmp.Or(policy.Err(), aof.Err(), save.Err()); err != nil {
		unchecked = append(unchecked, fmt.Errorf("CONFIG GET: %w", err))
	} else {
		if p := policy.Val()["maxmemory-policy"]; p != "" && p != "noeviction" {
			log.Warn("redisleader: maxmemory-policy lets Redis evict lock keys (volatile-*) or fence keys (allkeys-*) when memory runs out; an evicted lock key can give a name two owners. Use noeviction.",
				"maxmemory-policy", p)
		}
		if a, ok := aof.Val()["appendonly"]; ok && a == "no" && save.Val()["save"] == "" {
			log.Warn("redisleader: Redis persistence is off (appendonly no, save \"\"): a restart loses every lock at once and a new owner can start while the former one still believes it holds the name, until its next renewal. Enable AOF, restart Redis only after a TTL, or see WithTakeoverDelay.")
		}
	}
	if err := repl.Err(); err != nil {
		unchecked = append(unchecked, fmt.Errorf("INFO replication: %w", err))
	} else if n := infoField(repl.Val(), "connected_slaves"); n != "" && n != "0" && !acks {
		log.Warn("redisleader: the Redis primary has replicas, and replication is asynchronous: a failover can lose a lock while its owner still believes it holds the name. See WithReplicaAcks.",
			"connected_replicas", n)
	}
	return unchecked
}

// infoField returns a field of an INFO reply ("" when absent).
func infoField(info, name string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
