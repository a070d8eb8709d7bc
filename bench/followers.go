package main

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/redisleader/redisleader"
)

// A followerKind waits for leadership while a healthy leader holds it; its
// run returns what each waiting follower sent per second, counted by the
// server (INFO commandstats) over cfg.loadWindow.
type followerKind struct {
	name, desc string
	run        func(ctx context.Context, e *env, cfg config, key string) (load, error)
}

// load is what one waiting follower sends per second.
type load struct{ attempts, pubsub float64 }

var followerKinds = []followerKind{
	{"redisleader", "one Session per follower, each waiting in Election.Campaign, while a leader Session holds the name (taken with TryLock, so it has no pub/sub connection of its own); attempts = EVALSHA/EVAL − the leader's renewals (one PEXPIRE each), pub/sub = SUBSCRIBE, UNSUBSCRIBE, PING", libraryFollowerLoad},
	{"redisleader-priority", "as `redisleader`, with priorities: follower i campaigns with value i and WithPriority(i+1), and the leader holds the name with Campaign and WithPriority(0), so every renewal of the leader finds a better candidate (a Campaign leader does not yield); the window starts once the leader's session has left the name's channel (a TTL after it won); attempts as for `redisleader`", priorityFollowerLoad},
	{"poll-100ms", "one goroutine per follower sends SET NX PX every 100 ms while a raw leader holds; attempts = SET", pollFollowerLoad},
}

// libraryFollowerLoad measures the library's waiting candidates. The window
// starts once the server has run every follower's first (failed) attempt
// (with priorities, and the leader's UNSUBSCRIBE).
func libraryFollowerLoad(ctx context.Context, e *env, cfg config, name string) (load, error) {
	return followerLoad(ctx, e, cfg, name, false)
}

// priorityFollowerLoad measures them with priorities (WithPriority).
func priorityFollowerLoad(ctx context.Context, e *env, cfg config, name string) (load, error) {
	return followerLoad(ctx, e, cfg, name, true)
}

// followerLoad is libraryFollowerLoad, with priorities when prio is set.
func followerLoad(ctx context.Context, e *env, cfg config, name string, prio bool) (load, error) {
	c := e.client()
	defer c.Close()
	list, closeAll, err := sessions(c, cfg.followers+1, redisleader.WithTTL(cfg.electionTTL))
	if err != nil {
		return load{}, err
	}
	defer closeAll()
	all, err := elections(list, name)
	if err != nil {
		return load{}, err
	}
	first, err := commandCalls(ctx, e.admin)
	if err != nil {
		return load{}, err
	}
	var lead *redisleader.Lock
	if prio {
		lead, err = all[0].Campaign(ctx, "leader", redisleader.WithPriority(0))
	} else {
		lead, err = list[0].TryLock(ctx, name)
	}
	if err != nil {
		return load{}, err
	}
	followers := all[1:]
	before, err := commandCalls(ctx, e.admin)
	if err != nil {
		return load{}, err
	}
	for i, f := range followers {
		value, opts := "follower", []redisleader.CampaignOption(nil)
		if prio {
			value, opts = strconv.Itoa(i), []redisleader.CampaignOption{redisleader.WithPriority(int64(i + 1))}
		}
		c := startCampaign(ctx, f, value, opts...)
		defer c.stop()
	}
	wctx, cancel := context.WithTimeout(ctx, sampleTimeout)
	err = waitCalls(wctx, e.admin, before, "pttl", int64(cfg.followers))
	if err == nil && prio {
		// Campaign subscribed the leader to the name's channel, which it
		// leaves a TTL after it won: not a follower's command.
		err = waitCalls(wctx, e.admin, first, "unsubscribe", 1)
	}
	cancel()
	if err != nil {
		return load{}, err
	}
	d, elapsed, err := window(ctx, e, cfg.loadWindow)
	if err != nil {
		return load{}, err
	}
	if !lead.Held() {
		return load{}, errors.New("the leader lost its lease during the window")
	}
	per := float64(cfg.followers) * elapsed.Seconds()
	return load{attempts: float64(attemptCalls(d)) / per, pubsub: float64(pubsubCalls(d)) / per}, nil
}

// pollFollowerLoad measures followers that poll with SET NX every 100 ms.
func pollFollowerLoad(ctx context.Context, e *env, cfg config, key string) (load, error) {
	c := e.client()
	defer c.Close()
	leader := rawToken()
	if ok, err := rawSetNX(ctx, c, key, leader, lockTTL); err != nil || !ok {
		return load{}, errors.Join(errors.New("the raw leader could not take the key"), err)
	}
	defer func() { _ = rawRelease.Run(context.Background(), c, []string{key}, leader).Err() }()

	pctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var mu sync.Mutex // protects errs
	var errs []error
	for range cfg.followers {
		wg.Go(func() {
			token := rawToken()
			for {
				ok, err := rawSetNX(pctx, c, key, token, lockTTL)
				if err == nil && ok {
					err = errors.New("a polling follower took a held key")
				}
				if err != nil && pctx.Err() == nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				select {
				case <-time.After(pollEvery): // the polling follower's deliberate sleep
				case <-pctx.Done():
					return
				}
			}
		})
	}
	d, elapsed, err := window(ctx, e, cfg.loadWindow)
	stop()
	wg.Wait()
	if err = errors.Join(append(errs, err)...); err != nil {
		return load{}, err
	}
	return load{attempts: float64(d["set"]) / float64(cfg.followers) / elapsed.Seconds()}, nil
}

// window returns the commands the main server ran during the next d, and
// how long the window really was (between the two INFO replies).
func window(ctx context.Context, e *env, d time.Duration) (calls, time.Duration, error) {
	before, err := commandCalls(ctx, e.admin)
	if err != nil {
		return nil, 0, err
	}
	t0 := time.Now()
	<-time.After(d) // the measurement window itself, not a synchronisation
	after, err := commandCalls(ctx, e.admin)
	if err != nil {
		return nil, 0, err
	}
	return after.since(before), time.Since(t0), nil
}
