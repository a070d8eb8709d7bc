package redisleader

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisleader/redisleader/internal/lease"
)

// foreignFences are values someone else may have left in a fence key: a
// string with a TTL, and a hash (WRONGTYPE) with a TTL.
var foreignFences = []struct {
	name  string
	write func(c *redis.Client, key string) error
	read  func(c *redis.Client, key string) (any, error)
}{
	{
		"string",
		func(c *redis.Client, key string) error {
			return c.Set(context.Background(), key, "not a fence", time.Minute).Err()
		},
		func(c *redis.Client, key string) (any, error) { return c.Get(context.Background(), key).Result() },
	},
	{
		"hash",
		func(c *redis.Client, key string) error {
			if err := c.HSet(context.Background(), key, "field", "value").Err(); err != nil {
				return err
			}
			return c.Expire(context.Background(), key, time.Minute).Err()
		},
		func(c *redis.Client, key string) (any, error) { return c.HGetAll(context.Background(), key).Result() },
	},
}

// untouched checks that key still holds what foreign wrote, with its TTL.
func untouched(t *testing.T, c *redis.Client, key string, read func(*redis.Client, string) (any, error), want any) {
	t.Helper()
	got, err := read(c, key)
	require.NoError(t, err)
	assert.Equal(t, want, got, "the foreign value is kept")
	ttl, err := c.PTTL(context.Background(), key).Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, 50*time.Second, "its TTL is kept")
}

// TestForeignFenceKeyIsUntouched: a fence key that holds something other
// than a fence (a string or a hash, with a TTL) makes the acquire fail with a
// permanent error naming the key and the rule, and nothing is written: the
// value and its TTL stay, keyspace watchers see no write at all, and no lock
// key appears. (Regression, string: the acquire script swapped the value out
// with SET … GET and wrote it back with a plain SET, dropping its TTL: four
// writes for a TryLock and the blocking Lock after it.)
func TestForeignFenceKeyIsUntouched(t *testing.T) {
	c, ks := notifying(t)
	ctx := context.Background()
	s := newSession(t, c, WithTTL(time.Second))
	for _, f := range foreignFences {
		t.Run(f.name, func(t *testing.T) {
			k := lease.NewKeys("foreign-" + f.name)
			require.NoError(t, f.write(c, k.Fence))
			want, err := f.read(c, k.Fence)
			require.NoError(t, err)
			ks.writes("") // only what follows
			_, err = s.TryLock(ctx, k.Name)
			require.Error(t, err)
			assert.True(t, permanent(err), "a foreign fence key is not retried: %v", err)
			if f.name == "string" {
				assert.ErrorContains(t, err, "fence key "+k.Fence+" does not hold a fence (a decimal integer in [0, 2^53-1), no sign or leading zero); it was left unchanged")
			} else {
				assert.ErrorContains(t, err, "WRONGTYPE redisleader: key "+k.Fence+" holds a value this package did not write (another type); it was left unchanged")
			}
			_, err = s.Lock(ctx, k.Name)
			assert.True(t, permanent(err), "blocking Lock returns at once: %v", err)
			assert.Empty(t, ks.writes("redisleader:"), "a foreign fence key means no write at all")
			untouched(t, c, k.Fence, f.read, want)
			n, err := c.Exists(ctx, k.Lock).Result()
			require.NoError(t, err)
			assert.Zero(t, n, "no lock without a fence")
		})
	}
}

// TestRedlockScriptsLeaveForeignFenceKey: the Redlock renewal (also the
// acquire's fence write-back) and release validate the fence key before
// they write anything: a foreign value or a key of another type is a
// permanent error, and neither the lock key nor the fence key changes. A
// valid fence is raised, never lowered. (Regression, for the write-back's
// former raiseScript: it rewrote the lock value first, then overwrote a
// foreign string with a plain SET, dropping its TTL, or failed on a hash
// after the rewrite.)
func TestRedlockScriptsLeaveForeignFenceKey(t *testing.T) {
	c, ks := notifying(t)
	ctx := context.Background()
	ahead := fmt.Sprint(time.Now().Add(time.Hour).UnixMicro()) // no clock has passed it
	further := fmt.Sprint(time.Now().Add(2 * time.Hour).UnixMicro())
	for _, sc := range []struct {
		name string
		run  func(k lease.Keys, fence string) error
	}{
		{"renew", func(k lease.Keys, fence string) error {
			return lease.RedlockRenewRun.Run(ctx, c, []any{nil, nil, 2, k.Lock, k.Fence, "tok", "60000", fence}).Err()
		}},
		{"release", func(k lease.Keys, fence string) error {
			return lease.RedlockReleaseRun.Run(ctx, c, []any{nil, nil, 2, k.Lock, k.Fence, "tok", fence}).Err()
		}},
	} {
		const held = "tok\n100\nv"
		for _, f := range foreignFences {
			t.Run(sc.name+"/"+f.name, func(t *testing.T) {
				k := lease.NewKeys(sc.name + "-" + f.name)
				require.NoError(t, c.Set(ctx, k.Lock, held, time.Minute).Err())
				require.NoError(t, f.write(c, k.Fence))
				want, err := f.read(c, k.Fence)
				require.NoError(t, err)
				ks.writes("")
				err = sc.run(k, ahead)
				assert.Error(t, err)
				assert.True(t, permanent(err), "%v", err)
				assert.Empty(t, ks.writes("redisleader:"), "no write at all")
				untouched(t, c, k.Fence, f.read, want)
				v, err := c.Get(ctx, k.Lock).Result()
				require.NoError(t, err)
				assert.Equal(t, held, v, "the lock keeps its value")
			})
		}
		t.Run(sc.name+"/valid", func(t *testing.T) {
			k := lease.NewKeys(sc.name)
			require.NoError(t, c.Set(ctx, k.Lock, held, time.Minute).Err())
			require.NoError(t, c.Set(ctx, k.Fence, "150", 0).Err())
			require.NoError(t, sc.run(k, ahead))
			v, _ := c.Get(ctx, k.Fence).Result()
			assert.Equal(t, ahead, v, "a smaller fence is raised")
			v, _ = c.Get(ctx, k.Lock).Result()
			if sc.name == "renew" {
				assert.Equal(t, "tok\n"+ahead+"\nv", v)
			} else {
				assert.Empty(t, v, "released")
			}
			require.NoError(t, c.Set(ctx, k.Lock, held, time.Minute).Err())
			require.NoError(t, c.Set(ctx, k.Fence, further, 0).Err())
			require.NoError(t, sc.run(k, ahead))
			v, _ = c.Get(ctx, k.Fence).Result()
			assert.Equal(t, further, v, "a larger fence stays")
		})
	}
}

// TestEventsCarryNoContent: the channel tells subscribers that something
// happened ("A": acquired, "R": released), never who holds the name: no
// token, fence or value reaches them.
func TestEventsCarryNoContent(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		k := lease.NewKeys("quiet")
		ps := b.client.Subscribe(ctx, k.Channel)
		defer ps.Close()
		_, err := ps.Receive(ctx)
		require.NoError(t, err)
		s := newSession(t, b.client)
		l, err := s.TryLock(ctx, "quiet")
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
		for _, want := range []string{"A", "R"} {
			m, err := ps.ReceiveMessage(ctx)
			require.NoError(t, err)
			assert.Equal(t, want, m.Payload)
		}
	})
}

// TestScriptErrorsWriteNothing: an acquire that fails on its first write
// (OOM here) has read and published, but written nothing; the lock stays
// free. A Lua runtime error in a script still comes back as an error reply.
func TestScriptErrorsWriteNothing(t *testing.T) {
	c, ks := notifying(t)
	ctx := context.Background()
	require.NoError(t, c.ConfigSet(ctx, "maxmemory", "1").Err())
	defer c.ConfigSet(ctx, "maxmemory", "0")
	s := newSession(t, c, WithTTL(time.Second))
	ks.writes("")
	_, err := s.TryLock(ctx, "oom")
	assert.ErrorContains(t, err, "OOM")
	assert.False(t, permanent(err), "OOM is retried")
	assert.Empty(t, ks.writes("redisleader:"))
	require.NoError(t, c.ConfigSet(ctx, "maxmemory", "0").Err())

	// The idempotent path finds our token followed by no fence.
	k := lease.NewKeys("broken")
	require.NoError(t, c.Set(ctx, k.Lock, "tok\nno-newline-after-the-fence", time.Minute).Err())
	err = lease.AcquireRun.Run(ctx, c, []any{nil, nil, 2, k.Lock, k.Fence, "tok", "1000", ""}).Err()
	var rerr redis.Error
	require.ErrorAs(t, err, &rerr, "an error reply, not a status reply")
	assert.True(t, strings.HasPrefix(err.Error(), "ERR "), "%v", err)
}

// TestWrongTypeNamesTheKey: a key of another type where a script reads
// (someone else wrote it) is a permanent error that names the key, for
// every operation that reads it, and the key is left as it was. (Before,
// most of them passed on Redis's bare "WRONGTYPE Operation against a key
// holding the wrong kind of value", naming nothing.)
func TestWrongTypeNamesTheKey(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		s := newSession(t, b.client, fastOpts()...)
		fair := newSession(t, b.client, fastOpts(WithFairness())...)
		key := func(n, suffix string) string { return "redisleader:{" + n + "}" + suffix }
		for i, tc := range []struct {
			what, suffix string
			op           func(n string) error
		}{
			{"TryLock", "", func(n string) error { _, err := s.TryLock(ctx, n); return err }},
			{"TryLock", ":fence", func(n string) error { _, err := s.TryLock(ctx, n); return err }},
			{"Leader", "", func(n string) error { _, err := mustElection(t, s, n).Leader(ctx); return err }},
			{"fair TryLock", "", func(n string) error { _, err := fair.TryLock(ctx, n); return err }},
			{"Semaphore.TryAcquire", ":fence", func(n string) error {
				m, err := s.Semaphore(n, 2)
				require.NoError(t, err)
				_, err = m.TryAcquire(ctx)
				return err
			}},
			{"Semaphore.Holders", ":sem", func(n string) error {
				m, err := s.Semaphore(n, 2)
				require.NoError(t, err)
				_, _, err = m.Holders(ctx)
				return err
			}},
			{"SetSemaphoreLimit", ":sem:limit", func(n string) error { _, err := s.SetSemaphoreLimit(ctx, n, 3); return err }},
			{"RWLock.Holders", ":rw", func(n string) error {
				rw, err := s.RWLock(n)
				require.NoError(t, err)
				_, _, err = rw.Holders(ctx)
				return err
			}},
			{"Candidates", ":cand", func(n string) error { _, err := mustElection(t, s, n).Candidates(ctx); return err }},
			{"RWLock.TryLock", ":fence", func(n string) error {
				rw, err := s.RWLock(n)
				require.NoError(t, err)
				_, err = rw.TryLock(ctx)
				return err
			}},
		} {
			n := fmt.Sprintf("wrongtype-%d", i)
			k := key(n, tc.suffix)
			require.NoError(t, b.client.HSet(ctx, k, "f", "v").Err())
			err := tc.op(n)
			assert.ErrorContains(t, err, "key "+k+" holds a value this package did not write", "%s on %s", tc.what, k)
			assert.True(t, permanent(err), "%s: %v", tc.what, err)
			got, herr := b.client.HGetAll(ctx, k).Result()
			require.NoError(t, herr)
			assert.Equal(t, map[string]string{"f": "v"}, got, "%s left %s as it was", tc.what, k)
		}
	})
}
