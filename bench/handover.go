package main

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader"
)

// pollEvery is the polling follower's period.
const pollEvery = 100 * time.Millisecond

// A handover mechanism hands leadership from a leader that resigns to a
// follower that is already waiting, cfg.handovers (or cfg.polls) times on
// key, and returns each handover's latency: from just before the leader's
// release call to the follower's successful acquire returning, both on this
// process's clock.
type mechanism struct {
	name, desc string
	run        func(ctx context.Context, e *env, cfg config, key string) ([]time.Duration, error)
}

var handoverMechanisms = []mechanism{
	{"redisleader", "Lock.Release of the leader → a waiting candidate's Election.Campaign returns (two Sessions, roles alternate)", leaderHandovers},
	{"transfer", "Election.Transfer(ctx, value) of the leader → the waiting candidate it names (by its value) returns from Election.Campaign (two Sessions, roles alternate; the call subscribes to the name's channel, then hands over)", transferHandovers},
	{"raw-push", "floor: the leader runs GET==token → DEL + PUBLISH in one EVALSHA; the follower, SUBSCRIBEd before its first try, sends SET NX PX on the message", rawPushHandovers},
	{"poll-100ms", "the follower sends SET NX PX every 100 ms; the leader releases (compare-and-delete) at a random point of that period", pollHandovers},
}

// leaderHandovers alternates leadership between two sessions by Release.
func leaderHandovers(ctx context.Context, e *env, cfg config, name string) ([]time.Duration, error) {
	return alternate(ctx, e, cfg, name, func(ctx context.Context, _ *redisleader.Election, lead *redisleader.Lock, _ string) error {
		return lead.Release(ctx)
	})
}

// transferHandovers alternates leadership between two sessions by Transfer
// to the other's value.
func transferHandovers(ctx context.Context, e *env, cfg config, name string) ([]time.Duration, error) {
	return alternate(ctx, e, cfg, name, func(ctx context.Context, from *redisleader.Election, _ *redisleader.Lock, to string) error {
		return from.Transfer(ctx, to)
	})
}

// A handOff ends lead, the leadership of from, for the candidate
// campaigning with value to.
type handOff func(ctx context.Context, from *redisleader.Election, lead *redisleader.Lock, to string) error

// alternate hands leadership back and forth between two sessions, which
// campaign with the values "0" and "1", cfg.handovers times.
func alternate(ctx context.Context, e *env, cfg config, name string, hand handOff) ([]time.Duration, error) {
	c := e.client()
	defer c.Close()
	list, closeAll, err := sessions(c, 2, redisleader.WithTTL(lockTTL))
	if err != nil {
		return nil, err
	}
	defer closeAll() // releases whoever leads last
	candidates, err := elections(list, name)
	if err != nil {
		return nil, err
	}
	lead, err := candidates[0].Campaign(ctx, "0")
	if err != nil {
		return nil, err
	}
	var out []time.Duration
	for i := range cfg.handovers {
		from, to := i%2, (i+1)%2
		d, next, err := leaderHandover(ctx, e, lead, candidates[from], candidates[to], strconv.Itoa(to), hand)
		if err != nil {
			return nil, err
		}
		out, lead = append(out, d), next
	}
	return out, nil
}

// leaderHandover makes follower campaign with value, hands lead over once
// the follower waits, and returns the handover latency and the new
// leadership. A follower is known to wait once the server has run its
// first acquire attempt (the script's PTTL call): Campaign subscribes
// before that attempt, so the release that follows always reaches it.
func leaderHandover(ctx context.Context, e *env, lead *redisleader.Lock, from, follower *redisleader.Election, value string, hand handOff) (time.Duration, *redisleader.Lock, error) {
	ctx, cancel := context.WithTimeout(ctx, sampleTimeout)
	defer cancel()
	before, err := commandCalls(ctx, e.admin)
	if err != nil {
		return 0, nil, err
	}
	c := startCampaign(ctx, follower, value)
	if err := waitCalls(ctx, e.admin, before, "pttl", 1); err != nil {
		c.stop()
		return 0, nil, err
	}
	t0 := time.Now()
	if err := hand(ctx, from, lead, value); err != nil {
		c.stop()
		return 0, nil, err
	}
	w := c.wait()
	return w.at.Sub(t0), w.lock, w.err
}

// rawResign is the push floor's release: compare-and-delete and PUBLISH in
// one script.
var rawResign = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]); redis.call('PUBLISH', KEYS[2], ARGV[1]); return 1 end return 0`)

func rawPushHandovers(ctx context.Context, e *env, cfg config, key string) ([]time.Duration, error) {
	c := e.client()
	defer c.Close()
	channel := key + ":ch"
	ps := c.Subscribe(ctx, channel)
	defer ps.Close()
	sctx, cancel := context.WithTimeout(ctx, sampleTimeout)
	_, err := ps.Receive(sctx) // the subscription is confirmed
	cancel()
	if err != nil {
		return nil, err
	}
	wait := func(ctx context.Context) error {
		_, err := ps.ReceiveMessage(ctx)
		return err
	}
	resign := func(ctx context.Context, token string) error {
		return rawResign.Run(ctx, c, []string{key, channel}, token).Err()
	}
	return rawHandovers(ctx, c, key, cfg.handovers, 0, wait, resign)
}

func pollHandovers(ctx context.Context, e *env, cfg config, key string) ([]time.Duration, error) {
	c := e.client()
	defer c.Close()
	wait := func(ctx context.Context) error {
		select {
		case <-time.After(pollEvery): // the polling follower's deliberate sleep
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	resign := func(ctx context.Context, token string) error {
		return rawRelease.Run(ctx, c, []string{key}, token).Err()
	}
	return rawHandovers(ctx, c, key, cfg.polls, pollEvery, wait, resign)
}

// rawHandovers hands key over n times between raw go-redis leaders and
// followers. The follower tries SET NX PX, and after each failure waits with
// wait before it tries again; the leader resigns with resign once the
// follower has failed once, after a random delay in [0, phase) when phase
// is not zero (so that a polling follower's period is not phase-locked to
// the release).
func rawHandovers(ctx context.Context, c *redis.Client, key string, n int, phase time.Duration,
	wait func(context.Context) error, resign func(context.Context, string) error) ([]time.Duration, error) {
	leader := rawToken()
	if ok, err := rawSetNX(ctx, c, key, leader, lockTTL); err != nil || !ok {
		return nil, errors.Join(errors.New("the first raw leader could not take the key"), err)
	}
	defer func() { _ = rawRelease.Run(context.Background(), c, []string{key}, leader).Err() }()
	var out []time.Duration
	for range n {
		d, next, err := rawHandover(ctx, c, key, leader, phase, wait, resign)
		if err != nil {
			return nil, err
		}
		out, leader = append(out, d), next
	}
	return out, nil
}

// rawWon is a raw follower's outcome: its token and when it took the key.
type rawWon struct {
	token string
	at    time.Time
	err   error
}

// rawHandover runs one raw handover from leader and returns its latency and
// the new leader's token.
func rawHandover(ctx context.Context, c *redis.Client, key, leader string, phase time.Duration,
	wait func(context.Context) error, resign func(context.Context, string) error) (time.Duration, string, error) {
	ctx, cancel := context.WithTimeout(ctx, sampleTimeout)
	defer cancel()
	waiting := make(chan struct{})
	done := make(chan rawWon, 1)
	go func() {
		token := rawToken()
		for first := true; ; first = false {
			ok, err := rawSetNX(ctx, c, key, token, lockTTL)
			switch {
			case err != nil:
				done <- rawWon{err: err}
				return
			case ok:
				done <- rawWon{token: token, at: time.Now()}
				return
			case first:
				close(waiting)
			}
			if err := wait(ctx); err != nil {
				done <- rawWon{err: err}
				return
			}
		}
	}()
	select {
	case <-waiting:
	case w := <-done:
		return 0, "", errors.Join(errors.New("the follower did not find the key held"), w.err)
	}
	if phase > 0 {
		<-time.After(rand.N(phase))
	}
	t0 := time.Now()
	if err := resign(ctx, leader); err != nil {
		cancel()
		<-done
		return 0, "", err
	}
	w := <-done
	return w.at.Sub(t0), w.token, w.err
}
