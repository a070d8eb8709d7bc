package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// An etcdServer is one etcd process started for the latency run: a
// single-member cluster on two free loopback ports (never 2379/2380), its
// data in a private temporary directory, stopped by PID.
type etcdServer struct {
	url    string // the client URL, http://127.0.0.1:PORT
	dir    string
	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has been reaped
}

// startEtcdIfInstalled starts etcd, or returns nil and says so when no
// etcd binary is installed: the etcd rows are optional, a failure to start
// an installed one is not.
func startEtcdIfInstalled() (*etcdServer, error) {
	if _, err := exec.LookPath("etcd"); err != nil {
		progress("etcd rows skipped: no etcd on PATH (Debian: apt-get install etcd-server)")
		return nil, nil
	}
	var lastErr error
	for range startAttempts {
		client, err := freePort()
		if err != nil {
			return nil, err
		}
		peer, err := freePort()
		if err != nil {
			return nil, err
		}
		if client == peer || isEtcdDefault(client) || isEtcdDefault(peer) {
			continue
		}
		s, err := launchEtcd(client, peer)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	return nil, fmt.Errorf("etcd: %d attempts failed, last: %v", startAttempts, lastErr)
}

// isEtcdDefault reports whether port is one a developer's own etcd uses.
func isEtcdDefault(port int) bool { return port == 2379 || port == 2380 }

// launchEtcd runs etcd on the two ports and returns once it serves a read.
func launchEtcd(clientPort, peerPort int) (*etcdServer, error) {
	dir, err := os.MkdirTemp("", "redisleader-bench-etcd-")
	if err != nil {
		return nil, err
	}
	url := "http://127.0.0.1:" + strconv.Itoa(clientPort)
	peer := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	cmd := exec.Command("etcd", "--name", "bench", "--data-dir", dir+"/data",
		"--listen-client-urls", url, "--advertise-client-urls", url,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "bench="+peer, "--logger", "zap", "--log-outputs", dir+"/etcd.log")
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("etcd: %w", err)
	}
	s := &etcdServer{url: url, dir: dir, cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(s.exited)
	}()
	if err := s.waitReady(); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// waitReady waits until the server answers a read, it exits, or
// readyTimeout passes.
func (s *etcdServer) waitReady() error {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	c, err := s.client()
	if err != nil {
		return err
	}
	defer c.Close()
	read := make(chan error, 1)
	go func() {
		_, err := c.Get(ctx, "bench-ready")
		read <- err
	}()
	select {
	case err := <-read:
		if err != nil {
			return fmt.Errorf("etcd on %s not ready: %w (log: %s)", s.url, err, s.logTail())
		}
		return nil
	case <-s.exited:
		return fmt.Errorf("etcd on %s exited before it was ready (log: %s)", s.url, s.logTail())
	}
}

// logTail is the end of the server's log, for errors.
func (s *etcdServer) logTail() string {
	b, _ := os.ReadFile(s.dir + "/etcd.log")
	return string(b[max(0, len(b)-2000):])
}

// client returns a new client of the server.
func (s *etcdServer) client() (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: []string{s.url}, DialTimeout: readyTimeout})
}

// stop kills the process by PID, waits until it has been reaped and removes
// its data directory.
func (s *etcdServer) stop() {
	_ = s.cmd.Process.Kill()
	<-s.exited
	os.RemoveAll(s.dir)
}

// watchers reads the server's watcher gauges from /metrics: all watchers,
// and the unsynced ("slow") ones that etcd catches up only every 100 ms.
func (s *etcdServer) watchers(ctx context.Context) (all, unsynced int, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url+"/metrics", nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	all, unsynced = -1, -1
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		switch {
		case !ok:
		case name == "etcd_debugging_mvcc_watcher_total":
			all, err = strconv.Atoi(v)
		case name == "etcd_debugging_mvcc_slow_watcher_total":
			unsynced, err = strconv.Atoi(v)
		}
		if err != nil {
			return 0, 0, fmt.Errorf("etcd /metrics: %q: %w", sc.Text(), err)
		}
	}
	if all < 0 || unsynced < 0 {
		return 0, 0, errors.Join(errors.New("etcd /metrics has no watcher gauges"), sc.Err())
	}
	return all, unsynced, nil
}

// etcdVersion picks the version (3.4.23) out of etcd --version.
func etcdVersion() string {
	out, err := exec.Command("etcd", "--version").Output()
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	first, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(strings.TrimPrefix(first, "etcd Version:"))
}

// etcdPoll paces the reads of /metrics while a follower's watch is awaited.
const etcdPoll = 2 * time.Millisecond
