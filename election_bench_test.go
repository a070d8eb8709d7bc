package redisleader

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader/internal/redisserver"

	"github.com/redisleader/redisleader/internal/lease"
)

// Election benchmarks run on a private redis-server and report latency
// percentiles as metrics (ns/op is not meaningful for them):
//
//	go test -run '^$' -bench 'Handover|CrashTakeover|FollowerLoad' -benchtime 300x .

func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func reportLatency(b *testing.B, prefix string, d []time.Duration) {
	b.ReportMetric(float64(percentile(d, 0.50).Microseconds())/1e3, prefix+"p50-ms")
	b.ReportMetric(float64(percentile(d, 0.99).Microseconds())/1e3, prefix+"p99-ms")
}

// attempts returns a hook option that reports each ErrLocked attempt.
func attempts() (Option, chan struct{}) {
	ch := make(chan struct{}, 1)
	return withAttemptHook(func(_ string, err error) {
		if errors.Is(err, ErrLocked) {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}), ch
}

// A push is a handover with no library: the leader frees the key and
// publishes on ch in one script (resign); the follower, subscribed to ch
// before its first try, tries again (take) on every message.
type push struct {
	ch     string
	take   func(ctx context.Context, c *redis.Client, token string) (bool, error)
	resign func(ctx context.Context, c *redis.Client, token string) error
}

// rawPush is the floor a push design can reach: SET NX PX, and
// compare-and-delete + PUBLISH in one script.
var rawPush = push{
	ch: "raw-lead-ch",
	take: func(ctx context.Context, c *redis.Client, token string) (bool, error) {
		return c.SetNX(ctx, "raw-lead", token, 10*time.Second).Result()
	},
	resign: func(ctx context.Context, c *redis.Client, token string) error {
		return rawResign.Run(ctx, c, []string{"raw-lead", "raw-lead-ch"}, token).Err()
	},
}

var rawResign = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]); redis.call('PUBLISH', KEYS[2], '1'); return 1 end return 0`)

// scriptsPush is the library's push with no library: its acquire and
// release scripts (the release publishes on the name's channel), by
// EVALSHA; what is left of a handover once the library's own work is gone.
func scriptsPush(k lease.Keys) push {
	return push{
		ch: k.Channel,
		take: func(ctx context.Context, c *redis.Client, token string) (bool, error) {
			res, err := c.EvalSha(ctx, lease.AcquireRun.SHA(), []string{k.Lock, k.Fence}, token, "10000", "").Result()
			if err != nil {
				return false, err
			}
			r, err := lease.DecodeAcquire(res)
			return err == nil && r.Taken, err
		},
		resign: func(ctx context.Context, c *redis.Client, token string) error {
			n, err := c.EvalSha(ctx, lease.ReleaseRun.SHA(), []string{k.Lock}, token).Int()
			if err == nil && n != 1 {
				err = fmt.Errorf("release of %s: %d, want 1", k.Lock, n)
			}
			return err
		},
	}
}

// fairScriptsPush is scriptsPush for fair mode: lease.FairAcquireRun, which
// queues the follower (member "push.<token>", so its wake-ups come on k's
// wake-up channel of session "push"), and lease.FairReleaseRun, which wakes
// the head waiter there.
func fairScriptsPush(k lease.Keys) push {
	return push{
		ch: k.WakeChannel("push"),
		take: func(ctx context.Context, c *redis.Client, token string) (bool, error) {
			r, err := c.EvalSha(ctx, lease.FairAcquireRun.SHA(), []string{k.Lock, k.Fence, k.Queue, k.Leases},
				token, "10000", "", "push."+token, "1").Slice()
			return err == nil && len(r) >= 2 && r[0] == int64(1), err
		},
		resign: func(ctx context.Context, c *redis.Client, token string) error {
			n, err := c.EvalSha(ctx, lease.FairReleaseRun.SHA(), []string{k.Lock, k.Queue, k.Leases}, token).Int()
			if err == nil && n != 1 {
				err = fmt.Errorf("release of %s: %d, want 1", k.Lock, n)
			}
			return err
		},
	}
}

// handover times one push handover: from just before the leader's resign to
// the follower's successful take. The follower then resigns too.
func (p push) handover(b *testing.B, c *redis.Client) time.Duration {
	ctx := context.Background()
	leader := rand.Text()
	if ok, err := p.take(ctx, c, leader); err != nil || !ok {
		b.Fatalf("push leader: %v %v", ok, err)
	}
	ps := c.Subscribe(ctx, p.ch)
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		b.Fatal(err)
	}
	done := make(chan time.Time, 1)
	waiting := make(chan struct{})
	me := rand.Text()
	go func() {
		first := true
		for {
			ok, err := p.take(ctx, c, me)
			if err != nil {
				b.Error(err)
				return
			}
			if ok {
				done <- time.Now()
				return
			}
			if first {
				close(waiting)
				first = false
			}
			if _, err := ps.ReceiveMessage(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	}()
	<-waiting
	start := time.Now()
	if err := p.resign(ctx, c, leader); err != nil {
		b.Fatal(err)
	}
	end := <-done
	if err := p.resign(ctx, c, me); err != nil {
		b.Fatal(err)
	}
	return end.Sub(start)
}

// BenchmarkHandover: graceful handover latency, Resign → the waiting
// follower's Campaign returns, alternating two candidates; next to the raw
// push floor (rawPush) and the library's scripts pushed the same way
// (scriptsPush, fairScriptsPush), in the same loop. In fair mode a release
// wakes the head waiter with a message addressed to it (fair.go) where the
// floor's PUBLISH wakes its one subscriber: the same floor serves both.
func BenchmarkHandover(b *testing.B) {
	b.Run("default", func(b *testing.B) { benchLibHandover(b, scriptsPush(lease.NewKeys("scripts-lead"))) })
	b.Run("fair", func(b *testing.B) {
		benchLibHandover(b, fairScriptsPush(lease.NewKeys("scripts-lead")), WithFairness())
	})
}

func benchLibHandover(b *testing.B, scripts push, opts ...Option) {
	srv := redisserver.Start(b)
	c := srv.Client(b, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	ctx := context.Background()
	loadScripts(ctx, b, c, lease.FairAcquireRun, lease.FairReleaseRun)
	hookA, waitingA := attempts()
	hookB, waitingB := attempts()
	ea := mustElection(b, newSession(b, c, append(opts, hookA)...), "handover")
	eb := mustElection(b, newSession(b, c, append(opts, hookB)...), "handover")
	lead, err := ea.Campaign(ctx, "a")
	if err != nil {
		b.Fatal(err)
	}
	follower, waiting := eb, waitingB
	other, otherWaiting := ea, waitingA
	var lib, raw, pushed []time.Duration
	for b.Loop() {
		type led struct {
			l  *Lock
			at time.Time // taken on the follower's goroutine, as push.handover does
		}
		got := make(chan led, 1)
		go func() {
			l, err := follower.Campaign(ctx, "next")
			if err != nil {
				b.Error(err)
			}
			got <- led{l, time.Now()}
		}()
		<-waiting // the follower found the name held and waits
		start := time.Now()
		if err := lead.Release(ctx); err != nil {
			b.Fatal(err)
		}
		r := <-got
		lead = r.l
		lib = append(lib, r.at.Sub(start))
		follower, waiting, other, otherWaiting = other, otherWaiting, follower, waiting

		raw = append(raw, rawPush.handover(b, c))
		pushed = append(pushed, scripts.handover(b, c))
	}
	_ = lead.Release(ctx)
	reportLatency(b, "lib-", lib)
	reportLatency(b, "rawpush-", raw)
	for _, p := range []float64{0.5, 0.99} {
		name := fmt.Sprintf("-p%.0f", p*100)
		b.ReportMetric(float64(percentile(lib, p))/float64(percentile(raw, p)), "lib/rawpush"+name)
		b.ReportMetric(float64(percentile(pushed, p))/float64(percentile(raw, p)), "scriptspush/rawpush"+name)
	}
}

// BenchmarkHandoverBurst: a session holding n names closes (one pipelined
// release) while another session waits for each name in a Lock of its own;
// the latency runs to the last of those Locks returning. It shows what a
// burst of wake-ups for one session costs, where a watcher that made
// attempts one after another would queue them.
func BenchmarkHandoverBurst(b *testing.B) {
	const n = 64
	srv := redisserver.Start(b)
	c := srv.Client(b, func(o *redis.Options) { o.ContextTimeoutEnabled = true; o.PoolSize = 2 * n })
	ctx := context.Background()
	var lat []time.Duration
	for b.Loop() {
		holder := newSession(b, c)
		var mu sync.Mutex
		waiting, all := map[string]bool{}, make(chan struct{})
		follower := newSession(b, c, withAttemptHook(func(name string, err error) {
			mu.Lock()
			defer mu.Unlock()
			if errors.Is(err, ErrLocked) && !waiting[name] {
				if waiting[name] = true; len(waiting) == n {
					close(all) // each follower has found its name held once
				}
			}
		}))
		for i := range n {
			if _, err := holder.Lock(ctx, fmt.Sprint("burst-", i)); err != nil {
				b.Fatal(err)
			}
		}
		ended := make(chan time.Time, n)
		for i := range n {
			go func() {
				if _, err := follower.Lock(ctx, fmt.Sprint("burst-", i)); err != nil {
					b.Error(err)
				}
				ended <- time.Now()
			}()
		}
		<-all
		start := time.Now()
		if err := holder.Close(ctx); err != nil {
			b.Fatal(err)
		}
		var last time.Time
		for range n {
			if t := <-ended; t.After(last) {
				last = t
			}
		}
		lat = append(lat, last.Sub(start))
		if err := follower.Close(ctx); err != nil {
			b.Fatal(err)
		}
	}
	reportLatency(b, "burst-", lat)
}

// BenchmarkCrashTakeover: the leader dies without releasing; the lag is
// measured on the Redis server's clock, from the moment its key expires
// (PEXPIRETIME, read after its last renewal) to the new leader's
// acquisition (its fence is the server's TIME in µs).
func BenchmarkCrashTakeover(b *testing.B) {
	srv := redisserver.Start(b)
	c := srv.Client(b, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	ctx := context.Background()
	opts := []Option{WithTTL(200 * time.Millisecond)}
	follower := mustElection(b, newSession(b, c, opts...), "crash")
	var lags []time.Duration
	for b.Loop() {
		s, err := NewSession(c, opts...)
		if err != nil {
			b.Fatal(err)
		}
		lead, err := mustElection(b, s, "crash").Campaign(ctx, "doomed")
		if err != nil {
			b.Fatal(err)
		}
		got := make(chan *Lock, 1)
		go func() {
			l, err := follower.Campaign(ctx, "survivor")
			if err != nil {
				b.Error(err)
			}
			got <- l
		}()
		crash(s)
		expireAt, err := c.Do(ctx, "PEXPIRETIME", lead.Key()).Int64()
		if err != nil {
			b.Fatal(err)
		}
		next := <-got
		lags = append(lags, time.Duration(next.Fence()-expireAt*1000)*time.Microsecond)
		if err := next.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	reportLatency(b, "lag-", lags)
	b.ReportMetric(float64(percentile(lags, 0).Microseconds())/1e3, "lag-min-ms")
}

// BenchmarkFollowerLoad: commands per waiting follower per TTL while a
// healthy leader holds, counted by the server (INFO commandstats), minus the
// leader's own renewals.
func BenchmarkFollowerLoad(b *testing.B) {
	srv := redisserver.Start(b)
	c := srv.Client(b, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	ctx := context.Background()
	const followers, ttl, ttls = 10, 300 * time.Millisecond, 10
	opts := []Option{WithTTL(ttl)}
	hook, rounds := rounds()
	lead, err := mustElection(b, newSession(b, c, append(opts, hook)...), "load").Campaign(ctx, "leader")
	if err != nil {
		b.Fatal(err)
	}
	var perFollowerPerTTL float64
	for b.Loop() {
		fctx, cancel := context.WithCancel(ctx)
		waiting := make(chan struct{}, followers)
		errs := make(chan error, followers)
		for i := 0; i < followers; i++ {
			hook, attempted := attempts()
			e := mustElection(b, newSession(b, c, append(opts, hook)...), "load")
			go func() {
				_, err := e.Campaign(fctx, "follower")
				errs <- err
			}()
			go func() { <-attempted; waiting <- struct{}{} }()
		}
		for i := 0; i < followers; i++ {
			<-waiting
		}
		before := evalCalls(b, c)
		renewals := 0
		start := time.Now()
		for time.Since(start) < ttls*ttl {
			<-rounds
			renewals++
		}
		after := evalCalls(b, c)
		elapsed := time.Since(start)
		cancel()
		for i := 0; i < followers; i++ {
			<-errs
		}
		followerCmds := float64(after - before - int64(renewals))
		perFollowerPerTTL = max(followerCmds, 0) / followers / (float64(elapsed) / float64(ttl))
	}
	if !lead.Held() {
		b.Fatal("the leader lost its lease during the measurement")
	}
	b.ReportMetric(perFollowerPerTTL, "cmds/follower/TTL")
}

// evalCalls reads how many EVALSHA and EVAL calls the server has run.
func evalCalls(b *testing.B, c *redis.Client) int64 {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(info, "\n") {
		for _, cmd := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), cmd); ok {
				v, _, _ := strings.Cut(rest, ",")
				x, _ := strconv.ParseInt(v, 10, 64)
				n += x
			}
		}
	}
	return n
}
