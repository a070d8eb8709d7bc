//go:build linux

package scenario

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader"
	"github.com/redisleader/redisleader/internal/faultproxy"
	"github.com/redisleader/redisleader/internal/history"
	"github.com/redisleader/redisleader/internal/redisserver"
)

// TestScenarioFailover runs S18: a primary with one replica and three
// Sentinels; replication is cut, a candidate leads on the primary, the
// primary dies and Sentinel promotes the replica, which never saw the lock.
func TestScenarioFailover(t *testing.T) {
	t.Run("S18", func(t *testing.T) { failoverScenario(t, "S18", false) })
	t.Run("S18-WAIT", func(t *testing.T) { failoverScenario(t, "S18-WAIT", true) })
}

// failoverScenario: without WAIT the checker sees two leaders (the old one
// believes until its renewal reaches the promoted replica, which never saw
// its key); with WithReplicaAcks(1, 50ms) the unreplicated acquire never
// counts, so nobody leads until a replica can acknowledge again, and
// nothing overlaps. In the plain variant the old leader cannot reach any
// server from the primary's death until the newcomer leads (a network
// partition; its lease is long enough to outlast the failover), so the
// newcomer's acquire reaches the promoted replica first: left to a race,
// the old leader's renewal could win it on a loaded machine and end its
// term before the newcomer led, with no overlap to see. Up to three trials
// run all the same.
func failoverScenario(t *testing.T, id string, wait bool) {
	h := newHarness(t, id)
	if wait {
		failoverTrial(t, h, true)
		h.finish(false)
		return
	}
	for range 3 {
		failoverTrial(t, h, false)
		if !history.Check(h.rec.Events()).Safe() {
			break
		}
	}
	h.finish(true)
}

// failoverTrial: a primary with one replica behind a proxy and three
// Sentinels; replication is cut, c1 campaigns on the primary, the primary
// dies, Sentinel promotes the replica, and c2 campaigns on the new primary.
func failoverTrial(t *testing.T, h *harness, wait bool) {
	var link *faultproxy.Proxy
	rep := redisserver.StartReplicated(t, redisserver.ReplicatedOptions{
		Replicas: 1, Sentinels: 3,
		ReplicaOf: func(primary string) string {
			p, err := faultproxy.New(primary)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close() })
			link = p
			return p.Addr()
		},
	})
	leaseTTL := 3 * time.Second
	if !wait {
		leaseTTL = 8 * time.Second // c1's lease outlasts the failover under load
	}
	opts := leaseOpts(leaseTTL)
	if wait {
		opts = append(opts, redisleader.WithReplicaAcks(1, 50*time.Millisecond))
	}
	// cut1 set: c1's client dials nothing (its connections to the old
	// primary die with it).
	var cut1 atomic.Bool
	session := func(cut *atomic.Bool, extra ...redisleader.Option) *redisleader.Election {
		c := rep.FailoverClient(t, func(o *redis.FailoverOptions) {
			o.ContextTimeoutEnabled = true
			o.DialTimeout = 200 * time.Millisecond
			o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
				if cut != nil && cut.Load() {
					return nil, errors.New("failover test: c1 is cut off")
				}
				var d net.Dialer
				return d.DialContext(ctx, network, addr)
			}
		})
		s, err := redisleader.NewSession(c, append(opts, extra...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close(context.Background()) })
		e, _ := s.Election(h.name)
		return e
	}
	// c1 retries a failed renewal only after 1s (c2 after 300ms).
	e1 := session(&cut1, redisleader.WithRetryInterval(time.Second), redisleader.WithRetryJitter(0))
	e2 := session(nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	campaign := func(e *redisleader.Election, who string) <-chan *redisleader.Lock {
		ch := make(chan *redisleader.Lock, 1)
		go func() {
			if l, err := e.Campaign(ctx, who); err == nil {
				ch <- l
			}
		}()
		return ch
	}

	h.fault("cut-replication", true)
	link.Blackhole(faultproxy.Both)
	first := h.expect(kind(history.Acquired))
	c1 := campaign(e1, "c1")
	var l1 *redisleader.Lock
	if !wait {
		h.wait(first, 5*time.Second, "c1 leads on the primary")
		l1 = <-c1
	}
	// With WAIT, c1's acquire is refused (0 of 1 replicas): let it try for a
	// moment, then kill the primary (within Sentinel's promotion window).
	<-time.After(500 * time.Millisecond) // part of the fault schedule
	if !wait {
		h.fault("cut-c1", true)
		cut1.Store(true)
	}
	h.fault("kill-primary", true)
	old := rep.Primary().Addr()
	rep.Primary().Kill(t)
	promoted := rep.WaitFailover(t, old)
	h.fault("kill-primary", false)
	c2 := campaign(e2, "c2")

	if !wait {
		var l2 *redisleader.Lock
		select {
		case l2 = <-c2:
		case <-time.After(3 * g8(leaseTTL)):
			t.Fatal("c2 does not lead after the failover")
		}
		// c1's next renewal reaches the promoted replica, which never saw
		// its key: not owner.
		cut1.Store(false)
		h.fault("cut-c1", false)
		select {
		case <-l1.Done():
		case <-time.After(2 * leaseTTL):
		}
		h.note("c1_end", "%s", reason(l1.Err()))
		_ = l2.Release(ctx)
		return
	}
	// WAIT mode: the promoted replica has no replica of its own, so nobody
	// can lead yet; bring the old primary back as a replica of the new one
	// (Sentinel would do it after about 10s; an operator does it at once)
	// and leadership resumes.
	select {
	case <-c1:
		h.check(false, "a leader without any replica to acknowledge")
	case <-c2:
		h.check(false, "a leader without any replica to acknowledge")
	case <-time.After(time.Second): // the observation window
	}
	rep.Primary().Restart(t)
	host, port, _ := strings.Cut(promoted, ":")
	back := time.Now()
	rep.Primary().Do(t, "REPLICAOF", host, port)
	var l *redisleader.Lock
	select {
	case l = <-c1:
	case l = <-c2:
	case <-time.After(20 * time.Second):
		t.Fatal("no leader after the old primary came back as a replica")
	}
	h.note("leader_after_replica_back_ms", "%.0f", ms(time.Since(back)))
	h.check(l.Held(), "the new leader does not hold")
	_ = l.Release(ctx)
}
