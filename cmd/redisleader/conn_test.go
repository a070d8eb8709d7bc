//go:build unix

package main

import (
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/redisleader/redisleader/internal/redisserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rediss:// against a redis-server that requires a client certificate:
// --cacert, --cert and --key (or their environment variables) connect;
// without the client certificate or the CA it fails with exit 1; --insecure
// skips the server's verification; TLS flags with redis:// are a usage
// error.
func TestTLS(t *testing.T) {
	t.Parallel()
	srv := redisserver.StartTLS(t, redisserver.TLSOptions{AuthClients: true})
	url := "rediss://" + srv.TLSAddr()
	ca, cert, key := srv.CACert, srv.ClientCert, srv.ClientKey
	tests := []struct {
		name string
		env  []string
		args []string
		code int
		err  string
	}{
		{"flags", nil, []string{"--cacert", ca, "--cert", cert, "--key", key}, exitOK, ""},
		{"env", []string{"REDISLEADER_CACERT=" + ca, "REDISLEADER_CERT=" + cert, "REDISLEADER_KEY=" + key}, nil, exitOK, ""},
		{"insecure without CA", nil, []string{"--insecure", "--cert", cert, "--key", key}, exitOK, ""},
		{"insecure from env", []string{"REDISLEADER_INSECURE=1"}, []string{"--cert", cert, "--key", key}, exitOK, ""},
		{"no client certificate", nil, []string{"--cacert", ca}, exitError, "cannot reach Redis at " + url},
		{"unknown CA", nil, []string{"--cert", cert, "--key", key}, exitError, "certificate"},
		{"cert without key", nil, []string{"--cacert", ca, "--cert", cert}, exitUsage, "--cert and --key go together"},
		{"CA file is not PEM", nil, []string{"--cacert", key, "--cert", cert, "--key", key}, exitUsage, "no PEM certificate"},
		{"bad REDISLEADER_INSECURE", []string{"REDISLEADER_INSECURE=maybe"}, []string{"--cacert", ca}, exitUsage, `invalid $REDISLEADER_INSECURE "maybe"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args := append(append([]string{"status", "--redis", url}, tt.args...), "job")
			p := startCLI(t, tt.name, tt.env, args...)
			code := p.wait(t)
			assert.Equal(t, tt.code, code, "stderr: %s", p.stderr.String())
			if tt.code == exitOK {
				assert.Equal(t, "no leader\n", p.stdout.String())
			} else {
				assert.Contains(t, p.stderr.String(), tt.err)
				assert.Equal(t, 1, strings.Count(p.stderr.String(), "\n"), p.stderr.String())
			}
		})
	}

	// run leads over TLS; the key is on the server.
	code, out, errOut := runCLI(t, "run", "--redis", url, "--cacert", ca, "--cert", cert, "--key", key,
		"--name", "job", "--", "sh", "-c", `echo "$REDISLEADER_FENCE"`)
	assert.Equal(t, exitOK, code, errOut)
	assert.Regexp(t, `^\d+\n$`, out)

	code, _, errOut = runCLI(t, "status", "--redis", "redis://"+srv.Addr(), "--cacert", ca, "job")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "need a rediss:// URL")
}

// --sentinel-master with the Sentinels' addresses in --redis: run leads on
// the primary the Sentinels name, and status and watch read it there.
func TestSentinel(t *testing.T) {
	t.Parallel()
	r := redisserver.StartReplicated(t, redisserver.ReplicatedOptions{Replicas: 1, Sentinels: 3})
	var args []string
	for _, a := range r.SentinelAddrs() {
		args = append(args, "--redis", "redis://"+a)
	}
	args = append(args, "--sentinel-master", r.MasterName())

	s := runSetup{marker: filepath.Join(t.TempDir(), "marker")}
	s.script = childScript(t, t.TempDir())
	p := startCLI(t, "run", []string{"MARKER=" + s.marker, "CHILD_MODE=exec"},
		append(append([]string{"run", "--name", "job", "--value", "A"}, args...), "--", s.script)...)
	started := waitMarker(t, s.marker, 1)[0]
	assert.NotNil(t, r.Primary().Do(t, "GET", "redisleader:{job}"), "the key is not on the primary")

	code, out, errOut := runCLI(t, append(append([]string{"status", "--check"}, args...), "job")...)
	assert.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "leader A (fence ")
	assert.Contains(t, out, " (fence "+strconv.FormatInt(started.fence, 10)+",")

	p.signal(t, syscall.SIGTERM)
	assert.Equal(t, 128+int(syscall.SIGTERM), p.wait(t))
	code, _, _ = runCLI(t, append(append([]string{"status", "--check"}, args...), "job")...)
	assert.Equal(t, exitNoLeader, code)

	code, _, errOut = runCLI(t, "status", "--redis", "redis://"+r.SentinelAddrs()[0], "--redis", "redis://"+r.SentinelAddrs()[1], "job")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "several --redis URLs need --sentinel-master or --cluster")
}

// --cluster with seed nodes: run leads on the node that owns the key's
// slot, and status reads it through any seed.
func TestCluster(t *testing.T) {
	t.Parallel()
	c := redisserver.StartCluster(t, 3)
	addrs := c.Addrs()
	args := []string{"--cluster", "--redis", "redis://" + addrs[0], "--redis", "redis://" + addrs[1]}

	s := runSetup{marker: filepath.Join(t.TempDir(), "marker")}
	s.script = childScript(t, t.TempDir())
	p := startCLI(t, "run", []string{"MARKER=" + s.marker, "CHILD_MODE=exec"},
		append(append([]string{"run", "--name", "job", "--value", "A"}, args...), "--", s.script)...)
	started := waitMarker(t, s.marker, 1)[0]
	owner := c.Owner(redisserver.Slot("redisleader:{job}"))
	require.NotNil(t, owner)
	assert.NotNil(t, owner.Do(t, "GET", "redisleader:{job}"), "the key is not on the slot's owner")

	code, out, errOut := runCLI(t, "status", "--cluster", "--redis", "redis://"+addrs[2], "job")
	assert.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "leader A (fence "+strconv.FormatInt(started.fence, 10)+",")

	p.signal(t, syscall.SIGTERM)
	assert.Equal(t, 128+int(syscall.SIGTERM), p.wait(t))

	code, _, errOut = runCLI(t, "status", "--cluster", "--sentinel-master", "m", "--redis", "redis://"+addrs[0], "job")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "exclude each other")
}
