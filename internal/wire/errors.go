package wire

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

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

// Permanent reports whether a Redis error will not go away by retrying.
// Everything else (network errors, timeouts, LOADING, READONLY, OOM,
// NOSCRIPT, BUSY, TRYAGAIN, CLUSTERDOWN, MASTERDOWN) is transient.
func Permanent(err error) bool {
	if err == nil {
		return false
	}
	var netErr net.Error
	if errors.As(err, &netErr) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if errors.As(err, new(*ACLError)) {
		return true
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := rerr.Error()
	for _, p := range permanentPrefixes {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// Redis error prefixes that retrying cannot fix: wrong key type at our key,
// missing permissions or credentials (NOPERM, and a denial inside a script:
// Redis 7.0 and 7.2 word those as ERR, see the two prefixes after NOPERM), a
// server without scripting, a script that does not compile, a fence key that
// someone else wrote. Valkey 9.1 made Lua a module of the server: one built
// without it (BUILD_LUA=no) answers EVALSHA with NOSCRIPT and our EVAL with
// "Could not find scripting engine 'lua'" (valkey src/eval.c).
var permanentPrefixes = []string{"WRONGTYPE", "NOPERM", "ERR The user executing the script can't", "ERR ACL failure in script",
	"NOAUTH", "WRONGPASS", "ERR unknown command", "ERR Could not find scripting engine", "ERR Error compiling script", "ERR redisleader:"}
