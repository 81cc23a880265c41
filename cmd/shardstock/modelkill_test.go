package main

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/shardstock/shardstock/api"
	"pgregory.net/rapid"
)

// A coordinator killed mid-request (SIGKILL, the OOM killer, a lost
// machine): the model's coordinators run in the test's process, so a kill
// is their network ending at once. Every connection a coordinator holds,
// to the shards and from its HTTP clients, closes in the same instant and
// it can open no new one; only then is it closed, its shutdown finding
// every shard gone. What it had in hand stays where it was: reservations
// answered to nobody, stream entries read and not acknowledged (another
// coordinator takes them over after ClaimIdle), settlements and claim
// give-backs not sent. (Its shutdown may still write to its database and
// spool what it does with every shard unreachable, as a process killed a
// moment later would have; a real SIGKILL is TestChaos's.)

var errKilled = errors.New("the coordinator was killed")

// severable is one coordinator process's network.
type severable struct {
	mu        sync.Mutex
	dead      bool
	conns     map[net.Conn]bool
	listeners []net.Listener
}

func newSeverable() *severable { return &severable{conns: map[net.Conn]bool{}} }

// dial wraps a dialer so that its connections end with the process.
func (s *severable) dial(base func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := base(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return s.track(c)
	}
}

// listen wraps a listener so that it and the connections it accepts end
// with the process.
func (s *severable) listen(base func(addr string) (net.Listener, error)) func(addr string) (net.Listener, error) {
	return func(addr string) (net.Listener, error) {
		ln, err := base(addr)
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.dead {
			ln.Close()
			return nil, errKilled
		}
		s.listeners = append(s.listeners, ln)
		return severableListener{ln, s}, nil
	}
}

func (s *severable) track(c net.Conn) (net.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		c.Close()
		return nil, errKilled
	}
	s.conns[c] = true
	t := trackedConn{c, s}
	if sc, ok := c.(syscall.Conn); ok { // (go-redis checks a pooled TCP connection for EOF through it)
		return trackedSysConn{t, sc}, nil
	}
	return t, nil
}

// kill ends every connection and listener at once.
func (s *severable) kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dead = true
	for c := range s.conns {
		c.Close()
	}
	for _, ln := range s.listeners {
		ln.Close()
	}
}

// revive lets connections be made again (a database back after an
// outage; a coordinator's network is never revived: a new process gets
// a new one).
func (s *severable) revive() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dead = false
}

type trackedConn struct {
	net.Conn
	s *severable
}

func (c trackedConn) Close() error {
	c.s.mu.Lock()
	delete(c.s.conns, c.Conn)
	c.s.mu.Unlock()
	return c.Conn.Close()
}

type trackedSysConn struct {
	trackedConn
	sc syscall.Conn
}

func (c trackedSysConn) SyscallConn() (syscall.RawConn, error) { return c.sc.SyscallConn() }

type severableListener struct {
	net.Listener
	s *severable
}

func (l severableListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.s.track(c)
}

func realDial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

func realListen(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }

// killCoordinator: buyers send purchases through a coordinator, which is
// killed while they are in flight (at once, or a few milliseconds in: some
// answered, some reserved and never answered, some never arrived). It is
// away until a start-coordinator step.
func (h *history) killCoordinator() {
	c := rapid.IntRange(0, 1).Draw(h.t, "coordinator")
	p := h.product("product")
	users := make([]string, rapid.IntRange(1, 4).Draw(h.t, "purchases in flight"))
	for k := range users {
		users[k] = rapid.SampledFrom(h.users).Draw(h.t, "user")
	}
	after := rapid.SampledFrom([]time.Duration{0, time.Millisecond, 5 * time.Millisecond}).Draw(h.t, "killed after")
	url := h.coords[c].URL()
	headers := make([][]string, len(users))
	for k, user := range users {
		headers[k] = []string{"X-User-ID", user}
		if p.queued { // (its place first: a buyer without one is told 403 not_admitted)
			if token, _ := h.place(c, user, p); token != "" {
				headers[k] = append(headers[k], api.QueueTokenHeader, token)
			}
		}
	}
	reps, ats := make([]modelReply, len(users)), make([]time.Time, len(users))
	var wg sync.WaitGroup
	for k := range users {
		ats[k] = time.Now()
		wg.Go(func() {
			reps[k] = h.env.send(url, "POST", "/api/v1/products/"+p.id+"/purchase", "", headers[k]...)
		})
	}
	time.Sleep(after)
	h.nets[c].kill()
	wg.Wait()
	h.stopCoordinator(c)
	h.stopped[c] = true
	var told []string
	for k, user := range users {
		h.no500(c, "a purchase as the coordinator was killed", reps[k])
		h.answered(c, user, p, ats[k], reps[k])
		told = append(told, reps[k].short())
	}
	h.logf("coordinator %d killed %s into %d purchases of %s (away until it is started): %s",
		c, after, len(users), p.id, strings.Join(told, ", "))
}
