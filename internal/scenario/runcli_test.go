//go:build linux

package scenario

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redisleader/redisleader/internal/history"
)

// TestScenarioCLI runs C1: the CLI's "redisleader run" as real processes,
// each COMMAND under the supervisor that run starts. A leading run is
// stopped past its lease (SIGSTOP; C1-ctrlz: SIGTSTP, Ctrl-Z, which stops
// COMMAND too) while a second run campaigns: the supervisor's dead-man's
// switch must end the first COMMAND before the second starts. The history
// holds the COMMANDs, not the leases: acquired when a COMMAND reports its
// start, ended when it has died, so overlaps counts two jobs at once and
// min_margin_ms is the time from the stopped COMMAND's death to the next
// one's start.
func TestScenarioCLI(t *testing.T) {
	bin := buildBinary(t, t.TempDir(), "redisleader", "github.com/redisleader/redisleader/cmd/redisleader")
	for _, tc := range []struct {
		id  string
		sig syscall.Signal
	}{{"C1", syscall.SIGSTOP}, {"C1-ctrlz", syscall.SIGTSTP}} {
		t.Run(tc.id, func(t *testing.T) { c1StoppedRun(t, newHarness(t, tc.id), bin, tc.sig) })
	}
}

// cliJob is the COMMAND of C1: it ignores SIGTERM, so that only SIGKILL
// ends it (at the latest moment the switch allows), opens $FIFO, writes its
// fence there and becomes sleep 60, which holds the FIFO until it dies.
const cliJob = `trap '' TERM; exec 3>"$FIFO"; echo "$REDISLEADER_FENCE" >&3; exec sleep 60`

// c1StoppedRun: run "a" leads; run "b" campaigns; a is stopped with sig and
// left stopped until b's COMMAND has started and a's has died; then a is
// continued and must exit 3 (leadership lost), and b is stopped.
func c1StoppedRun(t *testing.T, h *harness, bin string, sig syscall.Signal) {
	dir := t.TempDir()
	aEnded := h.expect(endedBy("a"))
	a := h.cliRun(bin, "a", dir)
	h.wait(h.expect(acquiredBy("a")), 10*time.Second, "a's COMMAND starts")
	b := h.cliRun(bin, "b", dir)
	b.waitLine(t, "campaigning for leadership")

	h.fault("stop-run-"+sigName(sig), true)
	stoppedAt := history.Now()
	if err := a.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	bStarted := h.wait(h.expect(acquiredBy("b")), 3*g8(h.ttl), "b's COMMAND starts once a's lease has expired")
	select {
	case e := <-aEnded.ch:
		h.note("stopped_command_ran_ms", "%.0f", float64(e.Mono-stoppedAt)/1e6)
		h.check(e.Mono < bStarted.Mono, "a's COMMAND died %.1fms after b's started", float64(e.Mono-bStarted.Mono)/1e6)
	case <-time.After(2 * time.Second):
		h.check(false, "a's COMMAND still runs 2s after b's started")
	}
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	h.fault("stop-run-"+sigName(sig), false)
	code := a.exit(t)
	h.check(code == 3, "a, continued, exited %d, want 3 (leadership lost); stderr:\n%s", code, a.stderr.String())
	h.check(strings.Contains(a.stderr.String(), "by the lease's deadline"), "a does not say that its supervisor stopped COMMAND; stderr:\n%s", a.stderr.String())
	h.note("a_exit", "%d", code)
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	b.exit(t)
	h.finish(false)
}

func sigName(sig syscall.Signal) string {
	if sig == syscall.SIGTSTP {
		return "sigtstp"
	}
	return "sigstop"
}

// A cliProc is one "redisleader run" of C1.
type cliProc struct {
	cmd    *exec.Cmd
	stderr *strings.Builder // complete once lines is closed
	lines  chan string      // its stderr, line by line
	done   chan struct{}    // closed once it has exited
}

// cliRun starts "redisleader run --value who" on the scenario's server,
// with the fast tier's TTL, --grace 1s and cliJob as COMMAND, and watches
// the job's FIFO: its start is an acquired event of who (with its fence),
// its death an ended one.
func (h *harness) cliRun(bin, who, dir string) *cliProc {
	h.t.Helper()
	fifo := filepath.Join(dir, who)
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		h.t.Fatal(err)
	}
	go h.watchJob(who, fifo)
	h.t.Cleanup(func() { // a watcher still waiting in open gets an empty job
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			_ = f.Close()
		}
	})
	cmd := exec.Command(bin, "run", "--verbose", "--redis", "redis://"+h.srv.Addr(), "--name", h.name, "--value", who,
		"--ttl", h.ttl.String(), "--grace", "1s", "--", "sh", "-c", cliJob)
	cmd.Env = append(os.Environ(), "FIFO="+fifo)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &cliProc{cmd: cmd, stderr: &strings.Builder{}, lines: make(chan string, 64), done: make(chan struct{})}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		h.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	go p.read(stderr)
	h.t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-p.done
	})
	return p
}

// watchJob records the job's start and death as who's acquired and ended
// events.
func (h *harness) watchJob(who, fifo string) {
	f, err := os.Open(fifo) // until the job opens it, or the clean-up
	if err != nil {
		return
	}
	defer f.Close()
	in := bufio.NewReader(f)
	line, err := in.ReadString('\n')
	if err != nil {
		return
	}
	var fence int64
	_, _ = fmt.Sscan(line, &fence)
	now := history.Now()
	h.add(history.Event{Mono: now, Who: who, Kind: history.Acquired, Token: who, Fence: fence, Sent: now, Deadline: now + int64(time.Hour)})
	_, _ = io.Copy(io.Discard, in)
	h.add(history.Event{Mono: history.Now(), Who: who, Kind: history.Ended, Token: who, Reason: "command_died"})
}

// read copies the process's stderr to p.stderr and p.lines, then waits for
// it to exit.
func (p *cliProc) read(r io.Reader) {
	defer close(p.done)
	for in := bufio.NewScanner(r); in.Scan(); {
		p.stderr.WriteString(in.Text() + "\n")
		select {
		case p.lines <- in.Text():
		default:
		}
	}
	close(p.lines)
	_ = p.cmd.Wait()
}

// waitLine waits for a line of stderr that contains s.
func (p *cliProc) waitLine(t *testing.T, s string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				t.Fatalf("run exited before it printed %q", s)
			}
			if strings.Contains(l, s) {
				return
			}
		case <-timeout:
			t.Fatalf("run did not print %q within 10s", s)
		}
	}
}

// exit waits for the process to exit and returns its exit status.
func (p *cliProc) exit(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(10 * time.Second):
		t.Fatal("run did not exit within 10s")
		return 0
	}
}
