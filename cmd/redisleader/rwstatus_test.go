//go:build unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisleader/redisleader"
)

// rwStatus is status --json's read-write lock.
type rwStatus struct {
	RWLock *struct {
		Holders []struct {
			Role  string `json:"role"`
			Value string `json:"value"`
			Fence int64  `json:"fence"`
			TTLms int64  `json:"ttl_ms"`
		} `json:"holders"`
		Waiting int `json:"waiting_writers"`
	} `json:"rwlock"`
}

// rwHolder opens a session on the Redis at addr and its handle on the
// read-write lock doc, with value.
func rwHolder(t *testing.T, addr, value string) *redisleader.RWLock {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: addr})
	s, err := redisleader.NewSession(client)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(context.Background()); _ = client.Close() })
	rw, err := s.RWLock("doc", redisleader.WithRWValue(value))
	require.NoError(t, err)
	return rw
}

// status NAME of a read-write lock shows its leases (role, value, fence,
// TTL; never a token) and its waiting writers, in text and --json, and
// --check counts a held lease; a name with none prints what it printed
// before, byte for byte.
func TestStatusShowsRWLock(t *testing.T) {
	t.Parallel()
	srv := quietRedisServer(t)
	url := "redis://" + srv.Addr()
	before := statusLine(t, url, "--json", "doc")
	assert.Equal(t, `{"name":"doc","leader":null,"candidates":[]}`, before)
	assert.Equal(t, "no leader", statusLine(t, url, "doc"))

	ctx := context.Background()
	a, b, w := rwHolder(t, srv.Addr(), "A"), rwHolder(t, srv.Addr(), ""), rwHolder(t, srv.Addr(), "W")
	ra, err := a.RLock(ctx)
	require.NoError(t, err)
	rb, err := b.RLock(ctx)
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wrote := make(chan *redisleader.Lock, 1)
	go func() {
		l, err := w.Lock(wctx)
		assert.NoError(t, err)
		wrote <- l
	}()
	pollUntil(t, 5*time.Second, "the writer to wait", func() bool {
		_, waiting, err := a.Holders(ctx)
		return err == nil && waiting == 1
	})

	lines := statusLines(t, url, "doc")
	require.Len(t, lines, 3, "%q", lines)
	assert.Equal(t, "rwlock held by 2 readers, 1 writer waiting", lines[0])
	sort.Strings(lines[1:]) // in the order their leases end, which renewals change
	assert.Regexp(t, `^reader - \(fence `+fmt.Sprint(rb.Fence())+`, ttl [0-9.]+m?s\)$`, lines[1])
	assert.Regexp(t, `^reader A \(fence `+fmt.Sprint(ra.Fence())+`, ttl [0-9.]+m?s\)$`, lines[2])
	line := statusLine(t, url, "--json", "doc")
	var st rwStatus
	require.NoError(t, json.Unmarshal([]byte(line), &st))
	require.NotNil(t, st.RWLock, line)
	assert.Equal(t, 1, st.RWLock.Waiting)
	require.Len(t, st.RWLock.Holders, 2)
	for _, h := range st.RWLock.Holders {
		assert.Equal(t, "read", h.Role)
		assert.Positive(t, h.TTLms)
		assert.Contains(t, []int64{ra.Fence(), rb.Fence()}, h.Fence)
	}
	assert.Nil(t, statusAsJSON(t, url, "--json", "doc").Leader)
	for _, m := range srv.Do(t, "ZRANGE", "redisleader:{doc}:rw", 0, -1).([]any) {
		token, _, _ := strings.Cut(m.(string), "\n")
		assert.NotContains(t, line+strings.Join(lines, "\n"), token, "a token in status's output")
	}
	code, _, _ := runCLI(t, "status", "--check", "--redis", url, "doc")
	assert.Equal(t, exitOK, code, "a read lease held counts for --check")

	require.NoError(t, ra.Release(ctx))
	require.NoError(t, rb.Release(ctx))
	var wl *redisleader.Lock
	select {
	case wl = <-wrote:
	case <-time.After(5 * time.Second):
		t.Fatal("the writer was not granted once the readers left")
	}
	require.NotNil(t, wl)
	lines = statusLines(t, url, "doc")
	require.Len(t, lines, 2, "%q", lines)
	assert.Equal(t, "rwlock held by a writer, 0 writers waiting", lines[0])
	assert.Regexp(t, `^writer W \(fence `+fmt.Sprint(wl.Fence())+`, ttl [0-9.]+m?s\)$`, lines[1])
	assert.Regexp(t, `"rwlock":\{"holders":\[\{"role":"write","value":"W","fence":`+fmt.Sprint(wl.Fence())+`,"ttl_ms":[0-9]+\}\],"waiting_writers":0\}`,
		statusLine(t, url, "--json", "doc"))

	require.NoError(t, wl.Release(ctx))
	assert.Equal(t, before, statusLine(t, url, "--json", "doc"), "nothing held: the output of before")
	code, out, _ := runCLI(t, "status", "--check", "--redis", url, "doc")
	assert.Equal(t, exitNoLeader, code)
	assert.Equal(t, "no leader\n", out)
}
