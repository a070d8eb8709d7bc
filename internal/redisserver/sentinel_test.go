package redisserver

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader/internal/faultproxy"
)

func TestReplicatedFailover(t *testing.T) {
	t.Parallel()
	r := StartReplicated(t, ReplicatedOptions{Replicas: 1, Sentinels: 3})
	p, rep := r.Primary(), r.Replicas()[0]
	if got := r.MasterName(); got != "mymaster" {
		t.Fatalf("MasterName() = %q, want mymaster", got)
	}
	if got := len(r.SentinelAddrs()); got != 3 {
		t.Fatalf("len(SentinelAddrs()) = %d, want 3", got)
	}
	if got := r.CurrentPrimary(t); got != p.Addr() {
		t.Fatalf("CurrentPrimary() = %s, want the primary %s", got, p.Addr())
	}

	// WAIT on the write's connection: since 7.2 it waits for that
	// connection's last write (a fresh connection's WAIT returns at once).
	if got := p.DoSeq(t, []any{"SET", "k", "v1"}, []any{"WAIT", 1, 1000})[1]; got != int64(1) {
		t.Fatalf("WAIT 1 1000 on the primary = %v, want 1", got)
	}
	if got := rep.Do(t, "GET", "k"); got != "v1" {
		t.Fatalf("GET k on the replica = %v, want v1", got)
	}

	fc := r.FailoverClient(t, func(o *redis.FailoverOptions) {
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout = time.Second, time.Second, time.Second
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := fc.Set(ctx, "k", "v2", 0).Err(); err != nil {
		t.Fatalf("failover client SET before failover: %v", err)
	}
	if got := p.Do(t, "GET", "k"); got != "v2" {
		t.Fatalf("GET k on the primary after failover client SET = %v, want v2", got)
	}

	p.Kill(t)
	start := time.Now()
	if got := r.WaitFailover(t, p.Addr()); got != rep.Addr() {
		t.Fatalf("WaitFailover = %s, want the replica %s", got, rep.Addr())
	}
	t.Logf("failover took %v", time.Since(start))
	if got := r.CurrentPrimary(t); got != rep.Addr() {
		t.Fatalf("CurrentPrimary() after failover = %s, want %s", got, rep.Addr())
	}

	// The client may still hold connections to the dead primary; retry until
	// a write lands on the new one.
	if err := poll(10*time.Second, func() error { return fc.Set(ctx, "k", "v3", 0).Err() }); err != nil {
		t.Fatalf("failover client SET after failover: %v", err)
	}
	if got := rep.Do(t, "GET", "k"); got != "v3" {
		t.Fatalf("GET k on the new primary = %v, want v3", got)
	}
}

func TestReplicatedWithoutSentinels(t *testing.T) {
	t.Parallel()
	r := StartReplicated(t, ReplicatedOptions{Replicas: 2})
	if len(r.SentinelAddrs()) != 0 || len(r.Replicas()) != 2 {
		t.Fatalf("SentinelAddrs = %v, Replicas = %d; want none and 2", r.SentinelAddrs(), len(r.Replicas()))
	}
	// One connection: WAIT waits for its own connection's last write (7.2+).
	if got := r.Primary().DoSeq(t, []any{"SET", "k", "v"}, []any{"WAIT", 2, 1000})[1]; got != int64(2) {
		t.Fatalf("WAIT 2 1000 = %v, want 2", got)
	}
	for _, s := range r.Replicas() {
		if got := s.Do(t, "GET", "k"); got != "v" {
			t.Errorf("GET k on replica %s = %v, want v", s.Addr(), got)
		}
	}
}

// proxied starts a fault proxy in front of the primary for ReplicaOf and
// closes it on cleanup.
func proxied(t *testing.T, px **faultproxy.Proxy) func(string) string {
	return func(primary string) string {
		p, err := faultproxy.New(primary)
		if err != nil {
			t.Fatalf("faultproxy.New(%s): %v", primary, err)
		}
		t.Cleanup(func() { _ = p.Close() })
		*px = p
		return p.Addr()
	}
}

// cut breaks replication through the proxy: open links are reset and new
// ones refused.
func cut(px *faultproxy.Proxy) {
	px.Refuse(true)
	px.ResetConns()
}

// waitLinkDown polls the replica until its master link is down.
func waitLinkDown(t *testing.T, s *Server) {
	t.Helper()
	if err := poll(10*time.Second, func() error {
		info, err := infoFields(s.Addr(), "replication")
		if err != nil {
			return err
		}
		if info["master_link_status"] != "down" {
			return fmt.Errorf("master_link_status:%s", info["master_link_status"])
		}
		return nil
	}); err != nil {
		t.Fatalf("replica %s link not down after the cut: %v", s.Addr(), err)
	}
}

// masterPort returns the master_port a replica reports.
func masterPort(t *testing.T, s *Server) string {
	t.Helper()
	info, err := infoFields(s.Addr(), "replication")
	if err != nil {
		t.Fatalf("%v", err)
	}
	return info["master_port"]
}

func TestReplicaOfProxyLostWriteOnFailover(t *testing.T) {
	t.Parallel()
	var px *faultproxy.Proxy
	r := StartReplicated(t, ReplicatedOptions{Replicas: 1, Sentinels: 3, ReplicaOf: proxied(t, &px)})
	p, rep := r.Primary(), r.Replicas()[0]
	_, pxPort, _ := splitAddr(px.Addr())
	if got := masterPort(t, rep); got != fmt.Sprint(pxPort) {
		t.Fatalf("replica master_port = %s, want the proxy's %d", got, pxPort)
	}
	if got := p.DoSeq(t, []any{"SET", "k", "v1"}, []any{"WAIT", 1, 1000})[1]; got != int64(1) {
		t.Fatalf("WAIT 1 1000 through the proxy = %v, want 1", got)
	}

	cut(px)
	waitLinkDown(t, rep)
	if got := p.DoSeq(t, []any{"SET", "k", "v2"}, []any{"WAIT", 1, 100})[1]; got != int64(0) {
		t.Fatalf("WAIT 1 100 after the cut = %v, want 0", got)
	}
	p.Kill(t) // at once: Sentinel skips replicas whose link is down too long
	if got := r.WaitFailover(t, p.Addr()); got != rep.Addr() {
		t.Fatalf("WaitFailover = %s, want the replica %s", got, rep.Addr())
	}
	if got := rep.Do(t, "GET", "k"); got != "v1" {
		t.Fatalf("GET k on the promoted replica = %v, want v1 (v2 was written after the cut)", got)
	}
}

func TestReplicaOfProxySurvivesSentinelFix(t *testing.T) {
	t.Parallel()
	var px *faultproxy.Proxy
	r := StartReplicated(t, ReplicatedOptions{Replicas: 1, Sentinels: 1, ReplicaOf: proxied(t, &px)})
	p, rep := r.Primary(), r.Replicas()[0]
	_, pxPort, _ := splitAddr(px.Addr())

	// INFO every second instead of 10s, so the Sentinel notices sooner.
	sentinel := r.sentinels[0]
	if got := sentinel.Do(t, "SENTINEL", "DEBUG", "info-period", 1000); got != "OK" {
		t.Fatalf("SENTINEL DEBUG info-period 1000 = %v, want OK", got)
	}
	t0 := time.Now()
	cut(px)
	waitLinkDown(t, rep)
	p.Do(t, "SET", "k", "v")
	// The Sentinel tries to re-point the replica at the primary once
	// failover-timeout has passed since it saw the replica; the ACL refuses.
	if err := poll(15*time.Second, func() error {
		if !strings.Contains(sentinel.log.tail(200), "+fix-slave-config") {
			return errors.New("no +fix-slave-config in the sentinel log")
		}
		return nil
	}); err != nil {
		r.fatalf(t, "%v", err)
	}
	t.Logf("the Sentinel tried to re-point the replica %v after the cut", time.Since(t0).Round(time.Millisecond))
	if got := masterPort(t, rep); got != fmt.Sprint(pxPort) {
		t.Fatalf("replica master_port after the Sentinel's fix = %s, want still the proxy's %d", got, pxPort)
	}
	if got := rep.Do(t, "GET", "k"); got != nil {
		t.Fatalf("GET k on the cut-off replica = %v, want nil", got)
	}
	acl, _ := rep.Do(t, "ACL", "LOG").([]any)
	if len(acl) == 0 {
		t.Errorf("ACL LOG on the replica is empty, want the refused SLAVEOF")
	}

	px.Refuse(false) // heal: the replica resyncs through the proxy
	if err := poll(15*time.Second, r.replicationReady); err != nil {
		r.fatalf(t, "replication after heal: %v", err)
	}
	if got := p.DoSeq(t, []any{"SET", "k2", "v2"}, []any{"WAIT", 1, 5000})[1]; got != int64(1) {
		t.Fatalf("WAIT 1 5000 after heal = %v, want 1", got)
	}
	for k, want := range map[string]string{"k": "v", "k2": "v2"} {
		if got := rep.Do(t, "GET", k); got != want {
			t.Fatalf("GET %s on the replica after heal = %v, want %s", k, got, want)
		}
	}
}

// TestNothingLeftAfterCleanup runs a cluster and a replicated set with
// clients in a subtest and checks that its cleanup leaves no process and no
// goroutine behind. It is not parallel, so other tests' goroutines are
// paused and the count is stable.
func TestNothingLeftAfterCleanup(t *testing.T) {
	requireBinaries(t, "redis-server", "redis-cli")
	before := runtime.NumGoroutine()
	var pids []int
	t.Run("inner", func(t *testing.T) {
		c := StartCluster(t, 3)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Client(t).Set(ctx, "k", "v", 0).Err(); err != nil {
			t.Fatalf("cluster SET: %v", err)
		}
		var px *faultproxy.Proxy
		r := StartReplicated(t, ReplicatedOptions{Replicas: 1, Sentinels: 1, ReplicaOf: proxied(t, &px)})
		if err := r.FailoverClient(t).Set(ctx, "k", "v", 0).Err(); err != nil {
			t.Fatalf("failover SET: %v", err)
		}
		servers := append(c.Nodes(), r.Primary())
		servers = append(servers, r.Replicas()...)
		servers = append(servers, r.sentinels...)
		for _, s := range servers {
			pids = append(pids, s.PID())
		}
	})
	if len(pids) != 3+1+1+1 {
		t.Fatalf("inner test started %d processes, want 6", len(pids))
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d still exists after cleanup: kill(0) = %v", pid, err)
		}
	}
	if err := poll(5*time.Second, func() error {
		if n := runtime.NumGoroutine(); n > before {
			return fmt.Errorf("%d goroutines, %d before", n, before)
		}
		return nil
	}); err != nil {
		buf := make([]byte, 1<<20)
		t.Fatalf("goroutines left after cleanup: %v\n%s", err, buf[:runtime.Stack(buf, true)])
	}
}
