package redisleader

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader/internal/leak"
	"github.com/redisleader/redisleader/internal/redisserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisleader/redisleader/internal/lease"
)

// fencedState reads a fenced key: its value (ok false when it has none) and
// its fence field ("" when it has none).
func fencedState(t *testing.T, c redis.Cmdable, key string) (value string, ok bool, fence string) {
	t.Helper()
	ctx := context.Background()
	vals, err := c.HMGet(ctx, key, "value", "fence").Result()
	require.NoError(t, err)
	value, ok = vals[0].(string)
	fence, _ = vals[1].(string)
	return value, ok, fence
}

// TestFencedWrites: a write is accepted when its fence is at least the
// highest the key has accepted (equal fences too), refused with
// ErrStaleFence otherwise, writing nothing; FencedDel keeps the fence
// record, so a stale write after a delete is still refused.
func TestFencedWrites(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		c := b.client
		require.NoError(t, FencedSet(ctx, c, "cursor", "a", 5))
		require.NoError(t, FencedSet(ctx, c, "cursor", "b", 5), "an equal fence is accepted")
		require.NoError(t, FencedSet(ctx, c, "cursor", "c", 7))

		err := FencedSet(ctx, c, "cursor", "secret-late-write", 6)
		require.ErrorIs(t, err, ErrStaleFence)
		assert.EqualError(t, err, `redisleader: stale fence: fence 6 for key "cursor" is below 7, `+
			`the highest fence it has accepted; nothing was written`)
		assert.NotErrorIs(t, err, ErrInvalid)
		v, ok, f := fencedState(t, c, "cursor")
		assert.True(t, ok)
		assert.Equal(t, "c", v, "the stale write changed nothing")
		assert.Equal(t, "7", f)

		assert.ErrorIs(t, FencedDel(ctx, c, "cursor", 6), ErrStaleFence)
		_, ok, _ = fencedState(t, c, "cursor")
		assert.True(t, ok, "a stale delete deletes nothing")
		require.NoError(t, FencedDel(ctx, c, "cursor", 8))
		_, ok, f = fencedState(t, c, "cursor")
		assert.False(t, ok, "the value is gone")
		assert.Equal(t, "8", f, "the fence record stays")
		assert.ErrorIs(t, FencedSet(ctx, c, "cursor", "late", 7), ErrStaleFence, "refused after a delete too")
		require.NoError(t, FencedDel(ctx, c, "cursor", 8), "deleting a deleted value is not an error")
		require.NoError(t, FencedSet(ctx, c, "cursor", "d", 8))
		v, _, _ = fencedState(t, c, "cursor")
		assert.Equal(t, "d", v)

		require.NoError(t, FencedSet(ctx, c, "empty", "", lease.MaxFence), "an empty value and the largest fence")
		v, ok, f = fencedState(t, c, "empty")
		assert.True(t, ok)
		assert.Empty(t, v)
		assert.Equal(t, fmt.Sprint(int64(lease.MaxFence)), f)
	})
}

// TestFencedKeepsTTL: a fenced write keeps the key's TTL; when the key
// expires, value and fence record go together.
func TestFencedKeepsTTL(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		c := b.client
		require.NoError(t, FencedSet(ctx, c, "ttl", "a", 10))
		require.NoError(t, c.Expire(ctx, "ttl", time.Minute).Err())
		require.NoError(t, FencedSet(ctx, c, "ttl", "b", 11))
		ttl, err := c.PTTL(ctx, "ttl").Result()
		require.NoError(t, err)
		assert.Greater(t, ttl, 50*time.Second)
		b.expire("ttl")
		_, ok, f := fencedState(t, c, "ttl")
		assert.False(t, ok)
		assert.Empty(t, f, "the record expired with the value")
	})
}

// TestFencedRecordLost is the documented behaviour when the key (value and
// fence record, which are one key) is deleted or evicted: the next write is
// accepted whatever its fence, and starts a new record that refuses lower
// fences again.
func TestFencedRecordLost(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		c := b.client
		require.NoError(t, FencedSet(ctx, c, "lost", "new leader", 10))
		b.del("lost") // DEL by an operator, or an eviction
		require.NoError(t, FencedSet(ctx, c, "lost", "former leader", 3), "documented: accepted after the record is gone")
		v, _, f := fencedState(t, c, "lost")
		assert.Equal(t, "former leader", v)
		assert.Equal(t, "3", f, "a new record")
		assert.ErrorIs(t, FencedSet(ctx, c, "lost", "older", 2), ErrStaleFence)
	})
}

// TestFencedEvictionTakesValueAndFenceTogether: under memory pressure with
// allkeys-random, Redis evicts fenced keys, but never a value without its
// fence record: every key is either whole or gone.
func TestFencedEvictionTakesValueAndFenceTogether(t *testing.T) {
	srv := redisserver.Start(t, redisserver.Options{Args: []string{"--maxmemory-policy", "allkeys-random"}})
	c := srv.Client(t)
	ctx := context.Background()
	used, err := c.Info(ctx, "memory").Result()
	require.NoError(t, err)
	var base int64
	_, err = fmt.Sscanf(used[strings.Index(used, "used_memory:"):], "used_memory:%d", &base)
	require.NoError(t, err)
	require.NoError(t, c.ConfigSet(ctx, "maxmemory", fmt.Sprint(base+2<<20)).Err())
	value := string(make([]byte, 1024))
	const n = 4000 // 4 MB of values in 2 MB
	for i := range n {
		require.NoError(t, FencedSet(ctx, c, fmt.Sprintf("evict-%d", i), value, int64(i+1)))
	}
	gone := 0
	for i := range n {
		key := fmt.Sprintf("evict-%d", i)
		v, ok, f := fencedState(t, c, key)
		switch {
		case !ok && f == "":
			gone++
		case ok && f == fmt.Sprint(i+1) && v == value:
		default:
			t.Fatalf("%s: value present %v, fence %q: not whole", key, ok, f)
		}
	}
	assert.Greater(t, gone, n/4, "keys were evicted")
}

// TestFencedInvalid: bad input is refused with ErrInvalid before any I/O.
func TestFencedInvalid(t *testing.T) {
	m, c := newMini(t)
	ctx := context.Background()
	before := m.CommandCount()
	for _, tc := range []struct {
		name string
		err  error
		rule string
	}{
		{"nil client", FencedSet(ctx, nil, "k", "v", 1), "nil Client"},
		{"empty key", FencedSet(ctx, c, "", "v", 1), "key must not be empty"},
		{"empty key del", FencedDel(ctx, c, "", 1), "key must not be empty"},
		{"zero fence", FencedSet(ctx, c, "k", "v", 0), "fence 0 must be within [1, 2^53-1]"},
		{"negative fence", FencedDel(ctx, c, "k", -1), "fence -1 must be within"},
		{"fence too large", FencedSet(ctx, c, "k", "v", lease.MaxFence+1), "must be within"},
	} {
		assert.ErrorIs(t, tc.err, ErrInvalid, tc.name)
		assert.ErrorContains(t, tc.err, tc.rule, tc.name)
	}
	assert.Equal(t, before, m.CommandCount(), "no command was sent")
}

// TestFencedForeignValue: a key that holds something FencedSet did not
// write (another type, or a hash without a valid fence field) makes both
// calls fail with a permanent error that names the rule, and Redis sees no
// write: the key keeps its value, type and TTL.
func TestFencedForeignValue(t *testing.T) {
	c, ks := notifying(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		write func(key string) error
		read  func(key string) (any, error)
		want  string
	}{
		{"string", func(k string) error { return c.Set(ctx, k, "plain", 0).Err() },
			func(k string) (any, error) { return c.Get(ctx, k).Result() },
			"WRONGTYPE redisleader: the key holds a string, not a fenced value"},
		{"list", func(k string) error { return c.RPush(ctx, k, "a", "b").Err() },
			func(k string) (any, error) { return c.LRange(ctx, k, 0, -1).Result() },
			"WRONGTYPE redisleader: the key holds a list, not a fenced value"},
		{"hash without fence", func(k string) error { return c.HSet(ctx, k, "value", "x", "other", "y").Err() },
			func(k string) (any, error) { return c.HGetAll(ctx, k).Result() },
			"the key is a hash without a valid fence field"},
		{"hash with a foreign fence", func(k string) error { return c.HSet(ctx, k, "value", "x", "fence", "1e3").Err() },
			func(k string) (any, error) { return c.HGetAll(ctx, k).Result() },
			"the key is a hash without a valid fence field"},
		{"hash with a huge fence", func(k string) error { return c.HSet(ctx, k, "fence", "9007199254740993").Err() },
			func(k string) (any, error) { return c.HGetAll(ctx, k).Result() },
			"the key is a hash without a valid fence field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "foreign:" + tc.name
			require.NoError(t, tc.write(key))
			require.NoError(t, c.Expire(ctx, key, time.Minute).Err())
			want, err := tc.read(key)
			require.NoError(t, err)
			ks.writes("") // only what follows
			for _, err := range []error{FencedSet(ctx, c, key, "v", 1<<40), FencedDel(ctx, c, key, 1<<40)} {
				assert.ErrorContains(t, err, tc.want)
				assert.ErrorContains(t, err, "it was left unchanged")
				assert.True(t, permanent(err), "%v", err)
				assert.NotErrorIs(t, err, ErrStaleFence)
			}
			assert.Empty(t, ks.writes(key), "no write at all")
			got, err := tc.read(key)
			require.NoError(t, err)
			assert.Equal(t, want, got, "the foreign value is kept")
			ttl, err := c.PTTL(ctx, key).Result()
			require.NoError(t, err)
			assert.Greater(t, ttl, 50*time.Second, "its TTL is kept")
		})
	}
}

// TestFencedForeignValueMiniredis: the same rule on miniredis, which users
// test against.
func TestFencedForeignValueMiniredis(t *testing.T) {
	m, c := newMini(t)
	ctx := context.Background()
	require.NoError(t, m.Set("s", "plain"))
	assert.ErrorContains(t, FencedSet(ctx, c, "s", "v", 1), "WRONGTYPE redisleader: the key holds a string")
	v, _ := m.Get("s")
	assert.Equal(t, "plain", v)
	m.HSet("h", "other", "y")
	assert.ErrorContains(t, FencedSet(ctx, c, "h", "v", 1), "hash without a valid fence field")
	fields, err := m.HKeys("h")
	require.NoError(t, err)
	assert.Equal(t, []string{"other"}, fields)
}

// fencedOp is one call in TestFencedConcurrentWriters: its fence, whether
// it was accepted, the highest fence reported when refused, and when it was
// invoked and returned (monotonic clock).
type fencedOp struct {
	fence, highest int64
	accepted       bool
	start, end     time.Time
}

// TestFencedConcurrentWriters: writers with interleaved fences write one
// key at once; the history must be explainable by a single order in which
// the highest accepted fence never goes down:
//   - two accepted writes, the later-invoked one after the other returned,
//     never have a decreasing fence;
//   - a refused write was told a highest fence that some accepted write had,
//     invoked before the refusal returned, and above its own;
//   - the key ends with the largest fence tried and an accepted value of it.
func TestFencedConcurrentWriters(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		const writers, writes = 6, 150
		ops := make([][]fencedOp, writers)
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(w), 17))
				base := int64(1)
				for i := range writes {
					// Mostly rising fences per writer, with backward steps:
					// a leader term ends and a late write comes in.
					base += rng.Int64N(3)
					fence := max(1, base-rng.Int64N(4))
					op := fencedOp{fence: fence, start: time.Now()}
					err := FencedSet(ctx, b.client, "shared", fmt.Sprintf("%d/%d/%d", w, i, fence), fence)
					op.end = time.Now()
					var stale *lease.StaleFenceError
					switch {
					case err == nil:
						op.accepted = true
					case errors.As(err, &stale):
						op.highest = stale.Highest
					default:
						t.Errorf("writer %d: %v", w, err)
						return
					}
					ops[w] = append(ops[w], op)
				}
			}()
		}
		wg.Wait()
		var all, accepted []fencedOp
		maxFence := int64(0)
		for _, o := range ops {
			all = append(all, o...)
		}
		for _, op := range all {
			maxFence = max(maxFence, op.fence)
			if op.accepted {
				accepted = append(accepted, op)
			}
		}
		refused := len(all) - len(accepted)
		require.NotZero(t, refused, "the schedule must produce stale writes")
		for _, a := range accepted {
			for _, b := range accepted {
				if b.start.After(a.end) && b.fence < a.fence {
					t.Fatalf("fence %d accepted after fence %d had been accepted", b.fence, a.fence)
				}
			}
		}
		for _, r := range all {
			if r.accepted {
				continue
			}
			require.Greater(t, r.highest, r.fence)
			explained := false
			for _, a := range accepted {
				if a.fence == r.highest && a.start.Before(r.end) {
					explained = true
					break
				}
			}
			require.True(t, explained, "fence %d refused for %d, which no earlier write brought", r.fence, r.highest)
		}
		v, _, f := fencedState(t, b.client, "shared")
		assert.Equal(t, fmt.Sprint(maxFence), f, "the largest fence tried is always accepted")
		var w, i int
		var vf int64
		_, err := fmt.Sscanf(v, "%d/%d/%d", &w, &i, &vf)
		require.NoError(t, err)
		assert.Equal(t, maxFence, vf, "the value is one written with the largest fence")
		t.Logf("%d writes, %d refused", len(all), refused)
	})
}

// TestFencedCluster: on a 3-master Cluster, the fence record is the key
// itself, so it shares the key's slot (CLUSTER KEYSLOT) for any key name,
// with or without a hash tag, and no other key is created.
func TestFencedCluster(t *testing.T) {
	cluster := redisserver.StartCluster(t, 3)
	c := clusterClient(t, cluster)
	ctx := context.Background()
	keys := []string{"plain", "{tag}x", "a{b", "a}b{", "{}", "job:42", "{user1}:cursor"}
	masters := map[string]bool{}
	for _, key := range keys {
		require.NoError(t, FencedSet(ctx, c, key, "v", 100), key)
		assert.ErrorIs(t, FencedSet(ctx, c, key, "late", 99), ErrStaleFence, key)
		require.NoError(t, FencedDel(ctx, c, key, 101), key)
		slot, err := c.ClusterKeySlot(ctx, key).Result()
		require.NoError(t, err)
		owner := cluster.Owner(int(slot))
		masters[owner.Addr()] = true
		f, err := owner.Client(t).HGet(ctx, key, "fence").Result()
		require.NoError(t, err, "%s: the fence record is on the master of the key's slot %d", key, slot)
		assert.Equal(t, "101", f)
	}
	var total int64
	for _, n := range cluster.Nodes() {
		size, err := n.Client(t).DBSize(ctx).Result()
		require.NoError(t, err)
		total += size
	}
	assert.Equal(t, int64(len(keys)), total, "one key per fenced key: no companion record")
	assert.Greater(t, len(masters), 1, "the keys cover several masters")
}

// TestFencedACL: a user whose ACL denies a write the script needs gets a
// permanent error naming the command and the key, and the key is left as it
// was: HSET denied (both calls), HDEL denied (the delete, checked before its
// first write).
func TestFencedACL(t *testing.T) {
	srv := redisserver.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	require.NoError(t, FencedSet(ctx, admin, "acl:k", "v", 10))
	base := "on >secret resetkeys resetchannels ~acl:* -@all +evalsha +eval +type +hget"
	for _, tc := range []struct {
		user, rule string
		call       func(c *redis.Client) error
		want       string
	}{
		{"nohset", base, func(c *redis.Client) error { return FencedSet(ctx, c, "acl:k", "w", 11) },
			"permission denied for HSET acl:k (ACL)"},
		{"nohset-del", base + " +hdel", func(c *redis.Client) error { return FencedDel(ctx, c, "acl:k", 11) },
			"permission denied for HSET acl:k (ACL)"},
		{"nohdel", base + " +hset", func(c *redis.Client) error { return FencedDel(ctx, c, "acl:k", 11) },
			"permission denied for HDEL acl:k (ACL)"},
		{"notype", "on >secret resetkeys ~acl:* -@all +evalsha +eval +hget +hset +hdel",
			func(c *redis.Client) error { return FencedSet(ctx, c, "acl:k", "w", 11) },
			"permission denied for TYPE acl:k (ACL)"},
	} {
		t.Run(tc.user, func(t *testing.T) {
			setUser(t, admin, tc.user, tc.rule)
			err := tc.call(userClient(t, srv, tc.user))
			assert.ErrorContains(t, err, tc.want)
			assert.True(t, permanent(err), "%v", err)
			v, ok, f := fencedState(t, admin, "acl:k")
			assert.True(t, ok)
			assert.Equal(t, "v", v)
			assert.Equal(t, "10", f, "nothing was written")
		})
	}
	setUser(t, admin, "fenced", base+" +hset +hdel")
	c := userClient(t, srv, "fenced")
	require.NoError(t, FencedSet(ctx, c, "acl:k", "w", 11), "the documented rule suffices")
	require.NoError(t, FencedDel(ctx, c, "acl:k", 12))
}

// A nil *redis.Client or *redis.ClusterClient inside the Client interface
// is not == nil: FencedSet and FencedDel refuse it with ErrInvalid, no I/O,
// as NewSession does (wire.KindOf); they used to panic in go-redis.
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

// A fenced write to a Redis that hangs ends with its context: within the
// call bound (one second) of its start, with an error matching ctx's. It
// used to end only at the client's ReadTimeout (never with -1).
func TestFencedEndsWithCancelledContext(t *testing.T) {
	addr, received := hungServer(t, true)
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
		addr, _ := hungServer(t, false)
		c := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: readTimeout})
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
	assert.Empty(t, leak.Wait(2*time.Second, "wire.UntilDone"), "a call outlived its closed client")
}

// The largest fence the acquire script can hand out, 2^53−1 (a stored fence
// of 2^53−2, plus one), is a valid fence for a fenced write; FencedSet used
// to refuse it as invalid input.
func TestFencedLockFenceAtTheBound(t *testing.T) {
	m, c := newMini(t)
	ctx := context.Background()
	require.NoError(t, m.Set("redisleader:{job}:fence", fmt.Sprint(int64(lease.MaxFence-1))))
	s := newSession(t, c)
	l, err := s.TryLock(ctx, "job")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Release(ctx) })
	assert.NoError(t, FencedSet(ctx, c, "job:data", "v", l.Fence()),
		"the lock's fence %d is refused by FencedSet", l.Fence())
}

// The documented limit of fenced writes (docs/fencing.md, Fenced writes: Failover):
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
	// The documented limit (docs/fencing.md, Fenced writes: Failover): both accepted.
	assert.NoError(t, acked)
	assert.NoError(t, stale, "after a failover the key came back with fence 5, so fence 7 is accepted")
	guide, err := os.ReadFile("docs/fencing.md")
	require.NoError(t, err)
	assert.Contains(t, string(guide), "after a failover (or a restore from an older snapshot) the key can come back",
		"docs/fencing.md states this limit")
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

// After a failover to a replica that lacks the last fence writes, with a
// clock behind the old owner's fence (emulated: the promoted server's fence
// key stands 10 below the fence the resource accepted, which lies an hour
// ahead of its clock), every later owner, not only the first, gets a fence
// below the accepted one and is refused; the tenth, once the fence key has
// run up to it, gets a fence equal to the old owner's, and FencedSet then
// accepts both owners' writes (docs/guarantees.md, Failover with
// asynchronous replication).
func TestFencesAfterFailoverBehindTheClock(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		s := newSession(t, b.client)
		const name = "failover-fences"
		old := time.Now().Add(time.Hour).UnixMicro() // the old owner's fence, ahead of this server's clock
		require.NoError(t, FencedSet(ctx, b.client, "acct", "old owner", old))
		b.set(lease.NewKeys(name).Fence, fmt.Sprint(old-10)) // the promoted replica lacks the last fence writes

		for i := 1; i <= 10; i++ {
			l, err := s.TryLock(ctx, name)
			require.NoError(t, err)
			assert.Equal(t, old-10+int64(i), l.Fence(), "owner %d's fence: stored + 1, as the clock is behind", i)
			err = FencedSet(ctx, b.client, "acct", fmt.Sprint("owner ", i), l.Fence())
			if i < 10 {
				assert.ErrorIs(t, err, ErrStaleFence, "owner %d is refused: its fence is below the old owner's", i)
			} else {
				assert.NoError(t, err, "owner %d's fence equals the old owner's, and is accepted", i)
				assert.NoError(t, FencedSet(ctx, b.client, "acct", "late write of the old owner", old),
					"and so is the old owner's late write, with the same fence")
			}
			require.NoError(t, l.Release(ctx))
		}
	})
}
