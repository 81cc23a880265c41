package shardtest

// Net: an in-memory network for tests that run in a testing/synctest
// bubble, where a real socket would stop the fake clock (a goroutine
// blocked on a socket is not "durably blocked", so time never moves on).
// Listen and Dial make net.Pipe connections, whose reads and writes block
// on channels made in the bubble.

import (
	"context"
	"fmt"
	"net"
	"sync"
	"syscall"
)

// Net routes Dial to the listeners made by Listen, by address. The zero
// value is not usable: use NewNet.
type Net struct {
	mu        sync.Mutex
	listeners map[string]*pipeListener
	next      int // the last port given to a listener on ":0" (20001-39999, then round again)
	from      int // the last client port (40000-65535, then round again)
}

// NewNet is an empty network.
func NewNet() *Net { return &Net{listeners: map[string]*pipeListener{}} }

// Listen listens on addr; an address ending in ":0" gets a port of its own
// (as a real listener would), so Addr() tells the caller where it is.
func (n *Net) Listen(addr string) (net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if port == "0" {
		// A port of 65536 or more is no port: a URL or a peer address with
		// one does not parse (a long soak's coordinators dialled past it,
		// and were refused as an untrusted proxy).
		for tries := 0; ; tries++ {
			n.next = n.next%19999 + 1
			addr = net.JoinHostPort(host, fmt.Sprint(20000+n.next))
			if _, taken := n.listeners[addr]; !taken || tries == 19999 {
				break
			}
		}
	}
	if _, taken := n.listeners[addr]; taken {
		return nil, &net.OpError{Op: "listen", Net: "pipe", Err: syscall.EADDRINUSE}
	}
	l := &pipeListener{net: n, addr: pipeAddr(addr), conns: make(chan net.Conn), done: make(chan struct{})}
	n.listeners[addr] = l
	return l, nil
}

// Dial connects to the listener on addr: refused when there is none (or
// it was closed), as a closed port would.
func (n *Net) Dial(ctx context.Context, _, addr string) (net.Conn, error) {
	n.mu.Lock()
	l := n.listeners[addr]
	n.mu.Unlock()
	if l == nil {
		return nil, refused(addr)
	}
	client, server := net.Pipe()
	n.mu.Lock()
	n.from = (n.from + 1) % 25536
	from := pipeAddr(net.JoinHostPort("127.0.0.1", fmt.Sprint(40000+n.from)))
	n.mu.Unlock()
	select {
	case l.conns <- addrConn{server, l.addr, from}:
		return addrConn{client, from, l.addr}, nil
	case <-l.done:
		return nil, refused(addr)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func refused(addr string) error {
	return &net.OpError{Op: "dial", Net: "tcp", Addr: pipeAddr(addr), Err: syscall.ECONNREFUSED}
}

// pipeAddr is an address on the Net; a server sees its clients come from
// loopback addresses (what a check of the peer's address expects).
type pipeAddr string

func (a pipeAddr) Network() string { return "tcp" }
func (a pipeAddr) String() string  { return string(a) }

// addrConn is a pipe's end with the addresses of the Net.
type addrConn struct {
	net.Conn
	local, remote net.Addr
}

func (c addrConn) LocalAddr() net.Addr  { return c.local }
func (c addrConn) RemoteAddr() net.Addr { return c.remote }

type pipeListener struct {
	net   *Net
	addr  pipeAddr
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.net.mu.Lock()
		delete(l.net.listeners, string(l.addr))
		l.net.mu.Unlock()
	})
	return nil
}

func (l *pipeListener) Addr() net.Addr { return l.addr }
