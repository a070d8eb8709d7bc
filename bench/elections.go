package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redisleader/redisleader"
)

// sampleTimeout bounds one handover or takeover sample, so that a bug shows
// up as an error rather than a hung run.
const sampleTimeout = 10 * time.Second

// electionResults holds the election scenarios' numbers.
type electionResults struct {
	handover *pooled // latency samples per mechanism
	crash    *pooled // takeover lags, one row
	// Commands per waiting follower per second, per follower kind: acquire
	// attempts and pub/sub commands.
	attempts, pubsub *series
}

func newElectionResults(rounds int) *electionResults {
	return &electionResults{handover: newPooled(rounds), crash: newPooled(rounds),
		attempts: newSeries(rounds), pubsub: newSeries(rounds)}
}

// crashRow is the crash takeover's only row.
const crashRow = "redisleader"

// runElections runs the election scenarios once, mechanisms and follower
// kinds in an order rotated by round.
func runElections(ctx context.Context, e *env, cfg config, round int, res *electionResults, errs *errorLog) {
	runHandovers(ctx, e, cfg, round, res, errs)
	for _, f := range rotate(followerKinds, round) {
		l, err := f.run(ctx, e, cfg, fmt.Sprintf("bench:load:%s:r%d", f.name, round))
		if !errs.add("follower load", f.name, err) {
			res.attempts.set(f.name, round, l.attempts)
			res.pubsub.set(f.name, round, l.pubsub)
		}
	}
}

// runHandovers runs the graceful handovers, mechanisms in an order rotated
// by round, and the crash takeovers.
func runHandovers(ctx context.Context, e *env, cfg config, round int, res *electionResults, errs *errorLog) {
	for _, m := range rotate(handoverMechanisms, round) {
		d, err := m.run(ctx, e, cfg, fmt.Sprintf("bench:handover:%s:r%d", m.name, round))
		if !errs.add("handover", m.name, err) {
			res.handover.add(m.name, round, d)
		}
	}
	lags, err := crashTakeovers(ctx, e, cfg, round)
	if !errs.add("crash takeover", crashRow, err) {
		res.crash.add(crashRow, round, lags)
	}
}

// A campaign is an Election.Campaign running on its own goroutine.
type campaign struct {
	cancel context.CancelFunc
	done   chan won // receives the outcome, once
}

// won is the outcome of a campaign and when Campaign returned.
type won struct {
	lock *redisleader.Lock
	at   time.Time
	err  error
}

// startCampaign starts campaigning for e with value and opts.
func startCampaign(ctx context.Context, e *redisleader.Election, value string, opts ...redisleader.CampaignOption) *campaign {
	ctx, cancel := context.WithCancel(ctx)
	c := &campaign{cancel: cancel, done: make(chan won, 1)}
	go func() {
		l, err := e.Campaign(ctx, value, opts...)
		c.done <- won{lock: l, at: time.Now(), err: err}
	}()
	return c
}

// wait waits for Campaign to return.
func (c *campaign) wait() won {
	w := <-c.done
	c.cancel()
	return w
}

// stop cancels the campaign and waits for it to end, resigning if it won
// meanwhile.
func (c *campaign) stop() {
	c.cancel()
	if w := <-c.done; w.lock != nil {
		_ = w.lock.Release(context.Background())
	}
}

// sessions opens n sessions on client with opts and returns them with a
// function that closes them all.
func sessions(client redisleader.Client, n int, opts ...redisleader.Option) ([]*redisleader.Session, func(), error) {
	var list []*redisleader.Session
	closeAll := func() {
		for _, s := range list {
			_ = s.Close(context.Background())
		}
	}
	for range n {
		s, err := redisleader.NewSession(client, opts...)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		list = append(list, s)
	}
	return list, closeAll, nil
}

// elections returns the election called name in every session.
func elections(list []*redisleader.Session, name string) ([]*redisleader.Election, error) {
	out := make([]*redisleader.Election, len(list))
	for i, s := range list {
		var err error
		if out[i], err = s.Election(name); err != nil {
			return nil, err
		}
	}
	return out, nil
}
