package wire

import (
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Errors of the transport that the floors above hand on to their callers;
// the root re-exports those of its API (ErrSessionClosed, ErrReplication).
var (
	// ErrClosed: the transport's Done channel is closed (the session ended).
	ErrClosed = errors.New("redisleader: session closed")

	// ErrReplication: fewer replicas than Acks.N acknowledged a write within
	// Acks.Timeout.
	ErrReplication = errors.New("redisleader: too few replicas acknowledged")

	// ErrHookGoexit fails the calls of a pipeline whose goroutine a hook on
	// the client ended (runtime.Goexit) while it was sent.
	ErrHookGoexit = errors.New("redisleader: a hook on the client ended the goroutine sending a command (runtime.Goexit)")
)

// ScriptError is a Redis error reply rewritten to leave out the arguments
// Redis quoted (see denied), or one of the floors above that reads as one.
type ScriptError struct{ Msg string }

func (e *ScriptError) Error() string { return e.Msg }

// RedisError marks it as a Redis reply (redis.Error).
func (*ScriptError) RedisError() {}

// ACLError is a command, key or channel that the Redis user's ACL denies
// (see denied). It is a Redis error reply, rewritten to name what was
// denied; retrying cannot fix it.
type ACLError struct{ Msg string }

func (e *ACLError) Error() string { return e.Msg }

// RedisError marks it as a Redis reply (redis.Error).
func (*ACLError) RedisError() {}

// HookPanicError is the error of each command that a hook on the user's
// client panicked while running, before or after the command reached Redis.
// It does not unwrap to the panic value: a value that reads as a Redis error
// (say WRONGTYPE) is not Redis's reply, and must not be classified as one.
type HookPanicError struct{ v any }

// Error names the panic value's type, not the value, which can quote a
// command or its reply (tokens, the holder's among them).
func (e *HookPanicError) Error() string {
	return fmt.Sprintf("redisleader: a hook on the client panicked (with a %T value, not shown: it can quote tokens)", e.v)
}

// Replied reports whether err is Redis's reply (the command ran, or was
// refused, and will not run later), rather than a failure to hear one
// (timeouts, broken connections, an answer not waited for).
func Replied(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr)
}
