package main

import (
	"context"
	"testing"
)

// TestEtcdRows: the latency run's etcd rows measure what they name: every
// pair locks and unlocks, and every handover ends with the follower's
// Campaign returning after the leader's Resign (a positive latency). It
// skips where no etcd is installed, as the latency run does.
func TestEtcdRows(t *testing.T) {
	es, err := startEtcdIfInstalled()
	if err != nil {
		t.Fatal(err)
	}
	if es == nil {
		t.Skip("no etcd installed")
	}
	defer es.stop()
	c, err := es.client()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	cfg := config{warmup: 5, etcdPairs: 20, handovers: 4}
	pairs, _, err := etcdPairs(ctx, c, cfg, "/test/lock")
	if err != nil || len(pairs) != cfg.etcdPairs {
		t.Fatalf("pairs: %d samples, %v; want %d", len(pairs), err, cfg.etcdPairs)
	}
	handovers, err := etcdHandovers(ctx, es, c, cfg, "/test/handover")
	if err != nil || len(handovers) != cfg.handovers {
		t.Fatalf("handovers: %d samples, %v; want %d", len(handovers), err, cfg.handovers)
	}
	t.Logf("pairs %v, handovers %v", pairs, handovers)
	for i, d := range handovers {
		if d <= 0 {
			t.Errorf("handover %d took %v", i, d)
		}
	}
	if all, _, err := es.watchers(ctx); err != nil || all != 0 {
		t.Errorf("after the handovers: %d watchers, %v; want none", all, err)
	}
}
