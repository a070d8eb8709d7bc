//go:build unix

package main

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redisleader/redisleader/internal/redisserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pwMarker is in every password below: it must never be printed.
const pwMarker = "S3cr3t-Pw"

// percentAll percent-encodes every byte of s, as a URL may.
func percentAll(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&b, "%%%02X", s[i])
	}
	return b.String()
}

// assertNoPassword checks that none of the forms of the passwords used here
// is in out.
func assertNoPassword(t *testing.T, what, out string) {
	t.Helper()
	for _, secret := range []string{pwMarker, percentAll(pwMarker)} {
		assert.NotContains(t, out, secret, "%s shows the password", what)
	}
}

// malformedURLs are Redis URLs that do not parse, each with the password
// marker where a password would be, and what the CLI shows of them ("" for
// nothing).
var malformedURLs = []struct{ name, url, shown string }{
	{"bad port", "redis://user:" + pwMarker + "@127.0.0.1:badport/0", "redis://user:xxxxx@127.0.0.1:badport/0"},
	{"bad db number", "redis://:" + pwMarker + "@127.0.0.1:6379/notadb", "redis://:xxxxx@127.0.0.1:6379/notadb"},
	{"too many path segments", "rediss://:" + pwMarker + "@127.0.0.1/0/1", "rediss://:xxxxx@127.0.0.1/0/1"},
	{"bad scheme", "http://user:" + pwMarker + "@127.0.0.1:6379", ""},
	{"no scheme", "user:" + pwMarker + "@127.0.0.1:6379", ""},
	{"bad percent-escape in password", "redis://:" + pwMarker + "%zz@127.0.0.1:6379", "redis://:xxxxx@127.0.0.1:6379"},
	{"bad percent-escape in host", "redis://:" + pwMarker + "@127.0.0.1%zz:6379", "redis://:xxxxx@127.0.0.1%zz:6379"},
	{"bad query option", "redis://:" + pwMarker + "@127.0.0.1:6379/0?bogus=1", "redis://:xxxxx@127.0.0.1:6379/0"},
	{"password in the query", "redis://127.0.0.1:6379/0?password=" + pwMarker, "redis://127.0.0.1:6379/0"},
	{"unescaped special characters in password", "redis://user:" + pwMarker + "/?#@127.0.0.1:6379", "redis://user:xxxxx@127.0.0.1:6379"},
	{"password that looks like a port and a path", "redis://user:12/" + pwMarker + "@127.0.0.1:6379", "redis://user:xxxxx@127.0.0.1:6379"},
	{"password without user or colon, bad port", "redis://" + pwMarker + "@127.0.0.1:bad", "redis://xxxxx@127.0.0.1:bad"},
	{"every byte percent-encoded, bad port", "redis://:" + percentAll(pwMarker) + "@127.0.0.1:bad", "redis://:xxxxx@127.0.0.1:bad"},
	{"control character", "redis://:" + pwMarker + "@127.0.0.1:6379\n", "redis://:xxxxx@127.0.0.1:6379?"},
	{"unix socket, bad db", "unix://user:" + pwMarker + "@/tmp/redis.sock?db=x", "unix://user:xxxxx@/tmp/redis.sock"},
	{"unix socket, no path", "unix://user:" + pwMarker + "@", "unix://user:xxxxx@"},
}

// redactURL shows where the CLI connects, never the password, whether or
// not the URL parses.
func TestRedactURL(t *testing.T) {
	t.Parallel()
	tests := []struct{ url, want string }{
		{"redis://127.0.0.1:6379", "redis://127.0.0.1:6379"},
		{"redis://:" + pwMarker + "@host:6379/1", "redis://:xxxxx@host:6379/1"},
		{"redis://alice:" + pwMarker + "@host", "redis://alice:xxxxx@host"},
		{"REDISS://alice:" + url.QueryEscape(pwMarker+"/@:") + "@host:6380/0?dial_timeout=1s", "rediss://alice:xxxxx@host:6380/0"},
		{"redis://alice:" + pwMarker + "/x@y@host", "redis://alice:xxxxx@host"},
		{"redis://" + pwMarker + "@host", "redis://xxxxx@host"},             // redis-cli reads it as a password
		{"redis://" + pwMarker + "@host:1/0?name=a:b@c", "redis://xxxxx@c"}, // over-redacted rather than shown
		{"unix://alice:" + pwMarker + "@/run/redis.sock?db=1", "unix://alice:xxxxx@/run/redis.sock"},
		{"unix:///run/redis.sock", "unix:///run/redis.sock"},
		{"redis://host/0#" + pwMarker, "redis://host/0"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, redactURL(tt.url), "redactURL(%q)", tt.url)
	}
	for _, m := range malformedURLs {
		shown := redactURL(m.url)
		assert.Equal(t, m.shown, shown, m.name)
		assertNoPassword(t, m.name, shown)
	}
}

// run's status lines, the library's warnings among them, show the Redis URL
// only redacted and never the password, decoded or as written, even in a
// command line long enough to be shortened.
func TestRunLogHidesPassword(t *testing.T) {
	t.Parallel()
	raw := "redis://" + url.UserPassword("alice", pwMarker+"/@:%").String() + "@127.0.0.1:6379/0"
	target, err := parseRedisURL(raw, "--redis URL")
	require.NoError(t, err)
	var buf bytes.Buffer
	log := &logger{w: &buf, target: target}
	slog.New(warnHandler{log}).Warn("redisleader: renewal failed; retrying",
		"err", errors.New("dial "+raw+": refused"), "password", target.opt.Password)
	long := commandLine([]string{strings.Repeat("x", 60), "--password", target.opt.Password}, target)
	log.errorf("starting %s", long)
	out := buf.String()
	assertNoPassword(t, "run's log", out)
	assert.Contains(t, out, "redisleader: renewal failed; retrying (err=dial redis://alice:xxxxx@127.0.0.1:6379/0: refused, password=xxxxx)\n")
	assert.Contains(t, out, "--password xxxxx")
}

// cliCase is a Redis URL and the exit status of the commands that use it;
// for a malformed URL, what they show of it.
type cliCase struct {
	name, url string
	code      int
	shown     string
}

// A password in the Redis URL, from --redis or from REDIS_URL, is never
// printed by any command, nor by --help or a usage error, whatever the URL's
// shape: well-formed ones against a redis-server that requires the password
// (accepted or refused), unreachable ones, and malformed ones, which are a
// usage error (exit 2) shown redacted on one line.
func TestPasswordNeverPrinted(t *testing.T) {
	t.Parallel()
	// The socket's path must be short (sun_path), so not under t.TempDir.
	sockDir, err := os.MkdirTemp("", "rl")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(sockDir) })
	sock := filepath.Join(sockDir, "redis.sock")
	srv := redisserver.Start(t, redisserver.Options{Args: []string{"--unixsocket", sock, "--unixsocketperm", "700"}})
	// The passwords are set once the server runs: redisserver's readiness
	// probe does not authenticate, so --requirepass would make Start time out.
	password := pwMarker + `/@:%?# "`
	srv.Do(t, "ACL", "SETUSER", "alice", "on", ">"+password, "~*", "&*", "+@all")
	srv.Do(t, "CONFIG", "SET", "requirepass", password)
	userinfo := func(user string) string { return url.UserPassword(user, password).String() } // percent-encoded
	addr := srv.Addr()
	down := fmt.Sprintf("127.0.0.1:%d", closedPort(t))

	cases := []cliCase{
		{"password only", "redis://" + userinfo("") + "@" + addr, exitOK, ""},
		{"default user", "redis://" + userinfo("default") + "@" + addr + "/0", exitOK, ""},
		{"ACL user", "redis://" + userinfo("alice") + "@" + addr + "/1", exitOK, ""},
		{"every byte percent-encoded", "redis://alice:" + percentAll(password) + "@" + addr, exitOK, ""},
		{"unix socket", "unix://" + userinfo("alice") + "@" + sock + "?db=1", exitOK, ""},
		{"wrong password", "redis://alice:wrong-" + pwMarker + "@" + addr, exitError, ""},
		{"password without user or colon", "redis://" + pwMarker + "@" + addr, exitError, ""},
		{"unreachable", "redis://:" + pwMarker + "@" + down, exitError, ""},
		{"unreachable rediss", "rediss://alice:" + pwMarker + "@" + down, exitError, ""},
	}
	for _, m := range malformedURLs {
		cases = append(cases, cliCase{m.name, m.url, exitUsage, m.shown})
	}

	// Every command path; code < 0 means the case's code. The --redis flag
	// goes right after the command. demo does not read REDIS_URL.
	paths := []struct {
		args     []string
		code     int
		flagOnly bool
	}{
		{[]string{"status", "job"}, -1, false},
		{[]string{"status", "--json", "job"}, -1, false},
		{[]string{"watch", "job"}, -1, false},
		{[]string{"transfer", "nobody-leads", "--to", "B"}, -1, false}, // exitNoLeader for exitOK
		{[]string{"run", "--name", "job", "--", "true"}, -1, false},
		{[]string{"demo", "--ttl", "500ms"}, -1, true},
		{[]string{"status", "--help"}, exitOK, false},
		{[]string{"watch", "--help"}, exitOK, false},
		{[]string{"transfer", "--help"}, exitOK, false},
		{[]string{"run", "--help"}, exitOK, false},
		{[]string{"demo", "--help"}, exitOK, false},
		{[]string{"status", "--bogus", "job"}, exitUsage, false},
		{[]string{"watch", "--bogus", "job"}, exitUsage, false},
		{[]string{"transfer", "--bogus", "job", "--to", "B"}, exitUsage, false},
		{[]string{"run", "--bogus", "--name", "job", "--", "true"}, exitUsage, false},
		{[]string{"demo", "--bogus"}, exitUsage, false},
		{[]string{"status"}, exitUsage, false},
		{[]string{"watch"}, exitUsage, false},
		{[]string{"transfer", "--to", "B"}, exitUsage, false},
		{[]string{"run", "--name", "job"}, exitUsage, false},
		{[]string{"demo", "extra"}, exitUsage, false},
		{[]string{"help"}, exitOK, false},
		{[]string{"bogus"}, exitUsage, false},
	}
	// The password from --password-file, REDISLEADER_PASSWORD_FILE or
	// REDISCLI_AUTH instead of the URL: right (exit 0) or wrong (exit 1),
	// and never printed, not even in run's echo of the command line.
	pwDir := t.TempDir()
	pwFile := filepath.Join(pwDir, "password")
	require.NoError(t, os.WriteFile(pwFile, []byte(password+"\n"), 0o600))
	wrongFile := filepath.Join(pwDir, "wrong")
	require.NoError(t, os.WriteFile(wrongFile, []byte("wrong-"+pwMarker+"\r\n"), 0o600))
	plain, alice := "redis://"+addr, "redis://alice@"+addr
	secretCases := []struct {
		name string
		env  []string
		args []string
		code int
	}{
		{"--password-file", nil, []string{"--redis", plain, "--password-file", pwFile}, exitOK},
		{"--password-file with ACL user", nil, []string{"--redis", alice, "--password-file", pwFile}, exitOK},
		{"REDISLEADER_PASSWORD_FILE", []string{"REDISLEADER_PASSWORD_FILE=" + pwFile}, []string{"--redis", plain}, exitOK},
		{"REDISCLI_AUTH", []string{"REDISCLI_AUTH=" + password}, []string{"--redis", plain}, exitOK},
		{"REDISCLI_AUTH in REDIS_URL's stead", []string{"REDISCLI_AUTH=" + password, "REDIS_URL=" + alice}, nil, exitOK},
		{"wrong --password-file", nil, []string{"--redis", plain, "--password-file", wrongFile}, exitError},
		{"wrong REDISCLI_AUTH", []string{"REDISCLI_AUTH=wrong-" + pwMarker}, []string{"--redis", plain}, exitError},
		{"password twice", nil, []string{"--redis", "redis://:" + pwMarker + "@" + addr, "--password-file", pwFile}, exitUsage},
		{"unreachable", nil, []string{"--redis", "redis://" + down, "--password-file", pwFile}, exitError},
	}
	for _, c := range secretCases {
		for _, cmd := range [][]string{
			{"status", "job"},
			{"run", "--verbose", "--name", "job", "--", "sh", "-c", "exit 0", password},
		} {
			args := append(append([]string{cmd[0]}, c.args...), cmd[1:]...)
			name := c.name + "/" + cmd[0]
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				proc := startCLI(t, name, append([]string{"REDIS_URL="}, c.env...), args...)
				code := proc.wait(t)
				stdout, stderr := proc.stdout.String(), proc.stderr.String()
				assert.Equal(t, c.code, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
				assertNoPassword(t, "stdout", stdout)
				assertNoPassword(t, "stderr", stderr)
				if cmd[0] == "run" && c.code == exitOK {
					assert.Contains(t, stderr, "starting sh -c 'exit 0' xxxxx")
				}
			})
		}
	}

	for _, c := range cases {
		for _, fromEnv := range []bool{false, true} {
			for _, p := range paths {
				if fromEnv && p.flagOnly {
					continue
				}
				args := append([]string{p.args[0]}, p.args[1:]...)
				env := []string{"REDIS_URL=" + c.url}
				source := "REDIS_URL"
				if !fromEnv {
					args = append([]string{p.args[0], "--redis", c.url}, p.args[1:]...)
					env = []string{"REDIS_URL="}
					source = "--redis URL"
				}
				want := p.code
				if want < 0 {
					want = c.code
				}
				if want == exitOK && p.code < 0 && p.args[0] == "transfer" {
					want = exitNoLeader
				}
				name := fmt.Sprintf("%s/%s/%s", c.name, source, strings.Join(p.args, " "))
				// The demos on the real server use the same election: one at a
				// time (subtests without t.Parallel run in turn, first).
				demo := p.args[0] == "demo" && want == exitOK && p.code < 0
				t.Run(name, func(t *testing.T) {
					if !demo {
						t.Parallel()
					}
					proc := startCLI(t, name, env, args...)
					if p.args[0] == "watch" && want == exitOK && p.code < 0 {
						interruptAfterFirstLine(t, proc)
					}
					code := proc.wait(t)
					stdout, stderr := proc.stdout.String(), proc.stderr.String()
					assert.Equal(t, want, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
					assertNoPassword(t, "stdout", stdout)
					assertNoPassword(t, "stderr", stderr)
					if c.code == exitUsage && p.code < 0 {
						// One line naming the problem, the URL redacted.
						line := "redisleader: invalid " + source
						if p.args[0] == "demo" {
							line = "redisleader demo: invalid " + source
						}
						if c.shown != "" {
							line += " " + c.shown
						}
						assert.True(t, strings.HasPrefix(stderr, line+": "), "stderr %q does not start with %q", stderr, line+": ")
						assert.Equal(t, 1, strings.Count(stderr, "\n"), "stderr: %s", stderr)
						assert.Empty(t, stdout)
					}
				})
			}
		}
	}
}

// interruptAfterFirstLine sends SIGINT to p once it has printed a line on
// stdout, unless it exits first.
func interruptAfterFirstLine(t *testing.T, p *cliProc) {
	t.Helper()
	deadline := time.NewTimer(cliTimeout)
	defer deadline.Stop()
	for len(p.stdout.lines()) == 0 {
		select {
		case <-p.stdout.changed:
		case <-p.done:
			return
		case <-deadline.C:
			t.Fatalf("%s printed no line within %v; stderr:\n%s", p.name, cliTimeout, p.stderr.String())
		}
	}
	p.signal(t, syscall.SIGINT)
}

// A password that contains a library option's name is hidden before the
// option names are rewritten into flags: rewriting first would change the
// password's text and let it through unhidden.
func TestRunLogHidesPasswordWithOptionNames(t *testing.T) {
	t.Parallel()
	pw := pwMarker + "WithTTL(5s)WithTakeoverDelay"
	raw := "redis://" + url.UserPassword("alice", pw).String() + "@127.0.0.1:6379/0"
	target, err := parseRedisURL(raw, "--redis URL")
	require.NoError(t, err)
	var buf bytes.Buffer
	log := &logger{w: &buf, target: target}
	slog.New(warnHandler{log}).Warn("redisleader: see WithTakeoverDelay", "err", errors.New("AUTH "+pw+" refused"))
	out := buf.String()
	assert.NotContains(t, out, pwMarker)
	assert.Contains(t, out, "see --takeover-delay", "option names outside the password are still rewritten")
}
