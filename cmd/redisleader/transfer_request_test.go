//go:build unix

package main

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader/internal/redisserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests below cover issue 35, item 5: a transfer request ends with the
// transfer command that made it, and a leader acts only on a request
// addressed to its own term.

const requestKeyOfJob = "redisleader:{job}:transfer"

// heldJob starts a job that leads job and takes no transfer requests
// (--try): it holds leadership for 30s after its command exits, until a
// SIGTERM ends the hold and it resigns.
func heldJob(t *testing.T, url string) *cliProc {
	t.Helper()
	job := startCLI(t, "job", nil, "run", "--verbose", "--redis", url, "--name", "job", "--try", "--hold", "30s", "--", "true")
	job.stderr.waitContains(t, "holding leadership of job for 30s")
	return job
}

// requestStored waits until a transfer request is stored.
func requestStored(t *testing.T, srv *redisserver.Server) {
	t.Helper()
	pollUntil(t, cliTimeout, "the transfer request", func() bool { return srv.Do(t, "GET", requestKeyOfJob) != nil })
}

// VALUE wins an ordinary election before any leader took the request (the
// leader was a job, and VALUE campaigns as one): transfer exits 0 and its
// request ends with it. The next run to lead keeps its command: it is not
// handed to a VALUE that no longer campaigns. On d7b8f12 the request stayed,
// and the next leader stopped its command and left the name unled.
func TestTransferRequestEndsWithTransfer(t *testing.T) {
	t.Parallel()
	s, srv := newRunServer(t)
	job := heldJob(t, s.url)
	b := s.candidate(t, "trap", "B", "--ttl", "1s", "--wait", "30s")
	b.stderr.waitContains(t, "campaigning for leadership of job as B")
	tr := startCLI(t, "transfer", nil, "transfer", "--redis", s.url, "job", "--to", "B", "--wait", "10s")
	requestStored(t, srv)

	job.signal(t, syscall.SIGTERM) // ends the hold: job resigns, and B wins the election
	assert.Equal(t, exitOK, job.wait(t))
	lines := waitMarker(t, s.marker, 1)
	require.Equal(t, exitOK, tr.wait(t), "transfer: %s", tr.stderr.String())
	assert.Equal(t, fmt.Sprintf("leader B (fence %d)\n", lines[0].fence), tr.stdout.String())
	assert.Nil(t, srv.Do(t, "GET", requestKeyOfJob), "the request outlived the transfer that made it")

	c := s.candidate(t, "trap", "C", "--ttl", "1s")
	c.stderr.waitContains(t, "campaigning for leadership of job as C")
	b.signal(t, syscall.SIGTERM)
	assert.Equal(t, 128+int(syscall.SIGTERM), b.wait(t))
	lines = waitMarker(t, s.marker, 3)
	require.Equal(t, "C", lines[2].value)
	holdsFor(t, 1500*time.Millisecond, s.marker, 3, c) // more than one --ttl: C reads requests once per --ttl
	assert.NotContains(t, c.stderr.String(), "requested")
	assert.Equal(t, 1, strings.Count(c.stderr.String(), "elected leader of job"), "C's term ended")
	stopAll(t, c)
	assertOneAtATime(t, readMarker(t, s.marker))
}

// A request made during another term is not acted on: a transfer
// SIGKILLed (it cannot withdraw) leaves a request addressed to the job that
// led, and the run that leads next keeps its command and leaves the request
// as it is (it expires 5s after --wait). On d7b8f12 the next leader took it.
func TestTransferStaleRequestIgnored(t *testing.T) {
	t.Parallel()
	s, srv := newRunServer(t)
	job := heldJob(t, s.url)
	c := s.candidate(t, "trap", "C", "--ttl", "1s")
	c.stderr.waitContains(t, "campaigning for leadership of job as C")
	tr := startCLI(t, "transfer", nil, "transfer", "--redis", s.url, "job", "--to", "B", "--wait", "20s")
	requestStored(t, srv)
	require.NoError(t, tr.cmd.Process.Kill())
	tr.wait(t)
	stale := srv.Do(t, "GET", requestKeyOfJob)
	require.NotNil(t, stale, "the SIGKILLed transfer withdrew its request")

	job.signal(t, syscall.SIGTERM)
	assert.Equal(t, exitOK, job.wait(t))
	waitMarker(t, s.marker, 1)
	holdsFor(t, 1500*time.Millisecond, s.marker, 1, c) // more than one --ttl
	assert.NotContains(t, c.stderr.String(), "requested")
	assert.Equal(t, 1, strings.Count(c.stderr.String(), "elected leader of job"), "C's term ended")
	assert.Equal(t, stale, srv.Do(t, "GET", requestKeyOfJob), "the leader of a later term changed the request")
	c.stderr.waitContains(t, "ignoring a request to transfer job made for another term")
	stopAll(t, c)
}

// The term a request addresses ends without taking it, and another run
// leads: transfer addresses the request to the new term, whose leader
// takes it and hands over to VALUE.
func TestTransferRequestFollowsNewLeader(t *testing.T) {
	t.Parallel()
	s, srv := newRunServer(t)
	job := heldJob(t, s.url)
	c := s.candidate(t, "trap", "C", "--ttl", "5s") // the reservation for B lasts C's TTL
	c.stderr.waitContains(t, "campaigning for leadership of job as C")
	tr := startCLI(t, "transfer", nil, "transfer", "--redis", s.url, "job", "--to", "B", "--wait", "10s")
	requestStored(t, srv)

	job.signal(t, syscall.SIGTERM)
	assert.Equal(t, exitOK, job.wait(t))
	c.stderr.waitContains(t, "elected leader of job")
	b := s.candidate(t, "trap", "B", "--ttl", "1s") // B campaigns only once C leads
	require.Equal(t, exitOK, tr.wait(t), "transfer: %s", tr.stderr.String())
	c.stderr.waitContains(t, "handed job over to B")
	assert.Contains(t, c.stderr.String(), "transfer of job to B requested; stopping")
	assert.Equal(t, 1, strings.Count(c.stderr.String(), "elected leader of job"))
	var last markerLine // B's; C's command may have been stopped before it wrote its line
	pollUntil(t, cliTimeout, "B's command to start", func() bool {
		lines := readMarker(t, s.marker)
		if len(lines) == 0 {
			return false
		}
		last = lines[len(lines)-1]
		return last.value == "B"
	})
	assert.Equal(t, fmt.Sprintf("leader B (fence %d)\n", last.fence), tr.stdout.String())
	assert.Nil(t, srv.Do(t, "GET", requestKeyOfJob))
	stopAll(t, b, c)
	assertOneAtATime(t, readMarker(t, s.marker))
}

// transfer stopped by SIGINT or SIGTERM withdraws its request (the leader,
// a job, takes none) and exits 128+n. (--wait running out withdraws it too:
// TestTransferNoLeaderAndNotTaken.)
func TestTransferInterruptedWithdraws(t *testing.T) {
	t.Parallel()
	srv := quietRedisServer(t)
	url := "redis://" + srv.Addr()
	job := heldJob(t, url)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		tr := startCLI(t, "transfer", nil, "transfer", "--redis", url, "job", "--to", "B", "--wait", "20s")
		requestStored(t, srv)
		tr.signal(t, sig)
		assert.Equal(t, 128+int(sig), tr.wait(t), "%v: stderr: %s", sig, tr.stderr.String())
		assert.Nil(t, srv.Do(t, "GET", requestKeyOfJob), "%v: the request was not withdrawn", sig)
	}
	assert.True(t, job.running())
	job.signal(t, syscall.SIGTERM)
	assert.Equal(t, exitOK, job.wait(t))
}

// requestScript, the one place that decides which request a leader takes
// and which a transfer withdraws or addresses anew.
func TestRequestScript(t *testing.T) {
	t.Parallel()
	srv := redisserver.Start(t)
	c := srv.Client(t)
	ctx := t.Context()
	const key = requestKeyOfJob
	store := func(v string) { require.NoError(t, c.Set(ctx, key, v, time.Minute).Err()) }
	stored := func() any { return srv.Do(t, "GET", key) }

	_, _, err := takeRequest(ctx, c, key, "", "5", "")
	require.ErrorIs(t, err, redis.Nil, "no request")

	q := &transferRequest{key: key, id: "ID", to: "B x\ny", fence: 5} // VALUE may hold spaces and newlines
	require.Equal(t, "ID 5\nB x\ny", q.stored())
	for _, v := range []string{q.stored(), "ID\nB", "ID 05\nB", "ID 5", "no request"} {
		store(v)
		for _, fence := range []string{"", "4", "50"} { // another term's, or none
			took, held, err := takeRequest(ctx, c, key, "", fence, "")
			require.NoError(t, err)
			assert.False(t, took, "%q taken for fence %q", v, fence)
			assert.Equal(t, v, held)
		}
		took, _, err := takeRequest(ctx, c, key, "", "5", "")
		require.NoError(t, err)
		assert.Equal(t, v == q.stored(), took, "%q for fence 5", v)
		if took {
			assert.Nil(t, stored(), "taken, not deleted")
		} else {
			assert.Equal(t, v, stored(), "left as it was")
		}
	}

	// transfer's readdress and withdrawal act only on its own request, and
	// a readdress keeps the request's TTL.
	store(q.stored())
	other := &transferRequest{key: key, id: "OTHER", to: "B x\ny", fence: 5}
	moved, err := other.readdress(ctx, c, 6)
	require.NoError(t, err)
	assert.False(t, moved, "another transfer's request was addressed anew")
	moved, err = q.readdress(ctx, c, 6)
	require.NoError(t, err)
	require.True(t, moved)
	assert.Equal(t, "ID 6\nB x\ny", stored())
	assert.Greater(t, c.PTTL(ctx, key).Val(), 50*time.Second, "the TTL was not kept")
	took, _, err := takeRequest(ctx, c, key, other.stored(), "", "")
	require.NoError(t, err)
	assert.False(t, took, "another transfer's request was withdrawn")
	took, _, err = takeRequest(ctx, c, key, q.stored(), "", "")
	require.NoError(t, err)
	assert.True(t, took)
	assert.Nil(t, stored())
}
