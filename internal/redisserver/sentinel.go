package redisserver

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	masterName       = "mymaster"
	replicateTimeout = 20 * time.Second // bound on replicas and sentinels becoming ready
	failoverTimeout  = 15 * time.Second // bound on WaitFailover
	downAfterMs      = 500              // sentinel down-after-milliseconds
	failoverMs       = 3000             // sentinel failover-timeout
)

// ReplicatedOptions configures StartReplicated.
type ReplicatedOptions struct {
	// Replicas is the number of replicas, at least 1.
	Replicas int
	// Sentinels is the number of Sentinel processes, 0 for none. Their
	// quorum is Sentinels/2+1, so use 3 for a quorum of 2.
	Sentinels int
	// ReplicaOf, if set, returns the address a replica replicates from,
	// given the primary's address, instead of that address: tests put a
	// fault proxy there to cut replication. It is called once per replica.
	//
	// Sentinels "fix" a replica whose master address is not the primary's
	// (+fix-slave-config: they send it SLAVEOF <primary> at the first INFO
	// refresh, every 10s, that comes failover-timeout after they first saw
	// it), which would bypass the proxy. So with Sentinels, such replicas
	// run with an ACL for the default user that refuses SLAVEOF and
	// REPLICAOF except "NO ONE": a Sentinel can promote them but not
	// re-point them, and neither can a test. After a failover, other
	// replicas behind a proxy therefore keep replicating from that proxy
	// (Sentinel gives up reconfiguring them after failover-timeout).
	//
	// Sentinels do not promote a replica whose link has been down (its
	// master_link_down_since_seconds) for more than 10 × down-after-
	// milliseconds (5s) plus the time the primary has been down, so a test
	// that cuts replication in a way the replica notices (connections reset
	// or refused) and wants the replica promoted must kill the primary
	// within about 4s of the cut. A blackhole is noticed only after
	// repl-timeout (60s).
	ReplicaOf func(primaryAddr string) string
}

// Replicated is a primary with replicas, and optionally Sentinels, started by
// StartReplicated. Its processes are Servers killed by t.Cleanup like any
// other.
type Replicated struct {
	primary   *Server
	replicas  []*Server
	sentinels []*Server
}

// StartReplicated starts a primary, opts.Replicas replicas (each started with
// --replicaof the primary's address, or the address ReplicaOf returns) and
// opts.Sentinels Sentinels (redis-server <config> --sentinel, each with its
// own config file in its temp dir) that monitor the primary as "mymaster"
// with quorum Sentinels/2+1, down-after-milliseconds 500, failover-timeout
// 3000 and parallel-syncs 1. Data servers are configured like Start's, with
// --repl-diskless-sync-delay 0 so that a full sync starts at once (and see
// ReplicaOf for the ACL of replicas behind a proxy).
//
// It returns once every replica reports master_link_status:up, the primary
// reports every replica in INFO replication (connected_slaves, state=online)
// and every Sentinel reports the primary as master with the expected number
// of replicas (SENTINEL MASTER and SENTINEL REPLICAS, none down or
// disconnected) and of other Sentinels (SENTINEL SENTINELS). It fails the
// test, with the servers' log tails, if that does not happen within 20s of
// the start, and skips it (fails it under CI=true) if redis-server is not in PATH.
func StartReplicated(t testing.TB, opts ReplicatedOptions) *Replicated {
	t.Helper()
	requireBinaries(t, Binary())
	if opts.Replicas < 1 || opts.Sentinels < 0 {
		t.Fatalf("redisserver.StartReplicated: Replicas = %d, Sentinels = %d; want Replicas >= 1 and Sentinels >= 0", opts.Replicas, opts.Sentinels)
	}
	deadline := time.Now().Add(replicateTimeout)
	dataArgs := []string{"--repl-diskless-sync-delay", "0"}
	r := &Replicated{primary: Start(t, Options{Args: dataArgs})}
	for range opts.Replicas {
		addr := r.primary.Addr()
		if opts.ReplicaOf != nil {
			addr = opts.ReplicaOf(addr)
		}
		host, port, err := splitAddr(addr)
		if err != nil {
			r.fatalf(t, "redisserver: StartReplicated: replica source address %q: %v", addr, err)
		}
		args := append(slices.Clone(dataArgs), "--replicaof", host, strconv.Itoa(port))
		if opts.ReplicaOf != nil && opts.Sentinels > 0 {
			args = append(args, "--user", "default", "on", "nopass", "~*", "&*", "+@all",
				"-slaveof", "-replicaof", "+slaveof|no", "+replicaof|no")
		}
		r.replicas = append(r.replicas, Start(t, Options{Args: args}))
	}
	if err := poll(time.Until(deadline), r.replicationReady); err != nil {
		r.fatalf(t, "redisserver: StartReplicated: replication not ready: %v", err)
	}

	quorum := opts.Sentinels/2 + 1
	for range opts.Sentinels {
		r.sentinels = append(r.sentinels, start(t, func(port int, dir string) ([]string, error) {
			conf := filepath.Join(dir, "sentinel.conf")
			text := fmt.Sprintf(`port %d
bind 127.0.0.1
protected-mode no
daemonize no
dir %q
loglevel notice
sentinel resolve-hostnames no
sentinel monitor %s 127.0.0.1 %d %d
sentinel down-after-milliseconds %[3]s %[6]d
sentinel failover-timeout %[3]s %[7]d
sentinel parallel-syncs %[3]s 1
`, port, dir, masterName, r.primary.Port(), quorum, downAfterMs, failoverMs)
			if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
				return nil, err
			}
			return []string{conf, "--sentinel"}, nil
		}))
	}
	if err := poll(time.Until(deadline), r.sentinelsReady); err != nil {
		r.fatalf(t, "redisserver: StartReplicated: sentinels not ready: %v", err)
	}
	return r
}

// Primary returns the original primary, whatever its role is now.
func (r *Replicated) Primary() *Server { return r.primary }

// Replicas returns the replicas in the order started.
func (r *Replicated) Replicas() []*Server { return slices.Clone(r.replicas) }

// SentinelAddrs returns the Sentinels' addresses (none without Sentinels).
func (r *Replicated) SentinelAddrs() []string {
	addrs := make([]string, len(r.sentinels))
	for i, s := range r.sentinels {
		addrs[i] = s.Addr()
	}
	return addrs
}

// MasterName returns the name the Sentinels monitor the primary under, "mymaster".
func (r *Replicated) MasterName() string { return masterName }

// FailoverClient returns a new go-redis client from redis.NewFailoverClient
// with MasterName and SentinelAddrs set (go-redis defaults otherwise, except
// where the option funcs change them), closed on t.Cleanup. It fails the
// test if there are no Sentinels.
func (r *Replicated) FailoverClient(t testing.TB, opts ...func(*redis.FailoverOptions)) *redis.Client {
	t.Helper()
	if len(r.sentinels) == 0 {
		t.Fatalf("redisserver: FailoverClient needs Sentinels; StartReplicated was called with none")
	}
	o := &redis.FailoverOptions{MasterName: masterName, SentinelAddrs: r.SentinelAddrs()}
	for _, f := range opts {
		f(o)
	}
	c := redis.NewFailoverClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// CurrentPrimary returns the primary's address according to the first
// Sentinel that answers SENTINEL GET-MASTER-ADDR-BY-NAME. It fails the test
// if there are no Sentinels or none answers.
func (r *Replicated) CurrentPrimary(t testing.TB) string {
	t.Helper()
	if len(r.sentinels) == 0 {
		t.Fatalf("redisserver: CurrentPrimary needs Sentinels; StartReplicated was called with none")
	}
	var errs []string
	for _, s := range r.sentinels {
		addr, err := masterAddr(s)
		if err == nil {
			return addr
		}
		errs = append(errs, err.Error())
	}
	r.fatalf(t, "redisserver: CurrentPrimary: no sentinel answered: %s", strings.Join(errs, "; "))
	return ""
}

// WaitFailover waits until every Sentinel reports the same primary address,
// different from old, and the server there answers ROLE as a master, and
// returns that address. It fails the test, with the servers' log tails, if
// that does not happen within 15s or there are no Sentinels.
func (r *Replicated) WaitFailover(t testing.TB, old string) string {
	t.Helper()
	if len(r.sentinels) == 0 {
		t.Fatalf("redisserver: WaitFailover needs Sentinels; StartReplicated was called with none")
	}
	var addr string
	err := poll(failoverTimeout, func() error {
		addr = ""
		for _, s := range r.sentinels {
			got, err := masterAddr(s)
			switch {
			case err != nil:
				return err
			case got == old:
				return fmt.Errorf("sentinel %s still reports %s", s.Addr(), old)
			case addr != "" && got != addr:
				return fmt.Errorf("sentinels disagree: %s and %s", addr, got)
			}
			addr = got
		}
		role, err := query(addr, queryTimeout, "ROLE")
		if err != nil {
			return fmt.Errorf("ROLE on %s: %w", addr, err)
		}
		if v, _ := role.([]any); len(v) == 0 || v[0] != "master" {
			return fmt.Errorf("ROLE on %s = %v, want master", addr, role)
		}
		return nil
	})
	if err != nil {
		r.fatalf(t, "redisserver: WaitFailover from %s: %v", old, err)
	}
	return addr
}

// replicationReady checks once that every replica's link is up and the
// primary lists them all as online.
func (r *Replicated) replicationReady() error {
	for _, s := range r.replicas {
		info, err := infoFields(s.Addr(), "replication")
		if err != nil {
			return err
		}
		if info["master_link_status"] != "up" {
			return fmt.Errorf("replica %s: master_link_status:%s", s.Addr(), info["master_link_status"])
		}
	}
	info, err := infoFields(r.primary.Addr(), "replication")
	if err != nil {
		return err
	}
	if got := info["connected_slaves"]; got != strconv.Itoa(len(r.replicas)) {
		return fmt.Errorf("primary %s: connected_slaves:%s, want %d", r.primary.Addr(), got, len(r.replicas))
	}
	for i := range r.replicas {
		if v := info[fmt.Sprintf("slave%d", i)]; !strings.Contains(v, "state=online") {
			return fmt.Errorf("primary %s: slave%d:%s, want state=online", r.primary.Addr(), i, v)
		}
	}
	return nil
}

// sentinelsReady checks once that every Sentinel knows the primary, all
// replicas (up and connected) and all other Sentinels.
func (r *Replicated) sentinelsReady() error {
	for _, s := range r.sentinels {
		m, err := query(s.Addr(), queryTimeout, "SENTINEL", "MASTER", masterName)
		if err != nil {
			return fmt.Errorf("SENTINEL MASTER on %s: %w", s.Addr(), err)
		}
		master := fieldMap(m)
		want := map[string]string{
			"ip": "127.0.0.1", "port": strconv.Itoa(r.primary.Port()), "flags": "master",
			"num-slaves": strconv.Itoa(len(r.replicas)), "num-other-sentinels": strconv.Itoa(len(r.sentinels) - 1),
		}
		for k, v := range want {
			if master[k] != v {
				return fmt.Errorf("sentinel %s: SENTINEL MASTER %s = %q, want %q", s.Addr(), k, master[k], v)
			}
		}
		reps, err := query(s.Addr(), queryTimeout, "SENTINEL", "REPLICAS", masterName)
		if err != nil {
			return fmt.Errorf("SENTINEL REPLICAS on %s: %w", s.Addr(), err)
		}
		list, _ := reps.([]any)
		if len(list) != len(r.replicas) {
			return fmt.Errorf("sentinel %s knows %d replicas, want %d", s.Addr(), len(list), len(r.replicas))
		}
		for _, rep := range list {
			f := fieldMap(rep)
			if f["flags"] != "slave" || f["master-link-status"] != "ok" {
				return fmt.Errorf("sentinel %s: replica %s:%s flags %q, master-link-status %q", s.Addr(), f["ip"], f["port"], f["flags"], f["master-link-status"])
			}
		}
		sens, err := query(s.Addr(), queryTimeout, "SENTINEL", "SENTINELS", masterName)
		if err != nil {
			return fmt.Errorf("SENTINEL SENTINELS on %s: %w", s.Addr(), err)
		}
		if list, _ := sens.([]any); len(list) != len(r.sentinels)-1 {
			return fmt.Errorf("sentinel %s knows %d other sentinels, want %d", s.Addr(), len(list), len(r.sentinels)-1)
		}
	}
	return nil
}

// fatalf fails the test with the message and the last log lines of every
// server: primary, replicas, then Sentinels.
func (r *Replicated) fatalf(t testing.TB, format string, args ...any) {
	t.Helper()
	all := append([]*Server{r.primary}, r.replicas...)
	t.Fatalf("%s\n%s", fmt.Sprintf(format, args...), logTails(append(all, r.sentinels...)...))
}

// masterAddr asks a Sentinel for the primary's address.
func masterAddr(s *Server) (string, error) {
	v, err := query(s.Addr(), queryTimeout, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", masterName)
	if err != nil {
		return "", fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME on %s: %w", s.Addr(), err)
	}
	hp, _ := v.([]any)
	if len(hp) != 2 {
		return "", fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME on %s = %v", s.Addr(), v)
	}
	return net.JoinHostPort(fmt.Sprint(hp[0]), fmt.Sprint(hp[1])), nil
}

// infoFields runs INFO section on addr and returns its "name:value" lines.
func infoFields(addr, section string) (map[string]string, error) {
	v, err := query(addr, queryTimeout, "INFO", section)
	if err != nil {
		return nil, fmt.Errorf("INFO %s on %s: %w", section, addr, err)
	}
	text, _ := v.(string)
	m := map[string]string{}
	for line := range strings.SplitSeq(text, "\n") {
		if k, val, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = val
		}
	}
	return m, nil
}

// fieldMap turns a RESP2 flat list of names and values (or a RESP3 map)
// into a map of strings.
func fieldMap(v any) map[string]string {
	m := map[string]string{}
	switch v := v.(type) {
	case []any:
		for i := 0; i+1 < len(v); i += 2 {
			m[fmt.Sprint(v[i])] = fmt.Sprint(v[i+1])
		}
	case map[any]any:
		for k, val := range v {
			m[fmt.Sprint(k)] = fmt.Sprint(val)
		}
	}
	return m
}
