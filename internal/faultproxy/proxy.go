// Package faultproxy is a TCP proxy that injects network faults between a
// Redis client and server, for tests.
//
// The model follows etcd's pkg/proxy. One Proxy stands for one network path:
// it listens on 127.0.0.1 and forwards every accepted connection to one
// target server, so a test gives each client (or candidate) its own Proxy in
// front of the shared redis-server and breaks paths one by one.
//
// Each proxied connection has two pump goroutines, one per direction
// (ClientToServer carries requests, ServerToClient replies). A pump reads a
// chunk, decides its fate from the direction's current fault state, queues it
// with the time it is due, and writes due chunks in order. The fault state of
// a direction (delay, blackhole, pause) is held by the Proxy and shared by all
// its connections, so a fault switched on or off at runtime applies at once to
// open and new connections alike. Bytes are judged when they are read: bytes
// read during a blackhole are gone, bytes read while paused wait in the
// proxy's memory (without bound) until Unpause, and bytes already queued with
// a delay keep their due time when the delay changes.
//
// Server-to-client bytes are cut into complete RESP2/RESP3 replies before they
// are judged, so DropReplies and Blackhole drop whole replies and the client
// never sees half of one; the bytes of an incomplete reply wait in the proxy
// until it completes. If the server's bytes are not valid RESP, that
// connection falls back to forwarding raw chunks and its replies can no
// longer be dropped one by one.
//
// When either side of a connection closes or fails, the proxy closes both
// sides; bytes still queued in the proxy for that connection are lost.
package faultproxy

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"time"
)

// Dir selects one or both directions of the proxied connections.
type Dir int

const (
	// ClientToServer is the direction of requests.
	ClientToServer Dir = 1 << iota
	// ServerToClient is the direction of replies (and RESP3 pushes).
	ServerToClient
	// Both is ClientToServer and ServerToClient.
	Both = ClientToServer | ServerToClient
)

const (
	dialTimeout = 5 * time.Second // bound on connecting to the target
	bufSize     = 32 << 10        // bytes read from a socket at a time
)

// aLongTimeAgo is a read deadline in the past: setting it wakes a blocked Read.
var aLongTimeAgo = time.Unix(1, 0)

// Stats are counters of a Proxy since New.
type Stats struct {
	Conns           int64 // connections accepted, including refused ones
	Open            int64 // proxied connections currently open
	DroppedReplies  int64 // replies discarded by DropReplies
	BlackholedBytes int64 // bytes discarded by Blackhole, both directions
}

// Proxy forwards TCP connections from a loopback listener to a target server
// and injects faults into them. All methods are safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	ctx    context.Context // cancelled by Close, aborts dials in progress
	cancel context.CancelFunc
	wg     sync.WaitGroup // the accept loop and every connection goroutine

	mu     sync.Mutex
	closed bool
	target string
	dirs   [2]dirState // indexed by dirIndex
	queued [2]int      // bytes read but not yet forwarded, by dirIndex
	drops  int         // replies still to drop
	pushes bool        // whether a RESP3 push counts among drops
	refuse bool
	links  map[*link]struct{}
	stats  Stats
}

// dirState is the fault state of one direction.
type dirState struct {
	delay, jitter time.Duration
	blackhole     bool
	paused        bool
}

// link is one proxied connection: the accepted client side and the dialled
// server side.
type link struct {
	client, server net.Conn
	once           sync.Once
}

// chunk is a unit of bytes waiting in a pump to be forwarded at due.
type chunk struct {
	data []byte
	due  time.Time
}

// New listens on 127.0.0.1:0 and forwards every accepted connection to
// target (host:port). The caller must Close the Proxy.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{ln: ln, ctx: ctx, cancel: cancel, target: target, links: make(map[*link]struct{})}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr returns the proxy's listening address, "127.0.0.1:port", which the
// client should dial instead of the server.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetTarget makes connections accepted from now on go to addr (host:port).
// Open connections keep their server.
func (p *Proxy) SetTarget(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = addr
}

// Delay makes every chunk read in dir from now on be forwarded at its read
// time plus d plus a uniform random jitter in [-jitter, +jitter]; the total
// is never negative (negative arguments count as zero). Order within a
// direction of a connection is kept: a chunk is never forwarded before the
// one read before it. Delay(dir, 0, 0) removes the delay; chunks already
// queued keep their due time.
func (p *Proxy) Delay(dir Dir, d, jitter time.Duration) {
	p.update(dir, func(s *dirState) { s.delay, s.jitter = max(d, 0), max(jitter, 0) })
}

// Blackhole makes the proxy read and silently discard the bytes in dir (whole
// replies for ServerToClient); connections stay open. Only Heal ends it.
func (p *Proxy) Blackhole(dir Dir) {
	p.update(dir, func(s *dirState) { s.blackhole = true })
}

// Pause makes the proxy hold the bytes in dir, in order and without loss,
// until Unpause or Heal. The proxy keeps reading while paused.
func (p *Proxy) Pause(dir Dir) {
	p.update(dir, func(s *dirState) { s.paused = true })
}

// Unpause forwards what Pause held in dir, in order (subject to any delay
// they were queued with), and lets later bytes pass.
func (p *Proxy) Unpause(dir Dir) {
	p.update(dir, func(s *dirState) { s.paused = false })
}

// DropReplies makes the proxy silently discard the next n complete RESP
// replies from server to client, counted per reply across all connections
// (a RESP3 push counts as a reply). It replaces any drops still pending;
// n <= 0 cancels them. A reply is forwarded whole or dropped whole.
func (p *Proxy) DropReplies(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drops, p.pushes = max(n, 0), true
}

// DropCallReplies is DropReplies counting only the replies to commands:
// RESP3 pushes (pub/sub messages, which a client may be receiving on
// another connection at any moment) pass.
func (p *Proxy) DropCallReplies(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drops, p.pushes = max(n, 0), false
}

// ResetConns closes every open connection now, both sides, with SO_LINGER 0
// so that the peers get a TCP RST, like a crash of the network path. New
// connections are accepted as before.
func (p *Proxy) ResetConns() {
	for _, l := range p.openLinks() {
		l.close(true)
	}
}

// Refuse, while on, makes the proxy accept new connections and close them at
// once with a TCP RST, like a server that is down. Open connections are
// untouched.
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = on
}

// Heal clears every fault: no delay, no blackhole, no pause (held bytes are
// forwarded in order), no pending reply drops, Refuse off.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dirs = [2]dirState{}
	p.drops = 0
	p.refuse = false
	p.wakeLocked()
}

// Stats returns a snapshot of the proxy's counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Close stops accepting, closes every connection (both sides) and returns
// once every goroutine of the proxy has returned. Calling it again returns
// nil.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.wg.Wait()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	err := p.ln.Close()
	for _, l := range p.openLinks() {
		l.close(false)
	}
	p.wg.Wait()
	return err
}

// dirIndex returns the index into Proxy.dirs of a single direction.
func dirIndex(d Dir) int {
	if d == ClientToServer {
		return 0
	}
	return 1
}

// update applies f to the state of each direction in dir and wakes the pumps
// so that they act on the new state.
func (p *Proxy) update(dir Dir, f func(*dirState)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, d := range []Dir{ClientToServer, ServerToClient} {
		if dir&d != 0 {
			f(&p.dirs[dirIndex(d)])
		}
	}
	p.wakeLocked()
}

// wakeLocked interrupts every pump's Read so that it re-reads the fault
// state. A pump sets its read deadline while holding p.mu, so a wake-up is
// never overwritten by a deadline computed from the old state.
func (p *Proxy) wakeLocked() {
	for l := range p.links {
		_ = l.client.SetReadDeadline(aLongTimeAgo)
		_ = l.server.SetReadDeadline(aLongTimeAgo)
	}
}

func (p *Proxy) openLinks() []*link {
	p.mu.Lock()
	defer p.mu.Unlock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	return links
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed (or broken) listener
		}
		p.mu.Lock()
		p.stats.Conns++
		refuse, target := p.refuse, p.target
		p.mu.Unlock()
		if refuse {
			reset(c)
			continue
		}
		p.wg.Add(1)
		go p.serve(c, target)
	}
}

// serve dials target for the accepted client connection c and runs the
// ClientToServer pump; the ServerToClient pump runs in a second goroutine.
func (p *Proxy) serve(c net.Conn, target string) {
	defer p.wg.Done()
	d := net.Dialer{Timeout: dialTimeout}
	s, err := d.DialContext(p.ctx, "tcp", target)
	if err != nil {
		reset(c)
		return
	}
	l := &link{client: c, server: s}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.close(false)
		return
	}
	p.links[l] = struct{}{}
	p.stats.Open++
	p.mu.Unlock()

	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.pump(l, ServerToClient, s, c)
	}()
	p.pump(l, ClientToServer, c, s)
}

// pump moves bytes in direction dir from src to dst until either side fails
// or closes, then closes the link.
//
// The loop forwards the chunks that are due (unless paused), then reads with
// a deadline at the next chunk's due time, so one goroutine both keeps
// reading and forwards delayed chunks on time. Fault changes wake it through
// the read deadline (see wakeLocked).
func (p *Proxy) pump(l *link, dir Dir, src, dst net.Conn) {
	defer p.drop(l)
	i := dirIndex(dir)
	var (
		queue []chunk
		last  time.Time // due time of the last queued chunk
		sp    *replySplitter
		buf   = make([]byte, bufSize)
	)
	if dir == ServerToClient {
		sp = new(replySplitter)
	}
	defer func() { // bytes lost with the connection are no longer queued
		p.mu.Lock()
		for _, c := range queue {
			p.queued[i] -= len(c.data)
		}
		p.mu.Unlock()
	}()
	for {
		var out net.Buffers
		now := time.Now()
		p.mu.Lock()
		var deadline time.Time // zero: no deadline
		if !p.dirs[i].paused {
			n := 0
			for n < len(queue) && !queue[n].due.After(now) {
				out = append(out, queue[n].data)
				p.queued[i] -= len(queue[n].data)
				n++
			}
			queue = queue[n:]
			if len(queue) > 0 {
				deadline = queue[0].due
			}
		}
		err := src.SetReadDeadline(deadline)
		p.mu.Unlock()
		if err != nil {
			return
		}
		if len(out) > 0 {
			if _, err := out.WriteTo(dst); err != nil {
				return
			}
			continue
		}

		n, err := src.Read(buf)
		if n > 0 {
			units, replies := [][]byte{buf[:n]}, false
			if sp != nil {
				var perr error
				units, perr = sp.feed(buf[:n])
				replies = true
				if perr != nil { // not RESP: forward raw from here on
					queue, last = p.enqueue(i, units, true, queue, last)
					units, replies, sp = [][]byte{sp.rest()}, false, nil
				}
			}
			queue, last = p.enqueue(i, units, replies, queue, last)
		}
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			return
		}
	}
}

// enqueue judges units just read in direction i (replies tells whether they
// are whole RESP replies): it discards them if blackholed or to be dropped,
// and otherwise appends copies to queue with their due time.
func (p *Proxy) enqueue(i int, units [][]byte, replies bool, queue []chunk, last time.Time) ([]chunk, time.Time) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.dirs[i]
	for _, u := range units {
		switch {
		case len(u) == 0:
			continue
		case st.blackhole:
			p.stats.BlackholedBytes += int64(len(u))
			continue
		case replies && p.drops > 0 && (p.pushes || u[0] != '>'):
			p.drops--
			p.stats.DroppedReplies++
			continue
		}
		d := st.delay
		if st.jitter > 0 {
			d += rand.N(2*st.jitter+1) - st.jitter
		}
		due := now.Add(max(d, 0))
		if due.Before(last) {
			due = last
		}
		last = due
		queue = append(queue, chunk{data: bytes.Clone(u), due: due})
		p.queued[i] += len(u)
	}
	return queue, last
}

// drop closes both sides of l and forgets it. Both pumps of l call it.
func (p *Proxy) drop(l *link) {
	l.close(false)
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.links[l]; ok {
		delete(p.links, l)
		p.stats.Open--
	}
}

// close closes both sides of l once; with rst, the peers get a TCP RST.
func (l *link) close(rst bool) {
	l.once.Do(func() {
		if rst {
			reset(l.client)
			reset(l.server)
			return
		}
		_ = l.client.Close()
		_ = l.server.Close()
	})
}

// reset closes c with SO_LINGER 0, which sends a TCP RST instead of a FIN.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// queuedBytes returns the bytes read in dir and queued in the pumps (held by
// a pause or waiting for their delay). Tests use it to know that the proxy
// holds data.
func (p *Proxy) queuedBytes(dir Dir) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.queued[dirIndex(dir)]
}
