package shardtest

import (
	"errors"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// HalfSent is what became of requests that never end, sent to an edge.
type HalfSent struct {
	Closed, Held, Answered int64
	// Slowest is the longest a closed connection stayed open.
	Slowest time.Duration
}

// SendHalfSent opens n connections to addr from 127.0.0.1, each sending a
// request that never ends (half of them stop in the headers, half in the
// request line), and sorts them by what happened within `within` of the
// first: closed by the other side (EOF or reset), still held open, or
// answered. meanwhile (if not nil) runs once all are sent, while those not
// closed are still open; they are closed before SendHalfSent returns.
func SendHalfSent(t testing.TB, addr string, n int, within time.Duration, meanwhile func()) HalfSent {
	t.Helper()
	start := time.Now()
	deadline := start.Add(within)
	var wg sync.WaitGroup
	var closed, held, answered, slowest atomic.Int64 // slowest in ns
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for k := range n {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			t.Fatalf("connection %d: %v", k, err)
		}
		conns = append(conns, c)
		dialed := time.Now()
		part := "GET /healthz HTTP/1.1\r\nHost: edge\r\nUser-Agent: slow" // the headers never end
		if k%2 == 1 {
			part = "GET /heal" // the request line never ends
		}
		c.Write([]byte(part)) // (a refused connection may be closed already)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetReadDeadline(deadline)
			got, err := c.Read(make([]byte, 256))
			switch {
			case got > 0:
				answered.Add(1)
			case errors.Is(err, os.ErrDeadlineExceeded):
				held.Add(1)
			default: // EOF or reset: refused
				closed.Add(1)
				for d := int64(time.Since(dialed)); ; {
					if s := slowest.Load(); d <= s || slowest.CompareAndSwap(s, d) {
						break
					}
				}
			}
		}()
	}
	t.Logf("%d half-sent requests from 127.0.0.1 sent in %s", n, time.Since(start).Round(time.Millisecond))
	if meanwhile != nil {
		meanwhile()
	}
	wg.Wait()
	return HalfSent{Closed: closed.Load(), Held: held.Load(), Answered: answered.Load(), Slowest: time.Duration(slowest.Load())}
}

// ClientFrom is an HTTP client whose connections come from ip, another
// client address on loopback (Linux routes all of 127/8 there).
func ClientFrom(ip string) *http.Client {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: time.Second}
	return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: d.DialContext}}
}
