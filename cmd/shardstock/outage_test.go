package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/config"
	"github.com/shardstock/shardstock/messaging"
	"github.com/shardstock/shardstock/shard"
	"github.com/shardstock/shardstock/shard/shardtest"
	"github.com/shardstock/shardstock/sqlstore"
)

// exactlyOnce asserts that every order id the buyers were given has exactly
// one order row, and that there are no others.
func exactlyOnce(t *testing.T, m *Main, product string, orders map[string]string) {
	t.Helper()
	c := statusCounts(t, m, product)
	var total int64
	for _, n := range c {
		total += n
	}
	if total != int64(len(orders)) {
		t.Fatalf("%d order rows for %d reservations: %v", total, len(orders), c)
	}
	for id, user := range orders {
		o, err := m.store.Orders.Order(context.Background(), id)
		if err != nil || o == nil || o.UserID != user {
			t.Fatalf("order %s of %s: %+v %v", id, user, o, err)
		}
	}
}

// TestCoordinatorKilledBeforeRelaying: a coordinator process reserves, then
// is SIGKILLed while most of its reservations are still in the shard
// outboxes (its order rate is throttled) and some are read but not
// acknowledged; a new coordinator turns every one into exactly one order,
// claiming the dead one's pending entries.
func TestCoordinatorKilledBeforeRelaying(t *testing.T) {
	r := inMemory(t, 3)
	db := "sqlite:" + t.TempDir() + "/orders.db"
	addr := freeAddr(t)
	child := exec.Command(os.Args[0], "serve")
	child.Env = append(os.Environ(), "SHARDSTOCK_TEST_AS_MAIN=1", "SHARDSTOCK_HTTP_ADDR="+addr,
		"SHARDSTOCK_SHARDS="+strings.Join(r.URLs(), ","), "SHARDSTOCK_ADMIN_TOKEN="+testToken, "SHARDSTOCK_DEV=1",
		"SHARDSTOCK_DB="+db, "SHARDSTOCK_ORDER_RATE=20")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Process.Kill()
	base := "http://" + addr
	waitReady(t, base)
	putProduct(t, base, "crash", `{"stock":500}`)
	orders := buy(t, base, "crash", "c", 300)
	child.Process.Signal(syscall.SIGKILL)
	child.Wait()

	s, err := sqlstore.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := s.Orders.CountByStatus(context.Background(), "crash")
	s.Close()
	t.Logf("orders written before the kill: %v of %d", before, len(orders))
	if before[shardstock.StatusAwaitingPayment] >= int64(len(orders)) {
		t.Fatal("every order was written before the kill: the test proves nothing")
	}
	m := startServer(t, r.URLs(), func(c *config.Config) { c.DB = db; c.ClaimIdle = time.Second })
	waitFor(t, 60*time.Second, "every reservation becomes an order", func() (bool, string) {
		c := statusCounts(t, m, "crash")
		return c[shardstock.StatusAwaitingPayment] == int64(len(orders)), fmt.Sprint(c)
	})
	time.Sleep(2 * time.Second) // a late duplicate would show now
	exactlyOnce(t, m, "crash", orders)
}

// TestBrokerStoppedDuringSale: with the RocketMQ broker down, purchases
// keep succeeding (the outbox holds them); when it returns every
// reservation becomes exactly one order.
func TestBrokerStoppedDuringSale(t *testing.T) {
	mq, db := testRocketMQ(t), freshMySQL(t)
	r := shardtest.Start(t, 3)
	m := startServer(t, r.URLs(), func(c *config.Config) { c.MQ, c.DB = mq, db })
	base := m.URL()
	putProduct(t, base, "brk", `{"stock":1000}`)
	orders := buy(t, base, "brk", "early", 100)
	waitFor(t, 60*time.Second, "first orders", func() (bool, string) {
		c := statusCounts(t, m, "brk")
		return c[shardstock.StatusAwaitingPayment] == 100, fmt.Sprint(c)
	})
	runDeploy(t, "rocketmq.sh", "stop-broker")
	restarted := false
	defer func() {
		if !restarted {
			runDeploy(t, "rocketmq.sh", "start-broker")
		}
	}()
	for id, u := range buy(t, base, "brk", "during", 200) {
		orders[id] = u
	}
	runDeploy(t, "rocketmq.sh", "start-broker")
	restarted = true
	waitFor(t, 120*time.Second, "orders after the broker returned", func() (bool, string) {
		c := statusCounts(t, m, "brk")
		return c[shardstock.StatusAwaitingPayment] == 300, fmt.Sprint(c)
	})
	time.Sleep(2 * time.Second)
	exactlyOnce(t, m, "brk", orders)
}

// TestDatabaseStopped: with MariaDB down, purchases keep succeeding and the
// consumers wait; when it returns every reservation becomes exactly one
// order.
func TestDatabaseStopped(t *testing.T) {
	for _, md := range []mode{
		{"streams+mariadb", func(t *testing.T) func(*config.Config) {
			db := freshMySQL(t)
			return func(c *config.Config) { c.DB = db }
		}},
		modes[1],
	} {
		t.Run(md.name, func(t *testing.T) {
			r := shardtest.Start(t, 3)
			m := startServer(t, r.URLs(), md.opts(t))
			base := m.URL()
			putProduct(t, base, "dbx", `{"stock":1000}`)
			orders := buy(t, base, "dbx", "early", 50)
			waitFor(t, 60*time.Second, "first orders", func() (bool, string) {
				c := statusCounts(t, m, "dbx")
				return c[shardstock.StatusAwaitingPayment] == 50, fmt.Sprint(c)
			})
			runDeploy(t, "mariadb.sh", "stop")
			restarted := false
			defer func() {
				if !restarted {
					runDeploy(t, "mariadb.sh", "start")
				}
			}()
			for id, u := range buy(t, base, "dbx", "during", 100) {
				orders[id] = u
			}
			time.Sleep(time.Second) // the consumers are now retrying against a dead database
			runDeploy(t, "mariadb.sh", "start")
			restarted = true
			waitFor(t, 90*time.Second, "orders after the database returned", func() (bool, string) {
				c := statusCounts(t, m, "dbx")
				return c[shardstock.StatusAwaitingPayment] == 150, fmt.Sprint(c)
			})
			time.Sleep(time.Second)
			exactlyOnce(t, m, "dbx", orders)
		})
	}
}

// TestFailFast: a reservation older than the fail-fast age when consumed
// becomes a failed order, its unit is salable again and the buyer may buy.
func TestFailFast(t *testing.T) {
	r := inMemory(t, 3)
	clock := &offsetClock{}
	m := startServer(t, r.URLs(), func(c *config.Config) { c.Test.OrderClock = clock.now; c.FailFastAge = 30 * time.Minute })
	base := m.URL()
	putProduct(t, base, "ff", `{"stock":3}`)
	clock.advance(31 * time.Minute) // the order service now sees every reservation as 31 minutes old
	rep := purchase(t, base, "ff", "late")
	if rep.status != 200 {
		t.Fatalf("purchase: %d %s", rep.status, rep.raw)
	}
	id := rep.str("order_id")
	waitFor(t, 30*time.Second, "failed order and released unit", func() (bool, string) {
		o := do(t, "GET", base+"/api/v1/orders/"+id, "", "X-User-ID", "late")
		st := productStatus(t, base, "ff")
		return o.str("status") == string(shardstock.StatusFailed) && st.Totals.Salable == 3 && st.Totals.Locked == 0,
			fmt.Sprintf("order %s, shards %+v", o.raw, st.Totals)
	})
	clock.advance(-31 * time.Minute)
	waitFor(t, 10*time.Second, "the buyer buys again", func() (bool, string) {
		rep := purchase(t, base, "ff", "late")
		return rep.status == 200, rep.raw
	})
}

// TestPoisonEntryHoldsUpNothingElse: an outbox entry the order service can
// never process (its product is not in the catalog) stays pending and is
// retried, while every other reservation, in the same outbox and in other
// products', still becomes an order.
func TestPoisonEntryHoldsUpNothingElse(t *testing.T) {
	r := shardtest.Start(t, 3)
	m := startServer(t, r.URLs())
	base := m.URL()
	putProduct(t, base, "pa", `{"stock":100}`)
	putProduct(t, base, "pb", `{"stock":100}`)
	for i := range r.Ports {
		c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", r.Ports[i])})
		err := c.XAdd(context.Background(), &redis.XAddArgs{Stream: shard.OutboxKey("pa"), Values: []any{"res", fmt.Sprintf("ghost%d", i),
			"user", "g", "product", "ghost", "shard", fmt.Sprint(i), "at", fmt.Sprint(time.Now().UnixMilli())}}).Err()
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	a, b := buy(t, base, "pa", "a", 20), buy(t, base, "pb", "b", 20)
	waitFor(t, 30*time.Second, "orders of both products", func() (bool, string) {
		ca, cb := statusCounts(t, m, "pa"), statusCounts(t, m, "pb")
		return ca[shardstock.StatusAwaitingPayment] == 20 && cb[shardstock.StatusAwaitingPayment] == 20, fmt.Sprint(ca, cb)
	})
	exactlyOnce(t, m, "pa", a)
	exactlyOnce(t, m, "pb", b)
	if v := metricValue(t, base, `shardstock_stream_parked_entries_total{group="orders"}`); v != "3" {
		t.Fatalf("parked entries metric: %q, want 3 (one per shard)", v)
	}
	for i := range r.Ports {
		c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", r.Ports[i])})
		n, err := c.XPending(context.Background(), shard.OutboxKey("pa"), "orders").Result()
		c.Close()
		if err != nil || n.Count != 1 {
			t.Fatalf("shard %d: the poison entry is not kept pending: %+v %v", i, n, err)
		}
	}
}

// TestSpoolWhenNoShardAnswers: with every shard down, purchases are spooled
// to disk (202 with a ticket) up to the spool's bound and refused with 503
// past it, never 410; the spool survives a coordinator restart, and when the
// shards return every ticket is replayed into a reservation and an order.
func TestSpoolWhenNoShardAnswers(t *testing.T) {
	r := shardtest.Start(t, 3)
	db, spool := "sqlite:"+t.TempDir()+"/orders.db", t.TempDir()
	cfg := func(c *config.Config) { c.DB, c.SpoolDir, c.SpoolEntries, c.SpoolBytes = db, spool, 5, 1<<20 }
	m := startServer(t, r.URLs(), cfg)
	base := m.URL()
	putProduct(t, base, "spl", `{"stock":10}`)
	buy(t, base, "spl", "early", 2)
	for i := range r.Ports {
		r.Kill(i)
	}
	// Not ready while no shard can sell, and says why (issue 42, finding 1),
	// naming no host (the probe is public: the errors are the admin API's).
	waitFor(t, 10*time.Second, "/readyz 503 naming every shard", func() (bool, string) {
		rep := do(t, "GET", base+"/readyz", "")
		msg := rep.str("message")
		return rep.status == 503 && msg == "no shard can sell: shard 0 is down; shard 1 is down; shard 2 is down", fmt.Sprint(rep.status, " ", rep.raw)
	})
	tickets := map[string]string{} // ticket -> buyer
	for k := 0; k < 5; k++ {
		user := fmt.Sprintf("late%d", k)
		rep := purchase(t, base, "spl", user)
		if rep.status != 202 || rep.str("status") != "queued" || rep.str("ticket") == "" {
			t.Fatalf("purchase with no shard up: %d %s, want 202 queued", rep.status, rep.raw)
		}
		tickets[rep.str("ticket")] = user
		if tv := do(t, "GET", base+"/api/v1/tickets/"+rep.str("ticket"), "", "X-User-ID", user); tv.str("status") != "queued" {
			t.Fatalf("ticket: %d %s", tv.status, tv.raw)
		}
	}
	// One buyer waits in the spool for at most per_user_limit units (1).
	if rep := purchase(t, base, "spl", "late0"); rep.status != 409 || rep.str("error") != "limit_reached" {
		t.Fatalf("a second spooled purchase of one buyer (limit 1): %d %s, want 409 limit_reached", rep.status, rep.raw)
	}
	if rep := purchase(t, base, "spl", "one-too-many"); rep.status != 503 || rep.str("error") != "unavailable" {
		t.Fatalf("spool full: %d %s, want 503 unavailable", rep.status, rep.raw)
	}
	for tk := range tickets {
		if rep := do(t, "GET", base+"/api/v1/tickets/"+tk, "", "X-User-ID", "someone-else"); rep.status != 404 {
			t.Fatalf("another buyer reads a ticket: %d", rep.status)
		}
		break
	}
	m.Close() // the coordinator restarts while purchases wait in its spool
	for i := range r.Ports {
		r.Restart(i)
	}
	m2 := startServer(t, r.URLs(), cfg)
	orders := map[string]string{}
	waitFor(t, 30*time.Second, "every ticket replayed", func() (bool, string) {
		var states []string
		for tk, user := range tickets {
			tv := do(t, "GET", m2.URL()+"/api/v1/tickets/"+tk, "", "X-User-ID", user)
			states = append(states, tv.raw)
			if tv.str("status") != "reserved" || tv.str("order_id") == "" {
				return false, strings.Join(states, " ")
			}
			orders[tv.str("order_id")] = user
		}
		return true, ""
	})
	waitFor(t, 30*time.Second, "orders of the replayed tickets", func() (bool, string) {
		c := statusCounts(t, m2, "spl")
		return c[shardstock.StatusAwaitingPayment] == 7, fmt.Sprint(c)
	})
	for id, user := range orders {
		if o, err := m2.store.Orders.Order(context.Background(), id); err != nil || o == nil || o.UserID != user {
			t.Fatalf("order %s of %s: %+v %v", id, user, o, err)
		}
	}
	if st := productStatus(t, m2.URL(), "spl"); st.Totals.Locked != 7 || st.Totals.Salable != 3 {
		t.Fatalf("after replay: %+v", st.Totals)
	}
}

// TestSpooledPurchaseIsServedAfterTheWindowCloses: a purchase spooled while
// no shard answered, inside the sale window, is reserved when the shards
// return after the window has closed — the window is checked at the time the
// purchase arrived — while one arriving after the close gets 403 ended.
func TestSpooledPurchaseIsServedAfterTheWindowCloses(t *testing.T) {
	r := shardtest.Start(t, 3)
	spool := t.TempDir()
	m := startServer(t, r.URLs(), func(c *config.Config) { c.SpoolDir, c.SpoolEntries, c.SpoolBytes = spool, 10, 1<<20 })
	base := m.URL()
	ends := time.Now().Add(3 * time.Second).UTC().Truncate(time.Second)
	if rep := putProduct(t, base, "closing", fmt.Sprintf(`{"stock":5,"ends_at":%q}`, ends.Format(time.RFC3339))); rep.status != 201 {
		t.Fatalf("define: %d %s", rep.status, rep.raw)
	}
	for i := range r.Ports {
		r.Kill(i)
	}
	rep := purchase(t, base, "closing", "patient")
	if rep.status != 202 || rep.str("ticket") == "" {
		t.Fatalf("purchase with no shard up: %d %s, want 202 queued", rep.status, rep.raw)
	}
	ticket := rep.str("ticket")
	time.Sleep(time.Until(ends) + 200*time.Millisecond)
	if rep := purchase(t, base, "closing", "tardy"); rep.status != 403 || rep.str("error") != "ended" {
		t.Fatalf("purchase after the close: %d %s, want 403 ended", rep.status, rep.raw)
	}
	for i := range r.Ports {
		r.Restart(i)
	}
	waitFor(t, 30*time.Second, "the spooled purchase replayed", func() (bool, string) {
		tv := do(t, "GET", base+"/api/v1/tickets/"+ticket, "", "X-User-ID", "patient")
		return tv.str("status") == "reserved" && tv.str("order_id") != "", tv.raw
	})
	waitFor(t, 30*time.Second, "its order", func() (bool, string) {
		c := statusCounts(t, m, "closing")
		return c[shardstock.StatusAwaitingPayment] == 1, fmt.Sprint(c)
	})
	if st := productStatus(t, base, "closing"); st.Totals.Locked != 1 || st.Totals.Salable != 4 {
		t.Fatalf("after the replay: %+v, want 1 locked and 4 salable", st.Totals)
	}
}

// TestPoisonMessageGoesAloneToTheDeadLetterTopic (RocketMQ): a reservation
// the order service can never write (its product is not in the catalog),
// delivered in one call with valid ones, goes alone to the dead-letter
// topic; the valid ones after it are written at once, not after the
// broker's retry delays (issue: the order pipeline under partial outages,
// item 4).
func TestPoisonMessageGoesAloneToTheDeadLetterTopic(t *testing.T) {
	mq, db := testRocketMQ(t), freshMySQL(t)
	r := shardtest.Start(t, 3)
	m := startServer(t, r.URLs(), func(c *config.Config) { c.MQ, c.DB = mq, db })
	putProduct(t, m.URL(), "dl", `{"stock":10}`)
	rc, err := messaging.ParseRocketMQ(mq)
	if err != nil {
		t.Fatal(err)
	}
	rc.Instance = "poison-test"
	ctx := context.Background()
	bus, err := messaging.OpenRocketMQ(ctx, rc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bus.Close() })
	// A first reservation alone, to know the order consumer is pulling.
	warm := shardstock.ReservationEvent{ID: "v0", UserID: "u0", ProductID: "dl", AtMS: time.Now().UnixMilli()}
	if err := bus.Publish(ctx, messaging.TopicReservations, warm.ID, warm.Encode()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 90*time.Second, "the order consumer pulling", func() (bool, string) {
		c := statusCounts(t, m, "dl")
		return c[shardstock.StatusAwaitingPayment] == 1, fmt.Sprint(c)
	})
	var keys []string
	var bodies [][]byte
	for _, ev := range []shardstock.ReservationEvent{
		{ID: "v1", UserID: "u1", ProductID: "dl", AtMS: time.Now().UnixMilli()},
		{ID: "v2", UserID: "u2", ProductID: "dl", AtMS: time.Now().UnixMilli()},
		{ID: "x1", UserID: "u9", ProductID: "ghost", AtMS: time.Now().UnixMilli()},
		{ID: "v3", UserID: "u3", ProductID: "dl", AtMS: time.Now().UnixMilli()},
		{ID: "v4", UserID: "u4", ProductID: "dl", AtMS: time.Now().UnixMilli()},
	} {
		keys, bodies = append(keys, ev.ID), append(bodies, ev.Encode())
	}
	if err := bus.PublishBatch(ctx, messaging.TopicReservations, keys, bodies); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 8*time.Second, "the valid reservations written (the broker's first retry is 10 s away)", func() (bool, string) {
		c := statusCounts(t, m, "dl")
		return c[shardstock.StatusAwaitingPayment] == 5, fmt.Sprint(c)
	})
	// The poison went to the dead-letter topic (the broker took it: the
	// publish succeeded). No consumer is started here: a process whose
	// RocketMQ client has a consumer and a producer races in the client's
	// own shutdown.
	waitFor(t, 10*time.Second, "the poison message dead-lettered", func() (bool, string) {
		v := metricValue(t, m.URL(), "shardstock_reservations_dead_lettered_total")
		return v == "1", v
	})
	if o, _ := m.store.Orders.Order(ctx, "x1"); o != nil {
		t.Fatalf("the poison message became an order: %+v", o)
	}
}

// TestBuyerWhoHungUpIsNotSpooled (issue: crash-consistent shards, item 5):
// a buyer whose home shard is frozen gives up before the per-call deadline
// and closes the connection. Nobody would receive a ticket, so the purchase
// is not spooled (and not replayed into a unit held for nobody); a buyer
// who waits gets the ticket.
func TestBuyerWhoHungUpIsNotSpooled(t *testing.T) {
	r := shardtest.Start(t, 3)
	m := startServer(t, r.URLs(), func(c *config.Config) { c.SpoolDir, c.ShardTimeout = t.TempDir(), time.Second })
	base := m.URL()
	putProduct(t, base, "hang", `{"stock":30}`)
	homedAt := func(prefix string, i int) string {
		for k := 0; ; k++ {
			if u := fmt.Sprintf("%s%d", prefix, k); m.set.Purchases.Home(u) == i {
				return u
			}
		}
	}
	r.Freeze(1)
	defer r.Thaw(1)
	impatient := &http.Client{Timeout: 200 * time.Millisecond}
	req, _ := http.NewRequest("POST", base+"/api/v1/products/hang/purchase", nil)
	req.Header.Set("X-User-ID", homedAt("gone", 1))
	if resp, err := impatient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the frozen home answered within 200 ms: %d", resp.StatusCode)
	}
	time.Sleep(1500 * time.Millisecond) // past the per-call deadline: the purchase has ended
	if d := m.spool.Depth(); d != 0 {
		t.Fatalf("%d purchases spooled for a buyer who hung up", d)
	}
	if rep := purchase(t, base, "hang", homedAt("patient", 1)); rep.status != 202 || rep.str("ticket") == "" {
		t.Fatalf("a buyer who waits: %d %s, want 202 with a ticket", rep.status, rep.raw)
	}
	if d := m.spool.Depth(); d != 1 {
		t.Fatalf("spool depth %d, want 1 (the buyer who waited)", d)
	}
}

// TestShardAtMaxMemory (issue 14, item 2): a shard at its maxmemory
// (noeviction) is reported before and while it refuses writes
// (shardstock_shard_memory_bytes), purchases are never answered sold out
// because of it, and releases still get through, so it frees units itself.
func TestShardAtMaxMemory(t *testing.T) {
	r := shardtest.Start(t, 1)
	m := startServer(t, r.URLs(), func(c *config.Config) { c.SpoolDir = "" })
	base := m.URL()
	putProduct(t, base, "mem", `{"stock":20}`)
	orders := buy(t, base, "mem", "early", 5)
	waitFor(t, 20*time.Second, "orders", func() (bool, string) {
		c := statusCounts(t, m, "mem")
		return c[shardstock.StatusAwaitingPayment] == 5, fmt.Sprint(c)
	})
	opt, _ := redis.ParseURL(r.URLs()[0])
	c := redis.NewClient(opt)
	defer c.Close()
	ctx := context.Background()
	c.ConfigSet(ctx, "maxmemory", "1") // everything is over the limit now
	defer c.ConfigSet(ctx, "maxmemory", "0")
	waitFor(t, 10*time.Second, "the memory reported", func() (bool, string) {
		used := metricValue(t, base, `shardstock_shard_memory_bytes{kind="used",shard="0"}`)
		max := metricValue(t, base, `shardstock_shard_memory_bytes{kind="max",shard="0"}`)
		return max == "1" && used != "" && used != "0", used + " / " + max
	})
	rep := purchase(t, base, "mem", "late")
	if rep.status == 200 || rep.status == 410 {
		t.Fatalf("a purchase on a shard at maxmemory: %d %s (a full shard is not sold out, and takes no hold)", rep.status, rep.raw)
	}
	for id, user := range orders {
		if rep := do(t, "POST", base+"/api/v1/orders/"+id+"/cancel", "", "X-User-ID", user); rep.status != 202 {
			t.Fatalf("cancel: %d %s", rep.status, rep.raw)
		}
		break
	}
	waitFor(t, 20*time.Second, "the release applied at maxmemory", func() (bool, string) {
		st := productStatus(t, base, "mem")
		return st.Totals.Salable == 16 && st.Totals.Locked == 4, fmt.Sprint(st.Totals)
	})
}

// TestAdmissionControl (issue 14, item 3): with its purchases in flight at
// the bound (here 2, held by frozen shards), a coordinator answers the
// next purchase 503 with Retry-After within its queue budget, before it
// touches Redis: not spooled, not sold out, and without waiting on a shard.
func TestAdmissionControl(t *testing.T) {
	r := shardtest.Start(t, 3)
	m := startServer(t, r.URLs(), func(c *config.Config) { c.MaxInFlight, c.ShardTimeout = 2, 2*time.Second })
	base := m.URL()
	putProduct(t, base, "adm", `{"stock":100}`)
	for i := range r.Ports {
		r.Freeze(i)
	}
	defer func() {
		for i := range r.Ports {
			r.Thaw(i)
		}
	}()
	var wg sync.WaitGroup
	for k := range 2 { // these two wait on the frozen shards
		wg.Go(func() { purchase(t, base, "adm", fmt.Sprintf("held%d", k)) })
	}
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	rep := doRaw(t, "POST", base+"/api/v1/products/adm/purchase", "X-User-ID", "third")
	took := time.Since(start)
	if rep.status != 503 || rep.header.Get("Retry-After") == "" || !strings.Contains(rep.raw, "in flight") {
		t.Fatalf("a purchase past the bound: %d %s (Retry-After %q)", rep.status, rep.raw, rep.header.Get("Retry-After"))
	}
	if took > time.Second {
		t.Fatalf("the refusal took %s: it waited on the shards, not on the queue budget", took)
	}
	for i := range r.Ports {
		r.Thaw(i)
	}
	wg.Wait()
	if rep := purchase(t, base, "adm", "fourth"); rep.status != 200 {
		t.Fatalf("a purchase once the bound has room: %d %s", rep.status, rep.raw)
	}
}
