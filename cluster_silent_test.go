package redisleader

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader/internal/redisserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisleader/redisleader/internal/lease"
)

// Issue 35, item 2: one Redis Cluster master that stops answering
// (SIGSTOP) must cost only the names it serves. go-redis ran a session's
// pipeline as one operation over every master, and gave the silent
// master's timeout to every command of it: renewals the healthy masters
// had answered failed too, and the session lost every lock.

// TestClusterSilentMasterKeepsHealthyLocks: a session holds 7 locks on
// each of 3 masters (TTL 2s); one master is stopped past the TTL. Its
// locks end (not silently); the 14 others are all kept, and each is
// renewed in its rhythm: no gap between two successful renewals longer
// than renewInterval + callTimeout (a slice waits for the stopped master's
// part until the call timeout) plus slack for a loaded machine. Close, with
// the master still stopped, deletes the healthy keys; its error counts only
// the stopped master's 7 tokens. On d7b8f12 all 21 locks were lost.
func TestClusterSilentMasterKeepsHealthyLocks(t *testing.T) {
	cluster := redisserver.StartCluster(t, 3)
	ctx := context.Background()
	const ttl = 2 * time.Second
	gaps := &renewGaps{}
	cc := clusterClient(t, cluster)
	s := newSession(t, cc, WithTTL(ttl), withRoundHook(func(int, bool) { gaps.sample() }))
	victim := cluster.Nodes()[0]
	var healthy, stopped []*Lock
	for node, names := range namesPerMaster(t, cluster, "silent", 7) {
		for _, name := range names {
			l, err := s.TryLock(ctx, name)
			require.NoError(t, err, name)
			if node == victim {
				stopped = append(stopped, l)
			} else {
				healthy = append(healthy, l)
			}
		}
	}
	gaps.track(healthy)
	victim.Pause(t)
	paused := time.Now()
	defer victim.Resume(t)

	for _, l := range stopped {
		waitClosed(t, l.Done(), 2*ttl, "a lock on the stopped master ends")
		assert.ErrorIs(t, l.Err(), ErrLost, l.Name())
	}
	// Two more renewals of every healthy lock: the master stays stopped
	// past the TTL.
	gaps.waitRenewals(t, 2, 3*ttl)
	lost := 0
	for _, l := range healthy {
		if !l.Held() {
			lost++
			t.Errorf("%s lost on a healthy master: %v", l.Name(), l.Err())
		}
	}
	cfg := s.cfg
	maxGap := gaps.max()
	t.Logf("stopped %v: healthy lost %d of %d, stopped lost %d of %d; max gap between renewals of a healthy lock %v (interval %v, call timeout %v)",
		time.Since(paused).Round(time.Millisecond), lost, len(healthy), len(stopped), len(stopped),
		maxGap.Round(time.Millisecond), cfg.RenewInterval, cfg.CallTimeout)
	assert.Greater(t, time.Since(paused), ttl, "the master was stopped past the TTL")
	assert.Less(t, maxGap, cfg.RenewInterval+cfg.CallTimeout+cfg.RenewInterval/2, "a healthy lock's renewals kept their rhythm")

	err := s.Close(ctx)
	require.Error(t, err, "the stopped master's tokens could not be deleted")
	assert.Contains(t, err.Error(), fmt.Sprintf("releasing %d keys (%d failed", len(healthy)+len(stopped), len(stopped)))
	for _, l := range healthy {
		n, err := cc.Exists(ctx, l.Key()).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "Close deleted %s on its healthy master", l.Key())
	}
}

// TestClusterSilentMasterBatch: with one master stopped, the session's
// calls queue behind two that wait for it on the wire, and the flusher
// sends the queue as one batch: 4 acquires on healthy masters, bounded at
// 1s, and one on the stopped master, bounded at the call timeout (2s). The
// healthy acquires succeed as soon as their masters answer, not when the
// batch's stopped part ends (past their own deadlines). On d7b8f12 they
// failed.
func TestClusterSilentMasterBatch(t *testing.T) {
	cluster := redisserver.StartCluster(t, 3)
	ctx := context.Background()
	s := newSession(t, clusterClient(t, cluster), WithTTL(10*time.Second), WithCallTimeout(2*time.Second))
	victim := cluster.Nodes()[0]
	names := namesPerMaster(t, cluster, "batch", 3)
	var healthyNames []string
	for node, ns := range names {
		if node != victim {
			healthyNames = append(healthyNames, ns[:2]...)
		}
	}
	l, err := s.TryLock(ctx, "batch-warm-up") // the client loads the slot map
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	victim.Pause(t)
	defer victim.Resume(t)

	onWire := make(chan error, maxOnWire)
	for _, name := range names[victim][:maxOnWire] {
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			_, err := s.TryLock(wctx, name)
			onWire <- err
		}()
	}
	waitOnWire(t, s, maxOnWire)
	short := make([]context.Context, len(healthyNames))
	for i := range short {
		var cancel context.CancelFunc
		short[i], cancel = context.WithTimeout(ctx, time.Second)
		defer cancel()
	}
	start := time.Now()
	tries := tryAll(short, s, healthyNames)
	hung := tryAll(background(1), s, names[victim][maxOnWire:])
	waitQueued(t, s, len(healthyNames)+1)
	for range maxOnWire {
		assert.Error(t, recvWithin(t, onWire, 5*time.Second, "a call on the stopped master"))
	}
	for i, ch := range tries {
		r := recvWithin(t, ch, 5*time.Second, healthyNames[i])
		if assert.NoError(t, r.err, "%s, on a healthy master, in a batch with the stopped one", healthyNames[i]) {
			require.NoError(t, r.l.Release(ctx))
		}
	}
	t.Logf("healthy acquires of the batch answered after %v", time.Since(start).Round(time.Millisecond))
	assert.Error(t, recvWithin(t, hung[0], 5*time.Second, "the batch's call on the stopped master").err)
}

// namesPerMaster returns, for each master of cluster, n lock names (prefix
// and a number) whose slot it serves.
func namesPerMaster(t *testing.T, cluster *redisserver.Cluster, prefix string, n int) map[*redisserver.Server][]string {
	t.Helper()
	out := map[*redisserver.Server][]string{}
	for i := 0; len(out) < len(cluster.Nodes()) || !allHave(out, n); i++ {
		require.Less(t, i, 1000, "names spread over the masters")
		name := fmt.Sprintf("%s-%d", prefix, i)
		owner := cluster.Owner(redisserver.Slot(lease.NewKeys(name).Lock))
		require.NotNil(t, owner, name)
		if len(out[owner]) < n {
			out[owner] = append(out[owner], name)
		}
	}
	return out
}

func allHave(m map[*redisserver.Server][]string, n int) bool {
	for _, v := range m {
		if len(v) < n {
			return false
		}
	}
	return true
}

// renewGaps measures, from the heartbeat's round hook, the gaps between
// successive successful renewals of tracked locks: a lock's deadline is
// its last successful renewal's send time plus the validity, so two
// deadlines differ by the time between the two renewals.
type renewGaps struct {
	mu      sync.Mutex
	last    map[*Lock]time.Time
	renewed map[*Lock]int
	maxGap  time.Duration
	changed chan struct{} // capacity 1: a renewal was seen
}

func (g *renewGaps) track(locks []*Lock) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.last, g.renewed = map[*Lock]time.Time{}, map[*Lock]int{}
	g.changed = make(chan struct{}, 1)
	for _, l := range locks {
		g.last[l] = l.Deadline()
	}
}

func (g *renewGaps) sample() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for l, prev := range g.last {
		d := l.Deadline()
		if !d.After(prev) {
			continue
		}
		g.maxGap = max(g.maxGap, d.Sub(prev))
		g.last[l] = d
		g.renewed[l]++
		select {
		case g.changed <- struct{}{}:
		default:
		}
	}
}

func (g *renewGaps) max() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.maxGap
}

// waitRenewals waits until every tracked lock has been renewed n more
// times from now on, or one of them has ended.
func (g *renewGaps) waitRenewals(t *testing.T, n int, within time.Duration) {
	t.Helper()
	g.mu.Lock()
	want := make(map[*Lock]int, len(g.renewed))
	ended := make(chan struct{}, len(g.last))
	stop := make(chan struct{})
	defer close(stop)
	for l := range g.last {
		want[l] = g.renewed[l] + n
		go func() {
			select {
			case <-l.Done():
				ended <- struct{}{}
			case <-stop:
			}
		}()
	}
	changed := g.changed
	g.mu.Unlock()
	timeout := time.After(within)
	for {
		g.mu.Lock()
		done := true
		for l, w := range want {
			done = done && g.renewed[l] >= w
		}
		g.mu.Unlock()
		if done {
			return
		}
		select {
		case <-changed:
		case <-ended:
			return // the caller reports it
		case <-timeout:
			t.Fatalf("the tracked locks were not all renewed %d more times within %v", n, within)
		}
	}
}

// byNode asks the Cluster client for each call's master, which loads the
// slot map when the client has none yet, running the node clients' hooks
// outside wire.ExecPipeline's recover (found by review of issue 35, item 2: the
// process died of the panic). The panic must become the batch's error
// (hookfaults.go: "a panic becomes the error of the commands it hit").
//
// TestClusterSlotLoadPanicInABatch: a Cluster client without a slot
// map, whose node clients' hook panics on CLUSTER commands; two TryLocks are
// held in a cluster-level hook (on the wire), two more queue, and the
// flusher sends those two as a batch. The test runs in a child process, and
// the child must not die of the panic.
func TestClusterSlotLoadPanicInABatch(t *testing.T) {
	if os.Getenv("SLOT_LOAD_PANIC_CHILD") == "1" {
		slotLoadPanicChild(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestClusterSlotLoadPanicInABatch$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "SLOT_LOAD_PANIC_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		lines := strings.Split(string(out), "\n")
		t.Fatalf("the child process died: %v\n%s", err, strings.Join(lines[:min(len(lines), 25)], "\n"))
	}
}

// holdEvalsha holds the first maxOnWire evalsha sends until released.
type holdEvalsha struct {
	held chan chan struct{}
	n    *atomic.Int32
}

func (h holdEvalsha) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h holdEvalsha) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h holdEvalsha) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" && h.n.Add(1) <= maxOnWire {
			release := make(chan struct{})
			h.held <- release
			<-release
		}
		return next(ctx, cmd)
	}
}

type panicOnCluster struct{}

func (panicOnCluster) DialHook(next redis.DialHook) redis.DialHook { return next }
func (panicOnCluster) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (panicOnCluster) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "cluster" {
			panic("a hook on the node client")
		}
		return next(ctx, cmd)
	}
}

func slotLoadPanicChild(t *testing.T) {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true})
	defer cc.Close()
	cc.OnNewNode(func(c *redis.Client) { c.AddHook(panicOnCluster{}) })
	hold := holdEvalsha{held: make(chan chan struct{}, maxOnWire), n: new(atomic.Int32)}
	cc.AddHook(hold)
	s := newSession(t, cc, WithCallTimeout(2*time.Second))
	onWire := tryAll(background(maxOnWire), s, []string{"w1", "w2"})
	var releases []chan struct{}
	for range maxOnWire {
		releases = append(releases, recvWithin(t, hold.held, 5*time.Second, "a TryLock on the wire"))
	}
	queued := tryAll(background(2), s, []string{"q1", "q2"})
	waitQueued(t, s, 2)
	for _, r := range releases {
		close(r)
	}
	for _, ch := range append(onWire, queued...) {
		r := recvWithin(t, ch, 5*time.Second, "a TryLock's outcome")
		assert.ErrorContains(t, r.err, "a hook on the client panicked", "the hook's panic is the call's error")
	}
}
