package main

import (
	"context"
	"errors"
	"time"

	"github.com/redisleader/redisleader"
)

// candidateStats describes many candidates on one election.
type candidateStats struct {
	elected          time.Duration // from the start of every Campaign to the first returning
	cmdsPerSec       float64       // commands the server ran per second while the leader held
	attempts, pubsub float64       // of those, per waiting candidate per TTL
}

// candidates starts cfg.candidates Sessions campaigning at once on one
// election, and measures the election and the load while the winner holds.
func candidates(ctx context.Context, e *env, cfg config, name string) (candidateStats, error) {
	c := e.client()
	defer c.Close()
	list, closeAll, err := sessions(c, cfg.candidates, redisleader.WithTTL(cfg.electionTTL))
	if err != nil {
		return candidateStats{}, err
	}
	defer closeAll()
	all, err := elections(list, name)
	if err != nil {
		return candidateStats{}, err
	}
	before, err := commandCalls(ctx, e.admin)
	if err != nil {
		return candidateStats{}, err
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := make(chan struct{})
	outcomes := make(chan won, len(all))
	for _, el := range all {
		go func() {
			<-start
			l, err := el.Campaign(cctx, "candidate")
			outcomes <- won{lock: l, at: time.Now(), err: err}
		}()
	}
	// The losers end with cctx; Close releases the winner's lock.
	defer func() {
		cancel()
		for range len(all) - 1 {
			<-outcomes
		}
	}()
	t0 := time.Now()
	close(start)
	first := <-outcomes
	if first.err != nil {
		return candidateStats{}, first.err
	}
	wctx, wcancel := context.WithTimeout(ctx, sampleTimeout)
	err = waitCalls(wctx, e.admin, before, "pttl", int64(len(all)-1)) // every other candidate waits
	wcancel()
	if err != nil {
		return candidateStats{}, err
	}
	d, elapsed, err := window(ctx, e, cfg.loadWindow)
	if err != nil {
		return candidateStats{}, err
	}
	if !first.lock.Held() {
		return candidateStats{}, errors.New("the leader lost its lease during the window")
	}
	per := float64(len(all)-1) * elapsed.Seconds() / cfg.electionTTL.Seconds()
	return candidateStats{
		elected:    first.at.Sub(t0),
		cmdsPerSec: float64(scriptCalls(d)+pubsubCalls(d)) / elapsed.Seconds(),
		attempts:   float64(attemptCalls(d)) / per,
		pubsub:     float64(pubsubCalls(d)) / per,
	}, nil
}
