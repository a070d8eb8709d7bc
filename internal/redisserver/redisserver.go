// Package redisserver starts private redis-server processes for tests on free
// loopback ports and controls them by PID (pause, resume, kill, restart).
//
// The server program is redis-server from PATH unless the REDIS_SERVER
// environment variable names another (a name looked up in PATH, or a path),
// e.g. REDIS_SERVER=valkey-server: CI runs the tests against four servers
// (docs/SERVERS.md), two of them by path. Sentinels
// run the same program with --sentinel, and StartCluster joins nodes with the
// command-line client that comes with it (see CLI).
//
// Every server binds only 127.0.0.1, runs in its own t.TempDir(), has no
// persistence unless asked for, and is killed by t.Cleanup. When a test fails,
// the last lines of the server's log are written to the test log.
package redisserver

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	readyTimeout    = 10 * time.Second // bound on waiting for a server to answer
	killTimeout     = 5 * time.Second  // bound on waiting for a killed process to be reaped
	startAttempts   = 5                // ports tried by Start when the bind fails
	logCap          = 64 << 10         // bytes of server output kept for failure dumps
	dumpLines       = 50               // log lines dumped when a test fails
	addrInUseMarker = "Address already in use"
)

// Options configures Start. The zero value gives the defaults.
type Options struct {
	// Args are extra redis-server arguments appended after the defaults, so
	// they override them, e.g. {"--maxmemory-policy", "volatile-ttl"}.
	// They must not change --port, --bind or --dir.
	Args []string
	// Persistence, when false (the default), disables RDB and AOF with
	// --save "" --appendonly no. When true those settings are left to Args;
	// the server still uses its private --dir.
	Persistence bool
}

// Server is a redis-server process started by Start. Its accessors, Client,
// Do, Pause and Resume may be used from several goroutines; Kill and Restart
// should not run concurrently with each other.
type Server struct {
	port int
	dir  string
	args []string
	log  *logBuffer

	mu     sync.Mutex
	proc   *process // current or last process; never nil after Start
	paused bool
}

// process is one run of redis-server.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed after cmd.Wait returns (process reaped)
	err    error         // result of cmd.Wait; read only after exited is closed
}

// Binary returns the server program the package starts: $REDIS_SERVER, or
// redis-server when that is empty.
func Binary() string {
	if b := os.Getenv("REDIS_SERVER"); b != "" {
		return b
	}
	return "redis-server"
}

// CLI returns the command-line client used to create clusters: $REDIS_CLI,
// or else the one that comes with Binary (valkey-cli beside valkey-server,
// redis-cli beside redis-server, in the same directory when Binary is a path).
func CLI() string {
	if c := os.Getenv("REDIS_CLI"); c != "" {
		return c
	}
	b := Binary()
	dir, name := filepath.Split(b)
	if prefix, ok := strings.CutSuffix(name, "-server"); ok {
		return dir + prefix + "-cli"
	}
	return "redis-cli"
}

// Available reports whether Binary is found (in PATH, unless it is a path).
func Available() bool {
	_, err := exec.LookPath(Binary())
	return err == nil
}

// installHint says how to get the missing program, for skip and failure messages.
func installHint(name string) string {
	return fmt.Sprintf("%s not found; install it (apt-get install -y redis-server; for Valkey: valkey-server from bookworm-backports, and REDIS_SERVER=valkey-server; Valkey 9 and Redis 8: .ci/servers build valkey redis, and REDIS_SERVER=$(.ci/servers path valkey))", name)
}

// Start starts a redis-server on 127.0.0.1 at a free port with a private
// data directory, waits until it answers, and registers t.Cleanup to kill it
// (and, if the test failed, to log its last output lines). At most one
// Options may be given. If redis-server is not in PATH the test is skipped,
// or fails when the CI environment variable is "true". (Binary says which
// program runs; redis-server is the default.)
func Start(t testing.TB, opts ...Options) *Server {
	t.Helper()
	requireBinaries(t, Binary())
	if len(opts) > 1 {
		t.Fatalf("redisserver.Start: got %d Options, want at most 1", len(opts))
	}
	var o Options
	if len(opts) == 1 {
		o = opts[0]
	}
	return start(t, func(port int, dir string) ([]string, error) { return buildArgs(port, dir, o), nil })
}

// start does the work of Start (without the PATH check): argsFor returns the
// redis-server command line for each port tried, with the server's private
// directory, so that it can pick further ports or write a config file there.
func start(t testing.TB, argsFor func(port int, dir string) ([]string, error)) *Server {
	t.Helper()
	s := &Server{dir: t.TempDir(), log: &logBuffer{}}
	t.Cleanup(func() {
		if err := s.kill(); err != nil {
			t.Errorf("redisserver: cleanup of server on port %d: %v", s.port, err)
		}
		if t.Failed() {
			t.Logf("redis-server on port %d, last %d log lines:\n%s", s.port, dumpLines, s.log.tail(dumpLines))
		}
	})
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			t.Fatalf("redisserver: finding a free port: %v", err)
		}
		s.port = port
		if s.args, err = argsFor(port, s.dir); err != nil {
			t.Fatalf("redisserver: preparing server on port %d: %v", port, err)
		}
		inUse, err := s.launch()
		if err == nil {
			return s
		}
		if !inUse || attempt == startAttempts {
			t.Fatalf("redisserver: start on port %d (attempt %d): %v", port, attempt, err)
		}
	}
}

// Addr returns the server address, "127.0.0.1:PORT".
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port returns the TCP port the server listens on. It does not change on Restart.
func (s *Server) Port() int { return s.port }

// PID returns the process ID of the current (or, after Kill, the last) process.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc.cmd.Process.Pid
}

// Client returns a new go-redis client for Addr, closed on t.Cleanup. Only Addr
// is set, so go-redis defaults apply except where the option funcs change them.
func (s *Server) Client(t testing.TB, opts ...func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: s.Addr()}
	for _, f := range opts {
		f(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Pause stops the process with SIGSTOP; it keeps its sockets but answers nothing.
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.proc.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("redisserver: pause (SIGSTOP) server on port %d: %v", s.port, err)
	}
	s.paused = true
}

// Resume continues a paused process with SIGCONT.
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.proc.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("redisserver: resume (SIGCONT) server on port %d: %v", s.port, err)
	}
	s.paused = false
}

// Kill sends SIGKILL and waits until the process has exited and been reaped.
// Killing an already dead server is a no-op.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	if err := s.kill(); err != nil {
		t.Fatalf("redisserver: kill server on port %d: %v", s.port, err)
	}
}

// Restart kills the server if it is still running, then starts it again on
// the same port, in the same directory, with the same arguments, and waits
// until it answers. A port that is briefly unavailable is retried until a
// deadline.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if err := s.kill(); err != nil {
		t.Fatalf("redisserver: restart server on port %d: kill: %v", s.port, err)
	}
	deadline := time.Now().Add(readyTimeout)
	for backoff := 20 * time.Millisecond; ; backoff = min(2*backoff, 500*time.Millisecond) {
		s.log.Write([]byte("--- redisserver: restart ---\n"))
		inUse, err := s.launch()
		if err == nil {
			return
		}
		if !inUse || time.Now().Add(backoff).After(deadline) {
			t.Fatalf("redisserver: restart server on port %d: %v", s.port, err)
		}
		time.Sleep(backoff) // back off before retrying the bind; not synchronisation
	}
}

// Do runs one command on a fresh short-lived connection (no retries, 2s
// timeouts) and returns its reply; a nil reply (redis.Nil) returns nil. Any
// other error fails the test.
//
// Each call is its own connection, so a WAIT sent by Do waits for nothing:
// since Redis 7.2 (and on Valkey) WAIT waits for its own connection's last
// write. Send the write and the WAIT together with DoSeq.
func (s *Server) Do(t testing.TB, args ...any) any {
	t.Helper()
	return s.DoSeq(t, args)[0]
}

// DoSeq runs the commands in order on one fresh short-lived connection, like
// Do, and returns their replies (nil for a nil reply). Any other error fails
// the test.
func (s *Server) DoSeq(t testing.TB, cmds ...[]any) []any {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr: s.Addr(), MaxRetries: -1, DisableIdentity: true, PoolSize: 1,
		DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
	})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	replies := make([]any, len(cmds))
	for i, args := range cmds {
		v, err := c.Do(ctx, args...).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			t.Fatalf("redisserver: Do %v on port %d: %v", args, s.port, err)
		}
		replies[i] = v
	}
	return replies
}

// Version is what a server says it is in INFO server.
type Version struct {
	Name                string // "redis" or "valkey" (server_name; absent before Redis 7.2: "redis")
	Major, Minor, Patch int    // valkey_version on Valkey (its redis_version is a compatibility number), else redis_version
}

func (v Version) String() string {
	return fmt.Sprintf("%s %d.%d.%d", v.Name, v.Major, v.Minor, v.Patch)
}

// AtLeast reports whether v is name at major.minor or later.
func (v Version) AtLeast(name string, major, minor int) bool {
	return v.Name == name && (v.Major > major || v.Major == major && v.Minor >= minor)
}

// Version reads the server's name and version from INFO server. Valkey 8.0.1
// reports redis_version:7.2.4 besides valkey_version:8.0.1 and
// server_name:valkey: any version gate must read valkey_version there.
func (s *Server) Version(t testing.TB) Version {
	t.Helper()
	info, err := infoFields(s.Addr(), "server")
	if err != nil {
		t.Fatalf("redisserver: INFO server on port %d: %v", s.port, err)
	}
	v, err := parseVersion(info)
	if err != nil {
		t.Fatalf("redisserver: port %d: %v", s.port, err)
	}
	return v
}

// parseVersion reads a Version from INFO server's fields.
func parseVersion(info map[string]string) (Version, error) {
	v := Version{Name: "redis"}
	if n := info["server_name"]; n != "" {
		v.Name = n
	}
	num := info["redis_version"]
	if vv, ok := info["valkey_version"]; ok {
		v.Name, num = "valkey", vv
	}
	if _, err := fmt.Sscanf(num, "%d.%d.%d", &v.Major, &v.Minor, &v.Patch); err != nil {
		return Version{}, fmt.Errorf("version %q in INFO server: %v", num, err)
	}
	return v, nil
}

// launch starts a process with s.args and waits until it answers. On failure
// the process is gone, and inUse reports whether it could not bind its port.
func (s *Server) launch() (inUse bool, err error) {
	mark := s.log.total()
	cmd := exec.Command(Binary(), s.args...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = s.log, s.log
	cmd.SysProcAttr = sysProcAttr()
	cmd.WaitDelay = time.Second // don't hang on pipes inherited by forked children
	if err := cmd.Start(); err != nil {
		return false, fmt.Errorf("exec %s: %w", Binary(), err)
	}
	p := &process{cmd: cmd, exited: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	s.mu.Lock()
	s.proc, s.paused = p, false
	s.mu.Unlock()

	if err := waitReady(s.Addr(), p); err != nil {
		if kerr := s.kill(); kerr != nil {
			err = fmt.Errorf("%w (and %v)", err, kerr)
		}
		return strings.Contains(s.log.since(mark), addrInUseMarker), err
	}
	return false, nil
}

// kill SIGKILLs the current process (resuming it first if paused) and waits
// until it has been reaped.
func (s *Server) kill() error {
	s.mu.Lock()
	p, paused := s.proc, s.paused
	s.paused = false
	s.mu.Unlock()
	if p == nil {
		return nil
	}
	select {
	case <-p.exited:
		return nil
	default:
	}
	if paused {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("SIGKILL pid %d: %w", p.cmd.Process.Pid, err)
	}
	select {
	case <-p.exited:
		return nil
	case <-time.After(killTimeout):
		return fmt.Errorf("pid %d did not exit within %v of SIGKILL", p.cmd.Process.Pid, killTimeout)
	}
}

// waitReady polls addr until our process answers PING and INFO reports its
// PID (so a different server that won a port race is not mistaken for it).
func waitReady(addr string, p *process) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		if probe(addr, p.cmd.Process.Pid) {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("redis-server exited early: %v", p.err)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server not ready within %v", readyTimeout)
		}
	}
}

// probe sends PING and INFO server over a raw connection (no go-redis pool,
// whose dial-error throttling would slow polling) and checks the replies.
func probe(addr string, pid int) bool {
	conn, err := net.DialTimeout("tcp", addr, 250*time.Millisecond)
	if err != nil {
		return false
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(conn, "*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n"); err != nil {
		return false
	}
	r := bufio.NewReader(conn)
	if line, err := r.ReadString('\n'); err != nil || line != "+PONG\r\n" {
		return false
	}
	line, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "$") {
		return false
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || n < 0 || n > 1<<20 {
		return false
	}
	info := make([]byte, n)
	if _, err := io.ReadFull(r, info); err != nil {
		return false
	}
	return bytes.Contains(info, []byte("\nprocess_id:"+strconv.Itoa(pid)+"\r\n"))
}

// buildArgs returns the redis-server command line; user Args come last.
func buildArgs(port int, dir string, o Options) []string {
	args := []string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", dir}
	if !o.Persistence {
		args = append(args, "--save", "", "--appendonly", "no")
	}
	args = append(args,
		"--enable-debug-command", "local", "--protected-mode", "no", "--daemonize", "no",
		"--maxmemory-policy", "noeviction", "--loglevel", "warning")
	return append(args, o.Args...)
}

// freePort returns a currently free loopback port other than 6379. Another
// process may take it before redis-server binds it; Start retries then.
func freePort() (int, error) {
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		if err := l.Close(); err != nil {
			return 0, err
		}
		if port != 6379 {
			return port, nil
		}
	}
}

// logBuffer keeps the last logCap bytes written to it and the total count.
type logBuffer struct {
	mu  sync.Mutex
	buf []byte
	n   int64 // total bytes ever written
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > logCap {
		b.buf = append(b.buf[:0], b.buf[len(b.buf)-logCap:]...)
	}
	b.n += int64(len(p))
	return len(p), nil
}

func (b *logBuffer) total() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n
}

// since returns what was written after total() returned mark, as far as kept.
func (b *logBuffer) since(mark int64) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	start := max(int64(len(b.buf))-(b.n-mark), 0)
	return string(b.buf[start:])
}

// tail returns the last n lines.
func (b *logBuffer) tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	lines := strings.Split(strings.TrimRight(string(b.buf), "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}
