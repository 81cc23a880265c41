package shardtest

// The links of StartMemNet's masters: what toxiproxy does for a real
// master (a cut link refuses connections and drops those open; a slow one
// delays everything the master sends), on net.Pipe connections.

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

type memLink struct {
	latency atomic.Int64 // added to everything the master sends (a time.Duration)

	mu    sync.Mutex
	cut   bool
	conns map[*linkConn]struct{}
}

// Dial connects to the master at addr (a URL's host:port from URLs or
// URLsAs) through its link, as go-redis's Options.Dialer: refused while
// the master is killed or its link cut. Only for StartMemNet's masters.
func (mem *Mem) Dial(ctx context.Context, _, addr string) (net.Conn, error) {
	i, err := mem.index(addr)
	if err != nil {
		return nil, err
	}
	sh, link := mem.shards[i], mem.links[i]
	link.mu.Lock()
	cut := link.cut
	link.mu.Unlock()
	if cut {
		return nil, refused(addr)
	}
	// (Not under the link's lock: miniredis takes its own lock to dial,
	// and holds it while it writes a reply into a link's pipe.)
	sh.mu.Lock() // (Kill and Restart take it: a dial lands on one process)
	if sh.proc == nil {
		sh.mu.Unlock()
		return nil, refused(addr)
	}
	c, err := sh.proc.m.Dial()
	sh.mu.Unlock()
	if err != nil {
		return nil, err
	}
	lc := newLinkConn(c, link)
	link.mu.Lock()
	cut = link.cut
	if !cut {
		link.conns[lc] = struct{}{}
	}
	link.mu.Unlock()
	if cut { // (cut meanwhile)
		lc.Close()
		return nil, refused(addr)
	}
	return lc, nil
}

// DialDirect connects to the master at addr past its link (a cut or slow
// link does not touch it), as a test's own reads go straight to a real
// master and not through its toxiproxy: refused only while it is killed.
func (mem *Mem) DialDirect(ctx context.Context, _, addr string) (net.Conn, error) {
	i, err := mem.index(addr)
	if err != nil {
		return nil, err
	}
	sh := mem.shards[i]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.proc == nil {
		return nil, refused(addr)
	}
	c, err := sh.proc.m.Dial()
	if err != nil {
		return nil, err
	}
	return newLinkConn(c, &memLink{conns: map[*linkConn]struct{}{}}), nil
}

func (mem *Mem) index(addr string) (int, error) {
	host, _, _ := net.SplitHostPort(addr)
	n, err := strconv.Atoi(strings.TrimPrefix(host, memHostPrefix))
	i := n - 1
	if !mem.pipes || !strings.HasPrefix(host, memHostPrefix) || err != nil || i < 0 || i >= len(mem.shards) {
		return 0, fmt.Errorf("shardtest: no in-memory master at %q", addr)
	}
	return i, nil
}

// Cut cuts the link to master i: new connections are refused and those
// open are closed (toxiproxy's proxy stopped).
func (mem *Mem) Cut(i int) {
	l := mem.links[i]
	l.mu.Lock()
	l.cut = true
	conns := l.conns
	l.conns = map[*linkConn]struct{}{}
	l.mu.Unlock()
	for c := range conns {
		c.Close()
	}
}

// Slow delays everything master i sends by d (toxiproxy's latency toxic,
// downstream): a read that would get its bytes after its deadline times
// out instead, and its connection is lost with them.
func (mem *Mem) Slow(i int, d time.Duration) {
	mem.links[i].latency.Store(int64(d))
}

// Mend puts the link to master i back as it was: not cut, not slow.
func (mem *Mem) Mend(i int) {
	l := mem.links[i]
	l.mu.Lock()
	l.cut = false
	l.mu.Unlock()
	l.latency.Store(0)
}

// linkConn is one connection through a link. What the master sends is
// read off its pipe at once by a pump, and handed to the client's reads
// when it arrives (after the link's latency): miniredis writes its replies
// holding its lock, so a reader that waits (a slow link) must not leave it
// stuck in a pipe write, or every other command would wait on that lock,
// which is not a wait a synctest bubble's clock moves on.
type linkConn struct {
	net.Conn // the client's end of the pipe to the master
	link     *memLink

	mu       sync.Mutex
	queue    []chunk
	err      error         // the pipe's, once the pump has read everything
	deadline time.Time     // of reads
	notify   chan struct{} // a chunk or the error came (1 buffered)
	closed   chan struct{}
	once     sync.Once
}

type chunk struct {
	data []byte
	at   time.Time // when it reaches the client
}

func newLinkConn(c net.Conn, link *memLink) *linkConn {
	lc := &linkConn{Conn: c, link: link, notify: make(chan struct{}, 1), closed: make(chan struct{})}
	go lc.pump()
	return lc
}

func (c *linkConn) pump() {
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Conn.Read(buf)
		latency := time.Duration(c.link.latency.Load())
		c.mu.Lock()
		if n > 0 {
			c.queue = append(c.queue, chunk{append([]byte(nil), buf[:n]...), time.Now().Add(latency)})
		}
		if err != nil {
			c.err = err
		}
		c.mu.Unlock()
		select {
		case c.notify <- struct{}{}:
		default:
		}
		if err != nil {
			return
		}
	}
}

func (c *linkConn) SetDeadline(t time.Time) error {
	c.setReadDeadline(t)
	return c.Conn.SetWriteDeadline(t)
}

func (c *linkConn) SetReadDeadline(t time.Time) error {
	c.setReadDeadline(t)
	return nil
}

func (c *linkConn) setReadDeadline(t time.Time) {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
}

// Read hands over what has arrived, waiting for the next chunk to arrive
// until the read deadline.
func (c *linkConn) Read(b []byte) (int, error) {
	for {
		c.mu.Lock()
		deadline := c.deadline
		var wake time.Time // when to look again (zero: when notified)
		if len(c.queue) > 0 {
			ch := &c.queue[0]
			if !time.Now().Before(ch.at) {
				n := copy(b, ch.data)
				if ch.data = ch.data[n:]; len(ch.data) == 0 {
					c.queue = c.queue[1:]
				}
				c.mu.Unlock()
				return n, nil
			}
			wake = ch.at
		} else if c.err != nil {
			err := c.err
			c.mu.Unlock()
			return 0, err
		}
		c.mu.Unlock()
		if !deadline.IsZero() && (wake.IsZero() || deadline.Before(wake)) {
			wake = deadline
		}
		if err := c.wait(wake, deadline); err != nil {
			return 0, err
		}
	}
}

// wait waits for a chunk or the pipe's error, until wake (zero: no
// bound); past the read deadline it is a timeout.
func (c *linkConn) wait(wake, deadline time.Time) error {
	var timer <-chan time.Time
	if !wake.IsZero() {
		t := time.NewTimer(time.Until(wake))
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-c.notify:
	case <-c.closed:
		return net.ErrClosed
	case <-timer:
		if wake.Equal(deadline) {
			return os.ErrDeadlineExceeded
		}
	}
	return nil
}

func (c *linkConn) Close() error {
	c.link.mu.Lock()
	delete(c.link.conns, c)
	c.link.mu.Unlock()
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}
