package redisleader

// The coalescer's edges (combine.go): calls given up while their batch was
// on its way to Redis, and failures inside the user's hooks.

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader/internal/faultproxy"
	"github.com/redisleader/redisleader/internal/redisserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// holdRule holds the commands (single or pipelined) that carry an argument
// equal to match, until release is closed; reached is closed at the first.
// With once, only the first matching command or pipeline is held.
type holdRule struct {
	match   string
	once    bool
	reached chan struct{}
	release chan struct{}
	hits    int
}

// holdHook applies holdRules to every command the client sends.
type holdHook struct {
	mu    sync.Mutex
	rules []*holdRule
	// panicOn: a script call or pipeline carrying one of these arguments
	// panics in the hook (a user hook that panics, recovered by the caller).
	panicOn map[string]bool
}

// panicking makes h panic on any call or pipeline carrying one of args (with
// none, on nothing).
func (h *holdHook) panicking(args ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.panicOn = nil
	for _, a := range args {
		if h.panicOn == nil {
			h.panicOn = map[string]bool{}
		}
		h.panicOn[a] = true
	}
}

// waitFreed waits up to 10s for get(key) to return "" (what says what
// stayed otherwise).
func waitFreed(t *testing.T, get func(key string) string, key, what string) {
	t.Helper()
	start := time.Now()
	for get(key) != "" {
		require.Less(t, time.Since(start), 10*time.Second, what)
		runtimeYield()
	}
}

// boom panics if a command of cmds carries an argument in h.panicOn.
func (h *holdHook) boom(cmds ...redis.Cmder) {
	h.mu.Lock()
	boom := false
	for _, cmd := range cmds {
		for _, a := range cmd.Args() {
			boom = boom || h.panicOn[fmt.Sprint(a)]
		}
	}
	h.mu.Unlock()
	if boom {
		panic("user hook panics (test)")
	}
}

func (h *holdHook) rule(match string, once bool) *holdRule {
	r := &holdRule{match: match, once: once, reached: make(chan struct{}), release: make(chan struct{})}
	h.mu.Lock()
	h.rules = append(h.rules, r)
	h.mu.Unlock()
	return r
}

// holding returns the rule that applies to cmds, if any, counting the hit.
func (h *holdHook) holding(cmds ...redis.Cmder) *holdRule {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.rules {
		if r.once && r.hits > 0 {
			continue
		}
		for _, cmd := range cmds {
			for _, a := range cmd.Args() {
				if fmt.Sprint(a) == r.match {
					r.hits++
					if r.hits == 1 {
						close(r.reached)
					}
					return r
				}
			}
		}
	}
	return nil
}

func (h *holdHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *holdHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isScript(cmd) {
			h.boom(cmd)
		}
		if r := h.holding(cmd); r != nil {
			<-r.release
		}
		return next(ctx, cmd)
	}
}

func (h *holdHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.boom(cmds...)
		if r := h.holding(cmds...); r != nil {
			<-r.release
		}
		return next(ctx, cmds)
	}
}

// holdWire starts a TryLock for each of two names whose commands h holds on
// the wire, filling the session's maxOnWire slots; it returns their rules
// and a channel that gets each TryLock's result (released when the test
// ends).
func holdWire(t *testing.T, s *Session, h *holdHook, prefix string) ([maxOnWire]*holdRule, <-chan error) {
	t.Helper()
	var rules [maxOnWire]*holdRule
	errc := make(chan error, maxOnWire)
	for i := range maxOnWire {
		name := fmt.Sprintf("%s-wire-%d", prefix, i)
		rules[i] = h.rule(newKeys(name).lock, true)
		go func() {
			_, err := s.TryLock(context.Background(), name)
			errc <- err // Close releases it
		}()
		waitClosed(t, rules[i].reached, 5*time.Second, name+" on the wire")
	}
	return rules, errc
}

// freeing returns a function that lets the calls rules hold through, once;
// it also runs when the test ends, before the session's Close (which waits
// for the wire).
func freeing(t *testing.T, rules ...*holdRule) func() {
	var once sync.Once
	free := func() {
		once.Do(func() {
			for _, r := range rules {
				close(r.release)
			}
		})
	}
	t.Cleanup(free)
	return free
}

// flushInto lets the first held call return, so that a flusher takes the
// queue into the batch that batch holds, then lets the other held call
// return and waits for both.
func flushInto(t *testing.T, wire [maxOnWire]*holdRule, wired <-chan error, batch *holdRule) {
	t.Helper()
	close(wire[0].release)
	waitClosed(t, batch.reached, 5*time.Second, "the batch left the flusher")
	close(wire[1].release)
	for range maxOnWire {
		require.NoError(t, recvWithin(t, wired, 5*time.Second, "a call held on the wire"))
	}
}

// onWire reads the combiner's slot count.
func (s *Session) onWireNow() int {
	s.combine.mu.Lock()
	defer s.combine.mu.Unlock()
	return s.combine.onWire
}

// waitOnWire polls until the session has n calls or batches on the wire.
func waitOnWire(t *testing.T, s *Session, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for s.onWireNow() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d on the wire, want %d", s.onWireNow(), n)
		}
		runtimeYield()
	}
}

// A Proclaim given up while its batch was on its way to Redis reaches Redis
// before the next Proclaim of the same name: the value stored (what Leader
// and Observe report) is the later one, as Lock.Value says.
func TestGivenUpProclaimLandsBeforeTheNext(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		h := &holdHook{}
		b.client.AddHook(h)
		s := newSession(t, b.client)
		e, err := s.Election("review-proclaim")
		require.NoError(t, err)
		lead, err := e.Campaign(context.Background(), "v0")
		require.NoError(t, err)

		wire, wired := holdWire(t, s, h, "proclaim")
		stale := h.rule("v-stale", true)
		ctx, cancel := context.WithCancel(context.Background())
		failed := make(chan error, 1)
		go func() { failed <- e.Proclaim(ctx, "v-stale") }()
		waitQueued(t, s, 1)
		close(wire[0].release) // its return hands the slot to a flusher, which takes the Proclaim
		waitClosed(t, stale.reached, 5*time.Second, "the flusher took the Proclaim")
		cancel()
		require.ErrorIs(t, recvWithin(t, failed, 5*time.Second, "the cancelled Proclaim"), context.Canceled)
		close(wire[1].release)
		for range maxOnWire {
			require.NoError(t, recvWithin(t, wired, 5*time.Second, "a call held on the wire"))
		}

		// "Proclaim again": it waits until the given-up one has reached
		// Redis, then succeeds.
		again := make(chan error, 1)
		go func() { again <- e.Proclaim(context.Background(), "v-new") }()
		select {
		case err := <-again:
			t.Errorf("the second Proclaim returned (%v) while the first was still on its way to Redis", err)
		case <-time.After(100 * time.Millisecond): // a negative observation window, not a synchronisation
		}
		close(stale.release) // the flusher, on its way, reaches Redis now
		select {
		case <-again:
		default:
			require.NoError(t, recvWithin(t, again, 5*time.Second, "the second Proclaim"))
		}
		assert.Equal(t, "v-new", lead.Value())
		waitOnWire(t, s, 0)
		got, err := e.Leader(context.Background())
		require.NoError(t, err)
		assert.Equal(t, "v-new", got.Value,
			"the stored value reverted to the one whose Proclaim returned %v, after a later Proclaim succeeded", context.Canceled)
		assert.Equal(t, lead.Value(), got.Value, "Leader disagrees with the leadership's own Lock.Value")
		require.NoError(t, s.Close(context.Background()))
		checkNoLeaks(t)
	})
}

// A blocking Lock's next attempt waits until its batched first attempt,
// given up at its call deadline while its batch was on its way, has reached
// Redis: after Release no phantom of the released token is left holding
// the name.
func TestLockRetryWaitsForItsGivenUpAttempt(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		h := &holdHook{}
		b.client.AddHook(h)
		const call = 500 * time.Millisecond
		s := newSession(t, b.client, WithTTL(4*time.Second), WithRenewInterval(time.Second),
			WithCallTimeout(call), WithRetryInterval(20*time.Millisecond))

		wire, wired := holdWire(t, s, h, "phantom")
		key := newKeys("review-phantom").lock
		batch := h.rule(key, true) // the batch that carries the Lock's first attempt

		start := time.Now()
		locked := make(chan tryResult, 1)
		go func() {
			l, err := s.Lock(context.Background(), "review-phantom")
			locked <- tryResult{l, err}
		}()
		waitQueued(t, s, 1)
		// A later caller joins the queue: the batch is bounded by its deadline.
		for time.Since(start) < call*6/10 {
			runtimeYield()
		}
		other := tryAll(background(1), s, []string{"review-phantom-other"})[0]
		waitQueued(t, s, 2)
		flushInto(t, wire, wired, batch)

		// The first attempt times out; the second one waits until the
		// first has reached Redis, and then finds the name its own.
		var res tryResult
		select {
		case res = <-locked:
			t.Errorf("Lock's next attempt did not wait for its given-up first attempt (%v)", res.err)
		case <-time.After(time.Until(start.Add(call * 13 / 10))): // a negative observation window past the first attempt's deadline, not a synchronisation
		}
		close(batch.release) // the batch reaches Redis
		if res.l == nil && res.err == nil {
			res = recvWithin(t, locked, 5*time.Second, "Lock")
		}
		require.NoError(t, res.err)
		require.NoError(t, res.l.Release(context.Background()))
		o := recvWithin(t, other, 5*time.Second, "the later caller's TryLock")
		require.NoError(t, o.err)
		require.NoError(t, o.l.Release(context.Background()))
		waitOnWire(t, s, 0)

		// Whatever cleans up must do so within the TTL: give the heartbeat
		// two renewal rounds and more.
		deadline := time.Now().Add(2500 * time.Millisecond)
		for b.get(key) != "" && time.Now().Before(deadline) {
			runtimeYield()
		}
		if v := b.get(key); v != "" {
			hld, _ := parseHolder(v)
			t.Errorf("after Release, %s holds the released lock's token (%v) again: a phantom lock until its TTL ends", key, hld.token == res.l.token)
			s2 := newSession(t, b.client)
			_, err := s2.TryLock(context.Background(), "review-phantom")
			assert.NoError(t, err, "another session cannot take the released name")
			require.NoError(t, s2.Close(context.Background()))
		}
		require.NoError(t, s.Close(context.Background()))
		checkNoLeaks(t)
	})
}

// Close deletes the token of a TryLock cancelled while its batch was on its
// way only after that batch has reached Redis: no token of the closed
// session is left holding the name.
func TestCloseWaitsForAGivenUpBatchedAcquire(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		h := &holdHook{}
		b.client.AddHook(h)
		s, err := NewSession(b.client)
		require.NoError(t, err)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = s.Close(ctx)
		})

		wire, wired := holdWire(t, s, h, "closing")
		key := newKeys("review-abandoned").lock
		batch := h.rule(key, true)
		ctx, cancel := context.WithCancel(context.Background())
		try := tryAll([]context.Context{ctx}, s, []string{"review-abandoned"})[0]
		waitQueued(t, s, 1)
		close(wire[0].release)
		waitClosed(t, batch.reached, 5*time.Second, "the flusher took the TryLock")
		cancel()
		res := recvWithin(t, try, 5*time.Second, "the cancelled TryLock")
		require.ErrorIs(t, res.err, context.Canceled)
		close(wire[1].release)
		for range maxOnWire {
			require.NoError(t, recvWithin(t, wired, 5*time.Second, "a call held on the wire"))
		}

		closed := make(chan error, 1)
		go func() { closed <- s.Close(context.Background()) }()
		waitClosed(t, s.Done(), 5*time.Second, "Close started")
		select {
		case err := <-closed:
			t.Errorf("Close returned (%v) while the abandoned acquire was still on its way to Redis", err)
		case <-time.After(100 * time.Millisecond): // a negative observation window, not a synchronisation
		}
		close(batch.release)
		require.NoError(t, recvWithin(t, closed, 5*time.Second, "Close"))
		assert.Empty(t, b.get(key), "after Close returned, the abandoned TryLock's token holds the name until its TTL ends")
		checkNoLeaks(t)
	})
}

// A panic in a hook on the user's client, on a call sent alone, fails the
// call with an error naming it and frees the call's slot on the wire: the
// session stays usable and Close finishes.
func TestRecoveredHookPanicFreesTheSlot(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		h := &holdHook{panicOn: map[string]bool{}}
		b.client.AddHook(h)
		s, err := NewSession(b.client, fastOpts()...)
		require.NoError(t, err)
		for i := range maxOnWire {
			key := newKeys(fmt.Sprintf("review-boom-%d", i)).lock
			h.mu.Lock()
			h.panicOn[key] = true
			h.mu.Unlock()
			_, err := s.TryLock(context.Background(), fmt.Sprintf("review-boom-%d", i))
			assert.ErrorContains(t, err, "a hook on the client panicked")
		}
		assert.Zero(t, s.onWireNow(), "slots still counted after the calls returned")
		h.panicking() // the tokens' deletes (their outcome was unknown) go through now

		l, err := s.TryLock(context.Background(), "review-after-boom")
		if assert.NoError(t, err, "a TryLock after two recovered panics") {
			require.NoError(t, l.Release(context.Background()))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		err = s.Close(ctx)
		assert.NoError(t, err, "Close")
		if errors.Is(err, context.DeadlineExceeded) {
			t.Log("Close never finished: its stopped goroutine waits in closeCombiner forever")
		}
	})
}

// Every call given up while its batch is on the wire holds its key until
// that batch has ended, however many are given up on one key: here two
// acquires of one name, each in a batch of its own, given up in turn, the
// later one's batch ending first. No later call of the session on the key
// (a Leader read, the give-backs of the two attempts) reaches Redis until
// the earlier batch has ended too. (Noticed in review: the key kept only the
// last call given up on it, so the later batch's end freed it.)
func TestEveryGivenUpCallHoldsItsKey(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		s, h := holdSession(t, b)
		key := newKeys("settle").lock
		firstBatch, secondBatch := h.rule(key, true), h.rule(key, true)
		freeFirst, freeSecond := freeing(t, firstBatch), freeing(t, secondBatch)
		wire, wired := holdWire(t, s, h, "settle")
		freeWire := []func(){freeing(t, wire[0]), freeing(t, wire[1])}
		tries := make([]chan tryResult, 2)
		cancels := make([]context.CancelFunc, 2)
		for i, batch := range []*holdRule{firstBatch, secondBatch} {
			var tctx context.Context
			tctx, cancels[i] = context.WithCancel(ctx)
			defer cancels[i]()
			tries[i] = tryAll([]context.Context{tctx}, s, []string{"settle"})[0]
			waitQueued(t, s, 1)
			freeWire[i]() // its slot goes to a flusher, which sends the try alone
			waitClosed(t, batch.reached, 5*time.Second, fmt.Sprintf("try %d's batch on the wire", i))
		}
		for i := range tries {
			cancels[i]()
			assert.ErrorIs(t, recvWithin(t, tries[i], 5*time.Second, fmt.Sprintf("try %d", i)).err, context.Canceled)
		}
		later := h.rule(key, true)
		freeLater := freeing(t, later)
		read := leaderAll(t, s, "settle")[0]
		freeSecond()
		select {
		case <-later.reached:
			t.Fatal("a later call on the key reached Redis while the first given-up try was still on the wire")
		case <-time.After(200 * time.Millisecond):
		}
		freeFirst()
		waitClosed(t, later.reached, 5*time.Second, "a later call on the key, once both batches ended")
		freeLater()
		_ = recvWithin(t, read, 5*time.Second, "the Leader read") // either try's token may hold the name by then
		for range maxOnWire {
			require.NoError(t, recvWithin(t, wired, 5*time.Second, "a call held on the wire"))
		}
		waitFreed(t, b.get, key, "a given-up try's token stayed in Redis")
		require.NoError(t, s.Close(ctx))
		checkNoLeaks(t)
	})
}

// A hook's panic while a flusher sends a batch (here on the second of two
// queued calls) fails every call of the batch with an error naming it, and
// reaches no caller as a panic: the first caller of a batch can be a
// goroutine of the session (here an Observe reader), where a panic would end
// the process. The session still works and closes. (The panic, on the
// flusher's goroutine, ended the process; then, handed to the first caller,
// it ended it through the Observe reader: found by review.)
func TestRecoveredHookPanicInABatch(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		s, h := holdSession(t, b)
		wire, wired := holdWire(t, s, h, "batch-boom")
		free := freeing(t, wire[:]...)
		e, err := s.Election("batch-boom-head")
		require.NoError(t, err)
		obsCtx, stopObserving := context.WithCancel(ctx)
		defer stopObserving()
		changes := e.Observe(obsCtx) // its first read heads the queue
		waitQueued(t, s, 1)
		h.panicking(newKeys("batch-boom-other").lock)
		head := leaderAll(t, s, "batch-boom-head")[0]
		other := leaderAll(t, s, "batch-boom-other")[0]
		waitQueued(t, s, 3)
		free()
		for _, ch := range []chan error{head, other} {
			err := recvWithin(t, ch, 5*time.Second, "a call of the batch")
			assert.ErrorContains(t, err, "a hook on the client panicked", "a call of the batch")
		}
		h.panicking()
		for range maxOnWire {
			require.NoError(t, recvWithin(t, wired, 5*time.Second, "a call held on the wire"))
		}
		l, err := s.TryLock(ctx, "batch-boom-head")
		require.NoError(t, err, "a TryLock after the panic")
		awaitObserved(t, changes, l.Fence()) // the reader lived on, and reads again
		require.NoError(t, l.Release(ctx))
		stopObserving()
		require.NoError(t, s.Close(ctx))
		checkNoLeaks(t)
	})
}

// A hook's panic during a Release that took a queued call along (a pipeline
// of two, sent on a goroutine of the session) fails both calls with an error
// naming it, and the session still works and closes. (Found by review: the
// panic ended the process.)
func TestRecoveredHookPanicInAReleasePipeline(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		s, h, locks, read, freeWire := fullWire(t, b, "pair-boom")
		h.panicking(locks[0].keys.lock)
		assert.ErrorContains(t, locks[0].Release(context.Background()), "a hook on the client panicked")
		assert.ErrorContains(t, recvWithin(t, read, 5*time.Second, "the read taken along"), "a hook on the client panicked")
		h.panicking()
		freeWire()
		require.NoError(t, s.Close(context.Background()))
		checkNoLeaks(t)
	})
}

// WithReplicaAcks: the give-back of an attempt the replicas did not
// acknowledge (a compare-and-delete with the acquisition's token) is sent at
// once, never queued behind the session's other calls, even when the wire is
// full; so it reaches Redis before the acquisition's next attempt and never
// deletes the key of a lock that attempt took (two owners). (When give-backs
// were coalesced, a give-back given up in its batch could land after the
// next attempt; now one on the wire holds up that attempt on its own
// goroutine.)
func TestGiveBackLandsBeforeTheNextAttempt(t *testing.T) {
	primary, _, link := replicated(t)
	c := primary.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	h := &holdHook{}
	c.AddHook(h)
	s := newSession(t, c, WithTTL(12*time.Second), WithRenewInterval(2*time.Second), WithCallTimeout(2*time.Second),
		WithRetryInterval(20*time.Millisecond), WithReplicaAcks(1, 200*time.Millisecond))

	// Fill the wire with two Leader reads (acquires with acks do not coalesce).
	var wire [maxOnWire]*holdRule
	wired := make(chan error, maxOnWire)
	for i := range maxOnWire {
		name := fmt.Sprintf("acks-wire-%d", i)
		r := h.rule(newKeys(name).lock, true)
		wire[i] = r
		e, err := s.Election(name)
		require.NoError(t, err)
		go func() {
			_, err := e.Leader(context.Background())
			if errors.Is(err, ErrNoLeader) {
				err = nil
			}
			wired <- err
		}()
		waitClosed(t, r.reached, 5*time.Second, name+" on the wire")
	}
	free := freeing(t, wire[:]...)
	giveBack := h.rule(fmt.Sprint(releaseScript.sha), true)
	sendGiveBack := freeing(t, giveBack)

	link.Blackhole(faultproxy.Both) // the first attempt is not acknowledged
	locked := make(chan tryResult, 1)
	go func() {
		l, err := s.Lock(context.Background(), "acks-phantom")
		locked <- tryResult{l, err}
	}()
	waitClosed(t, giveBack.reached, 5*time.Second, "the give-back sent while the wire is full")
	assert.Zero(t, s.queued(), "a call queued")
	link.Heal()
	link.ResetConns() // the replica resynchronises: the next attempt is acknowledged
	sendGiveBack()

	res := recvWithin(t, locked, 10*time.Second, "Lock")
	free()
	for range maxOnWire {
		require.NoError(t, recvWithin(t, wired, 5*time.Second, "a Leader read held on the wire"))
	}
	require.NoError(t, res.err)
	assert.EqualValues(t, 1, c.Exists(context.Background(), res.l.Key()).Val(),
		"the held lock's key was deleted by its acquisition's earlier give-back")
	s2 := newSession(t, primary.Client(t))
	l2, err := s2.TryLock(context.Background(), "acks-phantom")
	if err == nil {
		assert.True(t, res.l.Held() && l2.Held(), "both sessions hold the name")
		t.Errorf("another session took the name while the first still holds it (Held=%v): two owners", res.l.Held())
	}
	require.NoError(t, s2.Close(context.Background()))
	require.NoError(t, s.Close(context.Background()))
	checkNoLeaks(t)
}

// failHook fails, without sending them, the pipelines that carry a script
// call once armed, as a circuit breaker or rate limiter on the user's client
// does; single commands it fails the same way.
type failHook struct {
	mu    sync.Mutex
	armed bool
}

var errBreaker = errors.New("circuit open (test hook)")

func (f *failHook) on() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.armed }

func (f *failHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (f *failHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isScript(cmd) && f.on() {
			return errBreaker
		}
		return next(ctx, cmd)
	}
}
func (f *failHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if isScript(cmd) && f.on() {
				return errBreaker
			}
		}
		return next(ctx, cmds)
	}
}

// A pipeline hook that refuses a pipeline without running it (a circuit
// breaker, say): every batched call gets the hook's error, as a lone call
// does.
func TestBatchedCallsGetThePipelineHooksError(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		h := &holdHook{}
		f := &failHook{}
		b.client.AddHook(h)
		b.client.AddHook(f)
		s := newSession(t, b.client)
		f.mu.Lock()
		f.armed = true
		f.mu.Unlock()
		_, lone := s.TryLock(context.Background(), "review-lone")
		require.ErrorIs(t, lone, errBreaker, "a lone call reports the hook's error")

		wire, wired := holdWire(t, s, h, "breaker")
		names := []string{"review-breaker-a", "review-breaker-b"}
		results := tryAll(background(len(names)), s, names)
		waitQueued(t, s, len(names))
		for _, r := range wire {
			close(r.release)
		}
		for range maxOnWire {
			assert.ErrorIs(t, recvWithin(t, wired, 5*time.Second, "a call held on the wire"), errBreaker)
		}
		for i, r := range results {
			res := recvWithin(t, r, 5*time.Second, names[i])
			require.Error(t, res.err)
			assert.NotErrorIs(t, res.err, ErrLocked)
			assert.ErrorIs(t, res.err, errBreaker, "%s in a batch: the hook's error is lost", names[i])
		}
		f.mu.Lock()
		f.armed = false
		f.mu.Unlock()
		require.NoError(t, s.Close(context.Background()))
		checkNoLeaks(t)
	})
}

// A hook's panic in the pipeline a Release rode in (here on a queued Leader
// read of another name, which the release took along) fails the release, and
// the delete, which never reached Redis, is retried in the background: the
// name is freed by the heartbeat, not left taken until its TTL. (Found by
// review: the panic, then given to Release's caller, left Lock.del before it
// marked the token for the retry, as it still would for a release sent alone
// (TestReleaseRetriedAfterAHookPanicAlone).)
func TestReleaseRetriedAfterAHookPanic(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		s, h, locks, read, freeWire := fullWire(t, b, "carry-boom")
		other := leaderAll(t, s, "carry-boom-other")[0]
		waitQueued(t, s, 2)
		h.panicking(newKeys("carry-boom-other").lock)
		require.ErrorContains(t, locks[0].Release(context.Background()), "a hook on the client panicked")
		h.panicking()
		freeWire()
		assert.Error(t, recvWithin(t, read, 5*time.Second, "the read taken along"), "it rode in the pipeline that panicked")
		assert.Error(t, recvWithin(t, other, 5*time.Second, "the other read"), "it rode in the pipeline that panicked")
		start := time.Now()
		waitFreed(t, b.get, locks[0].keys.lock, "the released name is still taken")
		t.Logf("freed %v after the panic", time.Since(start))
		require.NoError(t, s.Close(context.Background()))
		checkNoLeaks(t)
	})
}

// A hook's panic on a release sent alone fails Release with an error naming
// it, and the delete, which never reached Redis, is retried in the
// background: the heartbeat frees the name.
func TestReleaseRetriedAfterAHookPanicAlone(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		h := &holdHook{}
		b.client.AddHook(h)
		s := newSession(t, b.client, WithTTL(3*time.Second))
		l, err := s.TryLock(context.Background(), "alone-boom")
		require.NoError(t, err)
		h.panicking(l.keys.lock)
		assert.ErrorContains(t, l.Release(context.Background()), "a hook on the client panicked")
		h.panicking()
		waitFreed(t, b.get, l.keys.lock, "the released name is still taken")
		require.NoError(t, s.Close(context.Background()))
		checkNoLeaks(t)
	})
}

// WithReplicaAcks: a hook's panic on the give-back of an attempt the
// replicas did not acknowledge (sent alone, on the caller's goroutine) fails
// the give-back, and the token the attempt left on the primary is deleted,
// not left holding the name for a TTL. (Found by review: the panic unwound
// the acquisition past its clean-up.)
func TestGiveBackRetriedAfterAHookPanic(t *testing.T) {
	primary, _, link := replicated(t)
	c := primary.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	h := &holdHook{panicOn: map[string]bool{fmt.Sprint(releaseScript.sha): true}}
	c.AddHook(h)
	s := newSession(t, c, WithTTL(30*time.Second), WithRenewInterval(300*time.Millisecond), WithCallTimeout(2*time.Second),
		WithRetryInterval(20*time.Millisecond), WithReplicaAcks(1, 200*time.Millisecond))
	link.Blackhole(faultproxy.Both) // the attempt is not acknowledged
	_, err := s.TryLock(context.Background(), "gb-boom")
	assert.Error(t, err, "TryLock of an unacknowledged attempt")
	link.Heal()
	h.panicking()
	waitFreed(t, func(k string) string { return c.Get(context.Background(), k).Val() }, newKeys("gb-boom").lock,
		"the unacknowledged attempt's token still holds the name (TTL 30s)")
	require.NoError(t, s.Close(context.Background()))
	checkNoLeaks(t)
}

// faultHook, once set, panics, or with goexit ends its goroutine
// (runtime.Goexit, as t.FailNow does), on every script call or pipeline
// carrying match (anyScript: every script call), before it is sent or, with
// after, once it has run.
type faultHook struct {
	mu            sync.Mutex
	match         string
	goexit, after bool
	fired         chan struct{} // closed at the first fault after set
	said          string        // the arguments the first panic after set quoted
}

const anyScript = "*"

func (f *faultHook) set(match string, goexit, after bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.match, f.goexit, f.after, f.fired, f.said = match, goexit, after, make(chan struct{}), ""
}

// fire faults if a command of cmds carries the match and when (after or
// before sending) is when the hook faults.
func (f *faultHook) fire(after bool, cmds ...redis.Cmder) {
	f.mu.Lock()
	match, goexit, hit := f.match, f.goexit, false
	var args []any
	if f.after == after && match != "" {
		for _, cmd := range cmds {
			args = append(args, cmd.Args()...)
			for _, a := range cmd.Args() {
				hit = hit || (match == anyScript && isScript(cmd)) || fmt.Sprint(a) == match
			}
		}
	}
	said := fmt.Sprint(args)
	if hit && !goexit && f.said == "" {
		f.said = said
	}
	if hit {
		select {
		case <-f.fired:
		default:
			close(f.fired)
		}
	}
	f.mu.Unlock()
	switch {
	case hit && goexit:
		runtime.Goexit()
	case hit:
		panic("user hook panics (test) on " + said) // as a logging hook might, quoting tokens
	}
}

func (f *faultHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f *faultHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		f.fire(false, cmd)
		err := next(ctx, cmd)
		f.fire(true, cmd)
		return err
	}
}

func (f *faultHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		f.fire(false, cmds...)
		err := next(ctx, cmds)
		f.fire(true, cmds...)
		return err
	}
}

// A hook that ends the goroutine sending a shared pipeline (runtime.Goexit,
// which recover does not see) fails the pipeline's calls with an error
// saying so, and gives its place on the wire back: here a release's pipeline,
// then a flusher's batch. The session still works, and Close returns. (Found
// by review: the release's pipeline stayed counted on the wire, and Close
// waited for it forever.)
func TestHookGoexitInASharedPipeline(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		g := &faultHook{}
		b.client.AddHook(g)
		s, h, locks, read, freeWire := fullWire(t, b, "goexit")
		g.set(locks[0].keys.lock, true, false)
		assert.ErrorIs(t, locks[0].Release(ctx), errHookGoexit, "the release, which heads its pipeline")
		assert.ErrorIs(t, recvWithin(t, read, 5*time.Second, "the read taken along"), errHookGoexit)
		g.set("", false, false)
		freeWire()
		assert.Zero(t, s.onWireNow(), "calls counted on the wire")

		wire, wired := holdWire(t, s, h, "goexit-batch")
		free := freeing(t, wire[:]...)
		reads := leaderAll(t, s, "goexit-batch-a", "goexit-batch-b")
		waitQueued(t, s, 2)
		g.set(newKeys("goexit-batch-a").lock, true, false)
		free()
		for _, ch := range reads {
			assert.ErrorIs(t, recvWithin(t, ch, 5*time.Second, "a read of the flusher's batch"), errHookGoexit)
		}
		g.set("", false, false)
		for range maxOnWire {
			require.NoError(t, recvWithin(t, wired, 5*time.Second, "a call held on the wire"))
		}
		l, err := s.TryLock(ctx, "goexit-after")
		require.NoError(t, err, "a TryLock after the goroutines ended")
		require.NoError(t, l.Release(ctx))
		closed := make(chan error, 1)
		go func() { closed <- s.Close(ctx) }()
		require.NoError(t, recvWithin(t, closed, 5*time.Second, "Close"))
		checkNoLeaks(t)
	})
}

// A hook that panics after a lone acquire ran in Redis (a tracing hook
// failing on the reply, say) fails the attempt with an error naming the
// panic: its outcome is unknown to the caller, and the token it left is
// deleted, not left holding the name for a TTL. (Found by review: the
// panic unwound TryLock past its clean-up.)
func TestHookPanicAfterALoneAcquireRan(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		key := newKeys("after-boom").lock
		f := &faultHook{}
		f.set(key, false, true)
		b.client.AddHook(f)
		s := newSession(t, b.client, WithTTL(30*time.Second), WithRenewInterval(300*time.Millisecond))
		_, err := s.TryLock(context.Background(), "after-boom")
		assert.ErrorContains(t, err, "a hook on the client panicked")
		f.mu.Lock()
		said := f.said
		f.mu.Unlock()
		require.NotEmpty(t, said)
		assert.NotContains(t, err.Error(), said, "the error quotes what the panic said: the acquire's arguments, its token among them")
		f.set("", false, false)
		waitFreed(t, b.get, key, "the token of the attempt whose hook panicked still holds the name (TTL 30s)")
		require.NoError(t, s.Close(context.Background()))
		checkNoLeaks(t)
	})
}

// A hook that panics on one Redlock node's calls, sent on goroutines of the
// session, fails that node's answers; the quorum of the other two takes the
// lock. (Found by review: the panic ended the process.)
func TestRedlockNodeHookPanic(t *testing.T) {
	s, _ := faultyRedlock(t, 1, false)
	l, err := s.TryLock(context.Background(), "node-boom")
	require.NoError(t, err, "a quorum of two")
	require.NoError(t, l.Release(context.Background()))
	require.NoError(t, s.Close(context.Background()))
	checkNoLeaks(t)
}

// A hook that ends the goroutines of a Redlock acquire's node calls
// (runtime.Goexit) leaves the acquire without answers: TryLock ends with its
// context, and Close returns. (Found by review: TryLock waited for the
// answers forever.)
func TestRedlockNodeHookGoexit(t *testing.T) {
	s, f := faultyRedlock(t, 3, true)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		_, err := s.TryLock(ctx, "node-goexit")
		done <- err
	}()
	assert.Error(t, recvWithin(t, done, 5*time.Second, "TryLock, its node calls ended by a hook's Goexit"))
	f.set("", false, false)
	closed := make(chan error, 1)
	go func() { closed <- s.Close(context.Background()) }()
	require.NoError(t, recvWithin(t, closed, 5*time.Second, "Close"))
	checkNoLeaks(t)
}

// faultyRedlock returns a Redlock session on three nodes whose first faulty
// clients have a faultHook, set to fault (with goexit, by runtime.Goexit) on
// every script call.
func faultyRedlock(t *testing.T, faulty int, goexit bool) (*Session, *faultHook) {
	_, cs := redlockNodes(t, 3)
	f := &faultHook{}
	f.set(anyScript, goexit, false)
	for _, c := range cs[:faulty] {
		c.(*redis.Client).AddHook(f)
	}
	s, err := NewRedlockSession(cs, fastOpts()...)
	require.NoError(t, err)
	return s, f
}

// A hook that ends the heartbeat's goroutine in a renewal round
// (runtime.Goexit) does not leave the session without renewals: a lock
// held then is renewed again once the hook stops. (Found by review: the
// heartbeat never came back, and every lock of the session expired on a
// healthy Redis.)
func TestHeartbeatSurvivesAHookGoexit(t *testing.T) {
	srv := redisserver.Start(t)
	c := srv.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	f := &faultHook{}
	c.AddHook(f)
	s := newSession(t, c, fastOpts()...)
	ctx := context.Background()
	f.set(fmt.Sprint(renewScript.sha), true, false)
	fired := f.fired
	l, err := s.TryLock(ctx, "hb-goexit")
	require.NoError(t, err)
	waitClosed(t, fired, 5*time.Second, "the hook ended the heartbeat in a renewal")
	f.set("", false, false)
	before := l.Deadline()
	start := time.Now()
	for !l.Deadline().After(before) {
		require.NoError(t, l.Err(), "the lock ended on a healthy Redis")
		require.Less(t, time.Since(start), 5*time.Second, "no renewal after the hook stopped (TTL 600ms)")
		runtimeYield()
	}
	require.NoError(t, l.Release(ctx))
	require.NoError(t, s.Close(ctx))
	checkNoLeaks(t)
}

// A hook that ends the heartbeat's goroutine (runtime.Goexit) in the
// once-per-session server check (CONFIG GET, INFO) does not make the new
// heartbeat check again before any renewal: the check is cut short once,
// and the lock is renewed on a healthy Redis. (A heartbeat that forgot it
// had checked restarted in a tight loop and never renewed.)
func TestHeartbeatGoexitInTheServerCheck(t *testing.T) {
	_, c := newMini(t)
	count := &countingHook{match: "maxmemory-policy"}
	f := &faultHook{}
	f.set("maxmemory-policy", true, false)
	c.AddHook(count) // outermost: sees every check
	c.AddHook(f)
	s := newSession(t, c, fastOpts()...) // TTL 600ms, renewals every 100ms
	ctx := context.Background()
	l, err := s.TryLock(ctx, "hb-check-goexit")
	require.NoError(t, err)
	waitClosed(t, f.fired, 5*time.Second, "the server check")
	before := l.Deadline()
	start := time.Now()
	for !l.Deadline().After(before) {
		require.NoError(t, l.Err(), "the lock ended on a healthy Redis (server checks run: %d)", count.n.Load())
		require.Less(t, time.Since(start), 5*time.Second, "no renewal after the check was cut short (TTL 600ms)")
		runtimeYield()
	}
	assert.Equal(t, int64(1), count.n.Load(), "server checks run")
	require.NoError(t, l.Release(ctx))
	require.NoError(t, s.Close(ctx))
	checkNoLeaks(t)
}

// A hook that ends the heartbeat's goroutine (runtime.Goexit) after each
// renewal has run in Redis makes every round fail: the new heartbeat
// retries after the retry delay, as after any failed round, not at once
// (it armed at the earliest lease's last renewal plus the interval, long
// past, and sent renewals back to back until the lock's deadline).
func TestHeartbeatGoexitRetriesAfterTheRetryDelay(t *testing.T) {
	_, c := newMini(t)
	count := &countingHook{match: fmt.Sprint(renewScript.sha)}
	f := &faultHook{}
	c.AddHook(count) // outermost: counts what is sent
	c.AddHook(f)
	s := newSession(t, c, fastOpts()...) // TTL 600ms, renew every 100ms, retry 20ms + jitter
	ctx := context.Background()
	l, err := s.TryLock(ctx, "hb-goexit-flood")
	require.NoError(t, err)
	f.set(fmt.Sprint(renewScript.sha), true, true) // after the renewal ran
	waitClosed(t, l.Done(), 5*time.Second, "the lock's end (its renewals' replies never reach the heartbeat)")
	f.set("", false, false)
	// At most a TTL of retries every 20ms or more: 30, and a margin.
	assert.Less(t, count.n.Load(), int64(60), "renewals sent while the hook ended the heartbeat after each")
	require.NoError(t, s.Close(ctx))
	checkNoLeaks(t)
}

// A Redlock read whose goroutine a hook ends (runtime.Goexit) on two of
// three nodes is a failure there, not "nobody holds the key": Leader
// reports that no quorum answered, never ErrNoLeader while the leader holds
// every node.
func TestRedlockLeaderWithGoexitNodes(t *testing.T) {
	s, f := faultyRedlock(t, 2, true)
	f.set("", false, false)
	ctx := context.Background()
	l, err := s.TryLock(ctx, "rl-leader-goexit")
	require.NoError(t, err)
	e, err := s.Election("rl-leader-goexit")
	require.NoError(t, err)
	f.set(fmt.Sprint(inspectScript.sha), true, false)
	_, err = e.Leader(ctx)
	f.set("", false, false)
	require.Error(t, err, "two of three nodes did not answer")
	assert.NotErrorIs(t, err, ErrNoLeader)
	ldr, err := e.Leader(ctx)
	require.NoError(t, err, "once the hook is healthy")
	assert.Equal(t, l.Fence(), ldr.Fence)
	require.NoError(t, l.Release(ctx))
	require.NoError(t, s.Close(ctx))
	checkNoLeaks(t)
}

// goexits runs f on a goroutine and reports whether a hook ended that
// goroutine (runtime.Goexit) before f returned.
func goexits(t *testing.T, f func()) bool {
	t.Helper()
	exited := make(chan bool, 1)
	go func() {
		returned := false
		defer func() { exited <- returned }()
		f()
		returned = true
	}()
	return !recvWithin(t, exited, 5*time.Second, "the goroutine")
}

// A hook that ends Close's goroutine (runtime.Goexit) while Close deletes
// the session's keys does not leave the session half closed: its
// goroutines stop, and a later Close returns once they have.
func TestHookGoexitInClose(t *testing.T) {
	_, c := newMini(t)
	f := &faultHook{}
	c.AddHook(f)
	s, err := NewSession(c, fastOpts()...)
	require.NoError(t, err)
	ctx := context.Background()
	_, err = s.TryLock(ctx, "close-goexit")
	require.NoError(t, err)
	f.set(fmt.Sprint(releaseScript.sha), true, false)
	require.True(t, goexits(t, func() { _ = s.Close(ctx) }), "Close returned: the hook did not end its goroutine")
	f.set("", false, false)
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	assert.NoError(t, s.Close(cctx), "a second Close")
	checkNoLeaks(t)
}

// A hook that ends Run's goroutine (runtime.Goexit) while Run deletes its
// term's key, once onElected has returned, still ends the term: the
// heartbeat deletes the key (TTL 30s), and Close does not wait for the term.
func TestHookGoexitInRunsRelease(t *testing.T) {
	m, c := newMini(t)
	f := &faultHook{}
	c.AddHook(f)
	s, err := NewSession(c, WithTTL(30*time.Second), WithRenewInterval(200*time.Millisecond), WithRetryInterval(20*time.Millisecond))
	require.NoError(t, err)
	e, err := s.Election("run-goexit")
	require.NoError(t, err)
	ctx := context.Background()
	require.True(t, goexits(t, func() {
		_ = e.Run(ctx, "v", func(context.Context, *Lock) error {
			f.set(fmt.Sprint(releaseScript.sha), true, false) // Run's delete of the term, next
			return errors.New("done leading (test)")
		})
	}), "Run returned: the hook did not end its goroutine")
	f.set("", false, false)
	waitFreed(t, func(k string) string { v, _ := m.Get(k); return v }, newKeys("run-goexit").lock,
		"the term's key stayed (TTL 30s)")
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	assert.NoError(t, s.Close(cctx))
	checkNoLeaks(t)
}

// A hook that ends the caller's goroutine (runtime.Goexit) after a lone
// acquire ran in Redis (a test's t.FailNow in a tracing hook, say) leaves
// the token to the heartbeat, which deletes it, as after a hook's panic
// (TestHookPanicAfterALoneAcquireRan): the name is not held for the TTL.
func TestHookGoexitAfterALoneAcquireRan(t *testing.T) {
	m, c := newMini(t)
	key := newKeys("after-goexit").lock
	f := &faultHook{}
	c.AddHook(f)
	s := newSession(t, c, WithTTL(30*time.Second), WithRenewInterval(300*time.Millisecond))
	warm, err := s.TryLock(context.Background(), "goexit-warm") // the script is cached: the next acquire is one EVALSHA
	require.NoError(t, err)
	require.NoError(t, warm.Release(context.Background()))
	f.set(key, true, true)
	require.True(t, goexits(t, func() { _, _ = s.TryLock(context.Background(), "after-goexit") }),
		"TryLock returned: the hook did not end its goroutine")
	f.set("", false, false)
	require.NotEmpty(t, func() string { v, _ := m.Get(key); return v }(), "the acquire did not run")
	waitFreed(t, func(k string) string { v, _ := m.Get(k); return v }, key,
		"the token of the attempt whose hook ended the goroutine still holds the name (TTL 30s)")
	require.NoError(t, s.Close(context.Background()))
	checkNoLeaks(t)
}

// A hook that ends an Observe reader's goroutine (runtime.Goexit) in a
// read does not close the channel, which closes only when its ctx ends or
// the session closes: the observer goes on and reports the next leader.
func TestObserveSurvivesAHookGoexit(t *testing.T) {
	_, c := newMini(t)
	f := &faultHook{}
	c.AddHook(f)
	s := newSession(t, c, fastOpts()...)
	e, err := s.Election("observe-goexit")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.set(fmt.Sprint(inspectScript.sha), true, false)
	fired := f.fired
	changes := e.Observe(ctx)
	waitClosed(t, fired, 5*time.Second, "the Observe read")
	f.set("", false, false)
	l, err := s.TryLock(ctx, "observe-goexit")
	require.NoError(t, err)
	awaitObserved(t, changes, l.Fence())
	require.NoError(t, l.Release(ctx))
	cancel()
	for range changes { // closed once ctx has ended
	}
	require.NoError(t, s.Close(context.Background()))
	checkNoLeaks(t)
}

// replyLike is a panic value that looks like a reply from Redis.
type replyLike string

func (e replyLike) Error() string { return string(e) }
func (replyLike) RedisError()     {}

// panicOnce panics with v on the first script call once armed (fire, as a
// beforeHook).
type panicOnce struct {
	armed atomic.Bool
	v     any
}

func (h *panicOnce) fire(cmds ...redis.Cmder) {
	for _, cmd := range cmds {
		if isScript(cmd) && h.armed.CompareAndSwap(true, false) {
			panic(h.v)
		}
	}
}

// A hook's panic is never taken for Redis's reply, whatever its value
// says: a blocking Lock whose attempt a hook panicked in with a value that
// reads as WRONGTYPE retries, as after any failure to hear Redis, instead of
// giving up on an error Redis never sent.
func TestHookPanicIsNotARedisReply(t *testing.T) {
	_, c := newMini(t)
	h := &panicOnce{v: replyLike("WRONGTYPE Operation against a key holding the wrong kind of value")}
	c.AddHook(beforeHook(h.fire))
	s := newSession(t, c, fastOpts()...)
	h.armed.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err := s.Lock(ctx, "reply-like")
	require.NoError(t, err, "a blocking Lock after a hook's panic")
	require.False(t, h.armed.Load(), "the hook did not panic")
	require.NoError(t, l.Release(ctx))
	require.NoError(t, s.Close(ctx))
	checkNoLeaks(t)
}

// awaitObserved reads changes until a leader with fence arrives; the
// channel must stay open meanwhile.
func awaitObserved(t *testing.T, changes <-chan Leader, fence int64) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case ch, ok := <-changes:
			require.True(t, ok, "the Observe channel closed while its ctx and the session were open")
			if ch.Fence == fence {
				return
			}
		case <-deadline:
			t.Fatal("the Observe reader never reported the new leader")
		}
	}
}
