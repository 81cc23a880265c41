package main

import (
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/shardstock/shardstock/flashsale"
	"github.com/shardstock/shardstock/shard/shardtest"
)

// TestHeaderModeTrustsOnlyItsProxies (issue 15, item 3): in header mode an
// X-User-ID is believed only from SHARDSTOCK_TRUSTED_PROXIES; a buyer
// reaching the coordinator from anywhere else cannot claim an identity.
func TestHeaderModeTrustsOnlyItsProxies(t *testing.T) {
	r := shardtest.Start(t, 3)
	db := "sqlite:" + t.TempDir() + "/o.db"
	gateway := startServer(t, r.URLs(), func(c *Config) { c.DB = db }) // default: loopback is the trusted proxy
	elsewhere := startServer(t, r.URLs(), func(c *Config) {
		c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("10.9.9.9/32")}
		c.DB = db
	})
	putProduct(t, gateway.URL(), "hp", `{"stock":10}`)
	if rep := purchase(t, gateway.URL(), "hp", "alice"); rep.status != 200 {
		t.Fatalf("through the trusted proxy: %d %s", rep.status, rep.raw)
	}
	rep := purchase(t, elsewhere.URL(), "hp", "mallory")
	if rep.status != 401 || !strings.Contains(rep.str("message"), "trusted proxy") {
		t.Fatalf("X-User-ID from a peer that is not a trusted proxy: %d %s", rep.status, rep.raw)
	}
	if o := do(t, "GET", elsewhere.URL()+"/api/v1/orders/01M8PGV9QGCHE6P8YWT9HFAADV", "", "X-User-ID", "alice"); o.status != 401 {
		t.Fatalf("reading an order with a claimed identity from an untrusted peer: %d %s", o.status, o.raw)
	}
}

// TestStrictJSONOverHTTP (issue 15, item 7): the examples that passed
// before — a second key in another case paid an order, and defined 99
// units — are refused with 400.
func TestStrictJSONOverHTTP(t *testing.T) {
	r := shardtest.Start(t, 3)
	m := startServer(t, r.URLs())
	base := m.URL()
	if rep := putProduct(t, base, "sj", `{"stock":10,"Stock":99}`); rep.status != 400 {
		t.Fatalf(`PUT {"stock":10,"Stock":99}: %d %s`, rep.status, rep.raw)
	}
	putProduct(t, base, "sj", `{"stock":10}`)
	id := purchase(t, base, "sj", "alice").str("order_id")
	rep := do(t, "POST", base+"/api/v1/orders/"+id+"/pay", `{"result":"fail","RESULT":"success"}`,
		"X-User-ID", "alice", "Content-Type", "application/json")
	if rep.status != 400 {
		t.Fatalf(`pay {"result":"fail","RESULT":"success"}: %d %s`, rep.status, rep.raw)
	}
}

// TestSmallHardenings (issue 15, item 8): the page templates are not
// served raw, pages carry a Content-Security-Policy and frame and sniffing
// denials, and a request id a client sends is not taken as the server's.
func TestSmallHardenings(t *testing.T) {
	r := shardtest.Start(t, 3)
	m := startServer(t, r.URLs())
	base := m.URL()
	for _, p := range []string{"/static/product.html", "/static/index.html", "/static/admin.html"} {
		if rep := do(t, "GET", base+p, ""); rep.status != 404 {
			t.Fatalf("%s: %d, want 404 (a template)", p, rep.status)
		}
	}
	if rep := do(t, "GET", base+"/static/sale.js", ""); rep.status != 200 {
		t.Fatalf("/static/sale.js: %d", rep.status)
	}
	page := doRaw(t, "GET", base+"/admin/")
	for h, want := range map[string]string{"Content-Security-Policy": "script-src 'self'", "X-Frame-Options": "DENY",
		"X-Content-Type-Options": "nosniff"} {
		if got := page.header.Get(h); !strings.Contains(got, want) {
			t.Fatalf("%s: %q, want %q", h, got, want)
		}
	}
	forged := doRaw(t, "GET", base+"/healthz", "X-Request-Id", "deadbeef-1")
	if got := forged.header.Get("X-Request-Id"); got == "deadbeef-1" || got == "" {
		t.Fatalf("X-Request-Id answered %q for a client's own", got)
	}
}

// TestMadeUpProductsAreLimitedBeforeSQL (issue 15, item 6): purchases of
// product ids nobody defined cost their sender the per-buyer limit before
// the catalog is read, so a flood of random ids gets 429, not a SQL read
// each; a real product's buyers are not slowed by it.
func TestMadeUpProductsAreLimitedBeforeSQL(t *testing.T) {
	r := shardtest.Start(t, 3)
	m := startServer(t, r.URLs(), func(c *Config) { c.Limits = flashsale.Limits{User: 2} })
	base := m.URL()
	putProduct(t, base, "real", `{"stock":100}`)
	statuses := map[int]int{}
	for i := range 20 {
		statuses[purchase(t, base, "real", "other"+strconv.Itoa(i)).status]++ // warm: "real" is cached
		statuses[purchase(t, base, "madeup"+strconv.Itoa(i), "flooder").status+1000]++
	}
	if statuses[1000+404] > 3 || statuses[1000+429] < 17 {
		t.Fatalf("made-up ids from one buyer: %v (want 429 after the buyer's 2/s; 1000+ = the flooder)", statuses)
	}
	if statuses[200] != 20 {
		t.Fatalf("buyers of a real product: %v", statuses)
	}
}
