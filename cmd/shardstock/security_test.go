package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/redis/go-redis/v9"

	"github.com/shardstock/shardstock/config"
	"github.com/shardstock/shardstock/flashsale"
	"github.com/shardstock/shardstock/shard/shardtest"
)

// TestHeaderModeTrustsOnlyItsProxies (issue 15, item 3): in header mode an
// X-User-ID is believed only from SHARDSTOCK_TRUSTED_PROXIES; a buyer
// reaching the coordinator from anywhere else cannot claim an identity.
func TestHeaderModeTrustsOnlyItsProxies(t *testing.T) {
	r := inMemory(t, 3)
	db := "sqlite:" + t.TempDir() + "/o.db"
	gateway := startServer(t, r.URLs(), func(c *config.Config) { c.DB = db }) // default: loopback is the trusted proxy
	elsewhere := startServer(t, r.URLs(), func(c *config.Config) {
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
	r := inMemory(t, 3)
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
	r := inMemory(t, 3)
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
	r := inMemory(t, 3)
	m := startServer(t, r.URLs(), func(c *config.Config) { c.Limits = flashsale.Limits{User: 2} })
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

// TestAMadeUpOrderIDCostsAFewCommands (issue 41, finding 2): a GET of a
// made-up order id stamped now looked for its hold in every product on
// every shard (with 100 products, 300 Redis commands a look-up), with no
// rate limit. It looks only in the products whose sale is open (here one
// of 41: 3 commands), and order calls take the buyer's rate limit.
func TestAMadeUpOrderIDCostsAFewCommands(t *testing.T) {
	r := shardtest.Start(t, 3)
	m := startServer(t, r.URLs(), func(c *config.Config) { c.Limits = flashsale.Limits{User: 5} })
	tomorrow := time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339)
	for k := range 40 {
		putProduct(t, m.URL(), fmt.Sprintf("later%d", k), fmt.Sprintf(`{"stock":10,"starts_at":%q}`, tomorrow))
	}
	putProduct(t, m.URL(), "open", `{"stock":10}`)
	hgets := func() int64 {
		var n int64
		for _, u := range r.URLs() {
			opt, _ := redis.ParseURL(u)
			c := redis.NewClient(opt)
			info, err := c.Info(context.Background(), "commandstats").Result()
			c.Close()
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(info, "\n") {
				if rest, ok := strings.CutPrefix(line, "cmdstat_hget:calls="); ok {
					v, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
					n += v
				}
			}
		}
		return n
	}
	madeUp := func() string { return ulid.MustNew(ulid.Timestamp(time.Now()), rand.Reader).String() }
	before := hgets()
	if o := do(t, "GET", m.URL()+"/api/v1/orders/"+madeUp(), "", "X-User-ID", "mallory"); o.status != 404 {
		t.Fatalf("a made-up order id: %d %s", o.status, o.raw)
	}
	if n := hgets() - before; n > 3 {
		t.Fatalf("a made-up order id stamped now cost %d HGETs on the shards, want at most 3 (the one open product, on each shard)", n)
	}
	// A buyer's own order is found as ever.
	rep := purchase(t, m.URL(), "open", "alice")
	if rep.status != 200 {
		t.Fatalf("a purchase: %d %s", rep.status, rep.raw)
	}
	if o := do(t, "GET", m.URL()+"/api/v1/orders/"+rep.str("order_id"), "", "X-User-ID", "alice"); o.status != 200 {
		t.Fatalf("alice's order: %d %s", o.status, o.raw)
	}
	limited := 0
	for range 20 {
		if o := do(t, "GET", m.URL()+"/api/v1/orders/"+madeUp(), "", "X-User-ID", "mallory"); o.status == 429 {
			limited++
		}
	}
	if limited < 10 {
		t.Fatalf("20 look-ups at once by one buyer (limit 5 a second): %d answered 429, want most", limited)
	}
}

// TestLooksAtAPlaceAreLimited (issue 41, finding 3): one buyer's looks at
// their place are held to a budget (429 with Retry-After past it), and
// another buyer's look is answered meanwhile.
func TestLooksAtAPlaceAreLimited(t *testing.T) {
	r := inMemory(t, 3)
	m := startServer(t, r.URLs(), func(c *config.Config) { c.Limits = flashsale.Limits{User: 100} })
	putProduct(t, m.URL(), "peek", fmt.Sprintf(`{"stock":10,"starts_at":%q}`, time.Now().Add(time.Hour).UTC().Format(time.RFC3339)))
	if rep := adminDo(t, "PUT", m.URL()+"/admin/v1/products/peek/queue", `{"mode":"fifo","rate":1,"lead_seconds":7200,"window_seconds":60}`); rep.status != 200 {
		t.Fatalf("define the queue: %d %s", rep.status, rep.raw)
	}
	join := func(user string) string {
		rep := do(t, "POST", m.URL()+"/api/v1/products/peek/queue", "", "X-User-ID", user)
		if rep.status != 200 {
			t.Fatalf("%s joins: %d %s", user, rep.status, rep.raw)
		}
		return rep.str("token")
	}
	tok, other := join("peeker"), join("patient")
	limited := 0
	for range 20 {
		req, _ := http.NewRequest("GET", m.URL()+"/api/v1/products/peek/queue", nil)
		req.Header.Set("X-User-ID", "peeker")
		req.Header.Set("X-Queue-Token", tok)
		resp, err := testHTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == 429 {
			limited++
			if resp.Header.Get("Retry-After") == "" {
				t.Fatal("a look past the budget: 429 without Retry-After")
			}
		}
	}
	if limited < 10 {
		t.Fatalf("20 looks at once by one buyer: %d answered 429, want most", limited)
	}
	if rep := do(t, "GET", m.URL()+"/api/v1/products/peek/queue", "", "X-User-ID", "patient", "X-Queue-Token", other); rep.status != 200 {
		t.Fatalf("another buyer's look: %d %s", rep.status, rep.raw)
	}
}
