package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/redisleader/redisleader"
)

var statusHelp = helpText{
	synopsis: "status [--json] [--check] [flags] NAME",
	about: `
Print who leads NAME now: the leader's value, its fencing token and what is
left of its lease, or "no leader". Flags may also come after NAME.

  leader host-a:1234 (fence 1795000000000000, ttl 9.874s)
  no leader

With --json: {"name":"NAME","leader":{"value":"host-a:1234","fence":1795000000000000,"ttl_ms":9874}}
or {"name":"NAME","leader":null}. With --check the exit status says it too
(0 a leader, 3 none), for scripts: if redisleader status --check job >/dev/null; then ...
Colour is used only when stdout is a terminal and NO_COLOR is not set.
`,
	exit: `
Exit status: 0 when it could tell (a leader or no leader; with --check: a
leader), 3 with --check when no process leads NAME, 1 on a Redis error
(unreachable, or the key holds something else), 2 on a usage error (a bad
flag or NAME, or a malformed Redis URL), 128+n when stopped by signal n
(130 SIGINT, 143 SIGTERM) before it could tell.
`,
}

var watchHelp = helpText{
	synopsis: "watch [--json] [flags] NAME",
	about: `
Print one line per leader change of NAME, the current state first, each with
a UTC timestamp, until interrupted. Flags may also come after NAME.

  2026-11-29T10:00:00.123Z leader host-a:1234 (fence 1795000000000000)
  2026-11-29T10:00:12.456Z no leader

With --json, one JSON object per line:
  {"time":"2026-11-29T10:00:00.123Z","name":"NAME","leader":{"value":"host-a:1234","fence":1795000000000000}}
  {"time":"2026-11-29T10:00:12.456Z","name":"NAME","leader":null}

A leader that resigns is seen at once; one that dies is seen when its lease
expires. Colour is used only when stdout is a terminal and NO_COLOR is not set.
`,
	exit: `
Exit status: 0 when interrupted (SIGINT, SIGTERM, SIGHUP, SIGQUIT), 1 when
Redis is unreachable at start, 2 on a usage error (a bad flag or NAME, or a
malformed Redis URL). While Redis is unreachable later, watch waits and retries.
`,
}

// exitNoLeader is status --check's exit status when nobody leads.
const exitNoLeader = 3

// nameFlags are the flags of status and watch.
type nameFlags struct {
	conn   connFlags
	asJSON bool
	check  bool // status only
}

func newNameFlags(cmd, jsonUsage string) (*flag.FlagSet, *nameFlags) {
	fs := newFlagSet(cmd)
	f := &nameFlags{}
	fs.BoolVar(&f.asJSON, "json", false, jsonUsage)
	f.conn.register(fs)
	return fs, f
}

func newStatusFlags() (*flag.FlagSet, *nameFlags) {
	fs, f := newNameFlags("status", "print JSON instead of text")
	fs.BoolVar(&f.check, "check", false, "exit 3 when no process leads NAME (0 when one does)")
	return fs, f
}

func newWatchFlags() (*flag.FlagSet, *nameFlags) {
	return newNameFlags("watch", "print one JSON object per line instead of text")
}

// leaderJSON is a leader as status --json and watch --json print it.
type leaderJSON struct {
	Value string `json:"value"`
	Fence int64  `json:"fence"`
	TTLms *int64 `json:"ttl_ms,omitempty"`
}

// cmdStatus implements "redisleader status".
func cmdStatus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, f := newStatusFlags()
	c, code := f.start(ctx, fs, statusHelp, args, stdout, stderr, false)
	if code >= 0 {
		return code
	}
	defer c.close()
	l, err := c.election.Leader(ctx)
	if err != nil && !errors.Is(err, redisleader.ErrNoLeader) {
		if code := interrupted(ctx); code >= 0 {
			return code
		}
		c.log.errorf("%s", trimPrefix(err))
		return exitError
	}
	leading := err == nil
	code = exitOK
	if f.check && !leading {
		code = exitNoLeader
	}

	if f.asJSON {
		out := struct {
			Name   string      `json:"name"`
			Leader *leaderJSON `json:"leader"`
		}{Name: c.name}
		if leading {
			ms := l.TTL.Milliseconds()
			out.Leader = &leaderJSON{Value: l.Value, Fence: l.Fence, TTLms: &ms}
		}
		if err := json.NewEncoder(stdout).Encode(out); err != nil {
			fmt.Fprintf(stderr, "redisleader: writing output: %v\n", err)
			return exitError
		}
		return code
	}
	p := colour(stdout)
	if !leading {
		fmt.Fprintln(stdout, p.red("no leader"))
		return code
	}
	fmt.Fprintf(stdout, "leader %s (fence %d, ttl %v)\n", p.bold(p.green(printable(l.Value))), l.Fence, l.TTL.Round(time.Millisecond))
	return code
}

// cmdWatch implements "redisleader watch".
func cmdWatch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, f := newWatchFlags()
	c, code := f.start(ctx, fs, watchHelp, args, stdout, stderr, true)
	if code >= 0 {
		return code
	}
	defer c.close()
	p := colour(stdout)
	enc := json.NewEncoder(stdout)
	for l := range c.election.Observe(ctx) {
		now := time.Now().UTC().Format("2006-01-02T15:04:05.000Z07:00")
		if f.asJSON {
			out := struct {
				Time   string      `json:"time"`
				Name   string      `json:"name"`
				Leader *leaderJSON `json:"leader"`
			}{Time: now, Name: c.name}
			if l.Fence != 0 {
				out.Leader = &leaderJSON{Value: l.Value, Fence: l.Fence}
			}
			if err := enc.Encode(out); err != nil {
				c.log.errorf("writing output: %v", err)
				return exitError
			}
			continue
		}
		ts := p.dim(now)
		if l.Fence == 0 {
			fmt.Fprintf(stdout, "%s %s\n", ts, p.red("no leader"))
		} else {
			fmt.Fprintf(stdout, "%s leader %s (fence %d)\n", ts, p.bold(p.green(printable(l.Value))), l.Fence)
		}
	}
	if ctx.Err() == nil { // the channel closed by itself: the session closed
		c.log.errorf("watch of %s ended: the session closed", c.name)
		return exitError
	}
	return exitOK
}

// nameCommand is status or watch with NAME's election open.
type nameCommand struct {
	name     string
	election *redisleader.Election
	log      *logger
	close    func()
}

// start parses args, connects and opens NAME's election: what status and
// watch do first. On failure it returns the exit status; with stopOK, a
// stop signal while connecting makes it exitOK.
func (f *nameFlags) start(ctx context.Context, fs *flag.FlagSet, h helpText, args []string, stdout, stderr io.Writer, stopOK bool) (*nameCommand, int) {
	name, code := parseName(fs, h, args, stdout, stderr)
	if code >= 0 {
		return nil, code
	}
	log, target, code := f.conn.open(fs.Name(), stderr)
	if code >= 0 {
		return nil, code
	}
	election, closeAll, code := openElection(ctx, target, name, log)
	if code >= 0 {
		if stopOK && ctx.Err() != nil { // interrupted before it could start
			return nil, exitOK
		}
		return nil, code
	}
	return &nameCommand{name: name, election: election, log: log, close: closeAll}, -1
}

// parseName parses flags placed before or after the one NAME argument
// ("status NAME --json" works like "status --json NAME"; after "--" every
// argument is taken as it is, so a NAME may begin with "-"), and checks the
// name. It returns the exit status to use if the command must end, or -1.
func parseName(fs *flag.FlagSet, h helpText, args []string, stdout, stderr io.Writer) (string, int) {
	usageErr := func(format string, a ...any) (string, int) {
		return "", usageError(stderr, fs.Name(), format, a...)
	}
	var names []string
	for {
		if code := parseFlags(fs, h, args, stdout, stderr); code >= 0 {
			return "", code
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			names = append(names, rest...)
			break
		}
		if len(rest) == 0 {
			break
		}
		names = append(names, rest[0])
		args = rest[1:]
	}
	switch len(names) {
	case 0:
		return usageErr("missing NAME")
	case 1:
	default:
		return usageErr("expected one NAME, got %d: %s", len(names), printable(strings.Join(names, " ")))
	}
	if _, err := checkOffline(names[0]); err != nil {
		return usageErr("invalid NAME: %s", trimPrefix(err))
	}
	return names[0], -1
}

// openElection connects to Redis and opens a session on the election name.
// It returns a function that closes both, or the exit code to return (with
// the reason already logged).
func openElection(ctx context.Context, target *endpoint, name string, log *logger) (*redisleader.Election, func(), int) {
	quietRedis()
	client, err := connect(ctx, target)
	if err != nil {
		if code := interrupted(ctx); code >= 0 { // stopped, not unreachable
			return nil, nil, code
		}
		log.errorf("%v", err)
		return nil, nil, exitError
	}
	session, err := redisleader.NewSession(client)
	if err != nil {
		_ = client.Close()
		log.errorf("%s", trimPrefix(err))
		return nil, nil, exitError
	}
	closeAll := func() {
		_ = session.Close(context.WithoutCancel(ctx))
		_ = client.Close()
	}
	election, err := session.Election(name)
	if err != nil { // parseName checked the name already
		closeAll()
		log.errorf("%s", trimPrefix(err))
		return nil, nil, exitUsage
	}
	return election, closeAll, -1
}
