package redisserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// numSlots is the number of hash slots of a Redis Cluster.
	numSlots = 16384

	clusterTimeout = 20 * time.Second      // bound on a cluster becoming ok and agreeing
	pollInterval   = 50 * time.Millisecond // between two polls of a condition
	queryTimeout   = 2 * time.Second       // per command while polling
	migrateTimeout = 5 * time.Second       // MIGRATE's own timeout (sent in ms)
	migrateBatch   = 100                   // keys per GETKEYSINSLOT and MIGRATE
	nodeTimeoutMs  = 1000                  // cluster-node-timeout
	failTailLines  = 20                    // log lines per server in a failure message
)

// Cluster is a Redis Cluster of masters without replicas started by
// StartCluster. Its processes are Servers, killed by t.Cleanup like any
// other. Methods that take a testing.TB fail the test on errors; MigrateSlot
// and RestartNode should not run concurrently with each other, the other
// methods may be called from several goroutines.
type Cluster struct {
	nodes []*Server
	ids   map[*Server]string // CLUSTER MYID; kept in nodes.conf across restarts
}

// StartCluster starts n (at least 3) redis-server masters with
// cluster-enabled yes, cluster-node-timeout 1000 (ms) and
// cluster-require-full-coverage no (a dead master only makes its own slots
// unavailable), each with its own cluster bus port (cluster-port) and, unless
// the Options ask for persistence, none. At most one Options may be given;
// its Args apply to every node and come last. The nodes are joined with
// `redis-cli --cluster create ... --cluster-replicas 0 --cluster-yes`, which
// spreads the 16384 slots evenly in the order started.
//
// StartCluster returns once every node reports cluster_state:ok in CLUSTER
// INFO and all nodes show the same n healthy masters and the same owner for
// every slot in CLUSTER NODES. It fails the test (with the nodes' log tails)
// if that does not happen within 20s or redis-cli fails, and skips it (fails
// it under CI=true) if redis-server or redis-cli is not in PATH.
func StartCluster(t testing.TB, n int, opts ...Options) *Cluster {
	t.Helper()
	requireBinaries(t, Binary(), CLI())
	if n < 3 {
		t.Fatalf("redisserver.StartCluster: n = %d, want at least 3 masters", n)
	}
	if len(opts) > 1 {
		t.Fatalf("redisserver.StartCluster: got %d Options, want at most 1", len(opts))
	}
	var o Options
	if len(opts) == 1 {
		o = opts[0]
	}
	c := &Cluster{ids: make(map[*Server]string, n)}
	for range n {
		c.nodes = append(c.nodes, start(t, func(port int, dir string) ([]string, error) {
			busPort, err := freePort()
			for err == nil && busPort == port {
				busPort, err = freePort()
			}
			if err != nil {
				return nil, fmt.Errorf("finding a free cluster bus port: %w", err)
			}
			args := buildArgs(port, dir, Options{Persistence: o.Persistence})
			args = append(args,
				"--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(busPort),
				"--cluster-config-file", "nodes.conf",
				"--cluster-node-timeout", strconv.Itoa(nodeTimeoutMs),
				"--cluster-require-full-coverage", "no")
			return append(args, o.Args...), nil
		}))
	}
	for _, s := range c.nodes {
		id, err := query(s.Addr(), queryTimeout, "CLUSTER", "MYID")
		if err != nil {
			c.fatalf(t, "redisserver: CLUSTER MYID on %s: %v", s.Addr(), err)
		}
		c.ids[s], _ = id.(string)
	}

	// One deadline for redis-cli and for the nodes agreeing.
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	deadline, _ := ctx.Deadline()
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	cmd := exec.CommandContext(ctx, CLI(), args...)
	cmd.Env = append(os.Environ(), "TERM=dumb") // no colour codes in failure messages
	cmd.SysProcAttr = sysProcAttr()
	cmd.WaitDelay = time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		c.fatalf(t, "redisserver: %s %s: %v\n%s", CLI(), strings.Join(args, " "), err, out)
	}
	if _, err := c.waitAgreed(time.Until(deadline), nil); err != nil {
		c.fatalf(t, "redisserver: cluster of %d nodes did not become ok: %v", n, err)
	}
	return c
}

// Nodes returns the cluster's nodes in the order they were started.
func (c *Cluster) Nodes() []*Server { return slices.Clone(c.nodes) }

// Addrs returns the nodes' addresses, in the order of Nodes.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, s := range c.nodes {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Client returns a new go-redis cluster client seeded with Addrs, closed on
// t.Cleanup. Only Addrs is set, so go-redis defaults apply except where the
// option funcs change them.
func (c *Cluster) Client(t testing.TB, opts ...func(*redis.ClusterOptions)) *redis.ClusterClient {
	t.Helper()
	o := &redis.ClusterOptions{Addrs: c.Addrs()}
	for _, f := range opts {
		f(o)
	}
	cc := redis.NewClusterClient(o)
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// NodeID returns the cluster node ID of s (CLUSTER MYID, read once by
// StartCluster; it survives RestartNode because nodes.conf is kept), or ""
// if s is not a node of c.
func (c *Cluster) NodeID(s *Server) string { return c.ids[s] }

// Owner returns the master that serves slot now: the node whose own CLUSTER
// NODES line claims it (if two claim it during a reconfiguration, the one
// with the higher config epoch, which the cluster converges to). It returns
// nil if no reachable node claims the slot or slot is out of range; it does
// not fail the test.
func (c *Cluster) Owner(slot int) *Server {
	if slot < 0 || slot >= numSlots {
		return nil
	}
	var (
		owner *Server
		epoch int64 = -1
	)
	for _, s := range c.nodes {
		v, err := c.view(s)
		if err != nil {
			continue
		}
		if v.owner[slot] == v.self && v.epochs[v.self] > epoch {
			owner, epoch = s, v.epochs[v.self]
		}
	}
	return owner
}

// Slot returns the hash slot of key as Redis Cluster computes it: CRC16
// (XMODEM) of the key modulo 16384, where a key containing "{...}" with at
// least one byte between the first "{" and the next "}" is hashed by that
// part only (the hash tag), so "redisleader:{x}" and "redisleader:{x}:fence"
// share a slot.
func Slot(key string) int {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if n := strings.IndexByte(key[open+1:], '}'); n > 0 {
			key = key[open+1 : open+1+n]
		}
	}
	return int(crc16(key) % numSlots)
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the checksum
// of Redis Cluster's key hashing.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// MigrateSlot moves slot, with its keys, from its current owner to dst as
// the Redis Cluster specification describes: CLUSTER SETSLOT IMPORTING on
// dst, SETSLOT MIGRATING on the source, then CLUSTER GETKEYSINSLOT and
// MIGRATE ... KEYS (which keeps TTLs) in batches of 100 until the source has
// no key left in the slot, then SETSLOT NODE dst on dst, on the source and on
// every other master. It returns once every node is ok and agrees that dst
// owns the slot (at once if dst owns it already). It fails the test, with
// the nodes' log tails, on a command error, if the slot has no owner or dst
// is not a node of c, or if the cluster does not agree within 20s.
func (c *Cluster) MigrateSlot(t testing.TB, slot int, dst *Server) {
	t.Helper()
	c.BeginMigration(t, slot, dst)()
}

// BeginMigration is MigrateSlot up to the SETSLOT NODE commands: it returns
// with the slot's keys on dst and the slot still MIGRATING on its owner and
// IMPORTING on dst, where a client that asks the owner for the slot's keys
// is redirected with ASK (and sends ASKING to dst), until it calls finish,
// which ends the move as MigrateSlot does.
func (c *Cluster) BeginMigration(t testing.TB, slot int, dst *Server) (finish func()) {
	t.Helper()
	dstID := c.ids[dst]
	if dstID == "" {
		c.fatalf(t, "redisserver: MigrateSlot(%d): destination %s is not a node of this cluster", slot, dst.Addr())
	}
	if slot < 0 || slot >= numSlots {
		c.fatalf(t, "redisserver: MigrateSlot(%d): slot out of range [0, %d)", slot, numSlots)
	}
	src := c.Owner(slot)
	if src == nil {
		c.fatalf(t, "redisserver: MigrateSlot(%d): no node serves the slot", slot)
	}
	must := func(s *Server, args ...any) any {
		t.Helper()
		v, err := query(s.Addr(), migrateTimeout+queryTimeout, args...)
		if err != nil && !errors.Is(err, redis.Nil) {
			c.fatalf(t, "redisserver: MigrateSlot(%d) from %s to %s: %v on %s: %v", slot, src.Addr(), dst.Addr(), args, s.Addr(), err)
		}
		return v
	}
	if src != dst {
		must(dst, "CLUSTER", "SETSLOT", slot, "IMPORTING", c.ids[src])
		must(src, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID)
		for deadline := time.Now().Add(clusterTimeout); ; {
			keys, _ := must(src, "CLUSTER", "GETKEYSINSLOT", slot, migrateBatch).([]any)
			if len(keys) == 0 {
				break
			}
			if time.Now().After(deadline) {
				c.fatalf(t, "redisserver: MigrateSlot(%d) from %s to %s: keys still in the slot after %v", slot, src.Addr(), dst.Addr(), clusterTimeout)
			}
			args := []any{"MIGRATE", "127.0.0.1", dst.Port(), "", 0, migrateTimeout.Milliseconds(), "KEYS"}
			must(src, append(args, keys...)...)
		}
	}
	return func() {
		t.Helper()
		if src != dst {
			must(dst, "CLUSTER", "SETSLOT", slot, "NODE", dstID)
			must(src, "CLUSTER", "SETSLOT", slot, "NODE", dstID)
			for _, s := range c.nodes {
				if s != src && s != dst {
					must(s, "CLUSTER", "SETSLOT", slot, "NODE", dstID)
				}
			}
		}
		if _, err := c.waitAgreed(clusterTimeout, func(owner []string) error {
			if owner[slot] != dstID {
				return fmt.Errorf("slot %d is owned by %s, want %s (%s)", slot, owner[slot], dstID, dst.Addr())
			}
			return nil
		}); err != nil {
			c.fatalf(t, "redisserver: MigrateSlot(%d) to %s: %v", slot, dst.Addr(), err)
		}
	}
}

// RestartNode kills s with SIGKILL (if it runs) and starts it again on the
// same port, in the same directory, with the same arguments (see
// Server.Restart): its nodes.conf survives, so it keeps its node ID and
// slots, but its data is lost unless the cluster was started with
// persistence. It returns once every node is ok again and agrees on the same
// slot map as before the restart. It fails the test, with the nodes' log
// tails, if s is not a node of c, if no node can tell the slot map before
// the restart, if the node ID changed, or if the cluster does not agree
// within 20s.
func (c *Cluster) RestartNode(t testing.TB, s *Server) {
	t.Helper()
	id := c.ids[s]
	if id == "" {
		c.fatalf(t, "redisserver: RestartNode: %s is not a node of this cluster", s.Addr())
	}
	var before []string
	for _, n := range c.nodes {
		if v, err := c.view(n); err == nil {
			before = v.owner
			break
		}
	}
	if before == nil {
		c.fatalf(t, "redisserver: RestartNode(%s): no node answers CLUSTER NODES", s.Addr())
	}
	s.Restart(t)
	if got, err := query(s.Addr(), queryTimeout, "CLUSTER", "MYID"); err != nil || got != id {
		c.fatalf(t, "redisserver: RestartNode(%s): CLUSTER MYID = %v (err %v), want %s (nodes.conf kept)", s.Addr(), got, err, id)
	}
	if _, err := c.waitAgreed(clusterTimeout, func(owner []string) error {
		for slot := range owner {
			if owner[slot] != before[slot] {
				return fmt.Errorf("slot %d is owned by %s, before the restart by %s", slot, owner[slot], before[slot])
			}
		}
		return nil
	}); err != nil {
		c.fatalf(t, "redisserver: RestartNode(%s): %v", s.Addr(), err)
	}
}

// clusterView is one node's CLUSTER NODES.
type clusterView struct {
	self   string            // ID of the node that answered
	flags  map[string]string // node ID → flags
	addrs  map[string]string // node ID → ip:port
	links  map[string]string // node ID → link state
	epochs map[string]int64  // node ID → config epoch
	owner  []string          // slot → ID of the master that has it, "" if none
}

// view asks s for CLUSTER NODES.
func (c *Cluster) view(s *Server) (*clusterView, error) {
	r, err := query(s.Addr(), queryTimeout, "CLUSTER", "NODES")
	if err != nil {
		return nil, fmt.Errorf("CLUSTER NODES on %s: %w", s.Addr(), err)
	}
	text, _ := r.(string)
	v, err := parseClusterNodes(text)
	if err != nil {
		return nil, fmt.Errorf("CLUSTER NODES on %s: %w", s.Addr(), err)
	}
	return v, nil
}

// parseClusterNodes parses a CLUSTER NODES reply. Lines are
// "<id> <ip:port@cport[,hostname]> <flags> <master> <ping-sent> <pong-recv>
// <config-epoch> <link-state> <slot>...", where a slot is "N", "N-M" or an
// open migration "[N->-id]" / "[N-<-id]" (ignored here).
func parseClusterNodes(text string) (*clusterView, error) {
	v := &clusterView{
		flags: map[string]string{}, addrs: map[string]string{}, links: map[string]string{},
		epochs: map[string]int64{}, owner: make([]string, numSlots),
	}
	for line := range strings.SplitSeq(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("short line %q", line)
		}
		id := f[0]
		addr, _, _ := strings.Cut(f[1], "@")
		v.addrs[id], v.flags[id], v.links[id] = addr, f[2], f[7]
		epoch, err := strconv.ParseInt(f[6], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("config epoch in %q: %w", line, err)
		}
		v.epochs[id] = epoch
		if slices.Contains(strings.Split(f[2], ","), "myself") {
			v.self = id
		}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				continue
			}
			lo, hi, isRange := strings.Cut(r, "-")
			if !isRange {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil || a < 0 || b >= numSlots || a > b {
				return nil, fmt.Errorf("slot range %q in %q", r, line)
			}
			for slot := a; slot <= b; slot++ {
				v.owner[slot] = id
			}
		}
	}
	if v.self == "" {
		return nil, errors.New("no line flagged myself")
	}
	return v, nil
}

// agreed checks once that every node reports cluster_state:ok, knows
// exactly the cluster's nodes (by ID and address) as connected masters
// without fail, pfail, handshake or noaddr flags, and has the same owner for
// every slot, with all slots assigned; then that check (if not nil) accepts
// that slot map. It returns the slot map.
func (c *Cluster) agreed(check func(owner []string) error) ([]string, error) {
	var owner []string
	for _, s := range c.nodes {
		info, err := query(s.Addr(), queryTimeout, "CLUSTER", "INFO")
		if err != nil {
			return nil, fmt.Errorf("CLUSTER INFO on %s: %w", s.Addr(), err)
		}
		if text, _ := info.(string); !strings.Contains(text, "cluster_state:ok") {
			return nil, fmt.Errorf("%s: cluster_state is not ok:\n%s", s.Addr(), text)
		}
		v, err := c.view(s)
		if err != nil {
			return nil, err
		}
		if v.self != c.ids[s] {
			return nil, fmt.Errorf("%s: CLUSTER NODES says it is %s, want %s", s.Addr(), v.self, c.ids[s])
		}
		if len(v.flags) != len(c.nodes) {
			return nil, fmt.Errorf("%s knows %d nodes, want %d", s.Addr(), len(v.flags), len(c.nodes))
		}
		for _, n := range c.nodes {
			id := c.ids[n]
			flags, ok := v.flags[id]
			switch {
			case !ok:
				return nil, fmt.Errorf("%s does not know node %s (%s)", s.Addr(), id, n.Addr())
			case v.addrs[id] != n.Addr():
				return nil, fmt.Errorf("%s has node %s at %q, want %s", s.Addr(), id, v.addrs[id], n.Addr())
			case v.links[id] != "connected":
				return nil, fmt.Errorf("%s: link to %s is %s", s.Addr(), n.Addr(), v.links[id])
			}
			for _, flag := range strings.Split(flags, ",") {
				switch flag {
				case "fail", "fail?", "handshake", "noaddr", "slave", "noflags":
					return nil, fmt.Errorf("%s flags %s %s", s.Addr(), n.Addr(), flags)
				}
			}
		}
		if i := slices.Index(v.owner, ""); i >= 0 {
			return nil, fmt.Errorf("%s: slot %d is not assigned", s.Addr(), i)
		}
		if owner == nil {
			owner = v.owner
			continue
		}
		for slot := range owner {
			if owner[slot] != v.owner[slot] {
				return nil, fmt.Errorf("slot %d: %s says %s, %s says %s", slot, c.nodes[0].Addr(), owner[slot], s.Addr(), v.owner[slot])
			}
		}
	}
	if check != nil {
		if err := check(owner); err != nil {
			return nil, err
		}
	}
	return owner, nil
}

// waitAgreed polls agreed until it succeeds or timeout passes.
func (c *Cluster) waitAgreed(timeout time.Duration, check func(owner []string) error) ([]string, error) {
	var owner []string
	err := poll(timeout, func() error {
		var err error
		owner, err = c.agreed(check)
		return err
	})
	return owner, err
}

// fatalf fails the test with the message and the last log lines of every node.
func (c *Cluster) fatalf(t testing.TB, format string, args ...any) {
	t.Helper()
	t.Fatalf("%s\n%s", fmt.Sprintf(format, args...), logTails(c.nodes...))
}

// Helpers shared with sentinel.go.

// requireBinaries skips the test, or fails it when CI is "true", if one of
// the programs is not found. Debian's redis-server package brings redis-cli
// (redis-tools) along, and valkey-server brings valkey-cli.
func requireBinaries(t testing.TB, names ...string) {
	t.Helper()
	for _, name := range names {
		if _, err := exec.LookPath(name); err == nil {
			continue
		}
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s; CI must install it", installHint(name))
		}
		t.Skipf("%s to run this test", installHint(name))
	}
}

// query runs one command on a fresh connection to addr (RESP2, no retries,
// timeout for dialing, reading, writing and the whole call) and returns its
// reply. A nil reply returns redis.Nil.
func query(addr string, timeout time.Duration, args ...any) (any, error) {
	c := redis.NewClient(&redis.Options{
		Addr: addr, Protocol: 2, MaxRetries: -1, DisableIdentity: true, PoolSize: 1,
		DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout,
	})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return c.Do(ctx, args...).Result()
}

// poll calls check every pollInterval until it returns nil, or returns its
// last error once timeout has passed.
func poll(timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v: %w", timeout, err)
		}
		time.Sleep(pollInterval) // polling interval, not synchronisation
	}
}

// logTails returns the last failTailLines log lines of each server, with a
// header naming it.
func logTails(servers ...*Server) string {
	var b strings.Builder
	for _, s := range servers {
		fmt.Fprintf(&b, "--- %s (pid %d), last %d log lines ---\n%s\n", s.Addr(), s.PID(), failTailLines, s.log.tail(failTailLines))
	}
	return b.String()
}

// splitAddr splits "host:port".
func splitAddr(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return "", 0, fmt.Errorf("port in %q: %w", addr, err)
	}
	return host, port, nil
}
