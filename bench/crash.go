package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader"
)

// crashTakeovers makes a leader crash cfg.crashes times while a candidate of
// another session waits, and returns the takeover lags measured on the
// Redis server's clock: from the moment the dead leader's key expired
// (PEXPIRETIME, read once the leader can no longer renew) to the new
// leader's acquisition (its fence is the server's TIME in µs).
func crashTakeovers(ctx context.Context, e *env, cfg config, round int) ([]time.Duration, error) {
	c := e.client()
	defer c.Close()
	list, closeAll, err := sessions(c, 1, redisleader.WithTTL(cfg.crashTTL))
	if err != nil {
		return nil, err
	}
	defer closeAll()
	follower, err := list[0].Election(fmt.Sprintf("bench:crash:r%d", round))
	if err != nil {
		return nil, err
	}
	var out []time.Duration
	for i := range cfg.crashes {
		lag, err := crashTakeover(ctx, e, cfg.crashTTL, follower, fmt.Sprintf("bench-doomed-r%d-%d", round, i))
		if err != nil {
			return nil, err
		}
		out = append(out, lag)
	}
	return out, nil
}

// crashTakeover runs one crash. The leader connects as its own ACL user, so
// that one ACL DELUSER crashes it as Redis sees a crash: atomically, every
// connection of the leader is closed (nothing it sent is run afterwards)
// and it can never authenticate again. The crash comes at a random point
// of the leader's renewal cycle, after the follower waits.
func crashTakeover(ctx context.Context, e *env, ttl time.Duration, follower *redisleader.Election, user string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, sampleTimeout)
	defer cancel()
	if err := e.admin.Do(ctx, "ACL", "SETUSER", user, "on", ">"+user, "~*", "&*", "+@all").Err(); err != nil {
		return 0, err
	}
	defer e.admin.Do(context.Background(), "ACL", "DELUSER", user) // if the crash did not happen
	o := clientOptions(e.mainAddr())
	o.Username, o.Password = user, user
	lc := redis.NewClient(o)
	defer lc.Close()
	list, closeAll, err := sessions(lc, 1, redisleader.WithTTL(ttl))
	if err != nil {
		return 0, err
	}
	defer closeAll() // its release fails: the leader is dead
	doomed, err := list[0].Election(follower.Name())
	if err != nil {
		return 0, err
	}
	lead, err := doomed.Campaign(ctx, "doomed")
	if err != nil {
		return 0, err
	}
	before, err := commandCalls(ctx, e.admin)
	if err != nil {
		return 0, err
	}
	c := startCampaign(ctx, follower, "survivor")
	if err := waitCalls(ctx, e.admin, before, "pttl", 1); err != nil {
		c.stop()
		return 0, err
	}
	<-time.After(rand.N(ttl / 3)) // the default renew interval: crash anywhere in the cycle
	if err := e.admin.Do(ctx, "ACL", "DELUSER", user).Err(); err != nil {
		c.stop()
		return 0, err
	}
	expireAt, err := e.admin.Do(ctx, "PEXPIRETIME", lead.Key()).Int64()
	if err != nil {
		c.stop()
		return 0, err
	}
	w := c.wait()
	if w.err != nil {
		return 0, w.err
	}
	defer func() { _ = w.lock.Release(context.Background()) }()
	if expireAt < 0 {
		return 0, fmt.Errorf("the dead leader's key was gone or had no TTL when read (PEXPIRETIME %d)", expireAt)
	}
	lag := time.Duration(w.lock.Fence()-expireAt*1000) * time.Microsecond
	if lag < 0 {
		return 0, errors.New("the new leader's fence is older than the dead leader's expiry: PEXPIRETIME was read after the takeover")
	}
	return lag, nil
}
