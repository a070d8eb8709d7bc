package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader"
)

// lockTTL is every contender's lock TTL (redsync's 8s default is overridden).
const lockTTL = 10 * time.Second

// baseline is the contender every ratio is taken against.
const baseline = "raw"

// The auto-pipelining rows, and the per-goroutine Sessions that show what
// the Session's own coalescing adds.
const (
	rowRawAP            = "raw-ap"
	rowRawAPFull        = "raw-ap-fd"
	rowLeaderAP         = "redisleader-ap"
	rowLeaderAPFull     = "redisleader-ap-fd"
	rowLeaderSessions   = "redisleader-16s"
	rowLeaderAPSessions = "redisleader-ap-16s"
	rowLeaderAPFullSess = "redisleader-ap-fd-16s"
	poolSessions        = 16 // the parallel scenarios' goroutines
)

// A contender is one way to take a lock: the raw go-redis floor or a library.
type contender struct {
	name string
	desc string
	// worker returns a handle on key for one goroutine; handles are never
	// shared between goroutines (a redsync Mutex is not safe for that).
	worker func(key string) worker
}

// A worker makes one non-blocking acquisition of its key and, when it
// succeeds, releases the key at once.
type worker interface {
	// try reports whether the acquisition succeeded: a key held by someone
	// else is (false, nil); any other failure, including a release that did
	// not delete the key, is an error.
	try(ctx context.Context) (bool, error)
}

// contenders builds the lock contenders on the run's servers, each with its
// own go-redis client (and so its own connection pool), and returns a
// function that closes what they opened.
func (e *env) contenders() ([]contender, func(), error) {
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	client := func(addr string) *redis.Client {
		c := redis.NewClient(clientOptions(addr))
		closers = append(closers, func() { _ = c.Close() })
		return c
	}
	addr := e.mainAddr()

	raw := client(addr)
	session, err := redisleader.NewSession(client(addr), redisleader.WithTTL(lockTTL))
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	closers = append(closers, func() { _ = session.Close(context.Background()) })
	rl := redislock.New(client(addr))
	rs1 := redsync.New(goredis.NewPool(client(addr)))
	var pools []redsyncredis.Pool
	for _, s := range e.servers[:3] {
		pools = append(pools, goredis.NewPool(client(s.addr())))
	}
	rs3 := redsync.New(pools...)
	var nodes []redisleader.Client
	var raw3 []*redis.Client
	for _, s := range e.servers[:3] {
		nodes = append(nodes, client(s.addr()))
		raw3 = append(raw3, client(s.addr()))
	}
	redlock, err := redisleader.NewRedlockSession(nodes, redisleader.WithTTL(lockTTL))
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	closers = append(closers, func() { _ = redlock.Close(context.Background()) })

	// go-redis's auto-pipelining (v9.22+, experimental): one client's
	// commands from every goroutine share batches on one writer and reader;
	// half duplex (the default) or full duplex (v9.23+).
	autoPipeliner := func(fullDuplex bool) (*redis.AutoPipeliner, error) {
		c := client(addr)
		ap, err := c.AutoPipelineWithOptions(&redis.AutoPipelineOptions{FullDuplex: fullDuplex})
		if err == nil {
			closers = append(closers, func() { _ = ap.Close() })
		}
		return ap, err
	}
	newSession := func(c redisleader.Client) (*redisleader.Session, error) {
		s, err := redisleader.NewSession(c, redisleader.WithTTL(lockTTL))
		if err == nil {
			closers = append(closers, func() { _ = s.Close(context.Background()) })
		}
		return s, err
	}
	// sessionPool hands each worker the next of n sessions on c, so that 16
	// goroutines use 16 sessions: a session with one caller never queues a
	// call (its coalescing stays idle), which shows what the coalescing
	// adds on a client that batches by itself.
	sessionPool := func(c redisleader.Client, n int) (func() *redisleader.Session, error) {
		var list []*redisleader.Session
		for range n {
			s, err := newSession(c)
			if err != nil {
				return nil, err
			}
			list = append(list, s)
		}
		var next atomic.Int64
		return func() *redisleader.Session { return list[int(next.Add(1)-1)%n] }, nil
	}
	var (
		apHalf, apFull            *redis.AutoPipeliner
		apSession, apFullSession  *redisleader.Session
		plainSessions, apSessions func() *redisleader.Session
		apFullSessions            func() *redisleader.Session
	)
	err = func() (err error) {
		if apHalf, err = autoPipeliner(false); err != nil {
			return err
		}
		if apFull, err = autoPipeliner(true); err != nil {
			return err
		}
		if apSession, err = newSession(apHalf); err != nil {
			return err
		}
		if apFullSession, err = newSession(apFull); err != nil {
			return err
		}
		if plainSessions, err = sessionPool(client(addr), poolSessions); err != nil {
			return err
		}
		if apSessions, err = sessionPool(apHalf, poolSessions); err != nil {
			return err
		}
		apFullSessions, err = sessionPool(apFull, poolSessions)
		return err
	}()
	if err != nil {
		closeAll()
		return nil, nil, err
	}

	list := []contender{
		{"raw", "the floor, plain go-redis: SET key token PX ttl NX + EVALSHA compare-and-delete",
			func(key string) worker { return &rawWorker{c: raw, key: key} }},
		{"redisleader", "this library: Session.TryLock + Lock.Release, one Session for all goroutines",
			func(key string) worker { return &leaderWorker{s: session, name: key} }},
		{"redislock", "bsm/redislock: Obtain(ctx, key, ttl, nil) (no retry) + Release",
			func(key string) worker { return &redislockWorker{c: rl, key: key} }},
		{"redsync-1", "go-redsync/redsync, one server: TryLockContext + UnlockContext, WithExpiry(ttl)",
			func(key string) worker { return &redsyncWorker{m: rs1.NewMutex(key, redsync.WithExpiry(lockTTL))} }},
		{"redsync-3", "redsync, three independent servers (quorum 2): TryLockContext + UnlockContext, WithExpiry(ttl)",
			func(key string) worker { return &redsyncWorker{m: rs3.NewMutex(key, redsync.WithExpiry(lockTTL))} }},
		{"redisleader-redlock-3", "this library over the same three servers (quorum 2): NewRedlockSession, TryLock + Release",
			func(key string) worker { return &leaderWorker{s: redlock, name: key} }},
		{rowRaw3, "redsync's protocol with no library, over the same three servers (quorum 2): SET NX PX on all at once, then compare-and-delete on all at once",
			func(key string) worker { return &raw3Worker{cs: raw3, key: key} }},
		{rowRawAP, "the floor over go-redis auto-pipelining: raw's two commands through rdb.AutoPipeline() (half duplex)",
			func(key string) worker { return &rawWorker{c: apHalf, key: key} }},
		{rowRawAPFull, "the same through AutoPipelineWithOptions(&AutoPipelineOptions{FullDuplex: true})",
			func(key string) worker { return &rawWorker{c: apFull, key: key} }},
		{rowLeaderAP, "this library over rdb.AutoPipeline() (half duplex): one Session for all goroutines",
			func(key string) worker { return &leaderWorker{s: apSession, name: key} }},
		{rowLeaderAPFull, "this library over the full-duplex AutoPipeliner: one Session for all goroutines",
			func(key string) worker { return &leaderWorker{s: apFullSession, name: key} }},
		{rowLeaderSessions, fmt.Sprintf("this library on a plain client, %d Sessions handed to the goroutines in turn (a Session with one caller never coalesces)", poolSessions),
			func(key string) worker { return &leaderWorker{s: plainSessions(), name: key} }},
		{rowLeaderAPSessions, fmt.Sprintf("this library over rdb.AutoPipeline() (half duplex), %d Sessions handed out in turn: auto-pipelining without the Session's coalescing", poolSessions),
			func(key string) worker { return &leaderWorker{s: apSessions(), name: key} }},
		{rowLeaderAPFullSess, fmt.Sprintf("the same over the full-duplex AutoPipeliner, %d Sessions handed out in turn", poolSessions),
			func(key string) worker { return &leaderWorker{s: apFullSessions(), name: key} }},
	}
	return list, closeAll, nil
}

// rawRelease is the compare-and-delete every safe Redis lock needs.
var rawRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

// rawToken returns a fresh 128-bit random token, hex-encoded, as redislock
// and redsync make theirs.
func rawToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand's contract since Go 1.24)
	return hex.EncodeToString(b[:])
}

// rawClient is what the raw floor needs of a client: a plain *redis.Client
// or an *redis.AutoPipeliner.
type rawClient interface {
	redis.Scripter
	Process(ctx context.Context, cmd redis.Cmder) error
}

// rawSetNX sends SET key token PX ttl NX and reports whether it was set.
func rawSetNX(ctx context.Context, c rawClient, key, token string, ttl time.Duration) (bool, error) {
	cmd := redis.NewBoolCmd(ctx, "set", key, token, "px", ttl.Milliseconds(), "nx")
	_ = c.Process(ctx, cmd)
	return cmd.Result()
}

type rawWorker struct {
	c   rawClient
	key string
}

func (w *rawWorker) try(ctx context.Context) (bool, error) {
	token := rawToken()
	ok, err := rawSetNX(ctx, w.c, w.key, token, lockTTL)
	if err != nil || !ok {
		return false, err
	}
	n, err := rawRelease.Run(ctx, w.c, []string{w.key}, token).Int()
	if err == nil && n != 1 {
		err = errors.New("compare-and-delete did not delete the key")
	}
	return true, err
}

// raw3Worker is redsync's protocol with no library: SET NX PX on every
// server at once; with a quorum, compare-and-delete on every server at
// once; without one, compare-and-delete where it was set.
type raw3Worker struct {
	cs  []*redis.Client
	key string
}

func (w *raw3Worker) try(ctx context.Context) (bool, error) {
	token := rawToken()
	set, errs := make([]bool, len(w.cs)), make([]error, len(w.cs))
	onAll(w.cs, func(i int, c *redis.Client) { set[i], errs[i] = rawSetNX(ctx, c, w.key, token, lockTTL) })
	won := 0
	for _, ok := range set {
		if ok {
			won++
		}
	}
	quorum := won > len(w.cs)/2
	onAll(w.cs, func(i int, c *redis.Client) {
		if !quorum && !set[i] {
			return
		}
		n, err := rawRelease.Run(ctx, c, []string{w.key}, token).Int()
		if err == nil && n != 1 && set[i] {
			err = fmt.Errorf("compare-and-delete on server %d did not delete the key", i)
		}
		errs[i] = errors.Join(errs[i], err)
	})
	return quorum, errors.Join(errs...)
}

// onAll runs f on every client at once and waits for all of them.
func onAll(cs []*redis.Client, f func(i int, c *redis.Client)) {
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() { f(i, c) })
	}
	wg.Wait()
}

type leaderWorker struct {
	s    *redisleader.Session
	name string
}

func (w *leaderWorker) try(ctx context.Context) (bool, error) {
	l, err := w.s.TryLock(ctx, w.name)
	return releaseTaken(ctx, l, err)
}

// releaseTaken is a try's outcome from a non-blocking acquisition's: held
// by another (false, nil), an error, or taken and released at once.
func releaseTaken(ctx context.Context, l *redisleader.Lock, err error) (bool, error) {
	switch {
	case errors.Is(err, redisleader.ErrLocked):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, l.Release(ctx)
}

type redislockWorker struct {
	c   *redislock.Client
	key string
}

func (w *redislockWorker) try(ctx context.Context) (bool, error) {
	l, err := w.c.Obtain(ctx, w.key, lockTTL, nil)
	switch {
	case errors.Is(err, redislock.ErrNotObtained):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, l.Release(ctx)
}

type redsyncWorker struct{ m *redsync.Mutex }

func (w *redsyncWorker) try(ctx context.Context) (bool, error) {
	var taken *redsync.ErrTaken
	err := w.m.TryLockContext(ctx)
	switch {
	case errors.As(err, &taken):
		return false, nil
	case err != nil:
		return false, err
	}
	ok, err := w.m.UnlockContext(ctx)
	if err == nil && !ok {
		err = fmt.Errorf("unlock of %s reached no quorum", w.m.Name())
	}
	return true, err
}
