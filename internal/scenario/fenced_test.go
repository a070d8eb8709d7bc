//go:build linux

package scenario

import (
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader"
	"github.com/redisleader/redisleader/internal/history"
	"github.com/redisleader/redisleader/internal/redisserver"
)

// TestScenarioFencedWrites runs S29, the resource side of fencing on Redis
// itself (redisleader.FencedSet), on one redis-server and on a 3-master
// Cluster: a leader process stopped past its lease between its check and
// its write resumes and writes after its successor has: its write is
// refused, every write of the successor is accepted.
func TestScenarioFencedWrites(t *testing.T) {
	bin := buildBinary(t, t.TempDir(), "fencedwriter", "./testdata/fencedwriter")
	t.Run("S29", func(t *testing.T) {
		h := newHarness(t, "S29")
		s29PausedWriter(t, h, bin, []string{h.srv.Addr()}, false, func() redisleader.Client {
			return h.srv.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
		})
	})
	t.Run("S29-cluster", func(t *testing.T) {
		cluster := redisserver.StartCluster(t, 3)
		// The harness's own redis-server stays idle: here the election and
		// the data live on the Cluster.
		h := newHarness(t, "S29-cluster")
		s29PausedWriter(t, h, bin, cluster.Addrs(), true, func() redisleader.Client {
			return cluster.Client(t, func(o *redis.ClusterOptions) { o.ContextTimeoutEnabled = true })
		})
	})
}

// buildBinary builds the command pkg into dir/name.
func buildBinary(t *testing.T, dir, name, pkg string) string {
	t.Helper()
	bin := filepath.Join(dir, name)
	if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// S29: the former leader is a process of its own (testdata/fencedwriter):
// it leads, writes once through FencedSet, checks Held and reports
// write_ready, and is then stopped with SIGSTOP, for 1.5 T in all. Meanwhile
// an in-process candidate (g0, on a client of its own) takes over once the
// lease expires and writes five times with its fence. The former leader
// resumes and makes the write it had prepared, with its old fence:
// FencedSet must refuse it with ErrStaleFence naming g0's fence, g0's
// writes (five before, two after) must all be accepted, and the key must end
// with g0's last value and fence. The history checker judges the leases and
// counts stale writes accepted (the write events are what Redis answered).
// The paused process's lease events come from its own probe; its loss is
// signalled only once it runs again, with the error's text as the reason.
func s29PausedWriter(t *testing.T, h *harness, bin string, addrs []string, cluster bool, newClient func() redisleader.Client) {
	ctx := context.Background()
	key := "fenced-data:" + strings.ToLower(h.id)
	args := []string{"-addrs", strings.Join(addrs, ","), "-name", h.name, "-key", key, "-ttl", h.ttl.String(), "-who", "p0"}
	if cluster {
		args = append(args, "-cluster")
	}
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	ready := h.expect(kind(kindWriteReady))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	decoded := make(chan struct{})
	go func() {
		defer close(decoded)
		_ = history.Decode(stdout, h.add)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-decoded
		_ = cmd.Wait()
		if s := stderr.String(); s != "" {
			t.Logf("fencedwriter stderr:\n%s", s)
		}
	})
	staleFence := h.wait(ready, 10*time.Second, "p0 leads, has written once and is ready to write again").Fence

	h.fault("sigstop-writer", true)
	stopped := time.Now()
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	c := newClient()
	s, err := redisleader.NewSession(c, leaseOpts(h.ttl)...)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	el, err := s.Election(h.name)
	if err != nil {
		t.Fatal(err)
	}
	campaignCtx, cancel := context.WithTimeout(ctx, 3*g8(h.ttl))
	lead, err := el.Campaign(campaignCtx, "g0")
	cancel()
	if err != nil {
		t.Fatalf("g0 did not take over from the stopped p0: %v", err)
	}
	var accepted, tried int
	write := func(i int) {
		tried++
		err := redisleader.FencedSet(ctx, c, key, "g0 #"+strconv.Itoa(i), lead.Fence())
		ev := history.Event{Mono: history.Now(), Who: "g0", Kind: history.WriteOK, Fence: lead.Fence()}
		if err != nil {
			ev.Kind, ev.Reason = history.WriteRej, err.Error()
			h.check(false, "g0's write %d with fence %d: %v", i, lead.Fence(), err)
		} else {
			accepted++
		}
		h.add(ev)
	}
	for i := range 5 {
		write(i)
	}
	<-time.After(3*h.ttl/2 - time.Since(stopped)) // the fault's length: stopped 1.5 T in all
	pause := time.Since(stopped)

	rejected := h.expect(func(e history.Event) bool {
		return e.Who == "p0" && (e.Kind == history.WriteOK || e.Kind == history.WriteRej || e.Kind == "write_err")
	})
	heldAfter := h.expect(kind(kindHeldAfter))
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	h.fault("sigstop-writer", false)
	if _, err := stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	late := h.wait(rejected, 10*time.Second, "p0's late write")
	ha := h.wait(heldAfter, 10*time.Second, "p0's Held() after its late write")
	for i := 5; i < 7; i++ {
		write(i)
	}

	h.check(late.Kind == history.WriteRej, "p0's late write with fence %d: %s %s", staleFence, late.Kind, late.Reason)
	h.check(strings.Contains(late.Reason, "stale fence") && strings.Contains(late.Reason, " is below "+strconv.FormatInt(lead.Fence(), 10)),
		"p0's refusal %q does not name g0's fence %d", late.Reason, lead.Fence())
	h.check(ha.Reason == "false", "p0's Held() after resuming = %s", ha.Reason)
	h.check(lead.Fence() > staleFence, "g0's fence %d not above p0's %d", lead.Fence(), staleFence)
	value, err := c.(redis.Cmdable).HGet(ctx, key, "value").Result()
	h.check(err == nil && value == "g0 #6", "the key holds %q (%v), want g0's last write", value, err)
	fence, err := c.(redis.Cmdable).HGet(ctx, key, "fence").Int64()
	h.check(err == nil && fence == lead.Fence(), "the key's fence %d (%v), want g0's %d", fence, err, lead.Fence())
	if err := el.Resign(ctx); err != nil {
		t.Error(err)
	}
	_, _ = stdin.Write([]byte("exit\n"))

	rep := history.Check(h.rec.Events())
	h.check(rep.StaleAccepted == 0, "%d stale writes accepted", rep.StaleAccepted)
	h.note("topology", "%s", map[bool]string{false: "single", true: "cluster"}[cluster])
	h.note("pause_ms", "%.0f", ms(pause))
	h.note("successor_writes_ok", "%d/%d", accepted, tried)
	if late.Kind == history.WriteRej {
		h.note("stale_rejected", "1")
	} else {
		h.note("stale_rejected", "0")
	}
	h.finish(false)
}
