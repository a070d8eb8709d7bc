//go:build unix

package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
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

// replyDropper is a TCP proxy to Redis that, once, holds a command
// containing match until release is closed, then forwards it and drops
// every reply on that connection after it: the command runs in Redis, and
// its client never hears so.
type replyDropper struct {
	up      string
	match   []byte
	dropped atomic.Bool
	release chan struct{}
}

func startReplyDropper(t *testing.T, up string, match []byte) (addr string, release chan struct{}) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	d := &replyDropper{up: up, match: match, release: make(chan struct{})}
	t.Cleanup(func() {
		select {
		case <-d.release:
		default:
			close(d.release)
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go d.serve(c)
		}
	}()
	return ln.Addr().String(), d.release
}

func (d *replyDropper) serve(c net.Conn) {
	defer c.Close()
	s, err := net.Dial("tcp", d.up)
	if err != nil {
		return
	}
	defer s.Close()
	var deaf atomic.Bool
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := s.Read(buf)
			if n > 0 && !deaf.Load() {
				_, _ = c.Write(buf[:n])
			}
			if err != nil {
				_ = c.Close()
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 && bytes.Contains(buf[:n], d.match) && d.dropped.CompareAndSwap(false, true) {
			deaf.Store(true)
			<-d.release // held until the test lets it go
		}
		if n > 0 {
			if _, werr := s.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// The request was addressed to a term (a job with --try) that ended
// without taking it; transfer readdresses it to the next term (run B), and
// the reply to that script is lost (Redis ran it). go-redis runs the script
// again after its read timeout, and finds the request readdressed: moved
// already. transfer waits on and withdraws its request as it exits. On
// 478d07d it read that as "taken", exited 4 ("C did not take leadership: B
// leads") without withdrawing, and B took the request later and stopped its
// COMMAND to hand the name to C, which does not campaign.
func TestTransferReaddressReplyLost(t *testing.T) {
	t.Parallel()
	s, srv := newRunServer(t)
	job := heldJob(t, s.url)
	b := s.candidate(t, "trap", "B", "--ttl", "10s") // B polls requests every 10s: after transfer has exited
	b.stderr.waitContains(t, "campaigning for leadership of job as B")
	require.NoError(t, requestScript.Load(context.Background(), srv.Client(t)).Err()) // so that the EVALSHA held runs
	proxy, release := startReplyDropper(t, srv.Addr(), []byte(requestScript.Hash()))
	sub := srv.Client(t).Subscribe(t.Context(), requestKeyOfJob) // transfer's hints: one as it sends, one per readdress
	defer sub.Close()
	_, err := sub.Receive(t.Context())
	require.NoError(t, err)
	hints := sub.Channel()
	tr := startCLI(t, "transfer", nil, "transfer", "--redis", "redis://"+proxy, "job", "--to", "C", "--wait", "20s")
	requestStored(t, srv)
	nextHint(t, hints, tr)

	job.signal(t, syscall.SIGTERM)                                                       // job resigns without taking the request; B leads
	b.stderr.waitContains(t, "ignoring a request to transfer job made for another term") // B's take at its start
	close(release)                                                                       // the readdress runs now; B reads requests again in 10s (--ttl)
	if nextHint(t, hints, tr) {                                                          // the readdress's: transfer knows its request moved
		tr.signal(t, syscall.SIGINT) // before B reads requests again
	}
	code := tr.wait(t)
	t.Logf("transfer exited %d: %s", code, tr.stderr.String())
	left := srv.Do(t, "GET", requestKeyOfJob)
	assert.Nil(t, left, "transfer exited %d and left its request behind: %q", code, left)
	assert.NotEqual(t, exitNoSuccessor, code, "no leader took the request, yet transfer says the leader handed over")
	assert.Equal(t, 128+int(syscall.SIGINT), code)
	if left != nil {
		b.stderr.waitContains(t, "transfer of job to C requested")
		t.Logf("B, the next leader, acted on it after transfer had exited:\n%s", b.stderr.String())
	}
}

// nextHint waits for the next message on hints, and returns true, or
// returns false if tr exits first.
func nextHint(t *testing.T, hints <-chan *redis.Message, tr *cliProc) bool {
	t.Helper()
	select {
	case <-hints:
		return true
	case <-tr.done:
		return false
	case <-time.After(cliTimeout):
		t.Fatalf("no hint from transfer within %v; stderr:\n%s", cliTimeout, tr.stderr.String())
		return false
	}
}

// A term whose lease is lost takes no request while its command stops
// (--grace): it could not hand over. A request addressed to its fence stays
// for transfer, which addresses it to the next term. On 478d07d the run
// took (deleted) it, and dropped it.
func TestTransferRequestNotTakenOnceLost(t *testing.T) {
	t.Parallel()
	srv := quietRedisServer(t)
	a := startCLI(t, "run A", nil, "run", "--verbose", "--redis", "redis://"+srv.Addr(), "--name", "job", "--value", "A",
		"--ttl", "1s", "--grace", "5s", "--no-process-group", "--", "sh", "-c", `trap "" TERM; while :; do sleep 0.05; done`)
	a.stderr.waitContains(t, "elected leader of job")
	lock, ok := srv.Do(t, "GET", "redisleader:{job}").(string) // "<token>\n<fence>\n<value>"
	require.True(t, ok, "the lock key: %v", lock)
	srv.Do(t, "DEL", "redisleader:{job}") // A's next renewal finds it gone
	a.stderr.waitContains(t, "leadership of job lost")

	request := "ID " + strings.Split(lock, "\n")[1] + "\nC" // addressed to A's term
	srv.Do(t, "SET", requestKeyOfJob, request, "EX", "60")
	srv.Do(t, "PUBLISH", requestKeyOfJob, "T")
	for end := time.Now().Add(2500 * time.Millisecond); time.Now().Before(end); <-time.After(pollEvery) {
		require.Equal(t, request, srv.Do(t, "GET", requestKeyOfJob), "a term whose lease was lost took the request")
	}
	assert.Equal(t, exitLost, a.wait(t), "A: %s", a.stderr.String()) // COMMAND ignores SIGTERM: SIGKILL after --grace
	assert.NotContains(t, a.stderr.String(), "requested")
	assert.Equal(t, request, srv.Do(t, "GET", requestKeyOfJob))
}
