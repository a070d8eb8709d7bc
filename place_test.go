package redisleader

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"

	"github.com/redisleader/redisleader/internal/lease"
)

// A reply of the wrong shape (a proxy or server that does not run our
// scripts faithfully) is an error that repeats none of its content, which
// could hold another owner's token; a PTTL beyond a Duration saturates.
func TestRepliesNeverEchoContent(t *testing.T) {
	const secret = "SECRETTOKENSECRETTOKEN"
	l := &Lock{lease: lease.Lease{Keys: lease.NewKeys("shape")}}
	r := l.lease.Outcome([]any{secret + "\n7\nv"}, nil)
	assert.EqualError(t, r.Err, `redisleader: acquire "shape": unexpected reply of 1 elements`)

	cmd := redis.NewCmd(context.Background())
	cmd.SetVal([]any{secret + "\n7\nv", int64(10), secret})
	h, err := lease.DecodeInspect(cmd)
	assert.True(t, h.Present)
	assert.False(t, h.Known)
	assert.EqualError(t, err, "unexpected reply of 3 elements")

	r = l.lease.Outcome([]any{int64(0), secret + "\n7\nv", int64(math.MaxInt64)}, nil)
	assert.Equal(t, time.Duration(math.MaxInt64), r.Left, "a huge PTTL must not wrap to a short wait")
	assert.NotContains(t, r.Err.Error(), secret)
}
