package shardtest

import (
	"context"
	"net/netip"
	"testing"
)

// TestNetAddressesStayPorts: however many listeners and connections a long
// soak makes, every address the Net gives is a loopback address with a
// real port. Past 15,536 dials a client's port went beyond 65535: its
// address no longer parsed, and a coordinator refused the model test's
// buyers as coming from an untrusted proxy (401 for a whole history).
func TestNetAddressesStayPorts(t *testing.T) {
	n := NewNet()
	check := func(what, addr string) {
		t.Helper()
		ap, err := netip.ParseAddrPort(addr)
		if err != nil || !ap.Addr().IsLoopback() || ap.Port() == 0 {
			t.Fatalf("%s address %q: %v", what, addr, err)
		}
	}
	for i := range 70000 {
		ln, err := n.Listen("127.0.0.1:0")
		if err != nil {
			t.Fatalf("listener %d: %v", i, err)
		}
		check("listener", ln.Addr().String())
		if i%7 == 0 {
			go func() {
				if c, err := ln.Accept(); err == nil {
					c.Close()
				}
			}()
			c, err := n.Dial(context.Background(), "tcp", ln.Addr().String())
			if err != nil {
				t.Fatalf("dial %d: %v", i, err)
			}
			check("client", c.LocalAddr().String())
			c.Close()
		}
		ln.Close()
	}
}
