//go:build linux

package scenario

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redisleader/redisleader"
	"github.com/redisleader/redisleader/internal/history"
)

// S28: while three candidates hand leadership around (terms of 50–150ms),
// an attacker allowed to publish on the election's channel floods it with
// forged acquisitions (fences near 2^53 and just above the real leader's),
// forged releases of the real leader and garbage. An observer must report
// only real leaders, with their real fences, and every one of them; the
// leases themselves are untouched (pub/sub is a hint for waiters too).
func s28Forged(t *testing.T) {
	h := newHarness(t, "S28")
	cs := []*candidate{h.candidate("a", nil), h.candidate("b", nil), h.candidate("c", nil)}
	obs := h.candidate("observer", nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var (
		mu   sync.Mutex
		seen []redisleader.Leader
	)
	first := make(chan struct{})
	changed := make(chan struct{}, 1)
	observed := make(chan struct{})
	go func() {
		defer close(observed)
		for l := range obs.election().Observe(ctx) {
			mu.Lock()
			if len(seen) == 0 {
				close(first)
			}
			seen = append(seen, l)
			mu.Unlock()
			select {
			case changed <- struct{}{}:
			default:
			}
		}
	}()
	<-first // subscribed and read once

	channel := h.key + ":ch"
	forged := 0
	h.fault("forged-publish", true)
	forgeCtx, stopForging := context.WithCancel(ctx)
	forging := make(chan struct{})
	go func() {
		defer close(forging)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-forgeCtx.Done():
				return
			case <-tick.C:
			}
			cur, _ := h.admin.Get(forgeCtx, h.key).Result()
			_, rest, _ := strings.Cut(cur, "\n")
			fs, _, _ := strings.Cut(rest, "\n")
			fence, _ := strconv.ParseInt(fs, 10, 64)
			payloads := []string{
				"A1000\nFAKE\n9007199254740000\nattacker",
				fmt.Sprintf("A1000\nFAKE\n%d\nattacker-next", fence+1),
				fmt.Sprintf("RFAKE\n%d\n", fence),
				"garbage", "", "A", "R",
			}
			p := payloads[i%len(payloads)]
			if h.admin.Publish(forgeCtx, channel, p).Err() == nil {
				forged++
			}
		}
	}()
	contendAll(3*time.Second, 50*time.Millisecond, 150*time.Millisecond, nil, cs...)
	stopForging()
	<-forging
	h.fault("forged-publish", false)

	// The last leader resigned: wait for the observer's final vacancy.
	timeout := time.After(3 * g8(ttl))
	for vacant := false; !vacant; {
		mu.Lock()
		vacant = seen[len(seen)-1].Fence == 0
		mu.Unlock()
		if !vacant {
			select {
			case <-changed:
			case <-timeout:
				vacant = true // the check below reports it
			}
		}
	}
	cancel()
	<-observed

	real := map[int64]string{}
	for _, e := range h.rec.Events() {
		if e.Kind == history.Acquired {
			real[e.Fence] = e.Who
		}
	}
	// Every forged payload names an "attacker". A real value with a fence no
	// candidate was handed is a key that really was in Redis: an attempt
	// that took it as its campaign's context ended, deleted right after
	// (counted, not an error).
	reported, bogus, unhanded := map[int64]bool{}, 0, 0
	for _, l := range seen {
		if l.Fence == 0 {
			continue
		}
		who, ok := real[l.Fence]
		switch {
		case l.Value != "a" && l.Value != "b" && l.Value != "c", ok && who != l.Value:
			bogus++
		case !ok:
			unhanded++
		default:
			reported[l.Fence] = true
		}
	}
	h.check(forged > 100, "only %d forged messages published", forged)
	h.check(bogus == 0, "Observe reported %d leaders that never led: %v", bogus, seen)
	h.check(len(reported) == len(real), "Observe reported %d of %d real leaders", len(reported), len(real))
	h.check(seen[len(seen)-1].Fence == 0, "Observe's last state is %+v, not the final vacancy", seen[len(seen)-1])
	h.note("forged_published", "%d", forged)
	h.note("forged_reported", "%d", bogus)
	h.note("real_leaders", "%d", len(real))
	h.note("real_reported", "%d", len(reported))
	h.note("unhanded_keys_reported", "%d", unhanded)
	h.finish(false)
}
