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

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader"
)

var statusHelp = helpText{
	synopsis: "status [--json] [--check] [flags] NAME",
	about: `
Print who leads NAME now: the leader's value, its fencing token and what is
left of its lease, or "no leader". Flags may also come after NAME.

  leader host-a:1234 (fence 1795000000000000, ttl 9.874s)
  no leader

With candidates that declared a priority (run --priority), the first line
also says whether the leader is the preferred candidate (the one it yields
to), and a line follows for each live candidate, best first:

  leader host-a:1234 (fence 1795000000000000, ttl 9.874s, priority 1); preferred host-b:4321 (priority 2)
  candidate host-b:4321 (priority 2, preferred)
  candidate host-a:1234 (priority 1, leader)

With --json: {"name":"NAME","leader":{"value":"host-a:1234","fence":1795000000000000,"ttl_ms":9874},"candidates":[]}
or {"name":"NAME","leader":null,"candidates":[]}; each candidate is
{"value":"host-b:4321","priority":2,"leader":false,"preferred":true}, and
"candidates" is null when the Redis user may not read them. With --check
the exit status says whether someone leads too (0 a leader, 3 none), for
scripts: if redisleader status --check job >/dev/null; then ...

When NAME is a semaphore (run --slots), its holders follow, in the order
their leases end (values and fences, never tokens); the leader line is left
out when nobody leads NAME:

  semaphore 2 of 3 permits held
  permit host-a:1234 (fence 1795000000000007, ttl 9.874s)
  permit host-b:4321 (fence 1795000000000008, ttl 4.12s)

--json then adds "semaphore":{"limit":3,"holders":[{"value":"host-a:1234",
"fence":1795000000000007,"ttl_ms":9874},...]}; --check exits 0 while a
permit is held.

When NAME is a read-write lock (RWLock), its leases follow the same way,
and how many writers wait (their intents stop new readers):

  rwlock held by 2 readers, 1 writer waiting
  reader host-a:1234 (fence 1795000000000009, ttl 9.874s)
  reader - (fence 1795000000000010, ttl 4.12s)

--json then adds "rwlock":{"holders":[{"role":"read","value":"host-a:1234",
"fence":1795000000000009,"ttl_ms":9874},...],"waiting_writers":1}; --check
exits 0 while a read or write lease is held.
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

With candidates that declared a priority (run --priority), each line says
who is preferred at that change, as status's first line does:

  2026-11-29T10:00:12.456Z no leader; preferred host-b:4321 (priority 2)
  2026-11-29T10:00:12.459Z leader host-b:4321 (fence 1795000000000001, priority 2, preferred)

With --json, one JSON object per line, with the candidates as status --json
shows them:
  {"time":"2026-11-29T10:00:00.123Z","name":"NAME","leader":{"value":"host-a:1234","fence":1795000000000000},"candidates":[]}
  {"time":"2026-11-29T10:00:12.456Z","name":"NAME","leader":null,"candidates":[]}

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

// nameFlags are the flags of status, watch and transfer.
type nameFlags struct {
	conn     connFlags
	asJSON   bool
	check    bool           // status only
	transfer *transferFlags // transfer's own; nil for status and watch
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
	leading := err == nil
	var pref preference
	if leading || errors.Is(err, redisleader.ErrNoLeader) {
		pref, err = c.preference(ctx, l)
	}
	var permits *permitsJSON // slots.go: nil when NAME has no semaphore
	if err == nil {
		permits, err = c.permits(ctx)
	}
	var rw *rwJSON // rwstatus.go: nil when NAME has no read-write lock
	if err == nil {
		rw, err = c.rwLock(ctx)
	}
	if err != nil {
		return c.failed(ctx, "", err)
	}
	code = exitOK
	if f.check && !leading && (permits == nil || len(permits.Holders) == 0) && !rw.held() {
		code = exitNoLeader
	}

	if f.asJSON {
		out := struct {
			Name       string          `json:"name"`
			Leader     *leaderJSON     `json:"leader"`
			Candidates []candidateJSON `json:"candidates"`
			Semaphore  *permitsJSON    `json:"semaphore,omitempty"`
			RWLock     *rwJSON         `json:"rwlock,omitempty"`
		}{Name: c.name, Candidates: pref.asJSON(), Semaphore: permits, RWLock: rw}
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
	if leading || (permits == nil && rw == nil) || len(pref.cands) > 0 { // a semaphore's or rwlock's name alone: its lines only
		fmt.Fprintln(stdout, leaderLine(p, l, fmt.Sprintf(", ttl %v", l.TTL.Round(time.Millisecond)), pref))
	}
	for _, line := range append(append(pref.candidateLines(), permits.lines(p)...), rw.lines(p)...) {
		fmt.Fprintln(stdout, line)
	}
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
		pref, err := c.preference(ctx, l)
		if err != nil { // retried at the next change, as Observe retries
			pref = preferenceOf(nil, l)
		}
		if !f.asJSON {
			fmt.Fprintf(stdout, "%s %s\n", p.dim(now), leaderLine(p, l, "", pref))
			continue
		}
		out := struct {
			Time       string          `json:"time"`
			Name       string          `json:"name"`
			Leader     *leaderJSON     `json:"leader"`
			Candidates []candidateJSON `json:"candidates"`
		}{Time: now, Name: c.name, Candidates: pref.asJSON()}
		if l.Fence != 0 {
			out.Leader = &leaderJSON{Value: l.Value, Fence: l.Fence}
		}
		if err := enc.Encode(out); err != nil {
			c.log.errorf("writing output: %v", err)
			return exitError
		}
	}
	if ctx.Err() == nil { // the channel closed by itself: the session closed
		c.log.errorf("watch of %s ended: the session closed", c.name)
		return exitError
	}
	return exitOK
}

// failed returns the exit status after err: 128+n if a stop signal n ended
// ctx, otherwise exitError once it has said what failed (doing, if given)
// and why.
func (c *nameCommand) failed(ctx context.Context, doing string, err error) int {
	if code := interrupted(ctx); code >= 0 {
		return code
	}
	if doing != "" {
		doing += ": "
	}
	c.log.errorf("%s%s", doing, trimPrefix(err))
	return exitError
}

// leaderLine is how status and watch show l (Fence 0: nobody leads), with
// extra after the fence, and who is preferred.
func leaderLine(p painter, l redisleader.Leader, extra string, pref preference) string {
	if l.Fence == 0 {
		return p.red("no leader") + pref.describe("")
	}
	return fmt.Sprintf("leader %s (fence %d%s%s", p.bold(p.green(printable(l.Value))), l.Fence, extra, pref.describe(")"))
}

// preference reads the live candidates with a priority and says who is
// preferred while l leads (Fence 0: nobody). A Redis user that may not read
// them (it uses no priorities: docs/operations.md, ACL) gets none, and no error: the
// library reports a denial as a Redis error "permission denied for ..."
// (docs/operations.md, ACL), or Redis's own NOPERM.
func (c *nameCommand) preference(ctx context.Context, l redisleader.Leader) (preference, error) {
	cands, err := c.election.Candidates(ctx)
	switch {
	case denied(err):
		return preferenceOf(nil, l), nil
	case err != nil:
		return preference{}, err
	}
	return preferenceOf(cands, l), nil
}

// denied reports whether err is Redis refusing the user a command: the
// library's "permission denied for ..." (docs/operations.md, ACL), or
// Redis's own NOPERM.
func denied(err error) bool {
	return redis.HasErrorPrefix(err, "permission denied") || redis.HasErrorPrefix(err, "NOPERM")
}

// nameCommand is status, watch or transfer with NAME's election open.
type nameCommand struct {
	name     string
	election *redisleader.Election
	session  *redisleader.Session
	client   redis.UniversalClient
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
	if f.transfer != nil {
		if msg := f.transfer.invalid(name); msg != "" {
			return nil, usageError(stderr, fs.Name(), "%s", msg)
		}
	}
	log, target, code := f.conn.open(fs.Name(), stderr)
	if code >= 0 {
		return nil, code
	}
	c := &nameCommand{name: name, log: log}
	c.election, c.session, c.client, c.close, code = openElection(ctx, target, name, log)
	if code >= 0 {
		if stopOK && ctx.Err() != nil { // interrupted before it could start
			return nil, exitOK
		}
		return nil, code
	}
	return c, -1
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
	if _, err := checkOffline(names[0], nil, ""); err != nil {
		return usageErr("invalid NAME: %s", trimPrefix(err))
	}
	return names[0], -1
}

// openElection connects to Redis and opens a session on the election name.
// It returns the client and a function that closes both, or the exit code
// to return (with the reason already logged).
func openElection(ctx context.Context, target *endpoint, name string, log *logger) (*redisleader.Election, *redisleader.Session, redis.UniversalClient, func(), int) {
	quietRedis()
	client, err := connect(ctx, target)
	if err != nil {
		if code := interrupted(ctx); code >= 0 { // stopped, not unreachable
			return nil, nil, nil, nil, code
		}
		log.errorf("%v", err)
		return nil, nil, nil, nil, exitError
	}
	session, err := redisleader.NewSession(client)
	if err != nil {
		_ = client.Close()
		log.errorf("%s", trimPrefix(err))
		return nil, nil, nil, nil, exitError
	}
	closeAll := func() {
		_ = session.Close(context.WithoutCancel(ctx))
		_ = client.Close()
	}
	election, err := session.Election(name)
	if err != nil { // parseName checked the name already
		closeAll()
		log.errorf("%s", trimPrefix(err))
		return nil, nil, nil, nil, exitUsage
	}
	return election, session, client, closeAll, -1
}
