package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// calls is how many times the server has run each command, from INFO
// commandstats. Commands that scripts call are counted too (Redis 7 counts
// them under their own names), which the scenarios use: the library's
// acquire script calls PTTL exactly once when it finds the name held, and
// its renew script calls PEXPIRE exactly once, so those counts identify
// failed acquire attempts and renewals without any hook in the library.
type calls map[string]int64

// commandCalls reads INFO commandstats.
func commandCalls(ctx context.Context, c *redis.Client) (calls, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, fmt.Errorf("INFO commandstats: %w", err)
	}
	out := calls{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		n, _, _ := strings.Cut(rest, ",")
		v, err := strconv.ParseInt(n, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("INFO commandstats: line %q: %w", line, err)
		}
		out[name] = v
	}
	return out, nil
}

// since returns the calls made after before, per command.
func (c calls) since(before calls) calls {
	d := calls{}
	for k, v := range c {
		d[k] = v - before[k]
	}
	return d
}

// sum adds the counts of the named commands.
func (c calls) sum(names ...string) int64 {
	var n int64
	for _, name := range names {
		n += c[name]
	}
	return n
}

// waitCalls polls INFO commandstats until the server has run cmd at least
// want times more than in before. It is how a scenario learns that a
// follower's first acquire attempt has been executed: each poll is one round
// trip, so it waits exactly as long as needed and never sleeps.
func waitCalls(ctx context.Context, c *redis.Client, before calls, cmd string, want int64) error {
	for {
		now, err := commandCalls(ctx, c)
		if err != nil {
			return err
		}
		if now[cmd]-before[cmd] >= want {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("waiting for %d %s calls: %w", want, cmd, err)
		}
	}
}

// scriptCalls counts the scripts run (EVALSHA, EVAL): every acquire,
// renew and release of the library. The commands scripts call are counted
// apart, under their own names.
func scriptCalls(d calls) int64 { return d.sum("evalsha", "eval") }

// pubsubCalls counts the library's pub/sub commands: SUBSCRIBE, UNSUBSCRIBE
// and the PINGs with which a session checks a quiet pub/sub connection.
func pubsubCalls(d calls) int64 { return d.sum("subscribe", "unsubscribe", "ping") }

// attemptCalls counts acquire attempts while a leader holds: script calls
// minus the leader's renewals (each runs PEXPIRE once; a failed acquire
// never does).
func attemptCalls(d calls) int64 { return scriptCalls(d) - d["pexpire"] }
