package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// The etcd rows of the latency run (-only latency): etcd's own recipes,
// go.etcd.io/etcd/client/v3/concurrency, on a private etcd, measured as the
// Redis rows are. A pair is Mutex.Lock then Unlock on one session, one
// goroutine, its own key. A handover runs from just before the leader's
// Election.Resign to a waiting follower's Election.Campaign returning.
//
// "Waiting" means what it means for redisleader's follower, which is
// subscribed before the release: the follower's watch is in place and
// synced. Campaign watches from a revision that is not in the future, which
// etcd puts among its unsynced watchers and catches up only every 100 ms; a
// Resign inside that window is seen at the next catch-up (tens of ms more),
// which a follower that has waited longer never pays. So each handover
// waits, on the server's watcher gauges, until the watch is synced.

// etcdRow is the etcd rows' name in latency.json.
const etcdRow = "etcd"

// runEtcd measures etcd's pairs and handovers once; they run after the
// round's Redis rows.
func runEtcd(ctx context.Context, es *etcdServer, cfg config, round int, res *results) {
	c, err := es.client()
	if res.errs.add("etcd client", etcdRow, err) {
		return
	}
	defer c.Close()
	d, _, err := etcdPairs(ctx, c, cfg, fmt.Sprintf("/bench/lock/r%d", round))
	if !res.errs.add("(a) sequential", etcdRow, err) {
		res.locks.pairs.add(etcdRow, round, d)
	}
	h, err := etcdHandovers(ctx, es, c, cfg, fmt.Sprintf("/bench/handover/r%d", round))
	if !res.errs.add("handover", etcdRow, err) {
		res.elections.handover.add(etcdRow, round, h)
	}
}

// etcdTTL is the etcd sessions' lease TTL in seconds, lockTTL's.
const etcdTTL = int(lockTTL / time.Second)

// etcdLock is an etcd Mutex on a key nobody else uses, as a worker.
type etcdLock struct{ m *concurrency.Mutex }

func (l etcdLock) try(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, sampleTimeout)
	defer cancel()
	if err := l.m.Lock(ctx); err != nil {
		return false, err
	}
	return true, l.m.Unlock(ctx)
}

// etcdPairs runs the sequential pairs on one session's Mutex on key.
func etcdPairs(ctx context.Context, c *clientv3.Client, cfg config, key string) ([]time.Duration, float64, error) {
	s, err := concurrency.NewSession(c, concurrency.WithTTL(etcdTTL))
	if err != nil {
		return nil, 0, err
	}
	defer s.Close()
	return sequential(ctx, etcdLock{concurrency.NewMutex(s, key)}, cfg.warmup, cfg.etcdPairs)
}

// etcdHandovers alternates leadership of the election prefix between two
// sessions by Resign, cfg.handovers times.
func etcdHandovers(ctx context.Context, es *etcdServer, c *clientv3.Client, cfg config, prefix string) ([]time.Duration, error) {
	var candidates [2]*concurrency.Election
	for i := range candidates {
		s, err := concurrency.NewSession(c, concurrency.WithTTL(etcdTTL))
		if err != nil {
			return nil, err
		}
		defer s.Close() // revokes the lease: deletes whichever key is left
		candidates[i] = concurrency.NewElection(s, prefix)
	}
	first, cancel := context.WithTimeout(ctx, sampleTimeout)
	err := candidates[0].Campaign(first, "0")
	cancel()
	if err != nil {
		return nil, err
	}
	var out []time.Duration
	for i := range cfg.handovers {
		from, to := i%2, (i+1)%2
		d, err := etcdHandover(ctx, es, candidates[from], candidates[to], strconv.Itoa(to))
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// etcdHandover makes follower campaign with value, waits until its watch
// is synced, makes leader resign and returns the handover latency.
func etcdHandover(ctx context.Context, es *etcdServer, leader, follower *concurrency.Election, value string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, sampleTimeout)
	defer cancel()
	// The last winner's watch is gone, so the one to come is the follower's.
	if err := es.awaitWatchers(ctx, func(all, _ int) bool { return all == 0 }); err != nil {
		return 0, err
	}
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan won, 1)
	go func() {
		err := follower.Campaign(cctx, value)
		done <- won{at: time.Now(), err: err}
	}()
	if err := es.awaitSyncedWatch(ctx); err != nil {
		stop()
		return 0, errors.Join(err, (<-done).err)
	}
	t0 := time.Now()
	if err := leader.Resign(ctx); err != nil {
		stop()
		return 0, errors.Join(err, (<-done).err)
	}
	w := <-done
	return w.at.Sub(t0), w.err
}

// awaitSyncedWatch waits until the server's one watcher is synced. The
// gauges are read one after the other while the server may change them, so
// only a read that starts after one which saw the watcher proves it synced.
func (s *etcdServer) awaitSyncedWatch(ctx context.Context) error {
	seen := false
	return s.awaitWatchers(ctx, func(all, unsynced int) bool {
		ok := seen && all == 1 && unsynced == 0
		seen = seen || all == 1
		return ok
	})
}

// awaitWatchers reads the watcher gauges every etcdPoll until done accepts
// them or ctx ends.
func (s *etcdServer) awaitWatchers(ctx context.Context, done func(all, unsynced int) bool) error {
	for {
		all, unsynced, err := s.watchers(ctx)
		if err != nil {
			return err
		}
		if done(all, unsynced) {
			return nil
		}
		select {
		case <-time.After(etcdPoll):
		case <-ctx.Done():
			return fmt.Errorf("waiting for etcd's watchers (now %d, %d unsynced): %w", all, unsynced, ctx.Err())
		}
	}
}
