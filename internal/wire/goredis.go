package wire

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The go-redis releases whose RESP3 pub/sub reader loses or delays messages
// (issue 37). Since v9.15.0 go-redis peeks at the name of each push frame
// before a pub/sub read, to keep the notifications it handles itself
// (push/processor.go, Reader.PeekPushNotificationName):
//
//   - v9.15.0 to v9.20.0 (go-redis #3839, fixed in v9.20.1 by #3842): the
//     peek looked only at the bytes already buffered. A frame whose header
//     was cut by a read boundary ("messa") was taken for another
//     notification, read and dropped.
//   - v9.20.1 to v9.21.x (#3935, fixed in v9.22.0 by #3936): the peek waits
//     for 36 bytes, so a complete frame shorter than that waits for the
//     connection's next traffic (or the read's deadline). The session's own
//     frames are at least 48 bytes (its channels are redisleader:{name}:ch
//     and longer), so this one holds only the caller's own subscriptions.
//
// Only RESP3 (go-redis's default, Protocol 0 or 3) has push frames. Here the
// pub/sub connection carries hints only: a lost message delays a waiter by
// at most the holder's remaining lease (package documentation, section
// Waiting), never safety. The session cannot choose RESP2 for its own
// pub/sub connection without building a second client from the caller's
// options (losing their hooks, dialer and wrappers), so it warns instead:
// once per process, on the first session whose logger takes warnings.

// goRedisWarned is set once the go-redis warning has been logged.
var goRedisWarned atomic.Bool

// WarnGoRedis logs, once per process, the warning for the go-redis version
// this program is built with (goRedisPubSubBug), unless logger drops
// warnings or c, the client of the session's pub/sub connection, is
// configured for RESP2.
func WarnGoRedis(c Client, logger *slog.Logger) {
	warnGoRedis(&goRedisWarned, redis.Version(), c, logger)
}

// goRedisPubSubBug returns the warning for go-redis version v (as
// redis.Version reports it, "9.20.0"; a "v" prefix and a pre-release suffix
// are allowed), or "" when that version has neither bug or v does not parse.
func goRedisPubSubBug(v string) string {
	v = strings.TrimPrefix(v, "v")
	v, _, _ = strings.Cut(v, "-") // 9.16.0-beta.1 has 9.16.0's code
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return ""
	}
	var n [3]int
	for i, p := range parts {
		x, err := strconv.Atoi(p)
		if err != nil {
			return ""
		}
		n[i] = x
	}
	at := func(minor, patch int) bool { return n[1] > minor || n[1] == minor && n[2] >= patch }
	const fix = " Use go-redis 9.22.0 or later, or Protocol: 2 (RESP2) in the client's options."
	switch {
	case n[0] != 9 || !at(15, 0) || at(22, 0):
		return ""
	case !at(20, 1):
		return "redisleader: go-redis " + v + " can drop RESP3 pub/sub messages (go-redis #3839, fixed in 9.20.1; 9.22.0 also fixes #3935). " +
			"Here a dropped wake-up delays a waiter by at most the holder's remaining lease, never safety." + fix
	default:
		return "redisleader: go-redis " + v + " holds a RESP3 pub/sub frame shorter than " + strconv.Itoa(GoRedisPeekLen) +
			" bytes until the connection's next traffic (go-redis #3935, fixed in 9.22.0). The session's own frames are longer, " +
			"so its wake-ups are not held (and safety never depends on them); other subscriptions on this client can hang." + fix
	}
}

// GoRedisPeekLen is what go-redis 9.20.1–9.21.x waits for before it parses a
// push frame (#3935); every frame of the session's pub/sub is longer
// (lease's TestSessionPushFramesOutgrowGoRedisPeek).
const GoRedisPeekLen = 36

// warnGoRedis logs goRedisPubSubBug(version) to logger once per process (once
// sets the flag), unless logger drops warnings or c is configured for RESP2.
func warnGoRedis(once *atomic.Bool, version string, c Client, logger *slog.Logger) {
	msg := goRedisPubSubBug(version)
	if msg == "" || !logger.Enabled(context.Background(), slog.LevelWarn) || protocolOf(c) == 2 {
		return
	}
	if once.CompareAndSwap(false, true) {
		logger.Warn(msg)
	}
}

// protocolOf returns the RESP version c's options ask for (3 when they do not
// say, go-redis's default, or when c does not expose its options).
func protocolOf(c Client) int {
	p := 0
	switch cl := c.(type) {
	case interface{ Options() *redis.Options }:
		p = cl.Options().Protocol
	case interface{ Options() *redis.ClusterOptions }:
		p = cl.Options().Protocol
	}
	if p == 0 {
		return 3
	}
	return p
}

// WarnRiskyClient logs on logger c's settings that make calls
// outlive their deadlines. Safety does not depend on them (scripts are
// idempotent and loss is timer-driven), but Close and blocking calls may
// take up to the client's socket timeouts to return.
func WarnRiskyClient(c Client, callTimeout time.Duration, logger *slog.Logger) {
	var opt *redis.Options
	switch cl := c.(type) {
	case *redis.Client:
		opt = cl.Options()
	case *redis.ClusterClient:
		o := cl.Options()
		if !o.ContextTimeoutEnabled {
			logger.Warn("redisleader: redis.ClusterOptions.ContextTimeoutEnabled is false, so go-redis ignores call deadlines on sockets; set it to true so calls end within the call timeout",
				"call_timeout", callTimeout, "read_timeout", o.ReadTimeout)
		}
		return
	default:
		return
	}
	if !opt.ContextTimeoutEnabled {
		logger.Warn("redisleader: redis.Options.ContextTimeoutEnabled is false, so go-redis ignores call deadlines on sockets; set it to true so calls end within the call timeout",
			"call_timeout", callTimeout, "read_timeout", opt.ReadTimeout)
	}
}
