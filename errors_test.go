package redisleader

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader/internal/lease"
	"github.com/redisleader/redisleader/internal/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPermanentErrors(t *testing.T) {
	assert.True(t, permanent(redisErr("WRONGTYPE Operation against a key holding the wrong kind of value")))
	assert.True(t, permanent(redisErr("NOPERM this user has no permissions")))
	// Valkey 9.1+ built without its Lua module: retrying cannot help.
	assert.True(t, permanent(redisErr("ERR Could not find scripting engine 'lua'")))
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

// aclDenial is what an ACL denial means, whatever a server's words for it.
type aclDenial int

const (
	deniedCommand aclDenial = iota // the user may not run the command
	deniedKey                      // … access a key it names
	deniedChannel                  // … publish to a channel it names
)

// aclWording is how one server line words denials: inside a script (the
// error of redis.call) and of a command sent by the client (its NOPERM
// reply). {user} stands for the user, {cmd} for the command in lower case.
type aclWording struct {
	servers         string
	script, outside map[aclDenial]string
}

// wordings are the fixtures: texts seen on Redis 7.0.15, and on Valkey
// 8.0.1 and Redis 8.0.2 (Redis changed them in 7.2).
type wordings []aclWording

var aclWordings = wordings{
	{
		servers: "Redis 7.0",
		script: map[aclDenial]string{
			deniedCommand: "ERR The user executing the script can't run this command or subcommand",
			deniedKey:     "ERR The user executing the script can't access at least one of the keys mentioned in the command arguments",
			deniedChannel: "ERR The user executing the script can't publish to the channel mentioned in the command",
		},
		outside: map[aclDenial]string{
			deniedCommand: "NOPERM this user has no permissions to run the '{cmd}' command",
			deniedKey:     "NOPERM this user has no permissions to access one of the keys used as arguments",
			deniedChannel: "NOPERM this user has no permissions to access one of the channels used as arguments",
		},
	},
	{
		servers: "Redis 7.2+, Valkey",
		script: map[aclDenial]string{
			deniedCommand: "ERR ACL failure in script: User {user} has no permissions to run the '{cmd}' command",
			deniedKey:     "ERR ACL failure in script: No permissions to access a key",
			deniedChannel: "ERR ACL failure in script: No permissions to access a channel",
		},
		outside: map[aclDenial]string{
			deniedCommand: "NOPERM User {user} has no permissions to run the '{cmd}' command",
			deniedKey:     "NOPERM No permissions to access a key",
			deniedChannel: "NOPERM No permissions to access a channel",
		},
	},
}

// script returns every known wording of denial d inside a script.
func (ws wordings) script(d aclDenial, user, cmd string) []string {
	var out []string
	for _, w := range ws {
		out = append(out, strings.NewReplacer("{user}", user, "{cmd}", cmd).Replace(w.script[d]))
	}
	return out
}

// outside returns every known wording of denial d of a client's command.
func (ws wordings) outside(d aclDenial, user, cmd string) []string {
	var out []string
	for _, w := range ws {
		out = append(out, strings.NewReplacer("{user}", user, "{cmd}", cmd).Replace(w.outside[d]))
	}
	return out
}

// assertDenied checks that err means an ACL denial: an *wire.ACLError, which
// permanent reports as such, whose text is the library's account of what
// was denied (what) followed by the server's reason in one of the wordings.
func assertDenied(t *testing.T, err error, what string, wordings []string) {
	t.Helper()
	require.Error(t, err)
	var aerr *wire.ACLError
	assert.ErrorAs(t, err, &aerr, "not an ACL error: %v", err)
	assert.True(t, permanent(err), "not permanent: %v", err)
	assertOneOf(t, err.Error(), what, wordings)
}

// assertOneOf checks that s contains prefix followed by one of wordings.
func assertOneOf(t *testing.T, s, prefix string, wordings []string) {
	t.Helper()
	for _, w := range wordings {
		if strings.Contains(s, prefix+w) {
			return
		}
	}
	t.Errorf("%q does not contain %q followed by any of %q", s, prefix, wordings)
}

// replyClient answers every command with err.
type replyClient struct {
	Client // nil: only Process is called
	err    error
}

func (c replyClient) Process(_ context.Context, cmd redis.Cmder) error {
	cmd.SetErr(c.err)
	return c.err
}

// TestACLWordingsAreDenials: every known wording of a denial is permanent
// (a blocking acquire returns it instead of retrying), and a script call (wire's denied) turns a
// NOPERM reply to the script call, in either wording, into an *wire.ACLError that
// names the call's command and keys and keeps the server's reason.
func TestACLWordingsAreDenials(t *testing.T) {
	for _, d := range []aclDenial{deniedCommand, deniedKey, deniedChannel} {
		for _, msg := range aclWordings.script(d, "u", "publish") {
			assert.True(t, permanent(redisErr(msg+" script: 05fc4503a1a80103617a76da01f0bd4554a5fe93, on @user_script:1.")), msg)
		}
		for _, msg := range aclWordings.outside(d, "u", "evalsha") {
			assert.True(t, permanent(redisErr(msg)), msg)
			argv := []any{"evalsha", "0123", 2, "redisleader:{n}", "redisleader:{n}:fence", "token"}
			cmd := lease.AcquireRun.Run(context.Background(), replyClient{err: redisErr(msg)}, argv)
			assertDenied(t, cmd.Err(), "permission denied running EVALSHA on keys redisleader:{n} redisleader:{n}:fence (ACL): ", []string{msg})
		}
	}
}

// permanent reports whether a Redis error will not go away by retrying
// (wire.Permanent), so a blocking acquire should return it instead of
// retrying until its context ends. Renewals treat every error as transient
// until the local deadline: an error never means "lost" by itself.
func permanent(err error) bool { return wire.Permanent(err) }
