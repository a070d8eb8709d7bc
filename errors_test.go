package redisleader

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestPermanentErrors(t *testing.T) {
	assert.True(t, permanent(redisErr("WRONGTYPE Operation against a key holding the wrong kind of value")))
	assert.True(t, permanent(redisErr("NOPERM this user has no permissions")))
	for _, msg := range []string{"LOADING Redis is loading", "READONLY You can't write", "OOM command not allowed", "NOSCRIPT No matching script", "BUSY Redis is busy"} {
		assert.False(t, permanent(redisErr(msg)), msg)
	}
	assert.False(t, permanent(context.DeadlineExceeded))
	assert.False(t, permanent(errors.New("dial tcp: connection refused")))
	assert.False(t, permanent(nil))
}

// redisErr makes an error that go-redis would return for a Redis error reply.
type redisErr string

func (e redisErr) Error() string { return string(e) }

func (redisErr) RedisError() {}
