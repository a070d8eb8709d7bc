//go:build linux

package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeSentinel is a RESP server that records every command it gets and
// answers AUTH/HELLO with OK and anything else with an error, like a
// Sentinel that requires a password and knows no master.
type fakeSentinel struct {
	mu   sync.Mutex
	cmds []string
}

func (f *fakeSentinel) serve(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			r := bufio.NewReader(c)
			for {
				args, err := readRESP(r)
				if err != nil {
					return
				}
				f.mu.Lock()
				f.cmds = append(f.cmds, strings.Join(args, " "))
				f.mu.Unlock()
				switch strings.ToUpper(args[0]) {
				case "AUTH":
					_, _ = c.Write([]byte("+OK\r\n"))
				default:
					_, _ = c.Write([]byte("-NOAUTH Authentication required.\r\n"))
				}
			}
		}()
	}
}

func (f *fakeSentinel) saw(s string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.cmds {
		if strings.Contains(c, s) {
			return true
		}
	}
	return false
}

func readRESP(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "*")))
	if err != nil || n <= 0 {
		return nil, fmt.Errorf("bad array %q", line)
	}
	args := make([]string, n)
	for i := range args {
		h, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(h, "$")))
		if err != nil {
			return nil, err
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		args[i] = string(buf[:size])
	}
	return args, nil
}

// The password applies to every node (docs/operations.md, Connecting), the Sentinels
// included: a Sentinel that requires one (requirepass in sentinel.conf) gets
// AUTH with it, and the password is still never printed.
func TestSentinelGetsThePassword(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	fs := &fakeSentinel{}
	go fs.serve(l)
	code, _, errOut := runCLI(t, "status", "--redis", "redis://:s3ntinel-pw@"+l.Addr().String(), "--sentinel-master", "mymaster", "job")
	assert.Equal(t, exitError, code)
	assert.True(t, fs.saw("s3ntinel-pw"), "the Sentinel was never sent the password; stderr: %s", errOut)
	assert.NotContains(t, errOut, "s3ntinel-pw")
}
