package main

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/flashsale"
	"github.com/shardstock/shardstock/inventory"
	"github.com/shardstock/shardstock/order"
	"github.com/shardstock/shardstock/sqlstore"
)

// cluster is a deploy/cluster.sh cluster: every part on a host of its own
// (a network namespace on a bridge), reached from here, the machine, over
// the bridge.
type cluster struct {
	t        *testing.T
	args     []string          // --dir, --name, --net
	env      map[string]string // deploy/cluster.sh env
	ran      []string          // the chaos lines, for the report
	script   string
	chaosSh  string
	hostAddr map[string]string
}

// startCluster builds the coordinator and brings a cluster up, taken down
// when the test ends (also when it fails).
func startCluster(t *testing.T, shards int, extraEnv ...string) *cluster {
	t.Helper()
	needClusterRoot(t)
	root := repoRoot(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "shardstock")
	build := exec.Command("go", "build", "-o", bin, "./cmd/shardstock")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// A name and a network of the test's own, not those of an operator's
	// cluster (ss, 10.77.0).
	c := &cluster{t: t, script: filepath.Join(root, "deploy", "cluster.sh"), chaosSh: filepath.Join(root, "deploy", "chaos", "chaos.sh"),
		args: []string{"--dir", filepath.Join(dir, "cluster"), "--name", "sstest", "--net", "10.79.0"}}
	c.run("down") // what a killed earlier run left
	t.Cleanup(func() {
		if t.Failed() {
			c.keepLogs()
		}
		c.run("down", "--purge") // (MariaDB's data may be outside the test's directory)
	})
	up := exec.Command(c.script, append([]string{"up", "--shards", fmt.Sprint(shards), "--bin", bin}, c.args...)...)
	up.Env = append(clusterEnviron(), extraEnv...)
	out, err := up.CombinedOutput()
	if err != nil {
		t.Fatalf("cluster.sh up: %v\n%s", err, out)
	}
	t.Logf("cluster.sh up:\n%s", out)
	c.env = map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(c.run("env")))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			c.env[k] = strings.Trim(v, "'")
		}
	}
	c.hostAddr = map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(c.run("hosts")), "\n") {
		if h, a, ok := strings.Cut(l, " "); ok {
			c.hostAddr[h] = a
		}
	}
	return c
}

// needClusterRoot skips a test of deploy/cluster.sh unless it runs as root
// (its hosts are network namespaces); under make test it fails instead.
func needClusterRoot(t *testing.T) {
	t.Helper()
	if os.Getuid() == 0 {
		return
	}
	if os.Getenv("SHARDSTOCK_TEST_REQUIRE_ALL") == "1" {
		t.Fatal("deploy/cluster.sh needs root (its hosts are network namespaces), and SHARDSTOCK_TEST_REQUIRE_ALL=1 (make test) requires it")
	}
	t.Skip("deploy/cluster.sh needs root: its hosts are network namespaces")
}

// clusterEnviron is this process's environment without the test services'
// settings, which name the loopback MariaDB and broker of make test.
func clusterEnviron() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "SHARDSTOCK_") && !strings.HasPrefix(kv, "SHARDSTOCK_TEST_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// run runs a cluster.sh command and returns its output; a failure fails the test.
func (c *cluster) run(args ...string) string {
	c.t.Helper()
	cmd := exec.Command(c.script, append(append([]string{}, c.args...), args...)...) // (the options first: exec takes every word after its host)
	cmd.Env = clusterEnviron()
	out, err := cmd.CombinedOutput()
	if err != nil {
		c.t.Fatalf("cluster.sh %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// databaseTakesOnlyTheCoordinators (issue 41, finding 9): MariaDB granted
// the whole subnet (NET.%), so the application's user logged in from the
// edge's host, and the tests' user from anywhere, without TLS. The
// application's user logs in from a coordinator's host (over TLS) and
// from no other; there is no tests' user.
func (c *cluster) databaseTakesOnlyTheCoordinators() {
	c.t.Helper()
	dsn := c.env["SHARDSTOCK_DB"] // mysql://shardstock:PASS@tcp(HOST:PORT)/shardstock?tls=true
	pass := dsn[strings.Index(dsn, "shardstock:")+len("shardstock:") : strings.Index(dsn, "@tcp(")]
	hostPort := dsn[strings.Index(dsn, "@tcp(")+len("@tcp(") : strings.Index(dsn, ")/")]
	host, port, _ := strings.Cut(hostPort, ":")
	testPass, err := os.ReadFile(filepath.Join(c.args[1], "db", "mariadb", "shardstock_test.password"))
	if err != nil {
		c.t.Fatalf("the tests' user's password (mariadb.sh keeps one): %v", err)
	}
	passOf := map[string]string{"shardstock": pass, "shardstock_test": strings.TrimSpace(string(testPass))}
	login := func(from, user string) (string, error) {
		cmd := exec.Command(c.script, append(append([]string{}, c.args...), "exec", from, "mariadb", "--no-defaults", "-h", host, "-P", port,
			"-u", user, "-p"+passOf[user], "--ssl", "--ssl-verify-server-cert=0", "-N", "-e", "SELECT 1")...)
		cmd.Env = clusterEnviron()
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := login("coord1", "shardstock"); err != nil {
		c.t.Fatalf("the application's user from coordinator 1's host: %v %s", err, out)
	}
	for _, from := range []string{"edge", "prom", "shard1"} {
		for _, user := range []string{"shardstock", "shardstock_test"} {
			if out, err := login(from, user); err == nil {
				c.t.Errorf("%s logged in to the order database from the %s host: %s", user, from, out)
			}
		}
	}
}

// portsTakeOnlyTheirPeers (issue 41, finding 8): every host reached every
// port of every other host (the NameServer, which has no authentication, the
// masters, the database, Prometheus). Each port now takes connections only
// from the peers that need it (cluster.sh's packet filter) and this machine
// (NET.1); a connection from any other host is refused. ports: each host's
// listening ports.
func (c *cluster) portsTakeOnlyTheirPeers(ports map[string][]string) {
	c.t.Helper()
	needs := func(target, port, from string) bool {
		switch {
		case target == "mq" && port != "9876" && port != "10911":
			return false // the Broker's 10909 and its HA port (an unauthenticated copy of its log): nobody
		case target == "edge" || from == "":
			return true // the buyers, and this machine
		case strings.HasPrefix(target, "coord"):
			return from == "edge" || from == "prom"
		case strings.HasPrefix(target, "shard"), target == "db", target == "mq":
			return strings.HasPrefix(from, "coord")
		}
		return false
	}
	var targets []string // ADDR/PORT, as bash's /dev/tcp names them
	hostOf := map[string]string{}
	for h, ps := range ports {
		for _, p := range ps {
			t := c.hostAddr[h] + "/" + p
			targets = append(targets, t)
			hostOf[t] = h
		}
	}
	slices.Sort(targets)
	// One bash per source host tries every target and says which it reached.
	probe := `for t in "$@"; do if timeout 2 bash -c "exec 3<>/dev/tcp/$t" 2>/dev/null; then echo "$t open"; else echo "$t shut"; fi; done`
	var wrong []string
	checked := 0
	for from := range c.hostAddr {
		out := c.run(append([]string{"exec", from, "bash", "-c", probe, "probe"}, targets...)...)
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			t, state, _ := strings.Cut(l, " ")
			if hostOf[t] == from {
				continue // a host reaches itself over loopback
			}
			checked++
			if want := needs(hostOf[t], t[strings.Index(t, "/")+1:], from); (state == "open") != want {
				wrong = append(wrong, fmt.Sprintf("%s -> %s (%s): %s, want %s", from, hostOf[t], t, state, map[bool]string{true: "open", false: "shut"}[want]))
			}
		}
	}
	for _, t := range targets {
		addr := strings.Replace(t, "/", ":", 1)
		want := needs(hostOf[t], t[strings.Index(t, "/")+1:], "")
		conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err == nil {
			conn.Close()
		}
		checked++
		if (err == nil) != want {
			wrong = append(wrong, fmt.Sprintf("this machine -> %s (%s): connected %v (%v), want %v", hostOf[t], addr, err == nil, err, want))
		}
	}
	if len(wrong) > 0 {
		c.t.Fatalf("%d of %d connections between the hosts went against the packet filter's table:\n%s", len(wrong), checked, strings.Join(wrong, "\n"))
	}
	c.t.Logf("%d connections between the hosts, each open or shut as the packet filter's table says", checked)
}

// partsRunAsTheirOwnUsers (issue 41, finding 8): RocketMQ and Prometheus ran
// as root. Every process on the broker's host and on Prometheus's runs as
// that part's own system user.
func (c *cluster) partsRunAsTheirOwnUsers() {
	c.t.Helper()
	for host, want := range map[string]string{"mq": "shardstock-mq", "prom": "shardstock-prometheus"} {
		out, err := exec.Command("ip", "netns", "pids", c.args[3]+"-"+host).Output()
		if err != nil {
			c.t.Fatalf("the processes on %s: %v", host, err)
		}
		pids := strings.Fields(string(out))
		if len(pids) == 0 {
			c.t.Fatalf("nothing runs on %s", host)
		}
		u, err := user.Lookup(want)
		if err != nil {
			c.t.Fatalf("the user of %s: %v", host, err)
		}
		for _, pid := range pids {
			st, err := os.Stat("/proc/" + pid) // (owned by the process's user)
			if err != nil {
				continue // (gone meanwhile)
			}
			if got := fmt.Sprint(st.Sys().(*syscall.Stat_t).Uid); got != u.Uid {
				cmd, _ := os.ReadFile("/proc/" + pid + "/comm")
				c.t.Errorf("%s on %s runs as uid %s, want %s (%s)", strings.TrimSpace(string(cmd)), host, got, u.Uid, want)
			}
		}
	}
}

// chaos runs the operators' chaos script on the cluster and keeps its lines.
func (c *cluster) chaos(args ...string) {
	c.t.Helper()
	cmd := exec.Command("bash", append([]string{c.chaosSh}, args...)...)
	cmd.Env = append(clusterEnviron(), "SHARDSTOCK_CLUSTER_DIR="+c.args[1])
	out, err := cmd.CombinedOutput()
	if err != nil {
		c.t.Errorf("chaos %v: %v\n%s", args, err, out)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.HasPrefix(l, "chaos ") {
			c.ran = append(c.ran, l)
		}
	}
}

// keepLogs copies the coordinators' logs into artifacts/ (a failed run).
func (c *cluster) keepLogs() {
	for h := range c.hostAddr {
		if b, err := os.ReadFile(filepath.Join(c.args[1], h, "log", "shardstock.log")); err == nil {
			os.WriteFile(filepath.Join(artifacts(c.t), "cluster-"+h+".log"), b, 0o600)
		}
	}
}

func (c *cluster) coordinator(k int) string {
	return strings.Split(c.env["SHARDSTOCK_CLUSTER_COORDINATOR_URLS"], ",")[k]
}

func (c *cluster) admin(method, path, body string) reply {
	return do(c.t, method, c.coordinator(0)+path, body, "Authorization", "Bearer "+c.env["SHARDSTOCK_ADMIN_TOKEN"], "Content-Type", "application/json")
}

func (c *cluster) status(product string) inventory.ProductStatus {
	c.t.Helper()
	r := c.admin("GET", "/admin/v1/products/"+product, "")
	if r.status != 200 {
		c.t.Fatalf("admin product %s: %d %s", product, r.status, r.raw)
	}
	var st inventory.ProductStatus
	if err := json.Unmarshal([]byte(r.raw), &st); err != nil {
		c.t.Fatal(err)
	}
	return st
}

// window is a stretch of the sale under one fault, and what buyers were
// told in it.
type window struct {
	name       string
	from, to   time.Time
	statuses   map[int]int
	soldOnShrd map[int]int // 200s by the shard that holds the unit
}

// TestClusterSaleAcrossHostsWithPartitions (issue 29, item 1) runs a sale on
// deploy/cluster.sh's hosts — the nginx edge, two coordinators, three Redis
// masters, the RocketMQ NameServer and Broker, MariaDB and Prometheus, each
// in its own network namespace on its own address — through the edge, with
// buyers' signed tokens, while the chaos script partitions hosts: one
// coordinator cut off from one shard that the other coordinator still
// reaches, the broker cut off from a coordinator, and a coordinator cut off
// from the order database. It checks the invariants from outside (the
// answers, the admin API, the order table) and writes
// artifacts/cluster-report.txt.
func TestClusterSaleAcrossHostsWithPartitions(t *testing.T) {
	c := startCluster(t, 3, "SHARDSTOCK_PAY_TIMEOUT=20s", "SHARDSTOCK_CLAIM_IDLE=2s", "SHARDSTOCK_LOG_LEVEL=warn",
		"SHARDSTOCK_SHARD_TIMEOUT=500ms")
	// Stock enough for the whole run (about 250 purchases a second for half
	// a minute): every window below is a sale going on, not a sold-out one
	// (where a shard that cannot be asked makes an answer 202, rightly).
	const stock, limit, buyers, price = 40000, 2, 200000, 990
	if r := c.admin("PUT", "/admin/v1/products/hosts", fmt.Sprintf(`{"stock":%d,"per_user_limit":%d,"price_cents":%d}`, stock, limit, price)); r.status != 201 {
		t.Fatalf("define: %d %s", r.status, r.raw)
	}
	// Every part listens on its host's address and nowhere else: not on
	// loopback (unreachable from the other hosts, and a part that advertises
	// it sends its clients to themselves), not on every interface.
	var listening []string
	ports := map[string][]string{} // host -> the ports it listens on
	for h, a := range c.hostAddr {
		out := c.run("exec", h, "ss", "-ltnH")
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Fields(l); len(f) >= 4 {
				local := f[3]
				// (a JVM lists an IPv4 address as IPv4-mapped IPv6)
				if !strings.HasPrefix(local, a+":") && !strings.HasPrefix(local, "[::ffff:"+a+"]:") {
					t.Errorf("host %s (%s): something listens on %s", h, a, local)
				}
				listening = append(listening, h+" "+local)
				ports[h] = append(ports[h], local[strings.LastIndex(local, ":")+1:])
			}
		}
	}
	t.Logf("listening: %v", listening)
	c.databaseTakesOnlyTheCoordinators()
	c.partsRunAsTheirOwnUsers()
	c.portsTakeOnlyTheirPeers(ports)
	edge := c.env["SHARDSTOCK_CLUSTER_EDGE"]
	hmac := []byte(c.env["SHARDSTOCK_HMAC_SECRET"])
	token := func(user string) string {
		tok, err := flashsale.MintToken(hmac, user, time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}

	// The load, from this machine through the edge only.
	var (
		mu        sync.Mutex
		responses []response
		stop      atomic.Bool
		wg        sync.WaitGroup
		refused   atomic.Int64 // no answer at all from the edge
	)
	cl := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	buy := func(user string) (response, bool) {
		req, _ := http.NewRequest("POST", edge+"/api/v1/products/hosts/purchase", nil)
		req.Header.Set("Authorization", "Bearer "+token(user))
		resp, err := cl.Do(req)
		if err != nil {
			return response{}, false
		}
		var body map[string]any
		decodeJSON(resp, &body)
		rp := response{status: resp.StatusCode, user: user, shard: -1, at: time.Now()}
		rp.order, _ = body["order_id"].(string)
		rp.ticket, _ = body["ticket"].(string)
		if s, ok := body["shard"].(float64); ok {
			rp.shard = s
		}
		return rp, true
	}
	for w := 0; w < 8; w++ {
		wg.Go(func() {
			for !stop.Load() {
				rp, ok := buy(fmt.Sprintf("hb%d", rand.IntN(buyers)))
				if !ok {
					refused.Add(1)
					time.Sleep(50 * time.Millisecond)
					continue
				}
				mu.Lock()
				responses = append(responses, rp)
				mu.Unlock()
				time.Sleep(time.Duration(10+rand.IntN(30)) * time.Millisecond) // about 250 purchases a second
			}
		})
	}

	// The partitions, through the operators' chaos script.
	var windows []*window
	fault := func(name string, cut []string, hold time.Duration) {
		w := &window{name: name, from: time.Now()}
		c.chaos(append([]string{"partition"}, cut...)...)
		time.Sleep(hold)
		c.chaos("heal")
		w.to = time.Now()
		windows = append(windows, w)
		time.Sleep(2 * time.Second) // the cluster whole again between faults
	}
	start := time.Now()
	time.Sleep(2 * time.Second)
	fault("coordinator 1 cut off from shard 1 (coordinator 2 still reaches it)", []string{"coord1", "shard1"}, 6*time.Second)
	fault("the broker cut off from coordinator 2", []string{"mq", "coord2"}, 6*time.Second)
	fault("coordinator 2 cut off from the order database", []string{"coord2", "db"}, 6*time.Second)
	fault("shard 2 cut off from both coordinators", []string{"shard2", "coord1,coord2"}, 5*time.Second)
	stop.Store(true)
	wg.Wait()
	loadTook := time.Since(start)

	// Every queued purchase resolves and every reservation becomes an order.
	db, ca := c.env["SHARDSTOCK_DB"], c.env["SHARDSTOCK_DB_CA_FILE"]
	pem, err := os.ReadFile(ca)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	store, err := sqlstore.OpenTLS(db, roots)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	rows := openDB(t, db, roots)
	ctx := context.Background()
	ticketOf := map[string]string{}
	waitFor(t, 90*time.Second, "tickets resolved", func() (bool, string) {
		for _, rp := range responses {
			if rp.ticket == "" || ticketOf[rp.ticket] != "" {
				continue
			}
			req, _ := http.NewRequest("GET", edge+"/api/v1/tickets/"+rp.ticket, nil)
			req.Header.Set("Authorization", "Bearer "+token(rp.user))
			resp, err := cl.Do(req)
			if err != nil {
				return false, err.Error()
			}
			var body map[string]any
			decodeJSON(resp, &body)
			if resp.StatusCode != 200 || body["status"] == "queued" {
				return false, fmt.Sprintf("ticket %s: %d %v", rp.ticket, resp.StatusCode, body)
			}
			ticketOf[rp.ticket] = fmt.Sprint(body["order_id"], "|", body["status"], "|", body["error"])
		}
		return true, ""
	})
	// A ticket is answered by the coordinator that holds it. With one
	// coordinator stopped, the edge answers each ticket 200 (the other holds
	// it) or 503 (retry later), never 404: the stopped one may hold it.
	c.run("stop-part", "coord1")
	userOf := map[string]string{}
	for _, rp := range responses {
		if rp.ticket != "" {
			userOf[rp.ticket] = rp.user
		}
	}
	toldWithOneDown := map[int]int{}
	for tk := range ticketOf {
		rep := do(t, "GET", edge+"/api/v1/tickets/"+tk, "", "Authorization", "Bearer "+token(userOf[tk]))
		toldWithOneDown[rep.status]++
	}
	c.run("start-part", "coord1")

	want := map[string]response{}
	statuses := map[int]int{}
	ticketsSoldOut := 0 // rejected as sold out, with stock left all along
	for _, v := range ticketOf {
		if f := strings.Split(v, "|"); f[1] == "rejected" && f[2] == "sold_out" {
			ticketsSoldOut++
		}
	}
	for _, rp := range responses {
		statuses[rp.status]++
		if rp.status == 200 {
			want[rp.order] = rp
		}
		for _, w := range windows {
			if !rp.at.Before(w.from) && rp.at.Before(w.to) {
				if w.statuses == nil {
					w.statuses, w.soldOnShrd = map[int]int{}, map[int]int{}
				}
				w.statuses[rp.status]++
				if rp.status == 200 {
					w.soldOnShrd[int(rp.shard)]++
				}
			}
		}
	}
	for tk, v := range ticketOf {
		if f := strings.Split(v, "|"); f[1] == "reserved" {
			want[f[0]] = response{status: 202, ticket: tk, order: f[0], shard: -1}
		}
	}
	var missing []string
	waitFor(t, 90*time.Second, "every reservation has its order", func() (bool, string) {
		missing = nil
		for id := range want {
			o, err := store.Orders.Order(ctx, id)
			if err != nil {
				return false, err.Error()
			}
			if o == nil {
				missing = append(missing, id)
			}
		}
		return len(missing) == 0, fmt.Sprintf("%d of %d reservations without an order, e.g. %s", len(missing), len(want), describe(want, first(missing)))
	})

	// Half of what awaits payment is paid (signed, as a payment provider
	// does), through the edge; the rest times out.
	awaiting, err := rows.Query(ctx, `SELECT id, user_id FROM orders WHERE product_id = 'hosts' AND status = 'awaiting_payment'`)
	if err != nil {
		t.Fatal(err)
	}
	paySecret := []byte(c.env["SHARDSTOCK_PAYMENT_SECRET"])
	for k, row := range awaiting {
		if k%2 == 1 {
			continue
		}
		body := fmt.Sprintf(`{"result":"success","order_id":%q,"amount_cents":%d,"transaction_id":"txn-%s","timestamp":%d}`, row[0], price, row[0], time.Now().Unix())
		rep := do(t, "POST", edge+"/api/v1/orders/"+row[0]+"/pay", body, "Authorization", "Bearer "+token(row[1]),
			"Content-Type", "application/json", "X-Signature", order.SignPayment(paySecret, []byte(body)))
		if rep.status != 202 && rep.status != 409 {
			t.Errorf("pay %s: %d %s", row[0], rep.status, rep.raw)
		}
	}
	var final map[shardstock.OrderStatus]int64
	waitFor(t, 120*time.Second, "payments settled and unpaid orders timed out", func() (bool, string) {
		counts, _ := store.Orders.CountByStatus(ctx, "hosts")
		final = counts
		st := c.status("hosts")
		locked := int64(0)
		for _, s := range st.Shards {
			if s.Locked != nil {
				locked += *s.Locked
			}
		}
		return counts["awaiting_payment"] == 0 && locked == 0, fmt.Sprintf("orders %v, shards %+v", counts, st.Totals)
	})

	// The checks, from outside.
	var checks reportChecks
	check := checks.checker(t)
	after := c.status("hosts")
	byShard, err := store.Orders.CountsByShard(ctx, "hosts")
	if err != nil {
		t.Fatal(err)
	}
	var lockedSold, alloc int64
	for _, s := range after.Shards {
		if s.Alloc != nil {
			alloc += *s.Alloc
		}
		check(s.Up && s.Salable != nil, "shard %d (%s) answers the admin API after the partitions healed", s.Index, s.Addr)
		if s.Salable == nil {
			continue
		}
		lockedSold += *s.Locked + *s.Sold
		check(*s.Salable+*s.Locked+*s.Sold == *s.Alloc, "conservation on shard %d: salable %d + locked %d + sold %d = alloc %d",
			s.Index, *s.Salable, *s.Locked, *s.Sold, *s.Alloc)
		check(*s.Sold == byShard[s.Index].Paid && *s.Locked == byShard[s.Index].AwaitingPayment,
			"convergence on shard %d: sold %d = paid orders %d, locked %d = awaiting orders %d",
			s.Index, *s.Sold, byShard[s.Index].Paid, *s.Locked, byShard[s.Index].AwaitingPayment)
	}
	check(alloc == stock, "the shards' allocations add up to the stock: %d = %d", alloc, stock)
	check(lockedSold <= stock, "no oversell on the shards: locked + sold %d <= stock %d", lockedSold, stock)
	check(final["paid"] <= stock, "no oversell in the order table: %d paid <= stock %d", final["paid"], stock)
	check(len(missing) == 0, "no lost sale: every 200 and every reserved ticket has an order row (%d reservations)", len(want))
	over, err := rows.Query(ctx, `SELECT user_id, COUNT(*) FROM orders WHERE product_id = 'hosts' AND status IN ('awaiting_payment', 'paid') GROUP BY user_id HAVING COUNT(*) > ?`, limit)
	check(err == nil && len(over) == 0, "per-user limit %d held in the order table (%d buyers over it)", limit, len(over))
	check(statuses[500] == 0, "no 500 answers (%d)", statuses[500])
	// Stock was left all along: "sold out" or "not found" would be a lie.
	check(statuses[410] == 0 && statuses[404] == 0 && ticketsSoldOut == 0,
		"truthful answers: no 410 sold_out (%d), no 404 (%d), no ticket rejected sold_out (%d) while stock was left", statuses[410], statuses[404], ticketsSoldOut)
	check(toldWithOneDown[404] == 0 && toldWithOneDown[200]+toldWithOneDown[503] == len(ticketOf),
		"with coordinator 1 stopped, each of the %d tickets was answered 200 (held by coordinator 2) or 503 (retry), never 404: %s",
		len(ticketOf), sortedCounts(toldWithOneDown))
	check(statuses[200] > 0 && len(windows) == 4, "buyers were served through the edge during and between the partitions (%d answers 200)", statuses[200])
	for _, w := range windows {
		check(w.statuses[200] > w.statuses[202], "sales went on while %s: %s; 200s by shard %v", w.name, sortedCounts(w.statuses), w.soldOnShrd)
	}
	if len(windows) == 4 {
		check(windows[0].soldOnShrd[0] > 0, "coordinator 2 still sold shard 1's units while coordinator 1 could not reach it (%d)", windows[0].soldOnShrd[0])
	}

	report := &strings.Builder{}
	fmt.Fprintf(report, "shardstock cluster run (deploy/cluster.sh) — %s\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(report, "hosts:")
	for _, h := range []string{"edge", "coord1", "coord2", "shard1", "shard2", "shard3", "mq", "db", "prom"} {
		fmt.Fprintf(report, " %s %s;", h, c.hostAddr[h])
	}
	fmt.Fprintf(report, "\nsetup: stock %d, limit %d, %d buyers over 8 connections through the edge with signed tokens, load %s\n",
		stock, limit, buyers, loadTook.Round(time.Second))
	fmt.Fprintf(report, "partitions (%d chaos lines):\n", len(c.ran))
	for _, l := range c.ran {
		fmt.Fprintf(report, "  %s\n", l)
	}
	fmt.Fprintf(report, "what buyers were told in each partition:\n")
	for _, w := range windows {
		fmt.Fprintf(report, "  %s (%s): %s; 200s by shard %v\n", w.name, w.to.Sub(w.from).Round(100*time.Millisecond), sortedCounts(w.statuses), w.soldOnShrd)
	}
	fmt.Fprintf(report, "requests: %d answered, %d not answered by the edge; outcomes by status: %s\n", len(responses), refused.Load(), sortedCounts(statuses))
	fmt.Fprintf(report, "orders at the end: %v\n", final)
	fmt.Fprintf(report, "checks:\n")
	for _, l := range checks.lines {
		fmt.Fprintf(report, "  %s\n", l)
	}
	os.WriteFile(filepath.Join(artifacts(t), "cluster-report.txt"), []byte(report.String()), 0o644)
	t.Log("\n" + report.String())
}

// severalHosts reads the commands of the README's "Several hosts" section:
// its sh block, a command a line (a line ending in a backslash goes on).
func severalHosts(readme string) ([]string, error) {
	_, section, ok := strings.Cut(readme, "## Several hosts")
	if !ok {
		return nil, fmt.Errorf("no Several hosts section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	_, block, ok := strings.Cut(section, "```sh\n")
	if !ok {
		return nil, fmt.Errorf("no sh block in the Several hosts section")
	}
	block, _, _ = strings.Cut(block, "```")
	var cmds []string
	var cmd strings.Builder
	for _, line := range strings.Split(block, "\n") {
		switch {
		case strings.HasSuffix(line, "\\"):
			cmd.WriteString(strings.TrimSuffix(line, "\\"))
		case strings.TrimSpace(line) != "":
			cmd.WriteString(line)
			cmds = append(cmds, cmd.String())
			cmd.Reset()
		}
	}
	return cmds, nil
}

// TestReadmeSeveralHostsIsTrue (issue 29): the README's "Several hosts"
// commands, run as written on a fresh clone, one after the other in one
// shell, each succeed: the cluster comes up, a product is defined and sold
// through the edge with signed tokens (loadgen fails on a broken
// invariant), again while a coordinator is cut off from a shard, and down
// leaves no host or bridge behind. Only the cluster's name and network are
// the test's own (the environment), so it meets no operator's cluster.
func TestReadmeSeveralHostsIsTrue(t *testing.T) {
	needClusterRoot(t)
	clone, readme := freshClone(t)
	cmds, err := severalHosts(readme)
	if err != nil {
		t.Fatal(err)
	}
	env := append(clusterEnviron(), "SHARDSTOCK_CLUSTER_NAME=ssread", "SHARDSTOCK_CLUSTER_NET=10.80.0")
	down := exec.Command(filepath.Join(clone, "deploy", "cluster.sh"), "down", "--name", "ssread", "--net", "10.80.0")
	down.Dir, down.Env = clone, env
	down.Run()         // what a killed earlier run left
	t.Cleanup(func() { // (--purge: MariaDB's data may be outside the clone)
		down := exec.Command(filepath.Join(clone, "deploy", "cluster.sh"), "down", "--purge")
		down.Dir, down.Env = clone, env
		down.Run()
	})
	var script strings.Builder
	script.WriteString("set -euo pipefail\n")
	for k, c := range cmds {
		fmt.Fprintf(&script, "echo %q\n%s || { echo \"README command %d failed: $?\" >&2; exit 1; }\n", "$ "+c, c, k+1)
	}
	sh := exec.Command("bash", "-c", script.String())
	sh.Dir, sh.Env = clone, env
	out, err := sh.CombinedOutput()
	if err != nil {
		t.Fatalf("the README's Several hosts commands: %v\n%s", err, out)
	}
	text := string(out)
	for _, want := range []string{"up: buyers at http://10.80.0.2:8000", "partition: coord1 (10.80.0.11) and shard1 (10.80.0.21) no longer reach each other",
		"heal: coord1 and shard1 reach each other again", "down: every part stopped"} {
		if !strings.Contains(text, want) {
			t.Errorf("the commands' output does not say %q:\n%s", want, text)
		}
	}
	if n := strings.Count(text, "invariants hold: true"); n != 2 {
		t.Errorf("loadgen said the invariants hold %d times, want 2 (one per run):\n%s", n, text)
	}
	atoi := func(s string) int { n, _ := strconv.Atoi(s); return n }
	// 600 purchases of 600 buyers with stock left: each reserved, at once
	// or queued (a shard slower than its timeout on a loaded machine).
	if m := regexp.MustCompile(`statuses: 200×(\d+)(?: 202×(\d+))?\n`).FindStringSubmatch(text); m == nil || atoi(m[1])+atoi(m[2]) != 600 {
		t.Errorf("the first loadgen run did not reserve 600 units with 600 purchases:\n%s", text)
	}
	if links, _ := exec.Command("ip", "-o", "link", "show").Output(); strings.Contains(string(links), "ssread-") {
		t.Errorf("links left after down:\n%s", links)
	}
	if nss, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(nss), "ssread-") {
		t.Errorf("hosts left after down:\n%s", nss)
	}
	t.Logf("%s", text)
}

// TestClusterUpThatFailsLeavesNothing (issue 29): when a part does not
// start (here every coordinator, whose binary exits at once), up says so,
// fails, and takes down what it made: no host, link or bridge of the
// cluster's name stays, and no part it started still runs.
func TestClusterUpThatFailsLeavesNothing(t *testing.T) {
	needClusterRoot(t)
	script := filepath.Join(repoRoot(t), "deploy", "cluster.sh")
	dir := t.TempDir()
	args := []string{"--dir", filepath.Join(dir, "cluster"), "--name", "ssfail", "--net", "10.81.0", "--shards", "1", "--coordinators", "1"}
	run := func(cmd string, extra ...string) (string, error) {
		c := exec.Command(script, append(append([]string{cmd}, args...), extra...)...)
		c.Env = clusterEnviron()
		out, err := c.CombinedOutput()
		return string(out), err
	}
	run("down") // what a killed earlier run left
	t.Cleanup(func() { run("down", "--purge") })
	out, err := run("up", "--bin", "/bin/false")
	if err == nil {
		t.Fatalf("up with a coordinator that exits at once succeeded:\n%s", out)
	}
	for _, want := range []string{"coord1 exited during start", "up failed; taking down what it made", "down: every part stopped"} {
		if !strings.Contains(out, want) {
			t.Errorf("up's output does not say %q:\n%s", want, out)
		}
	}
	if links, _ := exec.Command("ip", "-o", "link", "show").Output(); strings.Contains(string(links), "ssfail-") {
		t.Errorf("links left after a failed up:\n%s", links)
	}
	if nss, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(nss), "ssfail-") {
		t.Errorf("hosts left after a failed up:\n%s", nss)
	}
	if ps, _ := exec.Command("ps", "-eo", "args").Output(); strings.Contains(string(ps), filepath.Join(dir, "cluster")) {
		t.Errorf("processes of the cluster left after a failed up:\n%s", ps)
	}
	if _, err := os.Stat(filepath.Join(dir, "cluster", "cluster.conf")); !os.IsNotExist(err) {
		t.Errorf("cluster.conf left after a failed up (a next up would refuse): %v", err)
	}
}
