package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/config"
	"github.com/shardstock/shardstock/flashsale"
	"github.com/shardstock/shardstock/ha"
	"github.com/shardstock/shardstock/inventory"
	"github.com/shardstock/shardstock/order"
	"github.com/shardstock/shardstock/shard"
	"github.com/shardstock/shardstock/shard/shardtest"
)

const testToken = "test-admin-token-0123456789"

// startServer runs a coordinator (Main) on a free port over the given
// shards, stopped when the test ends.
func startServer(t testing.TB, urls []string, opts ...func(*config.Config)) *Main {
	t.Helper()
	cfg := &config.Config{HTTPAddr: "127.0.0.1:0", Shards: urls, AdminToken: testToken, UserAuth: "header",
		ShardTimeout: 250 * time.Millisecond, LogFormat: "text", LogLevel: slog.LevelWarn,
		MQ: "streams", DB: "sqlite:" + t.TempDir() + "/orders.db", PayTimeout: 15 * time.Minute,
		FailFastAge: 30 * time.Minute, OrderRate: 100000, ClaimIdle: 30 * time.Second}
	for _, o := range opts {
		o(cfg)
	}
	m := NewMain(cfg, testLog(t))
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return m
}

// inMemory is n masters in this process (shardtest.Mem: miniredis running
// the real scripts), for the tests about the domain and the API rather than
// about Redis: they need no redis-server and start in milliseconds. The
// tests about what Redis itself does (a crash, a freeze, memory, the
// scripts' cost, AOF) run on real redis-servers (shardtest.Start).
func inMemory(t testing.TB, n int) *shardtest.Mem {
	t.Helper()
	return shardtest.StartMem(t, n, shardtest.Options{})
}

var testHTTP = &http.Client{
	Timeout:   10 * time.Second,
	Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 128, IdleConnTimeout: time.Minute},
}

type reply struct {
	status int
	body   map[string]any
	raw    string
}

func (r reply) str(k string) string { s, _ := r.body[k].(string); return s }

// do sends a request; headers is a list of name, value pairs.
func do(t testing.TB, method, url, body string, headers ...string) reply {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := testHTTP.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := reply{status: resp.StatusCode, raw: string(raw)}
	json.Unmarshal(raw, &r.body)
	return r
}

func purchase(t testing.TB, base, product, user string) reply {
	return do(t, "POST", base+"/api/v1/products/"+product+"/purchase", "", "X-User-ID", user)
}

func putProduct(t testing.TB, base, id, body string) reply {
	return do(t, "PUT", base+"/admin/v1/products/"+id, body,
		"Authorization", "Bearer "+testToken, "Content-Type", "application/json")
}

func productStatus(t testing.TB, base, id string) inventory.ProductStatus {
	t.Helper()
	r := do(t, "GET", base+"/admin/v1/products/"+id, "", "Authorization", "Bearer "+testToken)
	if r.status != 200 {
		t.Fatalf("admin product %s: %d %s", id, r.status, r.raw)
	}
	var st inventory.ProductStatus
	if err := json.Unmarshal([]byte(r.raw), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// checkShards asserts conservation on every shard that answers and no
// oversell overall; it returns the totals of the shards that answered.
func checkShards(t *testing.T, st inventory.ProductStatus) (salable, locked, sold int64) {
	t.Helper()
	var alloc int64
	for _, s := range st.Shards {
		if !s.Up || s.Salable == nil {
			continue
		}
		if *s.Salable+*s.Locked+*s.Sold != *s.Alloc {
			t.Errorf("shard %d breaks conservation: salable %d locked %d sold %d alloc %d",
				s.Index, *s.Salable, *s.Locked, *s.Sold, *s.Alloc)
		}
		salable, locked, sold, alloc = salable+*s.Salable, locked+*s.Locked, sold+*s.Sold, alloc+*s.Alloc
	}
	if locked+sold > st.Stock {
		t.Errorf("oversell: locked %d + sold %d > stock %d", locked, sold, st.Stock)
	}
	return salable, locked, sold
}

// TestRaceSellsExactlyTheStock: stock 1000 on 3 shards, 5000 distinct buyers
// trying twice each over 64 concurrent connections, spread over two
// coordinator processes sharing the shards.
func TestRaceSellsExactlyTheStock(t *testing.T) {
	r := shardtest.Start(t, 3)
	db := "sqlite:" + t.TempDir() + "/shared.db"
	sameDB := func(c *config.Config) { c.DB, c.Coalesce = db, true } // coalescing on: it must change no outcome
	// a starts purchases at the buyer's home (claim and reserve in one
	// call), b reserves first at random shards; each buyer's two tries go
	// to both at once.
	randomStart := func(c *config.Config) { c.Start = shard.StartRandom }
	a, b := startServer(t, r.URLs(), sameDB), startServer(t, r.URLs(), sameDB, randomStart)
	if rep := putProduct(t, a.URL(), "race", `{"stock":1000,"per_user_limit":1}`); rep.status != 201 {
		t.Fatalf("define: %d %s", rep.status, rep.raw)
	}
	const buyers, tries, conns = 5000, 2, 64
	jobs := make(chan int)
	var (
		mu       sync.Mutex
		orderIDs = map[string]string{} // order id -> buyer
		statuses = map[int]int{}
		perBuyer = map[string]int{}
	)
	var wg sync.WaitGroup
	for w := 0; w < conns; w++ {
		wg.Go(func() {
			for j := range jobs {
				user := fmt.Sprintf("buyer%d", j/tries) // a buyer's tries run side by side
				base := a.URL()
				if j%2 == 1 {
					base = b.URL()
				}
				rep := purchase(t, base, "race", user)
				mu.Lock()
				statuses[rep.status]++
				if rep.status == 200 {
					if prev, dup := orderIDs[rep.str("order_id")]; dup {
						t.Errorf("order id %s given to %s and %s", rep.str("order_id"), prev, user)
					}
					orderIDs[rep.str("order_id")] = user
					perBuyer[user]++
				} else if rep.status != 409 && rep.status != 410 {
					t.Errorf("%s: %d %s", user, rep.status, rep.raw)
				}
				mu.Unlock()
			}
		})
	}
	for j := 0; j < buyers*tries; j++ {
		jobs <- j
	}
	close(jobs)
	wg.Wait()
	t.Logf("statuses: %v", statuses)
	if statuses[200] != 1000 || len(orderIDs) != 1000 {
		t.Fatalf("%d successes, %d distinct order ids; want exactly 1000", statuses[200], len(orderIDs))
	}
	for u, n := range perBuyer {
		if n > 1 {
			t.Errorf("%s bought %d units with limit 1", u, n)
		}
	}
	salable, locked, sold := checkShards(t, productStatus(t, a.URL(), "race"))
	if locked != 1000 || salable != 0 || sold != 0 {
		t.Fatalf("totals: salable %d locked %d sold %d; want 0 1000 0", salable, locked, sold)
	}
}

// TestFailoverWhenAShardStopsMidSale: one shard is SIGKILLed while
// purchases are in flight; the others keep selling and the admin views
// show it down. Buyers whose home (their per-user limit register) is the
// dead shard are answered 503 unavailable (the spool is off here), never
// 410; everyone else buys. With every shard gone the answer is 503
// unavailable, never 410.
func TestFailoverWhenAShardStopsMidSale(t *testing.T) {
	r := shardtest.Start(t, 3)
	m := startServer(t, r.URLs())
	if rep := putProduct(t, m.URL(), "fo", `{"stock":3000}`); rep.status != 201 {
		t.Fatalf("define: %d %s", rep.status, rep.raw)
	}
	var (
		next, ok atomic.Int64
		homeless atomic.Int64 // buyers whose home is the dead shard
		killed   sync.Once
		wg       sync.WaitGroup
	)
	for w := 0; w < 16; w++ {
		wg.Go(func() {
			for n := next.Add(1); n <= 1200; n = next.Add(1) {
				if n == 300 {
					killed.Do(func() { r.Kill(1) })
				}
				user := fmt.Sprintf("u%d", n)
				rep := purchase(t, m.URL(), "fo", user)
				// (a purchase taken just before the kill may end after it)
				if rep.status == 503 && n >= 300-16 && m.set.Purchases.Home(user) == 1 {
					homeless.Add(1)
					continue
				}
				if rep.status != 200 {
					t.Errorf("purchase %d: %d %s", n, rep.status, rep.raw)
					continue
				}
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	if ok.Load()+homeless.Load() != 1200 || ok.Load() < 1200*5/10 {
		t.Fatalf("%d of 1200 purchases succeeded, %d unavailable (home shard dead)", ok.Load(), homeless.Load())
	}
	st := productStatus(t, m.URL(), "fo")
	if st.Shards[1].Up || st.Shards[1].Salable != nil {
		t.Errorf("admin product view shows the dead shard as %+v", st.Shards[1])
	}
	if !st.Shards[0].Up || !st.Shards[2].Up {
		t.Errorf("live shards shown down: %+v", st.Shards)
	}
	checkShards(t, st)
	var shards []inventory.ShardHealth
	rep := do(t, "GET", m.URL()+"/admin/v1/shards", "", "Authorization", "Bearer "+testToken)
	json.Unmarshal([]byte(rep.raw), &shards)
	if len(shards) != 3 || shards[1].Up || shards[1].LastError == "" || !shards[0].Up || !shards[2].Up {
		t.Errorf("admin shards: %s", rep.raw)
	}

	r.Kill(0)
	r.Kill(2)
	for k := 0; k < 5; k++ {
		rep := purchase(t, m.URL(), "fo", fmt.Sprintf("late%d", k))
		if rep.status != 503 || rep.str("error") != "unavailable" {
			t.Fatalf("all shards down: %d %s, want 503 unavailable", rep.status, rep.raw)
		}
	}
	time.Sleep(600 * time.Millisecond) // one health round
	if rep := do(t, "GET", m.URL()+"/readyz", ""); rep.status != 503 {
		t.Errorf("readyz with every shard down: %d", rep.status)
	}
}

func TestAdminProductLifecycle(t *testing.T) {
	r := inMemory(t, 3)
	m := startServer(t, r.URLs())
	body := `{"stock":10,"per_user_limit":2,"starts_at":"2026-01-01T00:00:00Z","ends_at":"2099-01-01T00:00:00Z","title":"Lamp","price_cents":9900}`
	for i, want := range []int{201, 200, 200} {
		if rep := putProduct(t, m.URL(), "lamp", body); rep.status != want {
			t.Fatalf("PUT #%d: %d %s, want %d", i, rep.status, rep.raw, want)
		}
	}
	if rep := putProduct(t, m.URL(), "lamp", `{"stock":11,"per_user_limit":2}`); rep.status != 409 || rep.str("error") != "conflict" {
		t.Fatalf("conflicting PUT: %d %s", rep.status, rep.raw)
	}
	st := productStatus(t, m.URL(), "lamp")
	if st.ID != "lamp" || st.Stock != 10 || st.PerUserLimit != 2 || st.Title != "Lamp" || st.PriceCents != 9900 ||
		st.StartsAt.Year() != 2026 || st.EndsAt.Year() != 2099 || len(st.Shards) != 3 || st.Totals.Salable != 10 {
		t.Fatalf("admin view: %+v", st)
	}
	if rep := purchase(t, m.URL(), "lamp", "someone"); rep.status != 200 || rep.str("status") != "reserved" {
		t.Fatalf("purchase: %d %s", rep.status, rep.raw)
	}
	if st := productStatus(t, m.URL(), "lamp"); st.Totals.Locked != 1 || st.Totals.Salable != 9 {
		t.Fatalf("after one purchase: %+v", st.Totals)
	}
	admin := []string{"Authorization", "Bearer " + testToken, "Content-Type", "application/json"}
	if rep := do(t, "POST", m.URL()+"/admin/v1/shards/0/drain", `{"drained":true}`, admin...); rep.status != 200 || rep.body["drained"] != true {
		t.Fatalf("drain: %d %s", rep.status, rep.raw)
	}
	if st := productStatus(t, m.URL(), "lamp"); *st.Shards[0].Salable != 0 || st.Totals.Salable != 9 {
		t.Fatalf("after drain: %+v", st.Shards)
	}
	do(t, "POST", m.URL()+"/admin/v1/shards/0/drain", `{"drained":false}`, admin...)
	if rep := do(t, "POST", m.URL()+"/admin/v1/products/lamp/rebalance", "", admin...); rep.status != 200 {
		t.Fatalf("rebalance: %d %s", rep.status, rep.raw)
	}
	if st := productStatus(t, m.URL(), "lamp"); *st.Shards[0].Salable != 3 || st.Totals.Salable != 9 {
		t.Fatalf("after rebalance: %+v", st.Shards)
	}
	if rep := do(t, "POST", m.URL()+"/admin/v1/shards/7/drain", "", admin...); rep.status != 404 {
		t.Fatalf("drain of no such shard: %d", rep.status)
	}
}

func TestBadInput(t *testing.T) {
	r := inMemory(t, 3)
	m := startServer(t, r.URLs())
	base := m.URL()
	putProduct(t, base, "ok", `{"stock":5}`)
	putProduct(t, base, "soon", `{"stock":5,"starts_at":"2099-01-01T00:00:00Z"}`)
	putProduct(t, base, "over", `{"stock":5,"starts_at":"2001-01-01T00:00:00Z","ends_at":"2002-01-01T00:00:00Z"}`)
	auth := []string{"Authorization", "Bearer " + testToken, "Content-Type", "application/json"}
	user := []string{"X-User-ID", "u1", "Content-Type", "application/json"}
	big := `{"title":"` + strings.Repeat("x", 20<<10) + `"}`
	cases := []struct {
		name, method, path, body string
		headers                  []string
		status                   int
		code                     string
	}{
		{"no identity", "POST", "/api/v1/products/ok/purchase", "", nil, 401, "unauthorized"},
		{"bad identity", "POST", "/api/v1/products/ok/purchase", "", []string{"X-User-ID", "a b"}, 401, "unauthorized"},
		{"identity too long", "POST", "/api/v1/products/ok/purchase", "", []string{"X-User-ID", strings.Repeat("u", 65)}, 401, "unauthorized"},
		{"unknown product", "POST", "/api/v1/products/nope/purchase", "", user, 404, "not_found"},
		{"bad product id", "POST", "/api/v1/products/a:b/purchase", "", user, 400, "bad_request"},
		{"malformed JSON", "POST", "/api/v1/products/ok/purchase", `{"x":`, user, 400, "bad_request"},
		{"unknown field", "POST", "/api/v1/products/ok/purchase", `{"quantity":5}`, user, 400, "bad_request"},
		{"trailing data", "POST", "/api/v1/products/ok/purchase", `{} {}`, user, 400, "bad_request"},
		{"not JSON", "POST", "/api/v1/products/ok/purchase", `hello`, []string{"X-User-ID", "u1", "Content-Type", "text/plain"}, 415, "unsupported_media_type"},
		{"oversized body", "POST", "/api/v1/products/ok/purchase", big, user, 413, "too_large"},
		{"not started", "POST", "/api/v1/products/soon/purchase", "", user, 403, "not_started"},
		{"ended", "POST", "/api/v1/products/over/purchase", "", user, 403, "ended"},
		{"negative stock", "PUT", "/admin/v1/products/neg", `{"stock":-1}`, auth, 400, "bad_request"},
		{"zero stock", "PUT", "/admin/v1/products/neg", `{"stock":0}`, auth, 400, "bad_request"},
		{"missing stock", "PUT", "/admin/v1/products/neg", `{"title":"x"}`, auth, 400, "bad_request"},
		{"stock as string", "PUT", "/admin/v1/products/neg", `{"stock":"10"}`, auth, 400, "bad_request"},
		{"bad time", "PUT", "/admin/v1/products/neg", `{"stock":1,"starts_at":"tomorrow"}`, auth, 400, "bad_request"},
		{"window backwards", "PUT", "/admin/v1/products/neg", `{"stock":1,"starts_at":"2030-01-02T00:00:00Z","ends_at":"2030-01-01T00:00:00Z"}`, auth, 400, "bad_request"},
		{"admin malformed JSON", "PUT", "/admin/v1/products/neg", `{`, auth, 400, "bad_request"},
		{"admin empty body", "PUT", "/admin/v1/products/neg", ``, auth, 400, "bad_request"},
		{"admin oversized body", "PUT", "/admin/v1/products/neg", big, auth, 413, "too_large"},
		{"admin bad id", "PUT", "/admin/v1/products/a.b", `{"stock":1}`, auth, 400, "bad_request"},
		{"admin without token", "GET", "/admin/v1/shards", "", nil, 401, "unauthorized"},
		{"admin wrong token", "GET", "/admin/v1/shards", "", []string{"Authorization", "Bearer wrong"}, 401, "unauthorized"},
		{"admin token without Bearer", "GET", "/admin/v1/shards", "", []string{"Authorization", testToken}, 401, "unauthorized"},
		{"admin put without token", "PUT", "/admin/v1/products/x", `{"stock":1}`, []string{"Content-Type", "application/json"}, 401, "unauthorized"},
		{"admin unknown product", "GET", "/admin/v1/products/nope", "", auth, 404, "not_found"},
		{"unknown route", "GET", "/api/v1/nothing", "", nil, 404, "not_found"},
		{"wrong method", "GET", "/api/v1/products/ok/purchase", "", user, 405, "method_not_allowed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep := do(t, tc.method, base+tc.path, tc.body, tc.headers...)
			if rep.status != tc.status || rep.str("error") != tc.code || rep.str("message") == "" {
				t.Fatalf("got %d %s, want %d {error: %s, message: ...}", rep.status, rep.raw, tc.status, tc.code)
			}
		})
	}
	// The API's rough edges (issue 42, finding 9): what a 404 did not find,
	// a limit of 0 said rather than made 1, messages as they are written,
	// the scheme in any case.
	for _, tc := range []struct {
		name, method, path, body string
		headers                  []string
		status                   int
		raw                      string
	}{
		{"no such product", "POST", "/api/v1/products/nope/purchase", "", user, 404, `"no such product"`},
		{"no such order", "GET", "/api/v1/orders/nope", "", user, 404, `"no such order"`},
		{"no such ticket", "GET", "/api/v1/tickets/nope", "", user, 404, `"no such ticket"`},
		{"no such shard", "POST", "/admin/v1/shards/7/resync", "{}", auth, 404, `"no such shard"`},
		{"a limit of 0", "PUT", "/admin/v1/products/zero", `{"stock":1,"per_user_limit":0}`, auth, 400, `per_user_limit must be between 1 and 1000`},
		{"a currency that is none", "PUT", "/admin/v1/products/zero", `{"stock":1,"currency":"euro"}`, auth, 400, `currency must be an ISO 4217 code`},
		{"a message unescaped", "PUT", "/admin/v1/products/neg", `{"stock":0}`, auth, 400, `stock must be > 0`},
		{"bearer in lower case", "GET", "/admin/v1/shards", "", []string{"Authorization", "bearer " + testToken}, 200, `"breaker"`},
	} {
		if rep := do(t, tc.method, base+tc.path, tc.body, tc.headers...); rep.status != tc.status || !strings.Contains(rep.raw, tc.raw) {
			t.Errorf("%s: %d %s, want %d with %s", tc.name, rep.status, rep.raw, tc.status, tc.raw)
		}
	}
	if st := productStatus(t, base, "ok"); st.Totals.Salable != 5 {
		t.Fatalf("bad requests changed the stock: %+v", st.Totals)
	}
	if rep := do(t, "GET", base+"/admin/v1/products/neg", "", auth...); rep.status != 404 {
		t.Fatalf("a rejected PUT defined the product: %d %s", rep.status, rep.raw)
	}
}

func TestOperationsEndpoints(t *testing.T) {
	r := inMemory(t, 3)
	m := startServer(t, r.URLs())
	if rep := do(t, "GET", m.URL()+"/admin/debug/pprof/heap", ""); rep.status != 401 {
		t.Errorf("pprof without the admin token: %d", rep.status)
	}
	if rep := do(t, "GET", m.URL()+"/admin/debug/pprof/heap?debug=1", "", "Authorization", "Bearer "+testToken); rep.status != 200 || !strings.Contains(rep.raw, "heap profile") {
		t.Errorf("pprof heap: %d %.80s", rep.status, rep.raw)
	}
	for path, want := range map[string]string{"/healthz": "ok", "/readyz": "ready", "/metrics": "go_goroutines", "/openapi.yaml": "openapi:"} {
		rep := do(t, "GET", m.URL()+path, "")
		if rep.status != 200 || !bytes.Contains([]byte(rep.raw), []byte(want)) {
			t.Errorf("%s: %d %.80s", path, rep.status, rep.raw)
		}
	}
}

// testLog sends the server's warnings and errors to the test log.
func testLog(t testing.TB) io.Writer { return testWriter{t} }

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// metricValue reads one sample from /metrics ("" when absent).
func metricValue(t *testing.T, base, series string) string {
	for _, line := range strings.Split(do(t, "GET", base+"/metrics", "").raw, "\n") {
		if strings.HasPrefix(line, series+" ") {
			return strings.TrimPrefix(line, series+" ")
		}
	}
	return ""
}

// TestFrozenShardDoesNotHoldRequests: a SIGSTOPped shard accepts
// connections but never answers. Each call to it ends at the per-call
// deadline, its breaker opens after a few failures, and from then on
// purchases skip it: every purchase succeeds but those of buyers whose
// home is the frozen shard (503: their limit cannot be vouched for), none
// waits past a small multiple of the deadline, and the frozen shard costs
// only a few calls. Thawed, it comes back into rotation after a probe.
func TestFrozenShardDoesNotHoldRequests(t *testing.T) {
	r := shardtest.Start(t, 3)
	m := startServer(t, r.URLs())
	base := m.URL()
	putProduct(t, base, "frz", `{"stock":300}`)
	r.Freeze(1)
	for k := 0; k < 40; k++ {
		start := time.Now()
		user := fmt.Sprintf("f%d", k)
		rep := purchase(t, base, "frz", user)
		want := 200
		if m.set.Purchases.Home(user) == 1 {
			want = 503
		}
		if took := time.Since(start); rep.status != want || took > 2*time.Second {
			t.Fatalf("purchase %d with shard 1 frozen: %d %s after %s (deadline 250ms per call)", k, rep.status, rep.raw, took)
		}
	}
	if v := metricValue(t, base, `shardstock_shard_breaker_state{shard="1"}`); v != "1" {
		t.Fatalf("breaker of the frozen shard: %q, want 1 (open)", v)
	}
	errs, _ := strconv.Atoi(metricValue(t, base, `shardstock_redis_errors_total{shard="1"}`))
	if errs > 12 {
		t.Fatalf("the frozen shard was called %d times failing in 40 purchases: the breaker does not skip it", errs)
	}
	var shards []inventory.ShardHealth
	json.Unmarshal([]byte(do(t, "GET", base+"/admin/v1/shards", "", "Authorization", "Bearer "+testToken).raw), &shards)
	if len(shards) != 3 || shards[1].Breaker != "open" {
		t.Fatalf("admin shards: %+v", shards)
	}
	r.Thaw(1)
	waitFor(t, 15*time.Second, "the thawed shard back in rotation", func() (bool, string) {
		v := metricValue(t, base, `shardstock_shard_breaker_state{shard="1"}`)
		return v == "0", v
	})
	sold := false
	for k := 0; k < 60 && !sold; k++ {
		rep := purchase(t, base, "frz", fmt.Sprintf("g%d", k))
		sold = rep.status == 200 && rep.body["shard"] == float64(1)
	}
	if !sold {
		t.Fatal("no purchase landed on the thawed shard")
	}
	checkShards(t, productStatus(t, base, "frz"))
}

// TestWipedShardIsNeverInitialisedAgain: a shard restarted without its data
// sells nothing more, a repeated definition refuses to allocate it again
// (its units may have been sold), and the rest of the sale goes on and ends
// sold out without selling any unit twice.
func TestWipedShardIsNeverInitialisedAgain(t *testing.T) {
	r := shardtest.Start(t, 3)
	m := startServer(t, r.URLs())
	base := m.URL()
	def := `{"stock":30}`
	putProduct(t, base, "wipe", def)
	first := buy(t, base, "wipe", "before", 6)
	before := productStatus(t, base, "wipe").Shards[1]
	r.Wipe(1)
	var rep reply
	waitFor(t, 10*time.Second, "the restarted shard resynced", func() (bool, string) {
		rep = putProduct(t, base, "wipe", def) // 503 while it is fenced
		return rep.status != 503, rep.raw
	})
	if rep.status != 409 || !strings.Contains(rep.str("message"), "lost") {
		t.Fatalf("re-defining over a wiped shard: %d %s", rep.status, rep.raw)
	}
	// The shard view may read the shard as down for a moment after its
	// fence opens (its health counted the calls refused while it was
	// fenced); wait for it to answer, then check nothing was allocated.
	waitFor(t, 10*time.Second, "the wiped shard answering, with no allocation", func() (bool, string) {
		st := productStatus(t, base, "wipe").Shards[1]
		if st.Up && st.Alloc != nil {
			t.Fatalf("the wiped shard was allocated again: %+v", st)
		}
		return st.Up && st.Alloc == nil, fmt.Sprintf("%+v", st)
	})
	sold, last := len(first), 0
	for k := 0; k < 60; k++ {
		rep := purchase(t, base, "wipe", fmt.Sprintf("after%d", k))
		last = rep.status
		if rep.status == 410 {
			break
		}
		if rep.status != 200 || rep.body["shard"] == float64(1) {
			t.Fatalf("purchase after the wipe: %d %s", rep.status, rep.raw)
		}
		sold++
	}
	// What the wiped shard had sold before it lost its data stays sold; its
	// remaining units are given up.
	given := *before.Salable
	if last != 410 || int64(sold) != 30-given {
		t.Fatalf("sold %d (last answer %d), want %d = stock 30 - %d units given up on the wiped shard", sold, last, 30-given, given)
	}
	checkShards(t, productStatus(t, base, "wipe"))
}

// TestRateLimits: per-user and per-product limits answer 429 with
// Retry-After, other buyers are unaffected, refusals are counted, and a
// sold-out product answers 410, not 429.
func TestRateLimits(t *testing.T) {
	r := inMemory(t, 3)
	m := startServer(t, r.URLs(), func(c *config.Config) { c.Limits = flashsale.Limits{User: 1, Product: 5} })
	base := m.URL()
	putProduct(t, base, "rl", `{"stock":500,"per_user_limit":100}`)
	limited := 0
	for k := 0; k < 5; k++ {
		rep := doRaw(t, "POST", base+"/api/v1/products/rl/purchase", "X-User-ID", "eager")
		if rep.status == 429 {
			limited++
			if rep.header.Get("Retry-After") == "" || rep.str("error") != "rate_limited" {
				t.Fatalf("429 without Retry-After or code: %v %s", rep.header, rep.raw)
			}
		}
	}
	if limited < 3 {
		t.Fatalf("one user sent 5 requests at once under a 1/s limit: %d refused", limited)
	}
	if rep := purchase(t, base, "rl", "patient"); rep.status != 200 {
		t.Fatalf("another buyer: %d %s", rep.status, rep.raw)
	}
	productLimited := 0
	for k := 0; k < 30; k++ {
		if rep := purchase(t, base, "rl", fmt.Sprintf("crowd%d", k)); rep.status == 429 {
			productLimited++
		}
	}
	if productLimited < 20 {
		t.Fatalf("30 buyers at once under a product limit of 5/s: %d refused", productLimited)
	}
	if v := metricValue(t, base, `shardstock_rate_limited_total{scope="user"}`); v == "" || v == "0" {
		t.Fatalf("user refusals not counted: %q", v)
	}
	putProduct(t, base, "gone", `{"stock":1}`)
	purchase(t, base, "gone", "winner")
	for k := 0; k < 3; k++ {
		purchase(t, base, "gone", fmt.Sprintf("late%d", k)) // marks every shard empty
	}
	time.Sleep(1100 * time.Millisecond)
	for k := 0; k < 3; k++ {
		if rep := purchase(t, base, "gone", "flood"); rep.status != 410 && rep.status != 429 {
			t.Fatalf("sold out: %d %s", rep.status, rep.raw)
		}
	}
}

type rawReply struct {
	reply
	header http.Header
}

func doRaw(t *testing.T, method, url string, headers ...string) rawReply {
	req, _ := http.NewRequest(method, url, nil)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := testHTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := rawReply{reply: reply{status: resp.StatusCode, raw: string(raw)}, header: resp.Header}
	json.Unmarshal(raw, &r.body)
	return r
}

// TestHMACModeAndSignedPayments: in hmac mode a purchase needs a valid
// token (X-User-ID alone is refused), orders belong to the token's user,
// and the payment callback needs the HMAC signature of its body.
func TestHMACModeAndSignedPayments(t *testing.T) {
	secret, paySecret := []byte(strings.Repeat("s", 32)), []byte(strings.Repeat("p", 32))
	r := inMemory(t, 3)
	m := startServer(t, r.URLs(), func(c *config.Config) { c.UserAuth, c.HMACSecret, c.PaySecret = "hmac", secret, paySecret })
	base := m.URL()
	putProduct(t, base, "tok", `{"stock":5,"per_user_limit":2,"price_cents":990}`)
	alice, _ := flashsale.MintToken(secret, "alice", time.Hour, time.Now())
	mallory, _ := flashsale.MintToken(secret, "mallory", time.Hour, time.Now())
	forged, _ := flashsale.MintToken([]byte(strings.Repeat("x", 32)), "alice", time.Hour, time.Now())
	if rep := do(t, "POST", base+"/api/v1/products/tok/purchase", "", "X-User-ID", "alice"); rep.status != 401 {
		t.Fatalf("header identity in hmac mode: %d", rep.status)
	}
	if rep := do(t, "POST", base+"/api/v1/products/tok/purchase", "", "Authorization", "Bearer "+forged); rep.status != 401 {
		t.Fatalf("forged token: %d", rep.status)
	}
	rep := do(t, "POST", base+"/api/v1/products/tok/purchase", "", "Authorization", "Bearer "+alice)
	if rep.status != 200 {
		t.Fatalf("purchase with a token: %d %s", rep.status, rep.raw)
	}
	id := rep.str("order_id")
	waitFor(t, 20*time.Second, "the order", func() (bool, string) {
		o := do(t, "GET", base+"/api/v1/orders/"+id, "", "Authorization", "Bearer "+alice)
		return o.str("status") == "awaiting_payment", o.raw
	})
	if o := do(t, "GET", base+"/api/v1/orders/"+id, "", "Authorization", "Bearer "+mallory); o.status != 404 {
		t.Fatalf("another user's token reads the order: %d", o.status)
	}
	// A signed callback binds the order, the result, the amount, the
	// provider's transaction id and the time (issue: payments that cannot
	// be forged or replayed).
	callback := func(order, result string, amount int64, txn string, at time.Time) string {
		return fmt.Sprintf(`{"result":%q,"order_id":%q,"amount_cents":%d,"transaction_id":%q,"timestamp":%d}`,
			result, order, amount, txn, at.Unix())
	}
	payAs := func(tok, id, body, sig string) reply {
		return do(t, "POST", base+"/api/v1/orders/"+id+"/pay", body, "Authorization", "Bearer "+tok,
			"Content-Type", "application/json", "X-Signature", sig)
	}
	sign := func(body string) string { return order.SignPayment(paySecret, []byte(body)) }
	good := callback(id, "success", 990, "txn-1", time.Now())
	if p := payAs(alice, id, good, ""); p.status != 401 {
		t.Fatalf("unsigned payment callback: %d %s", p.status, p.raw)
	}
	if p := payAs(alice, id, good, sign(callback(id, "fail", 990, "txn-1", time.Now()))); p.status != 401 {
		t.Fatalf("signature of another body: %d %s", p.status, p.raw)
	}
	old := `{"result":"success"}` // 0.6.0's body: the same bytes for every order
	if p := payAs(alice, id, old, sign(old)); p.status != 401 {
		t.Fatalf("a signed body that names no order: %d %s", p.status, p.raw)
	}
	refused := map[string]string{
		"signed for another order": callback("01OTHERORDER00000000000000", "success", 990, "txn-2", time.Now()),
		"another amount":           callback(id, "success", 1, "txn-3", time.Now()),
		"a stale timestamp":        callback(id, "success", 990, "txn-4", time.Now().Add(-6*time.Minute)),
		"no transaction id":        callback(id, "success", 990, "", time.Now()),
	}
	for why, body := range refused {
		if p := payAs(alice, id, body, sign(body)); p.status != 401 {
			t.Fatalf("callback with %s: %d %s", why, p.status, p.raw)
		}
	}
	if p := payAs(mallory, id, good, sign(good)); p.status != 404 {
		t.Fatalf("signed callback for another user's order: %d %s", p.status, p.raw)
	}
	if p := payAs(alice, id, good, sign(good)); p.status != 202 || p.str("status") != "paid" {
		t.Fatalf("signed payment: %d %s", p.status, p.raw)
	}
	if p := payAs(alice, id, good, sign(good)); p.status != 202 || p.str("status") != "paid" {
		t.Fatalf("the same transaction again: %d %s, want an idempotent 202", p.status, p.raw)
	}
	// The same transaction id for another order of alice's is a replay.
	rep = do(t, "POST", base+"/api/v1/products/tok/purchase", "", "Authorization", "Bearer "+alice)
	second := rep.str("order_id")
	waitFor(t, 20*time.Second, "the second order", func() (bool, string) {
		o := do(t, "GET", base+"/api/v1/orders/"+second, "", "Authorization", "Bearer "+alice)
		return o.str("status") == "awaiting_payment", o.raw
	})
	replay := callback(second, "success", 990, "txn-1", time.Now())
	if p := payAs(alice, second, replay, sign(replay)); p.status != 401 {
		t.Fatalf("a transaction id that paid another order: %d %s", p.status, p.raw)
	}
}

// TestSlowClientCannotHoldAConnection: a client that sends half a request
// and stalls is cut off after the header timeout, and oversized headers are
// refused.
func TestSlowClientCannotHoldAConnection(t *testing.T) {
	r := inMemory(t, 3)
	m := startServer(t, r.URLs(), func(c *config.Config) { c.Test.HeaderTimeout = 300 * time.Millisecond })
	conn, err := net.Dial("tcp", strings.TrimPrefix(m.URL(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "POST /api/v1/products/x/purchase HTTP/1.1\r\nHost: shardstock\r\nX-User-ID: slo")
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	buf := make([]byte, 512)
	for {
		if _, err := conn.Read(buf); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("the server kept a stalled connection open for 5s")
			}
			break // closed by the server
		}
	}
	t.Logf("stalled connection closed after %s", time.Since(start).Round(time.Millisecond))
	big := strings.Repeat("h", 20<<10)
	if rep := do(t, "POST", m.URL()+"/api/v1/products/x/purchase", "", "X-User-ID", "u", "X-Junk", big); rep.status != 431 || rep.str("error") != "headers_too_large" {
		t.Fatalf("20 KiB of headers: %d %s, want 431 in the API's JSON", rep.status, rep.raw)
	}
	huge := strings.Repeat("h", 80<<10)
	if rep := do(t, "POST", m.URL()+"/api/v1/products/x/purchase", "", "X-User-ID", "u", "X-Junk", huge); rep.status != 431 {
		t.Fatalf("80 KiB of headers: %d, want 431 (net/http's own, past what it reads)", rep.status)
	}
}

// TestRedefineAfterAShardWasAdded (issue: crash-consistent shards, item 2):
// coordinators restarted with one more shard URL and the same PUT again
// answer 200 without splitting the stock a second time — the product stays
// on the shards it was defined on, Σ alloc stays the stock, its buyers'
// homes stay where they were (the per-user limit holds), and the new shard
// sells none of it.
func TestRedefineAfterAShardWasAdded(t *testing.T) {
	r := inMemory(t, 4)
	db := "sqlite:" + t.TempDir() + "/orders.db"
	sameDB := func(c *config.Config) { c.DB = db }
	three := startServer(t, r.URLs()[:3], sameDB)
	def := `{"stock":1000,"per_user_limit":1}`
	if rep := putProduct(t, three.URL(), "grow", def); rep.status != 201 {
		t.Fatalf("define on 3 shards: %d %s", rep.status, rep.raw)
	}
	before := buy(t, three.URL(), "grow", "early", 30)
	four := startServer(t, r.URLs(), sameDB)
	if rep := putProduct(t, four.URL(), "grow", def); rep.status != 200 {
		t.Fatalf("the same definition on 4 shards: %d %s", rep.status, rep.raw)
	}
	st := productStatus(t, four.URL(), "grow")
	var alloc int64
	for _, sh := range st.Shards {
		if sh.Alloc != nil {
			alloc += *sh.Alloc
		}
	}
	if alloc != 1000 || st.Shards[3].Alloc != nil {
		t.Fatalf("after the repeat on 4 shards: Σ alloc %d (want 1000), shard 3 %+v (want no allocation)", alloc, st.Shards[3])
	}
	for _, user := range before {
		if rep := purchase(t, four.URL(), "grow", user); rep.status != 409 {
			t.Fatalf("%s bought again through the 4-shard coordinator: %d %s", user, rep.status, rep.raw)
		}
	}
	for k := 0; k < 30; k++ {
		rep := purchase(t, four.URL(), "grow", fmt.Sprintf("late%d", k))
		if rep.status != 200 || rep.body["shard"] == float64(3) {
			t.Fatalf("purchase through the 4-shard coordinator: %d %s", rep.status, rep.raw)
		}
	}
	checkShards(t, productStatus(t, four.URL(), "grow"))
}

// TestShardBackWithoutItsLastWrites (issue: crash-consistent shards, item
// 1): a shard's AOF is cut back to an earlier point — a machine crash that
// lost the writes since — after it reserved units that became orders, and
// after a rebalance moved units off it and after it confirmed a payment.
// Back, it is fenced until resynced from SQL: the holds of its live orders
// are restored, the transfers' source side re-applied and the settlement
// sent again, so Σ alloc stays the stock, every shard keeps
// salable + locked + sold = alloc, and selling everything sells the stock
// exactly once. Without the resync the lost holds and the lost transfer_out
// made those units salable a second time.
func TestShardBackWithoutItsLastWrites(t *testing.T) {
	r := shardtest.Start(t, 3)
	m := startServer(t, r.URLs())
	base := m.URL()
	const stock = 60
	putProduct(t, base, "crash", fmt.Sprintf(`{"stock":%d,"per_user_limit":1}`, stock))
	homedAt0 := func(prefix string, n int) []string {
		var out []string
		for k := 0; len(out) < n; k++ {
			if u := fmt.Sprintf("%s%d", prefix, k); m.set.Purchases.Home(u) == 0 {
				out = append(out, u)
			}
		}
		return out
	}
	sold := 0
	buyAll := func(users []string) map[string]string {
		orders := map[string]string{}
		for _, u := range users {
			rep := purchase(t, base, "crash", u)
			if rep.status != 200 {
				t.Fatalf("%s: %d %s", u, rep.status, rep.raw)
			}
			orders[u] = rep.str("order_id")
			sold++
		}
		return orders
	}
	early := buyAll(homedAt0("early", 3))
	waitFor(t, 10*time.Second, "the early orders written", func() (bool, string) {
		c := statusCounts(t, m, "crash")
		return c[shardstock.StatusAwaitingPayment] == 3, fmt.Sprint(c)
	})
	r.Checkpoint(0)
	for u, id := range early { // one payment, confirmed on shard 0 after the checkpoint
		if rep := orderCall(t, base, "pay", id, u, `{"result":"success"}`); rep.status != 202 {
			t.Fatalf("pay: %d %s", rep.status, rep.raw)
		}
		break
	}
	waitFor(t, 10*time.Second, "the payment confirmed on shard 0", func() (bool, string) {
		st := productStatus(t, base, "crash").Shards[0]
		return *st.Sold == 1, fmt.Sprintf("%+v", st)
	})
	buyAll(homedAt0("lost", 5)) // reserved on shard 0 after the checkpoint
	waitFor(t, 10*time.Second, "the orders written", func() (bool, string) {
		c := statusCounts(t, m, "crash")
		return c[shardstock.StatusAwaitingPayment] == int64(sold-1), fmt.Sprint(c)
	})
	rep := do(t, "POST", base+"/admin/v1/products/crash/rebalance", "", "Authorization", "Bearer "+testToken)
	if rep.status != 200 {
		t.Fatalf("rebalance: %d %s", rep.status, rep.raw)
	}
	r.Rewind(0) // back to the checkpoint: the confirm, 5 holds and the rebalance's transfer_out are gone
	waitFor(t, 10*time.Second, "shard 0 resynced", func() (bool, string) {
		st := productStatus(t, base, "crash").Shards[0]
		// (and its breaker closed again: until then a buyer homed there is
		// told 503, down, not tried)
		b := m.health.Status()[0].Breaker
		return st.Up && st.Locked != nil && *st.Locked == 7 && *st.Sold == 1 && b == ha.Closed, fmt.Sprintf("%+v, breaker %v", st, b)
	})
	st := productStatus(t, base, "crash")
	var alloc int64
	for _, sh := range st.Shards {
		alloc += *sh.Alloc
	}
	if alloc != stock {
		t.Fatalf("after the resync: Σ alloc %d, stock %d", alloc, stock)
	}
	checkShards(t, st)
	for k := 0; ; k++ {
		rep := purchase(t, base, "crash", fmt.Sprintf("rest%d", k))
		if rep.status == 410 {
			break
		}
		if rep.status != 200 || k > 2*stock {
			t.Fatalf("selling the rest: %d %s", rep.status, rep.raw)
		}
		sold++
	}
	if sold != stock {
		t.Fatalf("sold %d units of a stock of %d", sold, stock)
	}
	checkShards(t, productStatus(t, base, "crash"))
}
