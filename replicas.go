package redisleader

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

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
