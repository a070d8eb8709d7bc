package redisgocron

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// startRedis starts a private redis-server on a free loopback port without
// persistence and stops it (by its PID) when the test ends. Without
// redis-server in PATH the test is skipped, or fails under CI=true.
func startRedis(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-server not found in PATH (required under CI=true): %v", err)
		}
		t.Skipf("redis-server not found in PATH: %v", err)
	}
	for attempt := 0; ; attempt++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("finding a free port: %v", err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		addr := "127.0.0.1:" + strconv.Itoa(port)
		cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", t.TempDir())
		if err := cmd.Start(); err != nil {
			t.Fatalf("starting redis-server: %v", err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		stop := func() {
			_ = cmd.Process.Kill() // by PID: this process only
			<-exited
		}
		if err := waitPing(addr, exited); err != nil {
			stop()
			if attempt < 3 {
				continue // the port was taken meanwhile, say
			}
			t.Fatalf("redis-server on %s: %v", addr, err)
		}
		t.Cleanup(stop)
		return addr
	}
}

// waitPing waits for addr to answer PING, for up to 10s.
func waitPing(addr string, exited <-chan error) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case err := <-exited:
			return errors.Join(errors.New("redis-server exited"), err)
		case <-timeout:
			return errors.New("no PONG within 10s")
		case <-tick.C:
		}
	}
}

// cuttable is a dialer whose connections can all be cut at once, after
// which it refuses to dial: the process looks dead to Redis and Redis looks
// unreachable to the process.
type cuttable struct {
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

func (c *cuttable) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cut {
		_ = conn.Close()
		return nil, errors.New("cut off")
	}
	c.conns = append(c.conns, conn)
	return conn, nil
}

// Cut closes every connection and refuses new ones.
func (c *cuttable) Cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cut = true
	for _, conn := range c.conns {
		_ = conn.Close()
	}
}

// newClient returns a client of addr through d (if not nil), closed when the
// test ends.
func newClient(t *testing.T, addr string, d *cuttable) *redis.Client {
	o := &redis.Options{Addr: addr, ContextTimeoutEnabled: true}
	if d != nil {
		o.Dialer = d.dial
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}
