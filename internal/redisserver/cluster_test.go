package redisserver

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestSlotCRC16(t *testing.T) {
	t.Parallel()
	// The reference value from the Redis Cluster specification.
	if got := crc16("123456789"); got != 0x31C3 {
		t.Fatalf("crc16(123456789) = %#x, want 0x31c3", got)
	}
	for key, want := range map[string]int{
		"":                      0,
		"foo":                   12182,
		"{user1000}.following":  Slot("user1000"),
		"foo{}{bar}":            Slot("foo{}{bar}"), // empty first tag: whole key
		"foo{{bar}}zap":         Slot("{bar"),
		"foo{bar}{zap}":         Slot("bar"),
		"redisleader:{x}":       Slot("x"),
		"redisleader:{x}:fence": Slot("x"),
	} {
		if got := Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
}

func TestClusterSetGetAndKeyslot(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, 3)
	if got := len(c.Nodes()); got != 3 {
		t.Fatalf("len(Nodes()) = %d, want 3", got)
	}
	ids := map[string]bool{}
	for i, s := range c.Nodes() {
		if c.Addrs()[i] != s.Addr() {
			t.Fatalf("Addrs()[%d] = %s, want %s", i, c.Addrs()[i], s.Addr())
		}
		id := c.NodeID(s)
		if got := s.Do(t, "CLUSTER", "MYID"); got != id || len(id) != 40 {
			t.Fatalf("NodeID(%s) = %q, CLUSTER MYID = %v", s.Addr(), id, got)
		}
		ids[id] = true
	}
	if len(ids) != 3 {
		t.Fatalf("node IDs not distinct: %v", ids)
	}

	cc := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	owner := ownerMap(t, c)
	owners := map[*Server]int{}
	for i := range 300 {
		key := fmt.Sprintf("key:%d", i)
		if err := cc.Set(ctx, key, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
		owners[owner[Slot(key)]]++
	}
	for i := range 300 {
		key := fmt.Sprintf("key:%d", i)
		if got, err := cc.Get(ctx, key).Int(); err != nil || got != i {
			t.Fatalf("GET %s = %d, %v; want %d", key, got, err, i)
		}
	}
	var total int64
	for _, s := range c.Nodes() {
		if owners[s] == 0 {
			t.Errorf("no key of 300 hashed to %s", s.Addr())
		}
		n, _ := s.Do(t, "DBSIZE").(int64)
		if n != int64(owners[s]) {
			t.Errorf("DBSIZE on %s = %d, want %d (keys whose Slot it owns)", s.Addr(), n, owners[s])
		}
		total += n
	}
	if total != 300 || owners[nil] != 0 {
		t.Errorf("keys stored = %d (%d without an owner), want 300", total, owners[nil])
	}

	// Slot must match the server's CLUSTER KEYSLOT, hash tags included.
	keys := []string{
		"", "a", "redisleader:{x}", "redisleader:{x}:fence", "redisleader:{election/leader}",
		"{}", "{}x", "foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}", "a{b", "a}b{c}", "{a", "}{",
		"123456789", "héllo{wörld}", "\x00\xff{\x80}",
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		b := make([]byte, r.IntN(12))
		for i := range b {
			b[i] = "ab{}:x\xff"[r.IntN(7)]
		}
		keys = append(keys, string(b))
	}
	s := c.Nodes()[0]
	for _, key := range keys {
		want, _ := s.Do(t, "CLUSTER", "KEYSLOT", key).(int64)
		if got := Slot(key); int64(got) != want {
			t.Errorf("Slot(%q) = %d, CLUSTER KEYSLOT = %d", key, got, want)
		}
	}
}

func TestClusterMigrateSlot(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, 3)
	cc := c.Client(t) // learns the slot map before the migration
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()

	const key, fence = "redisleader:{x}", "redisleader:{x}:fence"
	slot := Slot(key)
	if Slot(fence) != slot {
		t.Fatalf("Slot(%q) = %d, Slot(%q) = %d; want equal", key, slot, fence, Slot(fence))
	}
	if err := cc.Set(ctx, key, "token-1", time.Minute).Err(); err != nil {
		t.Fatalf("SET %s: %v", key, err)
	}
	if err := cc.Incr(ctx, fence).Err(); err != nil {
		t.Fatalf("INCR %s: %v", fence, err)
	}
	// More keys than one MIGRATE batch, so the loop runs several times.
	for i := range 250 {
		if err := cc.Set(ctx, fmt.Sprintf("redisleader:{x}:%d", i), i, 0).Err(); err != nil {
			t.Fatalf("SET: %v", err)
		}
	}
	src := c.Owner(slot)
	if src == nil {
		t.Fatalf("Owner(%d) = nil before the migration", slot)
	}
	var dst *Server
	for _, s := range c.Nodes() {
		if s != src {
			dst = s
			break
		}
	}
	pttlBefore, _ := src.Do(t, "PTTL", key).(int64)

	c.MigrateSlot(t, slot, dst)

	if got := c.Owner(slot); got != dst {
		t.Fatalf("Owner(%d) after MigrateSlot = %v, want %s", slot, addrOf(got), dst.Addr())
	}
	if got := src.Do(t, "CLUSTER", "COUNTKEYSINSLOT", slot); got != int64(0) {
		t.Errorf("keys left in slot %d on the source = %v, want 0", slot, got)
	}
	if got := dst.Do(t, "CLUSTER", "COUNTKEYSINSLOT", slot); got != int64(252) {
		t.Errorf("keys in slot %d on the destination = %v, want 252", slot, got)
	}
	if got := dst.Do(t, "GET", key); got != "token-1" {
		t.Errorf("GET %s on the destination = %v, want token-1", key, got)
	}
	pttl, _ := dst.Do(t, "PTTL", key).(int64)
	if pttl <= 0 || pttl > pttlBefore || pttl < pttlBefore-10_000 {
		t.Errorf("PTTL %s after migration = %d ms, before %d ms; want kept (at most 10s less)", key, pttl, pttlBefore)
	}
	if got := dst.Do(t, "PTTL", fence); got != int64(-1) {
		t.Errorf("PTTL %s after migration = %v, want -1 (no TTL)", fence, got)
	}
	// The client's slot map is stale; it must follow MOVED to the new owner.
	if got, err := cc.Get(ctx, key).Result(); err != nil || got != "token-1" {
		t.Errorf("cluster client GET %s after migration = %q, %v; want token-1", key, got, err)
	}
	if got, err := cc.Incr(ctx, fence).Result(); err != nil || got != 2 {
		t.Errorf("cluster client INCR %s after migration = %d, %v; want 2", fence, got, err)
	}

	c.MigrateSlot(t, slot, dst) // already there: a no-op
	if got := c.Owner(slot); got != dst {
		t.Fatalf("Owner(%d) after a second MigrateSlot = %v, want %s", slot, addrOf(got), dst.Addr())
	}
}

func TestClusterRestartNode(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, 3)
	node := c.Nodes()[1]
	id, oldPID := c.NodeID(node), node.PID()
	var slots []int
	for slot, s := range ownerMap(t, c) {
		if s == node {
			slots = append(slots, slot)
		}
	}
	if len(slots) == 0 {
		t.Fatalf("node %s owns no slot", node.Addr())
	}
	key := fmt.Sprintf("k{%s}", keyForSlot(slots[0]))
	node.Do(t, "SET", key, "v")

	c.RestartNode(t, node)

	if node.PID() == oldPID {
		t.Fatalf("PID after RestartNode = %d, want a new process", oldPID)
	}
	if err := syscall.Kill(oldPID, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("old process %d still exists after RestartNode: kill(0) = %v", oldPID, err)
	}
	if got := node.Do(t, "CLUSTER", "MYID"); got != id {
		t.Fatalf("CLUSTER MYID after restart = %v, want %s", got, id)
	}
	for _, slot := range []int{slots[0], slots[len(slots)/2], slots[len(slots)-1]} {
		if got := c.Owner(slot); got != node {
			t.Errorf("Owner(%d) after restart = %v, want %s", slot, addrOf(got), node.Addr())
		}
	}
	for _, s := range c.Nodes() {
		if info, _ := s.Do(t, "CLUSTER", "INFO").(string); !strings.Contains(info, "cluster_state:ok") {
			t.Errorf("CLUSTER INFO on %s after restart:\n%s", s.Addr(), info)
		}
	}
	if got := node.Do(t, "GET", key); got != nil {
		t.Errorf("GET %s after restart = %v, want nil (no persistence)", key, got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cc := c.Client(t)
	if err := cc.Set(ctx, key, "again", 0).Err(); err != nil {
		t.Fatalf("cluster client SET %s after restart: %v", key, err)
	}

	// A node killed beforehand is restarted too.
	node.Kill(t)
	c.RestartNode(t, node)
	if got := c.Owner(slots[0]); got != node {
		t.Errorf("Owner(%d) after kill and restart = %v, want %s", slots[0], addrOf(got), node.Addr())
	}
}

func TestStartClusterRejectsFewNodes(t *testing.T) {
	requireBinaries(t, Binary(), CLI())
	r := &recordingTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		StartCluster(r, 2)
	}()
	<-done
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.kind != "fatal" || !strings.Contains(r.msg, "at least 3") {
		t.Fatalf("StartCluster(2): got %s %q, want fatal about at least 3 masters", r.kind, r.msg)
	}
}

// ownerMap returns the owner of every slot as the first node sees it.
func ownerMap(t *testing.T, c *Cluster) []*Server {
	t.Helper()
	v, err := c.view(c.Nodes()[0])
	if err != nil {
		t.Fatalf("%v", err)
	}
	byID := map[string]*Server{}
	for _, s := range c.Nodes() {
		byID[c.NodeID(s)] = s
	}
	owner := make([]*Server, numSlots)
	for slot, id := range v.owner {
		owner[slot] = byID[id]
	}
	return owner
}

// keyForSlot returns a key that hashes to slot.
func keyForSlot(slot int) string {
	for i := 0; ; i++ {
		if key := fmt.Sprintf("k%d", i); Slot(key) == slot {
			return key
		}
	}
}

func addrOf(s *Server) string {
	if s == nil {
		return "<nil>"
	}
	return s.Addr()
}

func TestStartClusterMissingCLI(t *testing.T) {
	requireBinaries(t, Binary())
	server, _ := exec.LookPath(Binary())
	name := filepath.Base(server)
	dir := t.TempDir() // the server but not its CLI
	if err := os.Symlink(server, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	t.Setenv("REDIS_SERVER", name)
	t.Setenv("REDIS_CLI", "")
	cli := CLI()
	for _, tc := range []struct{ ci, kind, msg string }{
		{"", "skip", cli + " not found; install it"},
		{"true", "fatal", cli + " not found; install it (apt-get"},
	} {
		t.Setenv("CI", tc.ci)
		r := &recordingTB{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			StartCluster(r, 3)
			t.Errorf("CI=%q: StartCluster returned without skipping or failing", tc.ci)
		}()
		<-done
		r.mu.Lock()
		if r.kind != tc.kind || !strings.Contains(r.msg, tc.msg) {
			t.Errorf("CI=%q: got %s %q, want %s containing %q", tc.ci, r.kind, r.msg, tc.kind, tc.msg)
		}
		r.mu.Unlock()
	}
}
