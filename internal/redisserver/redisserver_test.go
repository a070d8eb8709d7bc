package redisserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func ping(t *testing.T, c *redis.Client, timeout time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return c.Ping(ctx).Err()
}

func TestStartAndPing(t *testing.T) {
	t.Parallel()
	s := Start(t)
	if err := ping(t, s.Client(t), 2*time.Second); err != nil {
		t.Fatalf("PING: %v", err)
	}
	if want := fmt.Sprintf("127.0.0.1:%d", s.Port()); s.Addr() != want {
		t.Fatalf("Addr() = %q, want %q", s.Addr(), want)
	}
	if s.Port() == 6379 || s.Port() <= 0 {
		t.Fatalf("Port() = %d, want a free port other than 6379", s.Port())
	}
	info, ok := s.Do(t, "INFO", "server").(string)
	if !ok || !strings.Contains(info, fmt.Sprintf("process_id:%d\r\n", s.PID())) {
		t.Fatalf("INFO server does not report PID %d:\n%v", s.PID(), info)
	}
	// Defaults: no persistence, noeviction, debug command enabled locally.
	for param, want := range map[string]string{"save": "", "appendonly": "no", "maxmemory-policy": "noeviction", "bind": "127.0.0.1"} {
		if got := configGet(t, s, param); got != want {
			t.Errorf("CONFIG GET %s = %q, want %q", param, got, want)
		}
	}
	if got := s.Do(t, "DEBUG", "SLEEP", "0"); got != "OK" {
		t.Errorf("DEBUG SLEEP 0 = %v, want OK", got)
	}
}

func configGet(t *testing.T, s *Server, param string) string {
	t.Helper()
	m, ok := s.Do(t, "CONFIG", "GET", param).(map[any]any) // RESP3 map
	if !ok {
		t.Fatalf("CONFIG GET %s: unexpected reply type %T", param, m)
	}
	v, _ := m[param].(string)
	return v
}

func TestOptionsArgsOverrideDefaults(t *testing.T) {
	t.Parallel()
	s := Start(t, Options{Args: []string{"--maxmemory-policy", "volatile-ttl"}})
	if got := configGet(t, s, "maxmemory-policy"); got != "volatile-ttl" {
		t.Fatalf("maxmemory-policy = %q, want volatile-ttl", got)
	}
}

func TestDoSetGet(t *testing.T) {
	t.Parallel()
	s := Start(t)
	if got := s.Do(t, "SET", "k", "v"); got != "OK" {
		t.Fatalf("SET = %v, want OK", got)
	}
	if got := s.Do(t, "GET", "k"); got != "v" {
		t.Fatalf("GET k = %v, want v", got)
	}
	if got := s.Do(t, "GET", "missing"); got != nil {
		t.Fatalf("GET missing = %v, want nil", got)
	}
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	s := Start(t)
	c := s.Client(t, func(o *redis.Options) {
		o.ContextTimeoutEnabled = true
		o.MaxRetries = -1
	})
	if err := ping(t, c, 2*time.Second); err != nil {
		t.Fatalf("PING before Pause: %v", err)
	}

	s.Pause(t)
	start := time.Now()
	err := ping(t, c, 200*time.Millisecond)
	var ne net.Error
	if err == nil || !(errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("PING while paused: err = %v, want a timeout", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("PING while paused took %v, want about 200ms", d)
	}

	s.Resume(t)
	if err := ping(t, c, 2*time.Second); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}
}

func TestKillRestartSamePortNoData(t *testing.T) {
	t.Parallel()
	s := Start(t)
	addr, oldPID := s.Addr(), s.PID()
	s.Do(t, "SET", "k", "v")

	s.Kill(t)
	if err := syscall.Kill(oldPID, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("after Kill, kill(%d, 0) = %v, want ESRCH (process reaped)", oldPID, err)
	}
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		t.Fatalf("dial %s after Kill succeeded, want refused", addr)
	}
	s.Kill(t) // killing a dead server is a no-op

	s.Restart(t)
	if s.Addr() != addr {
		t.Fatalf("Addr after Restart = %q, want %q", s.Addr(), addr)
	}
	if s.PID() == oldPID {
		t.Fatalf("PID after Restart = %d, want a new process", s.PID())
	}
	if err := ping(t, s.Client(t), 2*time.Second); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
	if got := s.Do(t, "GET", "k"); got != nil {
		t.Fatalf("GET k after Restart = %v, want nil (no persistence)", got)
	}
}

func TestRestartWhileRunningAndPaused(t *testing.T) {
	t.Parallel()
	s := Start(t)
	oldPID := s.PID()
	s.Pause(t)
	s.Restart(t) // kills the paused process first
	if s.PID() == oldPID {
		t.Fatalf("PID after Restart = %d, want a new process", s.PID())
	}
	if got := s.Do(t, "PING"); got != "PONG" {
		t.Fatalf("PING after Restart = %v, want PONG", got)
	}
}

func TestTwoServersDifferentPorts(t *testing.T) {
	t.Parallel()
	a, b := Start(t), Start(t)
	if a.Port() == b.Port() || a.PID() == b.PID() {
		t.Fatalf("servers share port %d / PID %d", a.Port(), a.PID())
	}
	a.Do(t, "SET", "k", "a")
	if got := b.Do(t, "GET", "k"); got != nil {
		t.Fatalf("GET k on second server = %v, want nil (separate servers)", got)
	}
}

// recordingTB captures Skipf/Fatalf and stops the calling goroutine like the
// real methods do.
type recordingTB struct {
	testing.TB
	mu   sync.Mutex
	kind string
	msg  string
}

func (r *recordingTB) record(kind, format string, args ...any) {
	r.mu.Lock()
	r.kind, r.msg = kind, fmt.Sprintf(format, args...)
	r.mu.Unlock()
	runtime.Goexit()
}

func (r *recordingTB) Skipf(format string, args ...any)  { r.record("skip", format, args...) }
func (r *recordingTB) Fatalf(format string, args ...any) { r.record("fatal", format, args...) }

func TestMissingBinary(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv("REDIS_SERVER", "") // the default, redis-server
	if Available() {
		t.Fatal("Available() = true with an empty PATH")
	}
	for _, tc := range []struct{ ci, kind, msg string }{
		{"", "skip", "redis-server not found; install it (apt-get install -y redis-server"},
		{"true", "fatal", "CI must install it"},
	} {
		t.Setenv("CI", tc.ci)
		r := &recordingTB{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			Start(r)
			t.Errorf("CI=%q: Start returned without skipping or failing", tc.ci)
		}()
		<-done
		r.mu.Lock()
		if r.kind != tc.kind || !strings.Contains(r.msg, tc.msg) {
			t.Errorf("CI=%q: got %s %q, want %s containing %q", tc.ci, r.kind, r.msg, tc.kind, tc.msg)
		}
		r.mu.Unlock()
	}
}

func TestLaunchDetectsPortInUse(t *testing.T) {
	t.Parallel()
	a := Start(t)
	// A second server on a's port must not mistake a (another PID) for itself.
	b := &Server{port: a.Port(), dir: t.TempDir(), log: &logBuffer{}}
	b.args = buildArgs(b.port, b.dir, Options{})
	inUse, err := b.launch()
	if err == nil || !inUse {
		t.Fatalf("launch on busy port %d: inUse=%v err=%v, want inUse and an error\n%s", b.port, inUse, err, b.log.tail(5))
	}
	if got := a.Do(t, "PING"); got != "PONG" {
		t.Fatalf("first server PING = %v, want PONG", got)
	}
}

// TestParseVersion: a version gate reads valkey_version on Valkey, whose
// redis_version is a compatibility number (7.2.4 on Valkey 8.0.1), and a
// Redis without server_name (before 7.2) is Redis. Fields as the servers
// print them.
func TestParseVersion(t *testing.T) {
	for _, tc := range []struct {
		info map[string]string
		want Version
	}{
		{map[string]string{"redis_version": "7.0.15"}, Version{"redis", 7, 0, 15}},
		{map[string]string{"redis_version": "8.0.2", "server_name": "redis"}, Version{"redis", 8, 0, 2}},
		{map[string]string{"redis_version": "7.2.4", "server_name": "valkey", "valkey_version": "8.0.1"}, Version{"valkey", 8, 0, 1}},
	} {
		got, err := parseVersion(tc.info)
		if err != nil || got != tc.want {
			t.Errorf("parseVersion(%v) = %v, %v; want %v", tc.info, got, err, tc.want)
		}
	}
	if _, err := parseVersion(map[string]string{}); err == nil {
		t.Error("parseVersion without redis_version: no error")
	}
	v := Version{"valkey", 8, 0, 1}
	if !v.AtLeast("valkey", 8, 0) || v.AtLeast("valkey", 8, 1) || v.AtLeast("redis", 7, 2) {
		t.Errorf("%v.AtLeast: wrong answer", v)
	}
}

// TestVersionOfRunningServer: Version reads the server that Binary starts.
func TestVersionOfRunningServer(t *testing.T) {
	t.Parallel()
	s := Start(t)
	v := s.Version(t)
	out, err := exec.Command(Binary(), "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v", Binary(), err)
	}
	// "Redis server v=7.0.15 …" or "Valkey server v=8.0.1 …"
	want := fmt.Sprintf("v=%d.%d.%d ", v.Major, v.Minor, v.Patch)
	if !strings.Contains(string(out), want) || !strings.EqualFold(strings.Fields(string(out))[0], v.Name) {
		t.Fatalf("Version = %v, but %s --version says %q", v, Binary(), out)
	}
	t.Logf("server: %v", v)
}
