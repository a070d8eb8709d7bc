package redisleader

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader/internal/redisserver"
	"github.com/redisleader/redisleader/internal/syncbuf"
	"github.com/redisleader/redisleader/internal/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisleader/redisleader/internal/lease"
)

// The least-privilege ACL user docs/operations.md documents (section "ACL"): the
// required rule, and what the optional features add.
const (
	aclRule = "on >secret resetkeys resetchannels ~redisleader:* &redisleader:* -@all " +
		"+evalsha +eval +get +set +pexpire +pttl +time +del +publish +subscribe +unsubscribe +ping +multi +exec"
	aclOptional = "+wait +config|get +info"
	aclCluster  = "+cluster|slots +command +asking" // for a *redis.ClusterClient
	// aclIdentity is what Redis 7.2+ and Valkey add: go-redis sends CLIENT
	// SETINFO on every connect (unless DisableIdentity), which the rule above
	// denies, and each denial adds an ACL LOG entry. Redis 7.0 has no such
	// subcommand and rejects the rule.
	aclIdentity = "+client|setinfo"
	// aclFair is what WithFairness adds: the queue's sorted sets.
	aclFair = "+exists +pexpireat +zadd +zcard +zrange +zrangebyscore +zrank +zrem +zscore"
	// aclSuccession is what docs/operations.md adds for priorities and Transfer.
	aclSuccession = "+pexpireat +zadd +zrange +zrangebyscore +zrem +zscore"
	// aclDelifeq and aclDelex are what a plain lock's native release adds
	// on a server with DELIFEQ or DELEX (internal/lease/native.go), whose
	// MULTI and EXEC the required rule has (every server has them, and the
	// release asks for the delete inside them); a server without the
	// command rejects a rule that names it.
	aclDelifeq = "+delifeq"
	aclDelex   = "+delex"
)

// nativeRule returns aclDelifeq or aclDelex where srv has the command
// (asked, as the library learns it), else nothing; and the commands of the
// required rule that the native commands replace there, which nothing
// then runs: PEXPIRE (renew.lua's) where SET … IFEQ renews, DEL
// (release.lua's) where the native release deletes.
func nativeRule(t testing.TB, srv *redisserver.Server) (rule string, replaced []string) {
	has := probeNatives(t, srv.Client(t))
	if has.ifeq {
		replaced = append(replaced, "pexpire")
	}
	switch {
	case has.delifeq:
		return aclDelifeq, append(replaced, "del")
	case has.delex:
		return aclDelex, append(replaced, "del")
	}
	return "", replaced
}

// aclCommands are the commands the required rule allows.
func aclCommands() []string {
	var cmds []string
	for _, f := range strings.Fields(aclRule) {
		if c, ok := strings.CutPrefix(f, "+"); ok {
			cmds = append(cmds, c)
		}
	}
	return cmds
}

// hasSetinfo reports whether srv has CLIENT SETINFO (Redis 7.2+, Valkey):
// a gate on the version, which on Valkey is valkey_version.
func hasSetinfo(t testing.TB, srv *redisserver.Server) bool {
	v := srv.Version(t)
	return v.Name == "valkey" || v.AtLeast("redis", 7, 2)
}

// identityRule returns what srv needs beyond the required rule: aclIdentity
// where it has CLIENT SETINFO, and the native delete where it has one
// (nativeRule).
func identityRule(t testing.TB, srv *redisserver.Server) string {
	native, _ := nativeRule(t, srv)
	if hasSetinfo(t, srv) {
		return aclIdentity + " " + native
	}
	return native
}

// setUser creates or changes an ACL user on the server admin talks to.
func setUser(t testing.TB, admin *redis.Client, name string, rules ...string) {
	t.Helper()
	args := []any{"acl", "setuser", name}
	for _, r := range rules {
		for _, f := range strings.Fields(r) {
			args = append(args, f)
		}
	}
	require.NoError(t, admin.Do(context.Background(), args...).Err())
}

// userClient returns a client that authenticates as an ACL user.
func userClient(t testing.TB, srv *redisserver.Server, name string) *redis.Client {
	return srv.Client(t, func(o *redis.Options) {
		o.Username, o.Password, o.ContextTimeoutEnabled = name, "secret", true
	})
}

// warnLog returns a logger option that keeps warnings, and the buffer.
func warnLog() (Option, *syncbuf.Buffer) {
	var buf syncbuf.Buffer
	return WithLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))), &buf
}

// aclLog returns the server's ACL log: every denial since the last reset.
func aclLog(t testing.TB, admin *redis.Client) []any {
	t.Helper()
	log, err := admin.Do(context.Background(), "acl", "log").Slice()
	require.NoError(t, err)
	return log
}

// TestReadmeDocumentsTheACLRule: the rules the tests here run with are the
// ones the operations guide (docs/operations.md, ACL) tells operators to use.
func TestReadmeDocumentsTheACLRule(t *testing.T) {
	readme, err := os.ReadFile("docs/operations.md")
	require.NoError(t, err)
	rule := strings.Replace(aclRule, ">secret", ">PASSWORD", 1)
	assert.Contains(t, string(readme), "ACL SETUSER redisleader "+rule)
	assert.Contains(t, string(readme), aclOptional)
	assert.Contains(t, string(readme), aclCluster)
	assert.Contains(t, string(readme), aclIdentity)
	assert.Contains(t, string(readme), "DisableIdentity")
	assert.Contains(t, string(readme), aclDelifeq)
	assert.Contains(t, string(readme), aclDelex)
}

// TestACLClientSetinfo: on a server with CLIENT SETINFO (7.2+, Valkey) the
// documented rule without aclIdentity denies what go-redis sends on every
// connect (the ACL log fills), and either aclIdentity or a client with
// DisableIdentity keeps the log empty while a lock is taken and released.
func TestACLClientSetinfo(t *testing.T) {
	srv := redisserver.Start(t)
	if !hasSetinfo(t, srv) {
		t.Skipf("%v has no CLIENT SETINFO (Redis 7.2+ and Valkey have it)", srv.Version(t))
	}
	admin := srv.Client(t)
	ctx := context.Background()
	native, _ := nativeRule(t, srv)
	lockOnce := func(t *testing.T, c *redis.Client) {
		s := newSession(t, c, WithTTL(time.Second))
		l, err := s.TryLock(ctx, "setinfo")
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
		require.NoError(t, s.Close(ctx))
	}
	for _, tt := range []struct {
		name            string
		rules           []string
		disableIdentity bool
		denied          bool
	}{
		{"rule without aclIdentity", []string{aclRule, aclOptional, native}, false, true},
		{"rule with aclIdentity", []string{aclRule, aclOptional, aclIdentity, native}, false, false},
		{"DisableIdentity", []string{aclRule, aclOptional, native}, true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			setUser(t, admin, "setinfo", "reset")
			setUser(t, admin, "setinfo", tt.rules...)
			require.NoError(t, admin.Do(ctx, "acl", "log", "reset").Err())
			lockOnce(t, srv.Client(t, func(o *redis.Options) {
				o.Username, o.Password, o.ContextTimeoutEnabled = "setinfo", "secret", true
				o.DisableIdentity = tt.disableIdentity
			}))
			log := aclLog(t, admin)
			if !tt.denied {
				assert.Empty(t, log, "the server denied something")
				return
			}
			require.NotEmpty(t, log, "nothing denied CLIENT SETINFO")
			for _, e := range log {
				assert.Contains(t, fmt.Sprint(e), "client|setinfo", "a denial other than CLIENT SETINFO")
			}
		})
	}
}

// TestACLLeastPrivilege runs everything the library does as the documented
// least-privilege user: TryLock, renewal and Release; a blocking Lock woken
// by a release; the pruning of a channel nobody waits on; Campaign, Leader
// and Observe across a handover; Close. The server denies nothing (its ACL
// log stays empty), the sessions log no failure, and every command of the
// rule was used, so dropping any one of them breaks something.
func TestACLLeastPrivilege(t *testing.T) {
	srv := redisserver.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	native, replaced := nativeRule(t, srv)
	setUser(t, admin, "redisleader", aclRule, aclOptional, identityRule(t, srv))
	require.NoError(t, admin.ConfigResetStat(ctx).Err())
	c := userClient(t, srv, "redisleader")
	logOpt, logs := warnLog()
	opts := []Option{WithTTL(300 * time.Millisecond), logOpt}
	roundA, roundsA := rounds()
	roundB, roundsB := rounds()
	a := newSession(t, c, append(opts, roundA)...)
	b := newSession(t, c, append(opts, roundB)...)

	// A lock: taken, renewed, released.
	l, err := a.TryLock(ctx, "acl-lock")
	require.NoError(t, err)
	for range 2 {
		require.False(t, waitRound(t, roundsA, 2*time.Second), "a renewal failed")
	}
	assert.True(t, l.Held())

	// A blocking Lock waits for the holder and is woken by its release.
	waiting := make(chan *Lock, 1)
	go func() {
		l, err := b.Lock(ctx, "acl-lock")
		assert.NoError(t, err)
		waiting <- l
	}()
	require.NoError(t, l.Release(ctx))
	var lb *Lock
	select {
	case lb = <-waiting:
		require.NotNil(t, lb)
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting Lock was not woken by the release")
	}
	// Nobody has waited on the name's channel for over a TTL when b's own
	// release arrives there, so b's watcher unsubscribes from it.
	for range 4 {
		require.False(t, waitRound(t, roundsB, 2*time.Second), "a renewal failed")
	}
	require.NoError(t, lb.Release(ctx))

	// An election: a bystander observes a handover from a to b.
	bystander := mustElection(t, newSession(t, c, opts...), "acl-election")
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	o := observe(octx, bystander)
	o.waitFor(t, "initial vacancy", func(l Leader) bool { return l.Fence == 0 })
	la, err := mustElection(t, a, "acl-election").Campaign(ctx, "a")
	require.NoError(t, err)
	o.waitFor(t, "leader a", func(l Leader) bool { return l.Value == "a" })
	next := campaign(t, ctx, mustElection(t, b, "acl-election"), "b")
	require.NoError(t, la.Release(ctx))
	lb = <-next
	require.NotNil(t, lb)
	o.waitFor(t, "leader b", func(l Leader) bool { return l.Value == "b" && l.Fence == lb.Fence() })
	leader, err := bystander.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, "b", leader.Value)
	ocancel()

	require.NoError(t, b.Close(ctx))
	require.NoError(t, a.Close(ctx))
	assert.ErrorIs(t, lb.Err(), ErrSessionClosed)
	n, err := admin.Exists(ctx, "redisleader:{acl-election}").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "Close released the leadership")

	assert.Empty(t, aclLog(t, admin), "the server denied something")
	assert.NotContains(t, logs.String(), "failed", "a call failed")
	assert.NotContains(t, logs.String(), "could not check")
	for _, cmd := range aclCommands() {
		if cmd == "ping" || slices.Contains(replaced, cmd) {
			// PING: the pub/sub connection's health check, only after max(3 TTL,
			// 10s) of silence; replaced: the native commands run instead.
			continue
		}
		assert.Eventually(t, func() bool {
			stats, err := admin.Info(ctx, "commandstats").Result()
			return err == nil && strings.Contains(stats, "cmdstat_"+cmd+":calls=")
		}, 2*time.Second, 10*time.Millisecond, "the rule allows %s, which nothing used", cmd)
	}
	if native != "" {
		allUsed(t, admin, native)
	}
}

// TestACLCluster: on Redis Cluster the documented user also needs what
// go-redis's ClusterClient reads, the slot map (CLUSTER SLOTS) and the
// command table (COMMAND; without it every call sends COMMAND again and is
// denied), and ASKING, which it sends to follow an ASK redirection while a
// slot migrates: locks on names across the masters and an election then
// work, the leader renews while its slot is half moved, and no node denies
// anything.
func TestACLCluster(t *testing.T) {
	cluster := redisserver.StartCluster(t, 3)
	for _, n := range cluster.Nodes() {
		setUser(t, n.Client(t), "redisleader", aclRule, aclOptional, aclCluster, identityRule(t, n))
	}
	c := cluster.Client(t, func(o *redis.ClusterOptions) {
		o.Username, o.Password, o.ContextTimeoutEnabled = "redisleader", "secret", true
	})
	ctx := context.Background()
	round, roundDone := rounds()
	s := newSession(t, c, WithTTL(time.Second), round)
	for _, name := range []string{"a", "b", "c", "d", "e", "f"} {
		l, err := s.TryLock(ctx, name)
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
	}
	l, err := mustElection(t, s, "cluster-election").Campaign(ctx, "v")
	require.NoError(t, err)

	// While its slot migrates, the leader's renewals reach the keys on the
	// importing node through ASK redirections: go-redis sends ASKING there.
	slot, _, dst := slotOf(cluster, l.Key())
	finish := cluster.BeginMigration(t, slot, dst)
	for range 4 { // the first report may be of a round before the migration
		require.False(t, waitRound(t, roundDone, 3*time.Second), "a renewal failed mid-migration")
	}
	assert.True(t, l.Held(), "the leadership survived the migration's ASK redirections: %v", l.Err())
	finish()
	require.NoError(t, l.Release(ctx))
	require.NoError(t, s.Close(ctx))
	for _, n := range cluster.Nodes() {
		assert.Empty(t, aclLog(t, n.Client(t)), "node %s denied something", n.Addr())
	}
}

// TestACLDeniedChannel: without the channel permission, a blocking Lock on
// context.Background() returns at once with a permanent error that says what
// was denied, and the denied attempt wrote nothing: no lock key, the fence
// key as it was. (Regression: Redis 7 words a denial inside a script as
// "ERR The user executing the script can't …", which was retried forever,
// and the acquire script had set both keys before its PUBLISH failed.) The
// error is checked for what it means (an *wire.ACLError naming the channel, with
// the server's reason in any known wording; see aclWordings).
func TestACLDeniedChannel(t *testing.T) {
	srv := redisserver.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	setUser(t, admin, "nochannel", aclRule, "resetchannels")
	s := newSession(t, userClient(t, srv, "nochannel"), WithTTL(time.Second))

	for name, fence := range map[string]string{"denied-fresh": "", "denied-fenced": "42"} {
		k := lease.NewKeys(name)
		if fence != "" {
			require.NoError(t, admin.Set(ctx, k.Fence, fence, 0).Err())
		}
		start := time.Now()
		done := make(chan error, 1)
		go func() {
			_, err := s.Lock(ctx, k.Name)
			done <- err
		}()
		var err error
		select {
		case err = <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("a blocking Lock without the channel permission did not return")
		}
		t.Logf("Lock returned after %v: %v", time.Since(start), err)
		assertDenied(t, err, "permission denied for PUBLISH "+k.Channel+" (ACL): ", aclWordings.script(deniedChannel, "nochannel", "publish"))
		_, err = s.TryLock(ctx, k.Name)
		assertDenied(t, err, "permission denied for PUBLISH "+k.Channel+" (ACL): ", aclWordings.script(deniedChannel, "nochannel", "publish"))

		n, err := admin.Exists(ctx, k.Lock).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "the denied attempts left a lock key")
		got, err := admin.Get(ctx, k.Fence).Result()
		if fence == "" {
			assert.ErrorIs(t, err, redis.Nil, "the denied attempts wrote a fence key")
		} else {
			assert.Equal(t, fence, got, "the denied attempts changed the fence key")
		}
	}
}

// TestACLDeniedCommands: whichever command the user lacks, TryLock fails
// with a permanent error naming it (and its key or channel) and the
// server's reason for that kind of denial in any known wording (see
// aclWordings), and writes nothing.
func TestACLDeniedCommands(t *testing.T) {
	srv := redisserver.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	for _, tt := range []struct {
		without  string // ACL rules applied after the documented ones
		what     string // in the error, after "permission denied "; the library's words
		denial   aclDenial
		inScript bool   // denied inside the script (redis.call), or the script call itself
		cmd      string // the denied command, as the server names it
	}{
		{"-publish", "for PUBLISH redisleader:{no-publish}:ch (ACL): ", deniedCommand, true, "publish"},
		{"-time", "for TIME (ACL): ", deniedCommand, true, "time"},
		{"-get", "for GET redisleader:{no-get} (ACL): ", deniedCommand, true, "get"},
		{"-set", "for SET redisleader:{no-set}:fence (ACL): ", deniedCommand, true, "set"},
		{"-evalsha", "running EVALSHA on keys redisleader:{no-evalsha} redisleader:{no-evalsha}:fence (ACL): ", deniedCommand, false, "evalsha"},
		{"-eval", "running EVAL on keys redisleader:{no-eval} redisleader:{no-eval}:fence (ACL): ", deniedCommand, false, "eval"},
		{"resetkeys ~other:*", "running EVALSHA on keys redisleader:{no-keys} redisleader:{no-keys}:fence (ACL): ", deniedKey, false, "evalsha"},
	} {
		name := "no-" + strings.TrimPrefix(strings.Fields(tt.without)[0], "-")
		if name == "no-resetkeys" {
			name = "no-keys"
		}
		t.Run(name, func(t *testing.T) {
			setUser(t, admin, name, aclRule, tt.without)
			require.NoError(t, admin.ScriptFlush(ctx).Err()) // so that EVAL is needed
			k := lease.NewKeys(name)
			require.NoError(t, admin.Set(ctx, k.Fence, "42", 0).Err())
			s := newSession(t, userClient(t, srv, name), WithTTL(time.Second))
			_, err := s.TryLock(ctx, name)
			wordings := aclWordings.outside(tt.denial, name, tt.cmd)
			if tt.inScript {
				wordings = aclWordings.script(tt.denial, name, tt.cmd)
			}
			assertDenied(t, err, "permission denied "+tt.what, wordings)
			n, err := admin.Exists(ctx, k.Lock).Result()
			require.NoError(t, err)
			assert.Zero(t, n, "the denied attempt left a lock key")
			got, _ := admin.Get(ctx, k.Fence).Result()
			assert.Equal(t, "42", got, "the denied attempt changed the fence key")
		})
	}
}

// settingsWarnings runs a session on clients until its server check has
// run (before its first renewal round) and returns its warnings.
func settingsWarnings(t *testing.T, redlock bool, clients ...Client) string {
	t.Helper()
	logOpt, logs := warnLog()
	round, roundDone := rounds()
	opts := []Option{WithTTL(300 * time.Millisecond), round, logOpt}
	var s *Session
	if redlock {
		var err error
		s, err = NewRedlockSession(clients, opts...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close(context.Background()) })
	} else {
		s = newSession(t, clients[0], opts...)
	}
	ctx := context.Background()
	_, err := s.TryLock(ctx, "settings")
	require.NoError(t, err)
	require.False(t, waitRound(t, roundDone, 5*time.Second))
	require.NoError(t, s.Close(ctx))
	return logs.String()
}

// TestSettingsUncheckedAreWarned: a user whose ACL denies CONFIG and INFO
// (-@dangerous, the usual hardening) gets one warning per session that the
// server's settings could not be checked, and why (one for a Redlock
// session too, with every node's reasons). (Regression: it was a debug
// message, so the eviction and persistence warnings silently disappeared.)
func TestSettingsUncheckedAreWarned(t *testing.T) {
	const rule = "on >secret ~redisleader:* &redisleader:* +@all -@dangerous"
	srv := redisserver.Start(t)
	setUser(t, srv.Client(t), "hardened", rule)
	out := settingsWarnings(t, false, userClient(t, srv, "hardened"))
	assert.Equal(t, 1, strings.Count(out, "could not check the Redis server's settings"), out)
	assertOneOf(t, out, "CONFIG GET: ", aclWordings.outside(deniedCommand, "hardened", "config|get"))
	assertOneOf(t, out, "INFO replication: ", aclWordings.outside(deniedCommand, "hardened", "info"))

	var nodes []Client
	for range 3 {
		srv := redisserver.Start(t)
		setUser(t, srv.Client(t), "hardened", rule)
		nodes = append(nodes, userClient(t, srv, "hardened"))
	}
	out = settingsWarnings(t, true, nodes...)
	assert.Equal(t, 1, strings.Count(out, "could not check the Redis server's settings"), out)
	assert.Equal(t, 3, strings.Count(out, "CONFIG GET: NOPERM"), out)
}

// TestACLReplicated: on a primary with a replica, the documented user with
// +wait takes and releases locks with WithReplicaAcks (no denial in the ACL
// log); and a user denied CONFIG but allowed INFO still gets the warning
// about replicas without WithReplicaAcks, besides the warning that the
// other settings could not be checked. (Regression, the latter: one failed
// command skipped every check.)
func TestACLReplicated(t *testing.T) {
	primary, _, _ := replicated(t)
	admin := primary.Client(t)
	ctx := context.Background()
	t.Run("WithReplicaAcks", func(t *testing.T) {
		setUser(t, admin, "redisleader", aclRule, aclOptional, identityRule(t, primary))
		require.NoError(t, admin.Do(ctx, "acl", "log", "reset").Err())
		// Call timeout 1s: a first call also dials and authenticates, and
		// under the race detector on a busy machine that, the script and
		// WAIT's 200ms took longer than 500ms (the default for TTL 3s).
		s := newSession(t, userClient(t, primary, "redisleader"), WithTTL(6*time.Second), WithReplicaAcks(1, 200*time.Millisecond))
		l, err := s.TryLock(ctx, "acked")
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
		require.NoError(t, s.Close(ctx))
		assert.Empty(t, aclLog(t, admin))
	})
	t.Run("replicas checked without CONFIG", func(t *testing.T) {
		setUser(t, admin, "noconfig", "on >secret ~redisleader:* &redisleader:* +@all -config")
		out := settingsWarnings(t, false, userClient(t, primary, "noconfig"))
		assert.Contains(t, out, "connected_replicas=1")
		assert.Contains(t, out, "CONFIG GET: NOPERM")
		assert.NotContains(t, out, "INFO replication:")
	})
}

// TestACLRevokedChannel: with the channel permission revoked while a lock
// is held, renewals go on (they publish nothing), and Release fails with
// the permission error and deletes nothing (the key expires with its TTL):
// a script that cannot publish writes nothing.
func TestACLRevokedChannel(t *testing.T) {
	srv := redisserver.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	setUser(t, admin, "revoked", aclRule)
	round, roundDone := rounds()
	s := newSession(t, userClient(t, srv, "revoked"), WithTTL(300*time.Millisecond), round)
	l, err := s.TryLock(ctx, "revoked")
	require.NoError(t, err)
	setUser(t, admin, "revoked", "resetchannels")
	for range 3 {
		require.False(t, waitRound(t, roundDone, 2*time.Second), "a renewal failed without the channel permission")
	}
	assert.True(t, l.Held())
	err = l.Release(ctx)
	assert.ErrorContains(t, err, "permission denied for PUBLISH redisleader:{revoked}:ch (ACL)")
	v, err := admin.Get(ctx, l.Key()).Result()
	require.NoError(t, err, "the release that could not publish deleted the key")
	assert.True(t, strings.HasPrefix(v, l.lease.Token+"\n"))
}

func TestPermanentACLErrors(t *testing.T) {
	for _, msg := range []string{
		// Redis 7.0, a denial inside a script (redis.call).
		"ERR The user executing the script can't run this command or subcommand script: 05fc4503a1a80103617a76da01f0bd4554a5fe93, on @user_script:1.",
		"ERR The user executing the script can't publish to the channel mentioned in the command script: 05fc4503a1a80103617a76da01f0bd4554a5fe93, on @user_script:1.",
		"ERR The user executing the script can't access at least one of the keys mentioned in the command arguments script: 5c306038d6091f2835d0e71a729d768f915b864f, on @user_script:1.",
		// Redis 7.2 and later.
		"ERR ACL failure in script: User u has no permissions to run the 'publish' command script: 05fc4503a1a80103617a76da01f0bd4554a5fe93, on @user_script:1.",
		// Outside a script.
		"NOPERM this user has no permissions to access one of the channels used as arguments",
	} {
		assert.True(t, permanent(redisErr(msg)), msg)
	}
	assert.True(t, permanent(&wire.ACLError{Msg: "permission denied for TIME (ACL): ERR The user executing the script can't run this command or subcommand"}))
}

// TestACLFair: fair mode runs as the documented user plus aclFair (see
// docs/operations.md, section ACL): waiters queue, their re-checks renew their places,
// a release wakes the head, a waiter gives up; nothing is denied, and every
// command aclFair adds is used.
func TestACLFair(t *testing.T) {
	srv := redisserver.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	setUser(t, admin, "redisleader", aclRule, aclOptional, aclFair, identityRule(t, srv))
	require.NoError(t, admin.ConfigResetStat(ctx).Err())
	c := userClient(t, srv, "redisleader")
	logOpt, logs := warnLog()
	opts := []Option{WithFairness(), WithTTL(300 * time.Millisecond), logOpt}
	a := newSession(t, c, opts...)
	l, err := a.Lock(ctx, "acl-fair")
	require.NoError(t, err)

	// Two waiters queue and check again about a TTL later, renewing their
	// places (the second behind the first: ZRANK).
	var served []chan *Lock
	for i := range 2 {
		hook, locked := queued()
		w := newSession(t, c, append(opts, hook)...)
		ch := make(chan *Lock, 1)
		go func() {
			l, err := w.Lock(ctx, "acl-fair")
			assert.NoError(t, err, "waiter %d", i)
			ch <- l
		}()
		served = append(served, ch)
		recvWithin(t, locked, 5*time.Second, "waiter queued")
		recvWithin(t, locked, 5*time.Second, "waiter checks again")
	}
	// A third gives up (EXISTS, in leaving).
	hook, locked := queued()
	g := newSession(t, c, append(opts, hook)...)
	gctx, gcancel := context.WithCancel(ctx)
	gave := make(chan error, 1)
	go func() {
		_, err := g.Lock(gctx, "acl-fair")
		gave <- err
	}()
	recvWithin(t, locked, 5*time.Second, "third waiter queued")
	gcancel()
	require.ErrorIs(t, recvWithin(t, gave, 5*time.Second, "the third gives up"), context.Canceled)
	require.NoError(t, g.Close(ctx))

	require.NoError(t, l.Release(ctx))
	for _, ch := range served {
		l := recvWithin(t, ch, 5*time.Second, "waiter served")
		require.NotNil(t, l)
		require.NoError(t, l.Release(ctx))
	}

	assert.Empty(t, aclLog(t, admin), "the server denied something")
	assert.NotContains(t, logs.String(), "failed", "a call failed")
	allUsed(t, admin, aclFair)
}

// TestACLSuccession: priorities and Transfer run as the least-privilege
// user plus aclSuccession, with no denial, and use every command it adds.
func TestACLSuccession(t *testing.T) {
	srv := redisserver.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	setUser(t, admin, "redisleader", aclRule, aclOptional, aclSuccession, identityRule(t, srv))
	require.NoError(t, admin.ConfigResetStat(ctx).Err())
	c := userClient(t, srv, "redisleader")
	logOpt, logs := warnLog()
	opts := fastOpts(logOpt)
	e := mustElection(t, newSession(t, c, opts...), "acl-succession")
	lead, err := e.Campaign(ctx, "a", WithPriority(1))
	require.NoError(t, err)
	next := make(chan *Lock, 1)
	peer := mustElection(t, newSession(t, c, opts...), "acl-succession")
	go func() {
		l, err := peer.Campaign(ctx, "b", WithPriority(1))
		assert.NoError(t, err)
		next <- l
	}()
	waitEnlisted(t, e, "a", "b")
	require.NoError(t, e.Transfer(ctx, "b"))
	b := recvWithin(t, next, 5*time.Second, "b leads")
	require.NotNil(t, b)
	require.NoError(t, b.Release(ctx))
	assert.Greater(t, b.Fence(), lead.Fence())

	assert.Empty(t, aclLog(t, admin), "the server denied something")
	assert.NotContains(t, logs.String(), "failed", "a call failed")
	allUsed(t, admin, aclSuccession)
}

// allUsed checks that the server ran every command that rule allows.
func allUsed(t *testing.T, admin *redis.Client, rule string) {
	t.Helper()
	for _, f := range strings.Fields(rule) {
		cmd := strings.TrimPrefix(f, "+")
		assert.Eventually(t, func() bool {
			stats, err := admin.Info(context.Background(), "commandstats").Result()
			return err == nil && strings.Contains(stats, "cmdstat_"+cmd+":calls=")
		}, 2*time.Second, 10*time.Millisecond, "%q allows %s, which nothing used", rule, cmd)
	}
}

// TestACLRetriedAcquire: an acquire whose reply was lost is re-sent with
// its token and finds the key its own, which refreshes the key's TTL with
// what the documented rule allows (SET of the same value; it was
// PEXPIREAT, which the rule lacks), so the lock is held, not refused with
// a permission error while its key blocks the name for a TTL.
func TestACLRetriedAcquire(t *testing.T) {
	srv := redisserver.Start(t)
	admin := srv.Client(t)
	setUser(t, admin, "redisleader", aclRule, aclOptional, identityRule(t, srv))
	var drop atomic.Int32
	c := dropClient(t, srv.Addr(), &drop, func(o *redis.Options) {
		o.Username, o.Password = "redisleader", "secret"
	})
	checked := serverChecked(c)
	s := newSession(t, c)
	ctx := context.Background()
	first, err := s.TryLock(ctx, "acl-retried-warm")
	require.NoError(t, err)
	waitClosed(t, checked, 5*time.Second, "the session's check of the server's settings")

	drop.Store(1) // the acquire runs; its reply is lost; go-redis re-sends it
	l, err := s.TryLock(ctx, "acl-retried")
	require.NoError(t, err, "the re-sent acquire finds the key its own")
	assert.Zero(t, drop.Load())
	h, ok := lease.ParseHolder(admin.Get(ctx, l.Key()).Val())
	require.True(t, ok)
	assert.Equal(t, l.lease.Token, h.Token)
	assert.Equal(t, l.Fence(), h.Fence, "one fence for one acquisition")
	require.NoError(t, l.Release(ctx))
	require.NoError(t, first.Release(ctx))
	assert.Empty(t, aclLog(t, admin), "the server denied something")
}
