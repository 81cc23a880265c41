package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/config"
	"github.com/shardstock/shardstock/messaging"
	"github.com/shardstock/shardstock/shard"
	"github.com/shardstock/shardstock/shard/shardtest"
	"github.com/shardstock/shardstock/sqlstore/sqlstoretest"
)

// service returns the address of a shared test service from the
// environment (deploy/with-services.sh sets it for make test).
func service(t testing.TB, env string) string {
	t.Helper()
	v := os.Getenv(env)
	if v == "" {
		if os.Getenv("SHARDSTOCK_TEST_REQUIRE_ALL") == "1" {
			t.Fatalf("%s is not set", env)
		}
		t.Skipf("%s not set: run through make test (deploy/with-services.sh)", env)
	}
	return v
}

// testRocketMQ returns the shared broker's URL with a namespace of the
// test's own, so no test reads another's messages.
func testRocketMQ(t testing.TB) string {
	b := make([]byte, 4)
	rand.Read(b)
	return service(t, "SHARDSTOCK_TEST_ROCKETMQ") + "?namespace=t" + hex.EncodeToString(b)
}

// freshMySQL creates a database of its own for the test on the shared
// MariaDB and returns its DSN.
func freshMySQL(t testing.TB) string {
	return sqlstoretest.FreshMySQL(t, service(t, "SHARDSTOCK_TEST_MYSQL"))
}

// runDeploy runs a deploy script with the test environment.
func runDeploy(t *testing.T, script string, args ...string) {
	t.Helper()
	out, err := exec.Command("bash", append([]string{filepath.Join(repoRoot(t), "deploy", script)}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", script, args, err, out)
	}
	t.Logf("%s %v: %s", script, args, strings.TrimSpace(string(out)))
}

func repoRoot(t *testing.T) string {
	wd, _ := os.Getwd()
	return filepath.Clean(filepath.Join(wd, "..", ".."))
}

// offsetClock is real time plus an offset the test moves.
type offsetClock struct{ off atomic.Int64 }

func (c *offsetClock) now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *offsetClock) advance(d time.Duration) { c.off.Add(int64(d)) }
func (c *offsetClock) ahead() time.Duration    { return time.Duration(c.off.Load()) }

type mode struct {
	name string
	opts func(t *testing.T) func(*config.Config)
}

var modes = []mode{
	{"streams+sqlite", func(t *testing.T) func(*config.Config) { return func(c *config.Config) {} }},
	{"rocketmq+mariadb", func(t *testing.T) func(*config.Config) {
		mq, db := testRocketMQ(t), freshMySQL(t)
		return func(c *config.Config) { c.MQ, c.DB = mq, db }
	}},
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: not within %s; last state: %s", what, timeout, last)
}

func statusCounts(t *testing.T, m *Main, product string) map[shardstock.OrderStatus]int64 {
	t.Helper()
	c, err := m.store.Orders.CountByStatus(context.Background(), product)
	if err != nil {
		t.Logf("count orders: %v", err)
		return map[shardstock.OrderStatus]int64{}
	}
	return c
}

// buy makes n purchases of distinct new buyers over 32 connections and
// returns order id -> buyer; every one must be a 200.
func buy(t *testing.T, base, product, prefix string, n int) map[string]string {
	t.Helper()
	var mu sync.Mutex
	orders := map[string]string{}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 32; w++ {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				user := fmt.Sprintf("%s%d", prefix, i)
				rep := purchase(t, base, product, user)
				if rep.status != 200 {
					t.Errorf("%s: %d %s", user, rep.status, rep.raw)
					continue
				}
				mu.Lock()
				orders[rep.str("order_id")] = user
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(orders) != n {
		t.Fatalf("%d of %d purchases succeeded", len(orders), n)
	}
	return orders
}

func orderCall(t *testing.T, base, action, id, user, body string) reply {
	return do(t, "POST", base+"/api/v1/orders/"+id+"/"+action, body, "X-User-ID", user, "Content-Type", "application/json")
}

// TestOrderPipeline: 1000 reservations become 1000 orders awaiting payment;
// 500 are paid, 300 fail, 100 are cancelled by their buyers and 100 time
// out; duplicates of every kind change nothing; the shards converge on the
// order table (invariants 3, 5, 6). In both modes on real servers, and in
// memory (miniredis running the real scripts, SQLite): the whole path
// purchase -> outbox -> order row -> pay/fail/cancel/timeout -> settlement
// -> unit back in a few seconds, with no service started.
func TestOrderPipeline(t *testing.T) {
	type run struct {
		mode
		masters func(t *testing.T) (urls []string, ports []int)
	}
	onRedis := func(t *testing.T) ([]string, []int) { r := shardtest.Start(t, 3); return r.URLs(), r.Ports }
	runs := []run{{mode{"in-memory", modes[0].opts}, func(t *testing.T) ([]string, []int) {
		r := inMemory(t, 3)
		return r.URLs(), r.Ports
	}}}
	for _, md := range modes {
		runs = append(runs, run{md, onRedis})
	}
	for _, md := range runs {
		t.Run(md.name, func(t *testing.T) {
			urls, ports := md.masters(t)
			clock := &offsetClock{}
			m := startServer(t, urls, md.opts(t), func(c *config.Config) { c.Test.OrderClock = clock.now; c.PayTimeout = 10 * time.Minute })
			base := m.URL()
			if rep := putProduct(t, base, "pipe", `{"stock":1200}`); rep.status != 201 {
				t.Fatalf("define: %d %s", rep.status, rep.raw)
			}
			orders := buy(t, base, "pipe", "buyer", 1000)
			waitFor(t, 90*time.Second, "1000 orders awaiting payment", func() (bool, string) {
				c := statusCounts(t, m, "pipe")
				return c[shardstock.StatusAwaitingPayment] == 1000, fmt.Sprint(c)
			})
			k, ids := 0, make([]string, 0, len(orders))
			for id := range orders {
				ids = append(ids, id)
			}
			for _, id := range ids {
				body := `{"result":"success"}`
				if k >= 500 {
					body = `{"result":"fail"}`
				}
				switch {
				case k < 800:
					if rep := orderCall(t, base, "pay", id, orders[id], body); rep.status != 202 {
						t.Fatalf("pay %s: %d %s", id, rep.status, rep.raw)
					}
				case k < 900:
					if rep := orderCall(t, base, "cancel", id, orders[id], ""); rep.status != 202 || rep.str("status") != "cancelled" {
						t.Fatalf("cancel %s: %d %s", id, rep.status, rep.raw)
					}
				}
				k++
			}
			// Repeats and contradictions through the API.
			if rep := orderCall(t, base, "pay", ids[0], orders[ids[0]], `{"result":"success"}`); rep.status != 202 || rep.str("status") != "paid" {
				t.Fatalf("second success: %d %s", rep.status, rep.raw)
			}
			if rep := orderCall(t, base, "pay", ids[0], orders[ids[0]], `{"result":"fail"}`); rep.status != 409 {
				t.Fatalf("fail after success: %d %s", rep.status, rep.raw)
			}
			redeliver(t, m, ports, "pipe", ids[0], ids[600])
			clock.advance(11 * time.Minute) // the 100 unpaid orders left time out
			waitFor(t, 90*time.Second, "orders and shards converge", func() (bool, string) {
				c := statusCounts(t, m, "pipe")
				st := productStatus(t, base, "pipe")
				ok := c[shardstock.StatusPaid] == 500 && c[shardstock.StatusCancelled] == 500 && len(c) == 2 &&
					st.Totals.Sold == 500 && st.Totals.Locked == 0 && st.Totals.Salable == 700
				return ok, fmt.Sprintf("orders %v, shards %+v", c, st.Totals)
			})
			checkShards(t, productStatus(t, base, "pipe"))
			rec := do(t, "GET", base+"/admin/v1/products/pipe/reconcile", "", "Authorization", "Bearer "+testToken)
			if rec.status != 200 || rec.body["in_sync"] != true {
				t.Fatalf("reconcile: %d %s", rec.status, rec.raw)
			}
			// Released units sell again, to buyers whose orders were cancelled
			// too, once the order sweep gave their claims back.
			for _, k := range []int{700, 850} { // a payment failed; the buyer cancelled
				waitFor(t, 10*time.Second, "a buyer whose order was cancelled buys again", func() (bool, string) {
					rep := purchase(t, base, "pipe", orders[ids[k]])
					return rep.status == 200, fmt.Sprintf("%d %s", rep.status, rep.raw)
				})
			}
			if rep := purchase(t, base, "pipe", orders[ids[0]]); rep.status != 409 {
				t.Fatalf("a buyer who paid bought past the limit: %d %s", rep.status, rep.raw)
			}
		})
	}
}

// redeliver sends a paid order's reservation and settlement, and a cancelled
// order's settlement, through the real transport a second time.
func redeliver(t *testing.T, m *Main, ports []int, product, paidID, cancelledID string) {
	t.Helper()
	ctx := context.Background()
	paid, err := m.store.Orders.Order(ctx, paidID)
	if err != nil || paid == nil {
		t.Fatalf("order %s: %v", paidID, err)
	}
	cancelled, _ := m.store.Orders.Order(ctx, cancelledID)
	ev := shardstock.ReservationEvent{ID: paid.ID, UserID: paid.UserID, ProductID: product, Shard: paid.Shard, AtMS: time.Now().UnixMilli()}
	again := []shardstock.Settlement{
		{OrderID: paid.ID, ProductID: product, UserID: paid.UserID, Shard: paid.Shard, Action: shardstock.Confirm},
		{OrderID: cancelled.ID, ProductID: product, UserID: cancelled.UserID, Shard: cancelled.Shard, Action: shardstock.Release},
	}
	if b, ok := m.mq.(*messaging.Broker); ok {
		if err := b.MQ.Publish(ctx, messaging.TopicReservations, ev.ID, ev.Encode()); err != nil {
			t.Fatal(err)
		}
	} else {
		c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", ports[paid.Shard])})
		defer c.Close()
		err := c.XAdd(ctx, &redis.XAddArgs{Stream: shard.OutboxKey(product), Values: []any{"res", ev.ID, "user", ev.UserID,
			"product", product, "shard", fmt.Sprint(ev.Shard), "at", fmt.Sprint(ev.AtMS)}}).Err()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range again {
		for range 2 {
			if err := m.mq.Publish(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestReconcileFindsAndFixesDrift: an order paid in SQL whose settlement
// never reached its shard (simulated by clearing the mark without
// publishing) shows as drift on exactly that shard; the fix re-sends the
// settlements of that shard only — a shard that is down meanwhile is named
// and skipped — and the shard converges.
func TestReconcileFindsAndFixesDrift(t *testing.T) {
	r := shardtest.Start(t, 3)
	m := startServer(t, r.URLs())
	base := m.URL()
	putProduct(t, base, "rec", `{"stock":30}`)
	orders := buy(t, base, "rec", "r", 10)
	waitFor(t, 30*time.Second, "orders", func() (bool, string) {
		c := statusCounts(t, m, "rec")
		return c[shardstock.StatusAwaitingPayment] == 10, fmt.Sprint(c)
	})
	var lost string
	for id := range orders {
		lost = id
		break
	}
	if err := openDB(t, m.cfg.DB, nil).Exec(context.Background(), "UPDATE orders SET status = 'paid', settle_pending = 0 WHERE id = '"+lost+"'"); err != nil {
		t.Fatal(err)
	}
	o, _ := m.store.Orders.Order(context.Background(), lost)
	type report struct {
		InSync bool `json:"in_sync"`
		Shards []struct {
			Index       int   `json:"index"`
			LockedDrift int64 `json:"locked_drift"`
			SoldDrift   int64 `json:"sold_drift"`
		} `json:"shards"`
		Actions   []string `json:"actions"`
		Resettled int64    `json:"resettled"`
	}
	get := func(method string) report {
		rep := do(t, method, base+"/admin/v1/products/rec/reconcile", "", "Authorization", "Bearer "+testToken)
		var rr report
		if rep.status != 200 || json.Unmarshal([]byte(rep.raw), &rr) != nil {
			t.Fatalf("reconcile: %d %s", rep.status, rep.raw)
		}
		return rr
	}
	rr := get("GET")
	for _, sh := range rr.Shards {
		want := int64(0)
		if sh.Index == o.Shard {
			want = 1
		}
		if sh.LockedDrift != want || sh.SoldDrift != -want {
			t.Fatalf("shard %d drift locked %d sold %d; the lost settlement is on shard %d", sh.Index, sh.LockedDrift, sh.SoldDrift, o.Shard)
		}
	}
	if rr.InSync {
		t.Fatal("drift reported in sync")
	}
	// Another shard is down while the fix runs: it is skipped and named,
	// and only the drifting shard's one final order is sent again.
	down := (o.Shard + 1) % 3
	r.Kill(down)
	fixed := get("POST")
	if fixed.Resettled != 1 || len(fixed.Actions) != 2 || !strings.Contains(strings.Join(fixed.Actions, " "), fmt.Sprintf("shard %d did not answer", down)) {
		t.Fatalf("fix with shard %d down: %+v", down, fixed)
	}
	r.Restart(down)
	waitFor(t, 30*time.Second, "in sync after the fix", func() (bool, string) {
		rr := get("GET")
		return rr.InSync, fmt.Sprintf("%+v", rr)
	})
	if st := productStatus(t, base, "rec"); st.Totals.Sold != 1 || st.Totals.Locked != 9 {
		t.Fatalf("after the fix: %+v", st.Totals)
	}
	// Units that exist twice (a shard back without a transfer_out, say) show
	// as alloc and salable drift against the split and the transfer log.
	opt, _ := redis.ParseURL(r.URLs()[2])
	rc := redis.NewClient(opt)
	defer rc.Close()
	rc.HIncrBy(context.Background(), "ss:{p:rec}:stock", "alloc", 2)
	rc.HIncrBy(context.Background(), "ss:{p:rec}:stock", "salable", 2)
	var doubled struct {
		InSync bool `json:"in_sync"`
		Shards []struct {
			AllocDrift   int64 `json:"alloc_drift"`
			SalableDrift int64 `json:"salable_drift"`
		} `json:"shards"`
	}
	rep := do(t, "GET", base+"/admin/v1/products/rec/reconcile", "", "Authorization", "Bearer "+testToken)
	if json.Unmarshal([]byte(rep.raw), &doubled) != nil || doubled.InSync || doubled.Shards[2].AllocDrift != 2 ||
		doubled.Shards[2].SalableDrift != 2 || doubled.Shards[0].AllocDrift != 0 {
		t.Fatalf("2 units too many on shard 2: %s", rep.raw)
	}
}

// TestSettlementsDoNotWaitForAnUnrelatedShard (issue: one down shard stopped
// settlements everywhere): with a buyer's home shard down, cancelling that
// buyer's order held on a healthy shard releases the unit there at once,
// another buyer's payment on a healthy shard is confirmed at once, and the
// cancelled buyer's claim goes back when the home returns, so they may buy
// again.
func TestSettlementsDoNotWaitForAnUnrelatedShard(t *testing.T) {
	r := shardtest.Start(t, 3)
	m := startServer(t, r.URLs())
	base := m.URL()
	product := "settle"
	// Shard 2 sells nothing (drained before the product is split: it gets
	// no unit, and keeps its buyers' registers): a buyer homed there is
	// served by shard 0, the first after it, where a buyer homed at 0 is
	// served too — both holds on one shard, so both settlements go through
	// one settle stream. (Zeroing its counters by hand, as this test once
	// did, is a disagreement with the split the restart's resync rightly
	// refuses.)
	if rep := do(t, "POST", base+"/admin/v1/shards/2/drain", `{"drained":true}`, "Authorization", "Bearer "+testToken, "Content-Type", "application/json"); rep.status != 200 {
		t.Fatalf("drain: %d %s", rep.status, rep.raw)
	}
	putProduct(t, base, product, `{"stock":6}`)
	canceller, payer := "", ""
	for k := 0; canceller == "" || payer == ""; k++ {
		u := fmt.Sprintf("b%d", k)
		switch m.set.Purchases.Home(u) {
		case 2:
			canceller = cmp.Or(canceller, u)
		case 0:
			payer = cmp.Or(payer, u)
		}
	}
	held := map[string]reply{}
	for _, u := range []string{canceller, payer} {
		if held[u] = purchase(t, base, product, u); held[u].status != 200 || held[u].body["shard"] != float64(0) {
			t.Fatalf("%s: %d %s", u, held[u].status, held[u].raw)
		}
		id := held[u].str("order_id")
		waitFor(t, 10*time.Second, "order "+id+" written", func() (bool, string) {
			o, _ := m.store.Orders.Order(context.Background(), id)
			return o != nil, fmt.Sprint(o)
		})
	}
	r.Kill(2) // the canceller's home: their claim cannot go back now
	if rep := orderCall(t, base, "cancel", held[canceller].str("order_id"), canceller, ""); rep.status != 202 {
		t.Fatalf("cancel: %d %s", rep.status, rep.raw)
	}
	if rep := orderCall(t, base, "pay", held[payer].str("order_id"), payer, `{"result":"success"}`); rep.status != 202 {
		t.Fatalf("pay: %d %s", rep.status, rep.raw)
	}
	waitFor(t, 5*time.Second, "both settlements applied on shard 0", func() (bool, string) {
		sh := productStatus(t, base, product).Shards[0]
		if sh.Locked == nil {
			return false, "shard 0 did not answer"
		}
		return *sh.Locked == 0 && *sh.Sold == 1 && *sh.Salable == 2, fmt.Sprintf("salable %d locked %d sold %d", *sh.Salable, *sh.Locked, *sh.Sold)
	})
	if rep := purchase(t, base, product, canceller); rep.status == 200 {
		t.Fatalf("bought with the home down: %s", rep.raw)
	}
	r.Restart(2)
	waitFor(t, 15*time.Second, "the cancelled buyer buys again once the home is back", func() (bool, string) {
		rep := purchase(t, base, product, canceller)
		return rep.status == 200, fmt.Sprintf("%d %s", rep.status, rep.raw)
	})
}
