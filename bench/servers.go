package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// A server is one redis-server process started for this run: loopback only,
// no persistence, in a private working directory, stopped by PID.
type server struct {
	port   int
	dir    string
	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has been reaped
}

const (
	readyTimeout  = 10 * time.Second // bound on waiting for "Ready to accept connections"
	startAttempts = 5                // ports tried when one turns out to be taken
	readyMarker   = "Ready to accept connections"
)

// startServer starts redis-server (with extra arguments) on a free loopback port and returns once
// the server logs that it accepts connections.
func startServer(args ...string) (*server, error) {
	var lastErr error
	for range startAttempts {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s, err := launch(port, args...)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	return nil, fmt.Errorf("redis-server: %d attempts failed, last: %w", startAttempts, lastErr)
}

// freePort asks the kernel for a free loopback port. Ephemeral ports are
// allocated far above 6379, so a developer's own Redis is never touched.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	if port == 6379 {
		return 0, errors.New("the kernel offered port 6379; refusing to use it")
	}
	return port, nil
}

// launch runs redis-server on port and waits for its ready line on stdout
// (the server logs there with --daemonize no), so no polling is needed.
func launch(port int, extra ...string) (*server, error) {
	dir, err := os.MkdirTemp("", "redisleader-bench-")
	if err != nil {
		return nil, err
	}
	args := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no"}, extra...)
	cmd := exec.Command("redis-server", args...)
	cmd.Dir = dir
	cmd.SysProcAttr = sysProcAttr()
	out, err := cmd.StdoutPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("redis-server: %w (install it: apt-get install -y redis-server)", err)
	}
	s := &server{port: port, dir: dir, cmd: cmd, exited: make(chan struct{})}

	ready := make(chan struct{})
	var log strings.Builder // what the server said before it was ready
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), readyMarker) {
				close(ready)
				break
			}
			log.WriteString(sc.Text() + "\n")
		}
		_, _ = io.Copy(io.Discard, out) // keep the pipe drained
		_ = cmd.Wait()
		close(s.exited)
	}()
	select {
	case <-ready:
		return s, nil
	case <-s.exited:
		os.RemoveAll(dir)
		return nil, fmt.Errorf("redis-server on port %d exited before it was ready:\n%s", port, log.String())
	case <-time.After(readyTimeout):
		s.stop()
		return nil, fmt.Errorf("redis-server on port %d not ready within %v", port, readyTimeout)
	}
}

// addr is the server's "127.0.0.1:PORT".
func (s *server) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// stop kills the process by PID, waits until it has been reaped and removes
// its working directory.
func (s *server) stop() {
	_ = s.cmd.Process.Kill()
	<-s.exited
	os.RemoveAll(s.dir)
}

// redisVersion returns the first line of `redis-server --version`.
func redisVersion() string {
	out, err := exec.Command("redis-server", "--version").Output()
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return strings.TrimSpace(string(out))
}
