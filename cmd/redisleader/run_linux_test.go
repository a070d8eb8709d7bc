//go:build linux

package main

import (
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A key under the election's name that redisleader did not write (a string
// left by an older tool or a typo'd SET) is an error for run as for status
// (exit 1, naming the key), not another's lease: --try and --wait would
// exit 75 in silence and plain run would wait for ever, and a cron job would
// never run again without anybody being told.
func TestRunForeignKeyIsAnError(t *testing.T) {
	t.Parallel()
	srv := quietRedisServer(t)
	url := "redis://" + srv.Addr()
	srv.Do(t, "SET", "redisleader:{job}", "not a lock")
	code, _, errOut := runCLI(t, "status", "--redis", url, "job")
	require.Equal(t, exitError, code, "status: %s", errOut)
	require.Contains(t, errOut, "holds a value this package did not write")

	for _, flags := range [][]string{{"--try"}, {"--wait", "200ms"}, {}} {
		args := append([]string{"run", "--redis", url, "--name", "job"}, flags...)
		code, _, errOut := runCLI(t, append(args, "--", "true")...)
		assert.Equal(t, exitError, code, "run %v: a foreign key was taken for a leader", flags)
		assert.Contains(t, errOut, "holds a value this package did not write", "run %v said nothing", flags)
	}
}

// Every status line is one line with the "redisleader: " prefix, also for a
// library warning whose error is a joined error (the settings check when the
// ACL denies CONFIG GET and INFO): a log shipper or cron mail filter keyed on
// the prefix sees no stray line.
func TestRunWarningIsOneLine(t *testing.T) {
	t.Parallel()
	srv := quietRedisServer(t)
	srv.Do(t, "ACL", "SETUSER", "limited", "on", ">lpw", "~*", "&*", "+@all", "-config", "-info")
	dir := t.TempDir()
	marker := filepath.Join(dir, "marker")
	p := startCLI(t, "run", []string{"MARKER=" + marker, "CHILD_MODE=exec"},
		"run", "--redis", "redis://limited:lpw@"+srv.Addr(), "--name", "job", "--", childScript(t, dir))
	waitMarker(t, marker, 1)
	p.stderr.waitContains(t, "NOPERM this user has no permissions to run the 'info' command")
	p.signal(t, syscall.SIGTERM)
	p.wait(t)
	for _, l := range p.stderr.lines() {
		assert.True(t, strings.HasPrefix(l, "redisleader: "), "status line without the prefix (a multi-line message): %q", l)
	}
}

// A negative --takeover-delay is a usage error, like a negative --grace,
// --wait or --hold (it used to mean "off" in silence).
func TestRunNegativeTakeoverDelay(t *testing.T) {
	t.Parallel()
	code, _, errOut := runCLI(t, "run", "--redis", "redis://127.0.0.1:"+strconv.Itoa(closedPort(t)), "--name", "job", "--takeover-delay", "-5s", "--", "true")
	assert.Equal(t, exitUsage, code, "stderr: %s", errOut)
	assert.Contains(t, errOut, "--takeover-delay")
}
