package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shardstock/shardstock/api"
	"github.com/shardstock/shardstock/config"
	"github.com/shardstock/shardstock/flashsale"
	"github.com/shardstock/shardstock/shard/shardtest"
	"github.com/shardstock/shardstock/waitroom"
)

// TestNginxEdge sends traffic through a real nginx (Debian's, with the Lua
// module) in front of two coordinators: the edge enforces the product limit
// the coordinators publish, purchases under it still work, a coordinator
// that stops is skipped, and with none left the answer is 503 unavailable.
func TestNginxEdge(t *testing.T) {
	r := shardtest.Start(t, 3)
	db := "sqlite:" + t.TempDir() + "/orders.db"
	secret := []byte(strings.Repeat("s", 32))
	cfg := func(c *config.Config) {
		c.DB, c.Limits = db, flashsale.Limits{Product: 10, User: 100}
		c.UserAuth, c.HMACSecret = "hmac", secret
	}
	a, b := startServer(t, r.URLs(), cfg), startServer(t, r.URLs(), cfg)
	putProduct(t, a.URL(), "edge", `{"stock":1000,"per_user_limit":1}`)
	dir, port := t.TempDir(), strings.Split(freeAddr(t), ":")[1]
	ups := strings.TrimPrefix(a.URL(), "http://") + "," + strings.TrimPrefix(b.URL(), "http://")
	runDeploy(t, "nginx.sh", "start", "--port", port, "--upstreams", ups, "--dir", dir, "--conns-per-ip", "20")
	t.Cleanup(func() { runDeploy(t, "nginx.sh", "stop", "--dir", dir) })
	edge := "http://127.0.0.1:" + port
	buy := func(user string) reply {
		tok, _ := flashsale.MintToken(secret, user, time.Hour, time.Now())
		return do(t, "POST", edge+"/api/v1/products/edge/purchase", "", "Authorization", "Bearer "+tok)
	}

	if rep := do(t, "GET", a.URL()+"/edge/limits", ""); !strings.Contains(rep.raw, "product edge 10") {
		t.Fatalf("published limits: %q", rep.raw)
	}
	// The edge serves buyers only (issue 15, item 5), and passes on no
	// identity a client claims (item 3).
	for _, path := range []string{"/metrics", "/admin/", "/admin/v1/shards", "/edge/limits", "/openapi.yaml", "/admin/debug/pprof/"} {
		if rep := do(t, "GET", edge+path, "", "Authorization", "Bearer "+testToken); rep.status != 403 {
			t.Fatalf("%s through the edge: %d, want 403", path, rep.status)
		}
	}
	if rep := do(t, "POST", edge+"/api/v1/products/edge/purchase", "", "X-User-ID", "alice"); rep.status != 401 {
		t.Fatalf("a purchase with only X-User-ID through the edge: %d %s", rep.status, rep.raw)
	}
	buy("warmup") // the edge fetches the limits on its first purchase
	time.Sleep(1100 * time.Millisecond)
	counts := map[string]int{}
	for k := 0; k < 60; k++ {
		rep := buy(fmt.Sprintf("burst%d", k))
		switch {
		case rep.status == 200:
			counts["ok"]++
		case rep.status == 429 && strings.Contains(rep.str("message"), "edge"):
			counts["edge"]++
		case rep.status == 429:
			counts["coordinator"]++
		default:
			t.Fatalf("through the edge: %d %s", rep.status, rep.raw)
		}
	}
	t.Logf("60 purchases at once through the edge: %v", counts)
	if counts["edge"] < 30 || counts["ok"] < 1 || counts["ok"] > 20 {
		t.Fatalf("edge product limit 10/s: %v", counts)
	}
	time.Sleep(1100 * time.Millisecond)
	a.Close() // one coordinator goes away
	for k := 0; k < 5; k++ {
		rep := buy(fmt.Sprintf("after%d", k))
		if rep.status != 200 {
			t.Fatalf("with one coordinator down: %d %s", rep.status, rep.raw)
		}
		time.Sleep(150 * time.Millisecond)
	}
	b.Close()
	time.Sleep(1100 * time.Millisecond)
	if rep := buy("nobody"); rep.status != 503 || rep.str("error") != "unavailable" {
		t.Fatalf("with no coordinator: %d %s", rep.status, rep.raw)
	}
}

// TestEdgeSlowClientsCannotShutEveryoneOut (issue 15, item 2): one client
// address opening many connections that dribble a request body is held to
// the per-address bound (20 here), its extra connections are refused, and
// another address still gets through at once.
func TestEdgeSlowClientsCannotShutEveryoneOut(t *testing.T) {
	r := shardtest.Start(t, 3)
	m := startServer(t, r.URLs())
	dir, port := t.TempDir(), strings.Split(freeAddr(t), ":")[1]
	runDeploy(t, "nginx.sh", "start", "--port", port, "--upstreams", strings.TrimPrefix(m.URL(), "http://"), "--dir", dir, "--conns-per-ip", "20")
	t.Cleanup(func() { runDeploy(t, "nginx.sh", "stop", "--dir", dir) })
	addr := "127.0.0.1:" + port
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 60 { // slow POSTs from 127.0.0.1: a declared body that never comes
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "POST /api/v1/products/x/purchase HTTP/1.1\r\nHost: edge\r\nContent-Length: 16000\r\nContent-Type: application/json\r\n\r\n{")
		conns = append(conns, c)
	}
	time.Sleep(300 * time.Millisecond)
	// Another client address.
	start := time.Now()
	resp, err := shardtest.ClientFrom("127.0.0.2").Get("http://" + addr + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("another address while one holds 60 slow connections: %v %v", resp, err)
	}
	resp.Body.Close()
	t.Logf("another address answered in %s", time.Since(start).Round(time.Millisecond))
	// The slow client's own connections past the bound were refused.
	refused := 0
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		buf := make([]byte, 256)
		if n, _ := c.Read(buf); n > 0 && strings.Contains(string(buf[:n]), " 429 ") {
			refused++
		}
	}
	if refused < 30 {
		t.Fatalf("%d of 60 slow connections from one address refused, want at least 30 (40 past the bound of 20)", refused)
	}
}

// TestEdgeBoundsHalfSentRequests (issue 25, item 6): the edge's bound on
// one address's connections holds while they still send their request line
// or headers (http's limit_conn counts a connection only once its headers
// are read: a thousand half-sent requests from one address were all held).
// Past the bound (4 x --conns-per-ip by default) they are closed at once,
// long before the 5 s header timeout would; meanwhile another address is
// served, and the coordinator behind still learns each client's own address
// (X-Forwarded-For).
func TestEdgeBoundsHalfSentRequests(t *testing.T) {
	var mu sync.Mutex
	forwardedFor := map[string]string{} // path -> X-Forwarded-For the coordinator got
	coordinator := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		forwardedFor[r.URL.Path] = r.Header.Get("X-Forwarded-For")
		mu.Unlock()
		w.Write([]byte("ok"))
	}))
	defer coordinator.Close()
	dir, port := t.TempDir(), strings.Split(freeAddr(t), ":")[1]
	runDeploy(t, "nginx.sh", "start", "--port", port, "--upstreams", strings.TrimPrefix(coordinator.URL, "http://"), "--dir", dir, "--conns-per-ip", "20")
	t.Cleanup(func() { runDeploy(t, "nginx.sh", "stop", "--dir", dir) })
	addr := "127.0.0.1:" + port

	const n, bound = 1000, 4 * 20
	got := shardtest.SendHalfSent(t, addr, n, 3*time.Second, func() { // (the header timeout, 5 s, closes them all later anyway)
		// Another client address, while the first holds what it may.
		asked := time.Now()
		resp, err := shardtest.ClientFrom("127.0.0.2").Get("http://" + addr + "/another")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("another address while one holds half-sent requests: %v %v", resp, err)
		}
		resp.Body.Close()
		t.Logf("another address answered in %s", time.Since(asked).Round(time.Millisecond))
	})
	mu.Lock()
	if got := forwardedFor["/another"]; got != "127.0.0.2" {
		t.Errorf("the coordinator got X-Forwarded-For %q, want 127.0.0.2", got)
	}
	mu.Unlock()
	t.Logf("within 3s: %d closed (the slowest after %s), %d held, %d answered",
		got.Closed, got.Slowest.Round(time.Millisecond), got.Held, got.Answered)
	if got.Held > bound || got.Closed < n-bound {
		t.Fatalf("one address held %d half-sent requests and %d were closed, want at most %d held and the rest closed at once",
			got.Held, got.Closed, bound)
	}
}

// TestPagesAtTheEdge (issue 16, item 10): the coordinators publish each
// product's sale page as a file that the nginx edge serves itself: the
// page is there through the edge, stays there with every coordinator
// gone (while the live numbers, from the stock API, do not), and a moved
// window is published again.
func TestPagesAtTheEdge(t *testing.T) {
	m, edge := pagesAtTheEdge(t, `{"stock":10,"title":"Desk lamp"}`)
	if rep := do(t, "GET", edge+"/static/sale.js", ""); rep.status != 200 {
		t.Fatalf("the page's script through the edge: %d", rep.status)
	}
	before := do(t, "GET", edge+"/products/lamp", "").raw
	adminDo(t, "PATCH", m.URL()+"/admin/v1/products/lamp", fmt.Sprintf(`{"ends_at":%q}`, time.Now().Add(time.Hour).UTC().Format(time.RFC3339)))
	waitFor(t, 10*time.Second, "the moved window published", func() (bool, string) {
		return do(t, "GET", edge+"/products/lamp", "").raw != before, "unchanged"
	})
	m.Close()
	if rep := do(t, "GET", edge+"/products/lamp", ""); rep.status != 200 || !strings.Contains(rep.raw, "Desk lamp") {
		t.Fatalf("the page with no coordinator left: %d", rep.status)
	}
	if rep := do(t, "GET", edge+"/api/v1/products/lamp/stock", ""); rep.status != 503 {
		t.Fatalf("the stock API with no coordinator left: %d, want 503", rep.status)
	}
}

// pagesAtTheEdge runs a coordinator over three shards that publishes its
// sale pages, defines lamp (definition: the PUT body; its title "Desk
// lamp") and puts the nginx edge in front, serving the pages; it returns
// the coordinator and the edge's URL once the page is served there.
func pagesAtTheEdge(t *testing.T, definition string) (*Main, string) {
	r := shardtest.Start(t, 3)
	pages := t.TempDir()
	// nginx's workers run as an unprivileged user: they must reach the files.
	os.Chmod(pages, 0o755)
	os.Chmod(filepath.Dir(pages), 0o755)
	m := startServer(t, r.URLs(), func(c *config.Config) { c.PagesDir = pages })
	putProduct(t, m.URL(), "lamp", definition)
	dir, port := t.TempDir(), strings.Split(freeAddr(t), ":")[1]
	runDeploy(t, "nginx.sh", "start", "--port", port, "--upstreams", strings.TrimPrefix(m.URL(), "http://"), "--dir", dir, "--pages", pages)
	t.Cleanup(func() { runDeploy(t, "nginx.sh", "stop", "--dir", dir) })
	edge := "http://127.0.0.1:" + port
	waitFor(t, 10*time.Second, "the page published and served by the edge", func() (bool, string) {
		rep := do(t, "GET", edge+"/products/lamp", "")
		return rep.status == 200 && strings.Contains(rep.raw, "Desk lamp"), fmt.Sprint(rep.status)
	})
	return m, edge
}

// TestTheEdgeChecksQueuePlaces: with the waiting rooms' key, the edge
// answers 403 not_admitted itself to a purchase of a queued product
// without a place, with a forged one, another product's, or one whose turn
// has not come, and passes an admitted place on to the coordinator, which
// sells.
func TestTheEdgeChecksQueuePlaces(t *testing.T) {
	r := shardtest.Start(t, 3)
	secret, queueKey := []byte(strings.Repeat("s", 32)), strings.Repeat("q", 32)
	m := startServer(t, r.URLs(), func(c *config.Config) {
		c.UserAuth, c.HMACSecret, c.QueueSecret = "hmac", secret, []byte(queueKey)
	})
	starts := time.Now().Add(2 * time.Second).UTC()
	putProduct(t, m.URL(), "qedge", fmt.Sprintf(`{"stock":10,"starts_at":%q}`, starts.Format(time.RFC3339Nano)))
	putProduct(t, m.URL(), "other", `{"stock":10}`)
	if rep := adminDo(t, "PUT", m.URL()+"/admin/v1/products/qedge/queue", `{"mode":"fifo","rate":0.2,"lead_seconds":600,"window_seconds":60}`); rep.status != 200 {
		t.Fatalf("define the queue: %d %s", rep.status, rep.raw)
	}
	t.Setenv("SHARDSTOCK_QUEUE_SECRET", queueKey)
	t.Setenv("SHARDSTOCK_HMAC_SECRET", string(secret))
	dir, port := t.TempDir(), strings.Split(freeAddr(t), ":")[1]
	runDeploy(t, "nginx.sh", "start", "--port", port, "--upstreams", strings.TrimPrefix(m.URL(), "http://"), "--dir", dir)
	t.Cleanup(func() { runDeploy(t, "nginx.sh", "stop", "--dir", dir) })
	edge := "http://127.0.0.1:" + port
	bearer := func(user string) string {
		tok, _ := flashsale.MintToken(secret, user, time.Hour, time.Now())
		return "Bearer " + tok
	}
	join := func(user string) string {
		rep := do(t, "POST", edge+"/api/v1/products/qedge/queue", "", "Authorization", bearer(user))
		if rep.status != 200 {
			t.Fatalf("%s joins through the edge: %d %s", user, rep.status, rep.raw)
		}
		return rep.str("token")
	}
	first, second := join("ann"), join("bob")
	time.Sleep(time.Until(starts) + 200*time.Millisecond) // rate 0.2/s: ann's turn in 5 s, bob's in 10
	forged := first[:strings.LastIndexByte(first, '.')+1] + "AAAA" + first[strings.LastIndexByte(first, '.')+5:]
	buy := func(user, product, token string) reply {
		return do(t, "POST", edge+"/api/v1/products/"+product+"/purchase", "", "Authorization", bearer(user), api.QueueTokenHeader, token)
	}
	waitFor(t, 5*time.Second, "the edge refuses a purchase without a place itself", func() (bool, string) {
		rep := buy("ann", "qedge", "")
		return rep.status == 403 && strings.HasSuffix(rep.str("message"), "(edge)"), rep.raw
	})
	for what, tok := range map[string]string{"a forged place": forged, "a place not reached": second, "garbage": "x.y.z"} {
		if rep := buy("bob", "qedge", tok); rep.status != 403 || rep.str("error") != "not_admitted" || !strings.HasSuffix(rep.str("message"), "(edge)") {
			t.Errorf("%s through the edge: %d %s, want 403 not_admitted from the edge", what, rep.status, rep.raw)
		}
	}
	if rep := buy("ann", "other", ""); rep.status != 200 {
		t.Fatalf("a product without a waiting room through the edge: %d %s", rep.status, rep.raw)
	}
	waitFor(t, 10*time.Second, "ann, admitted, buys through the edge", func() (bool, string) {
		rep := buy("ann", "qedge", first)
		return rep.status == 200, rep.raw
	})
	// The edge knows the buyer (issue 41, finding 1): another's admitted
	// place, a revoked place and a place whose turn is over are turned
	// away there, before they count against the product's budget.
	if rep := buy("bob", "qedge", first); rep.status != 403 || !strings.HasSuffix(rep.str("message"), "(edge)") {
		t.Fatalf("bob with ann's admitted place: %d %s, want 403 from the edge", rep.status, rep.raw)
	}
	if rep := adminDo(t, "POST", m.URL()+"/admin/v1/products/qedge/queue/revoke", `{"user":"bob"}`); rep.status != 200 {
		t.Fatalf("revoke bob: %d %s", rep.status, rep.raw)
	}
	waitFor(t, 5*time.Second, "the edge turns bob's revoked place away itself", func() (bool, string) {
		rep := buy("bob", "qedge", second)
		return rep.status == 403 && rep.str("error") == "revoked" && strings.HasSuffix(rep.str("message"), "(edge)"), rep.raw
	})
	// A line whose turns last a second: dan's turn comes at once and is
	// over a second later; the edge says so once its margin for clocks
	// (waitroom.EdgeSkew) has passed too.
	putProduct(t, m.URL(), "brief", `{"stock":10}`)
	if rep := adminDo(t, "PUT", m.URL()+"/admin/v1/products/brief/queue", `{"mode":"fifo","rate":100,"lead_seconds":600,"window_seconds":1}`); rep.status != 200 {
		t.Fatalf("define the brief queue: %d %s", rep.status, rep.raw)
	}
	var dan string
	waitFor(t, 5*time.Second, "dan joins the brief line", func() (bool, string) {
		rep := do(t, "POST", edge+"/api/v1/products/brief/queue", "", "Authorization", bearer("dan"))
		dan = rep.str("token")
		return rep.status == 200, rep.raw
	})
	joined := time.Now()
	waitFor(t, 20*time.Second, "the edge says dan's turn is over", func() (bool, string) {
		rep := buy("dan", "brief", dan)
		if rep.status == 403 && rep.str("error") == "not_admitted" && strings.Contains(rep.str("message"), "passed") {
			if strings.HasSuffix(rep.str("message"), "(edge)") {
				return true, ""
			}
			if d := time.Since(joined); d < time.Second+waitroom.EdgeSkew {
				return false, rep.raw // the coordinator's word, before the edge's margin is up
			}
		}
		return false, rep.raw
	})
	if d := time.Since(joined); d < time.Second+waitroom.EdgeSkew-500*time.Millisecond {
		t.Fatalf("the edge ended dan's one-second turn %v after he joined, within its margin for clocks (%v)", d, waitroom.EdgeSkew)
	}
}

// TestOneAnonymousClientCannotShutASaleAtTheEdge (issue 41, finding 1): a
// flood of purchases with no token from one address, and another from one
// buyer with a valid token, each from its own address, spend their own
// allowances at the edge: every one of 20 buyers with valid tokens, from a
// third address, still reserves. Before, the edge counted every purchase
// against the product's one-second budget before knowing who sent it, and
// the flood took the budget (2 of 20 buyers reserved).
func TestOneAnonymousClientCannotShutASaleAtTheEdge(t *testing.T) {
	r := shardtest.Start(t, 3)
	secret := []byte(strings.Repeat("s", 32))
	m := startServer(t, r.URLs(), func(c *config.Config) {
		c.Limits = flashsale.Limits{Product: 30, User: 100}
		c.UserAuth, c.HMACSecret = "hmac", secret
	})
	putProduct(t, m.URL(), "flood", `{"stock":100,"per_user_limit":1}`)
	t.Setenv("SHARDSTOCK_HMAC_SECRET", string(secret))
	dir, port := t.TempDir(), strings.Split(freeAddr(t), ":")[1]
	runDeploy(t, "nginx.sh", "start", "--port", port, "--upstreams", strings.TrimPrefix(m.URL(), "http://"), "--dir", dir)
	t.Cleanup(func() { runDeploy(t, "nginx.sh", "stop", "--dir", dir) })
	url := "http://127.0.0.1:" + port + "/api/v1/products/flood/purchase"
	from := func(ip string) *http.Client { // a client at its own loopback address (Linux routes all of 127/8 there)
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: time.Second}
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 8}}
	}
	bearer := func(user string) string {
		tok, _ := flashsale.MintToken(secret, user, time.Hour, time.Now())
		return "Bearer " + tok
	}
	post := func(cl *http.Client, auth string) (int, string) {
		req, _ := http.NewRequest("POST", url, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := cl.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post(from("127.0.0.2"), bearer("warmup")); code != 200 { // (the edge fetches the limits)
		t.Fatalf("a first purchase: %d %s", code, body)
	}
	time.Sleep(1100 * time.Millisecond)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	flood := map[string]int{}
	for _, f := range []struct{ ip, auth string }{{"127.0.0.9", ""}, {"127.0.0.10", bearer("mallory")}} {
		cl := from(f.ip)
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					code, _ := post(cl, f.auth)
					mu.Lock()
					flood[fmt.Sprintf("%s %d", f.ip, code)]++
					mu.Unlock()
				}
			}()
		}
	}
	buyers, got := from("127.0.0.2"), map[int]int{}
	for k := range 20 {
		time.Sleep(100 * time.Millisecond)
		code, body := post(buyers, bearer(fmt.Sprintf("buyer%d", k)))
		got[code]++
		if code != 200 {
			t.Logf("buyer%d: %d %s", k, code, body)
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("the floods' answers: %v; the 20 buyers': %v", flood, got)
	if got[200] != 20 {
		t.Fatalf("%d of 20 buyers with valid tokens reserved during the floods, want all 20", got[200])
	}
	for k, n := range flood {
		ip, code, _ := strings.Cut(k, " ")
		switch {
		case ip == "127.0.0.9" && code != "401" && code != "429":
			t.Errorf("the anonymous flood got %d answers %s: want only 401 or 429 from the edge", n, code)
		case ip == "127.0.0.10" && code == "200" && n > 1:
			t.Errorf("mallory reserved %d units, limit 1", n)
		}
	}
	if flood["127.0.0.9 401"]+flood["127.0.0.9 429"] < 50 || flood["127.0.0.10 429"] < 10 {
		t.Fatalf("the floods were too thin to test anything: %v", flood)
	}
	// Looks at a waiting room's place take the same rates at the edge
	// (finding 3: 2,200 looks a second went through it).
	looks := map[int]int{}
	cl := from("127.0.0.11")
	for range 30 {
		req, _ := http.NewRequest("GET", "http://127.0.0.1:"+port+"/api/v1/products/flood/queue", nil)
		req.Header.Set("Authorization", bearer("peeker"))
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		looks[resp.StatusCode]++
		if resp.StatusCode == 429 && !strings.Contains(string(b), "(edge)") {
			t.Fatalf("a look past the buyer's rate: 429 from the coordinator, want the edge's: %s", b)
		}
	}
	if looks[429] < 20 {
		t.Fatalf("30 looks at once by one buyer through the edge (5 a second): %v, want most answered 429 there", looks)
	}
}

// TestTheEdgeWorkersKeepTheirKeys (issue 41, finding 10): the edge's
// workers ran as the shared user nobody and were dumpable, so any process
// running as nobody read SHARDSTOCK_QUEUE_SECRET (which mints places the
// coordinators take) from a worker's environment. They run as their own
// system user, and not dumpable: neither nobody nor that user can read a
// worker's environment or memory.
func TestTheEdgeWorkersKeepTheirKeys(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the edge drops to its own user only when started as root")
	}
	t.Setenv("SHARDSTOCK_QUEUE_SECRET", "edge-test-queue-key-0123456789abcdef")
	dir, port := t.TempDir(), strings.Split(freeAddr(t), ":")[1]
	runDeploy(t, "nginx.sh", "start", "--port", port, "--upstreams", "127.0.0.1:1", "--dir", dir)
	t.Cleanup(func() { runDeploy(t, "nginx.sh", "stop", "--dir", dir) })
	pid, err := os.ReadFile(filepath.Join(dir, "nginx.pid"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("pgrep", "-P", strings.TrimSpace(string(pid))).Output()
	if err != nil {
		t.Fatalf("the workers of nginx %s: %v", pid, err)
	}
	workers := strings.Fields(string(out))
	if len(workers) == 0 {
		t.Fatal("no worker")
	}
	for _, w := range workers {
		status, _ := os.ReadFile("/proc/" + w + "/status")
		uid := ""
		for _, line := range strings.Split(string(status), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
				uid = f[1]
			}
		}
		want, err := exec.Command("id", "-u", "shardstock-edge").Output()
		if err != nil || uid != strings.TrimSpace(string(want)) {
			t.Fatalf("worker %s runs as uid %s, want shardstock-edge's (%s, %v)", w, uid, strings.TrimSpace(string(want)), err)
		}
		// A process that is not dumpable has its /proc files owned by root
		// (a dumpable one's are its own user's, open to any process of it).
		for _, f := range []string{"environ", "mem"} {
			var st syscall.Stat_t
			if err := syscall.Stat("/proc/"+w+"/"+f, &st); err != nil || st.Uid != 0 {
				t.Errorf("worker %s's /proc/%s/%s is uid %d's (%v), want root's: the worker is dumpable", w, w, f, st.Uid, err)
			}
		}
		for _, user := range []string{"nobody", "shardstock-edge"} {
			got, err := exec.Command("runuser", "-u", user, "--", "head", "-c", "64", "/proc/"+w+"/environ").CombinedOutput()
			if err == nil {
				t.Errorf("a process running as %s read worker %s's environment (%d bytes)", user, w, len(got))
			}
		}
	}
}
