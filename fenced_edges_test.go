package redisleader

// Edges of the fenced-write API found by an adversarial review (issue 17);
// each test failed on the first version of fenced.go.

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader/internal/leak"
	"github.com/redisleader/redisleader/internal/redisserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A nil *redis.Client or *redis.ClusterClient inside the Client interface
// is not == nil: FencedSet and FencedDel refuse it with ErrInvalid, no I/O,
// as NewSession does (kindOf); they used to panic in go-redis.
func TestFencedTypedNilClient(t *testing.T) {
	ctx := context.Background()
	for name, c := range map[string]Client{
		"*redis.Client":        (*redis.Client)(nil),
		"*redis.ClusterClient": (*redis.ClusterClient)(nil),
	} {
		t.Run(name, func(t *testing.T) {
			var set, del error
			require.NotPanics(t, func() { set = FencedSet(ctx, c, "k", "v", 1) }, "FencedSet panics on a nil %s", name)
			require.NotPanics(t, func() { del = FencedDel(ctx, c, "k", 1) }, "FencedDel panics on a nil %s", name)
			assert.ErrorIs(t, set, ErrInvalid)
			assert.ErrorIs(t, del, ErrInvalid)
		})
	}
}

// A *redis.Ring is refused, as by NewSession: each Ring client decides on
// its own when a shard is down and moves its keys, so a paused former
// owner's client could write to a shard where the key has no fence record,
// and its stale write would be accepted. They used to accept one.
func TestFencedRefusesRing(t *testing.T) {
	ctx := context.Background()
	ma, _ := newMini(t)
	mb, _ := newMini(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": ma.Addr(), "b": mb.Addr()}})
	t.Cleanup(func() { _ = ring.Close() })
	// Two Ring clients that disagree on which shard is up send one key to two
	// shards, each with its own fence record: a stale write would be accepted.
	for _, write := range []func() error{
		func() error { return FencedSet(ctx, ring, "k", "v", 10) },
		func() error { return FencedDel(ctx, ring, "k", 10) },
	} {
		err := write()
		assert.ErrorIs(t, err, ErrInvalid)
		assert.ErrorContains(t, err, "*redis.Ring")
	}
	assert.Zero(t, ma.CommandCount()+mb.CommandCount(), "a refused client must not reach Redis")
}

// hangingServer is a TCP server that answers the connection handshake
// (HELLO, refused, so go-redis falls back to RESP2) and then reads commands
// without ever answering: a Redis that hangs. received gets a value for
// each EVALSHA or EVAL it has read, i.e. once the call is on the wire.
func hangingServer(t *testing.T) (addr string, received <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ch := make(chan struct{}, 16)
	var conns []net.Conn
	done := make(chan struct{})
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		for _, c := range conns {
			_ = c.Close()
		}
	})
	go func() {
		defer close(done)
		for {
			cn, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, cn)
			go func() {
				r := bufio.NewReader(cn)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					switch l := strings.ToLower(strings.TrimSpace(line)); l {
					case "hello":
						_, _ = cn.Write([]byte("-ERR unknown command 'hello'\r\n"))
					case "evalsha", "eval":
						ch <- struct{}{}
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), ch
}

// A fenced write to a Redis that hangs ends with its context: within the
// call bound (one second) of its start, with an error matching ctx's. It
// used to end only at the client's ReadTimeout (never with -1).
func TestFencedEndsWithCancelledContext(t *testing.T) {
	addr, received := hangingServer(t)
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, DisableIdentity: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	result := make(chan error, 1)
	go func() { result <- FencedSet(ctx, c, "k", "v", 5) }()
	select {
	case <-received:
	case err := <-result:
		t.Fatalf("the call ended before reaching the server: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the script call never reached the server")
	}
	cancel()
	cancelled := time.Now()
	select {
	case err := <-result:
		assert.ErrorIs(t, err, context.Canceled)
		// Bounded by the call timeout (one second from the start), as a
		// session's calls are, whatever Redis does.
		assert.Less(t, time.Since(cancelled), time.Second+slack, "FencedSet returned %v after its context was cancelled", time.Since(cancelled))
	case <-time.After(10 * time.Second):
		t.Fatal("FencedSet did not return within 10s of its context's cancellation")
	}
}

// A fenced write ends with its context on any client, also one that does
// not honour it: go-redis without ContextTimeoutEnabled bounds a read only by
// its ReadTimeout (3s by default, never with -1). The calls used to end
// there; once the client is closed, none is left running.
func TestFencedEndsWithContextWithoutContextTimeout(t *testing.T) {
	const within = 200 * time.Millisecond
	for name, readTimeout := range map[string]time.Duration{"default options": 0, "ReadTimeout -1": -1} {
		c := redis.NewClient(&redis.Options{Addr: hungServer(t), ReadTimeout: readTimeout})
		for op, write := range map[string]func(context.Context) error{
			"FencedSet": func(ctx context.Context) error { return FencedSet(ctx, c, "k", "v", 5) },
			"FencedDel": func(ctx context.Context) error { return FencedDel(ctx, c, "k", 5) },
		} {
			t.Run(name+"/"+op, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), within)
				defer cancel()
				result := make(chan error, 1)
				start := time.Now()
				go func() { result <- write(ctx) }()
				select {
				case err := <-result:
					assert.ErrorIs(t, err, context.DeadlineExceeded)
					assert.Less(t, time.Since(start), within+5*slack, "%s returned late", op)
				case <-time.After(5 * time.Second):
					t.Fatalf("%s did not return within 5s of its start (its context ends after %v)", op, within)
				}
			})
		}
		require.NoError(t, c.Close())
	}
	assert.Empty(t, leak.Wait(2*time.Second, "redisleader.untilDone"), "a call outlived its closed client")
}

// The largest fence the acquire script can hand out, 2^53−1 (a stored fence
// of 2^53−2, plus one), is a valid fence for a fenced write; FencedSet used
// to refuse it as invalid input.
func TestFencedLockFenceAtTheBound(t *testing.T) {
	m, c := newMini(t)
	ctx := context.Background()
	require.NoError(t, m.Set("redisleader:{job}:fence", fmt.Sprint(int64(maxFence-1))))
	s := newSession(t, c)
	l, err := s.TryLock(ctx, "job")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Release(ctx) })
	assert.NoError(t, FencedSet(ctx, c, "job:data", "v", l.Fence()),
		"the lock's fence %d is refused by FencedSet", l.Fence())
}

// The documented limit of fenced writes (README, Fenced writes: Failover):
// replication is asynchronous and fenced writes do not wait for replicas,
// so a failover can bring back an older {value, fence}. Here the replica
// stops replicating just before the new owner's fence-10 write and is then
// promoted: the stale fence-7 write is accepted there.
func TestFencedFailoverLimitIsDocumented(t *testing.T) {
	primary := redisserver.Start(t)
	replica := redisserver.Start(t)
	p := primary.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	r := replica.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	ctx := context.Background()
	host, port, err := net.SplitHostPort(primary.Addr())
	require.NoError(t, err)
	require.NoError(t, r.SlaveOf(ctx, host, port).Err())
	require.NoError(t, FencedSet(ctx, p, "acct", "old owner", 5))
	n, err := p.Wait(ctx, 1, 10*time.Second).Result()
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "the replica acknowledged fence 5")
	require.Equal(t, "5", r.HGet(ctx, "acct", "fence").Val())

	require.NoError(t, r.SlaveOf(ctx, "no", "one").Err()) // the link is cut; later this replica is promoted
	acked := FencedSet(ctx, p, "acct", "new owner", 10)
	stale := FencedSet(ctx, r, "acct", "late write of the old owner", 7) // clients follow the failover
	// The documented limit (README, Fenced writes: Failover): both accepted.
	assert.NoError(t, acked)
	assert.NoError(t, stale, "after a failover the key came back with fence 5, so fence 7 is accepted")
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	assert.Contains(t, string(readme), "after a failover (or a restore from an older snapshot) the key can come back",
		"the README states this limit")
}

// FencedDel frees memory on a full Redis (noeviction): it deletes first,
// and a script that has written may write on. It used to write the fence
// first, a deny-oom command, and fail with OOM before deleting anything.
func TestFencedDelUnderOOM(t *testing.T) {
	srv := redisserver.Start(t, redisserver.Options{Args: []string{"--maxmemory-policy", "noeviction"}})
	c := srv.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	ctx := context.Background()
	require.NoError(t, FencedSet(ctx, c, "big", strings.Repeat("x", 1<<20), 10))
	used, err := c.Info(ctx, "memory").Result()
	require.NoError(t, err)
	var mem int64
	_, err = fmt.Sscanf(used[strings.Index(used, "used_memory:"):], "used_memory:%d", &mem)
	require.NoError(t, err)
	require.NoError(t, c.ConfigSet(ctx, "maxmemory", fmt.Sprint(mem-1<<10)).Err()) // full
	require.ErrorContains(t, c.HSet(ctx, "other", "f", "v").Err(), "OOM", "Redis is full")

	assert.NoError(t, FencedDel(ctx, c, "big", 10), "FencedDel must be able to free memory on a full Redis")
	_, ok, f := fencedState(t, c, "big")
	assert.False(t, ok, "the value was deleted")
	assert.Equal(t, "10", f)
}

// On a Redis whose scripting commands are renamed away, Redis answers
// "unknown command … with args beginning with: …", quoting the value being
// written: the error says only which command is missing. It used to pass
// Redis's text through.
func TestFencedErrorNeverRevealsValue(t *testing.T) {
	srv := redisserver.Start(t, redisserver.Options{Args: []string{"--rename-command", "EVALSHA", "", "--rename-command", "EVAL", ""}})
	c := srv.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	err := FencedSet(context.Background(), c, "k", "SECRET-api-key-123", 5)
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "SECRET", "the error gives the value written")
}
