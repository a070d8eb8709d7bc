//go:build linux

package scenario

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader/internal/history"
	"github.com/redisleader/redisleader/internal/redisserver"
)

// aclRule is the README's least-privilege user (section "ACL").
const aclRule = "on >secret resetkeys resetchannels ~redisleader:* &redisleader:* -@all " +
	"+evalsha +eval +get +set +pexpire +pttl +time +del +publish +subscribe +unsubscribe +ping +multi +exec +config|get +info"

// setUser applies ACL rules to a user through the harness's admin client.
func (h *harness) setUser(name, rules string) {
	h.t.Helper()
	args := []any{"acl", "setuser", name}
	for _, f := range strings.Fields(rules) {
		args = append(args, f)
	}
	if err := h.admin.Do(context.Background(), args...).Err(); err != nil {
		h.t.Fatal(err)
	}
}

// keyEvent is one keyspace notification.
type keyEvent struct {
	at         time.Time
	key, event string
}

// keyspaceLog records the keyspace notifications of the election's keys
// (the server must run with notify-keyspace-events KEA).
type keyspaceLog struct {
	mu     sync.Mutex
	events []keyEvent
	more   chan struct{} // poked on every event
}

func (h *harness) watchKeyspace() *keyspaceLog {
	h.t.Helper()
	ctx := context.Background()
	ps := h.admin.PSubscribe(ctx, "__keyspace@0__:redisleader:*")
	h.t.Cleanup(func() { _ = ps.Close() })
	if _, err := ps.Receive(ctx); err != nil {
		h.t.Fatal(err)
	}
	k := &keyspaceLog{more: make(chan struct{}, 1)}
	go func() {
		for m := range ps.Channel() {
			k.mu.Lock()
			k.events = append(k.events, keyEvent{time.Now(), strings.TrimPrefix(m.Channel, "__keyspace@0__:"), m.Payload})
			k.mu.Unlock()
			select {
			case k.more <- struct{}{}:
			default:
			}
		}
	}()
	return k
}

// syncKey is the keyspace channel sync publishes a marker on.
const syncKey = "redisleader:sync"

// sync returns once every notification of a write made before it was
// called has been recorded: it publishes a marker on a keyspace channel
// (writing nothing), which Redis delivers after them, and waits for it.
func (k *keyspaceLog) sync(h *harness) {
	h.t.Helper()
	start := time.Now()
	if err := h.admin.Publish(context.Background(), "__keyspace@0__:"+syncKey, "sync").Err(); err != nil {
		h.t.Fatal(err)
	}
	k.waitFor(h, syncKey, "sync", start, 5*time.Second)
}

// since returns the events after t.
func (k *keyspaceLog) since(t time.Time) []keyEvent {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []keyEvent
	for _, e := range k.events {
		if e.at.After(t) {
			out = append(out, e)
		}
	}
	return out
}

// waitFor waits up to within for an event on key and returns when it came.
func (k *keyspaceLog) waitFor(h *harness, key, event string, after time.Time, within time.Duration) time.Time {
	h.t.Helper()
	deadline := time.After(within)
	for {
		for _, e := range k.since(after) {
			if e.key == key && e.event == event {
				return e.at
			}
		}
		select {
		case <-k.more:
		case <-deadline:
			h.t.Fatalf("no %s of %s within %v", event, key, within)
		}
	}
}

// S27: candidates run as the README's least-privilege user; an operator
// revokes the user's channel permission while g0 leads and g1 waits. g0
// keeps renewing (renewals publish nothing); its resignation fails with the
// permission error and deletes nothing, so the key expires with its TTL;
// then g1's Campaign, which found the name free, returns the permanent
// error instead of retrying, and so does a new Lock on a free name. No
// denied attempt writes anything (keyspace notifications show no set or
// del after the revocation). With the permission back, g1 leads.
func s27ACLRevoked(t *testing.T) {
	h := newHarness(t, "S27", redisserver.Options{Args: []string{"--notify-keyspace-events", "KEA"}})
	ctx := context.Background()
	h.setUser("redisleader", aclRule)
	asUser := func(o *redis.Options) { o.Username, o.Password = "redisleader", "secret" }
	g0, g1 := h.candidate("g0", asUser), h.candidate("g1", asUser)
	ks := h.watchKeyspace()
	fenceKey := h.key + ":fence"

	l0 := g0.mustLead(5 * time.Second)
	type result struct {
		err error
		at  time.Time
	}
	waiting := make(chan result, 1)
	go func() {
		l, err := g1.campaign(ctx)
		if err == nil {
			_ = l.Release(ctx)
		}
		waiting <- result{err, time.Now()}
	}()
	fence, err := h.admin.Get(ctx, fenceKey).Result()
	if err != nil {
		t.Fatal(err)
	}

	ks.sync(h) // g0's acquisition is recorded before the revocation
	revoked := time.Now()
	h.fault("acl-resetchannels", true)
	h.setUser("redisleader", "resetchannels")
	renewals := 0
	for range 3 {
		h.wait(h.expect(func(e history.Event) bool { return e.Kind == history.Renewed && e.Who == "g0" }), 2*ttl, "g0 renews without the channel")
		renewals++
	}
	h.check(l0.Held(), "g0 lost the lead without the channel permission: %v", l0.Err())
	select {
	case r := <-waiting:
		t.Fatalf("g1's Campaign returned while g0 held: %v", r.err)
	default:
	}

	relErr := l0.Release(ctx)
	h.check(relErr != nil && strings.Contains(relErr.Error(), "permission denied for PUBLISH "+h.key+":ch (ACL)"),
		"g0's resignation without the channel: %v", relErr)
	expired := ks.waitFor(h, h.key, "expired", revoked, 2*ttl)
	var r result
	select {
	case r = <-waiting:
	case <-time.After(3 * ttl):
		t.Fatal("g1's Campaign did not return after the name became free")
	}
	h.check(r.err != nil && strings.Contains(r.err.Error(), "permission denied for PUBLISH "+h.key+":ch (ACL)"),
		"g1's Campaign on the free name: %v", r.err)
	campaignMs := ms(r.at.Sub(expired))

	start := time.Now()
	_, err = g1.session().Lock(ctx, "s27-free")
	lockMs := ms(time.Since(start))
	h.check(err != nil && strings.Contains(err.Error(), "permission denied for PUBLISH redisleader:{s27-free}:ch (ACL)"),
		"a Lock on a free name: %v", err)

	ks.sync(h)
	writes := 0
	for _, e := range ks.since(revoked) {
		// g0's renewals: PEXPIRE, or SET … IFEQ where the server has it (its
		// last may be heard after the resignation began; nothing else sets
		// the key before it expires).
		renewal := e.event == "expire" || e.key == h.key && e.event == "set" && e.at.Before(expired)
		if e.key != syncKey && !renewal && e.event != "expired" { // renewals, and the lease running out
			writes++
			t.Logf("written after the revocation: %s %s", e.key, e.event)
		}
	}
	h.check(writes == 0, "the denied attempts wrote %d times", writes)
	after, _ := h.admin.Get(ctx, fenceKey).Result()
	h.check(after == fence, "the fence key changed from %s to %s", fence, after)
	h.fault("acl-resetchannels", false)

	h.setUser("redisleader", "&redisleader:*")
	g1.mustLead(5 * time.Second)
	h.note("renewals_after_revoke", "%d", renewals)
	h.note("denied_campaign_after_expiry_ms", "%.1f", campaignMs)
	h.note("denied_lock_return_ms", "%.1f", lockMs)
	h.note("writes_by_denied", "%d", writes)
	h.finish(false)
}
