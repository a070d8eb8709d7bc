//go:build unix

package main

import (
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Issue 36, step 4: a request left behind is never acted on by a later
// leader. A, a leader that takes requests (a run with a priority: the
// library's Election.Run takes them), is stopped (SIGSTOP); a transfer to
// Z stores its request, addressed to A's term, and is SIGKILLed (it cannot
// withdraw it); A is SIGKILLed with the request pending. The next leader
// (a run with a priority, or one without: Election.TransferRequested) is
// elected while the request is still stored, and leads on without acting on
// it until the request has expired (one TTL of the transfer's session):
// the key is never changed, and its command never stops.
func TestTransferRequestOfKilledLeaderIgnored(t *testing.T) {
	t.Parallel()
	for _, next := range [][]string{{"--priority", "1"}, nil} {
		t.Run("next"+strings.Join(next, "="), func(t *testing.T) {
			t.Parallel()
			killedLeaderRequest(t, next)
		})
	}
}

func killedLeaderRequest(t *testing.T, nextFlags []string) {
	s, srv := newRunServer(t)
	a := s.candidate(t, "trap", "A", "--ttl", "5s", "--priority", "1") // 5s: room for transfer to store its request
	first := waitMarker(t, s.marker, 1)[0]
	b := s.candidate(t, "trap", "B", append([]string{"--ttl", "1s"}, nextFlags...)...)
	b.stderr.waitContains(t, "campaigning for leadership of job as B")

	a.signal(t, syscall.SIGSTOP)
	tr := startCLI(t, "transfer", nil, "transfer", "--redis", s.url, "job", "--to", "Z", "--wait", "60s")
	requestStored(t, srv)
	require.NoError(t, tr.cmd.Process.Kill())
	tr.wait(t)
	stale, _ := srv.Do(t, "GET", requestKeyOfJob).(string)
	require.True(t, strings.HasSuffix(stale, " "+strconv.FormatInt(first.fence, 10)+"\nZ"), "not addressed to A's term: %q", stale)
	a.signal(t, syscall.SIGKILL)
	a.wait(t)

	var lines []markerLine // A's command may have written a term line: its supervisor stopped it
	pollUntil(t, cliTimeout, "B's command to start", func() bool {
		lines = readMarker(t, s.marker)
		return lines[len(lines)-1].value == "B"
	})
	next := lines[len(lines)-1]
	require.Equal(t, "B", next.value)
	require.Greater(t, next.fence, first.fence)
	require.Equal(t, stale, srv.Do(t, "GET", requestKeyOfJob), "B was elected after the request expired: nothing tested")
	pollUntil(t, 2*cliTimeout, "the request to expire", func() bool {
		held := srv.Do(t, "GET", requestKeyOfJob)
		require.Contains(t, []any{stale, nil}, held, "the request was changed")
		require.Equal(t, lines, readMarker(t, s.marker), "leadership changed")
		require.True(t, b.running(), "B exited: %s", b.stderr.String())
		return held == nil
	})
	assert.NotContains(t, b.stderr.String(), "requested")
	assert.Equal(t, 1, strings.Count(b.stderr.String(), "elected leader of job"), "B's term ended")
	b.stderr.waitContains(t, "ignoring a request to transfer job made for another term")
	stopAll(t, b)
}
