package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/config"
	"github.com/shardstock/shardstock/shard/shardtest"
)

// TestSlowShardThroughToxiproxy (issue 14, item 2): Toxiproxy, a real
// fault-injecting proxy, adds 300 ms to every answer of shard 1 of 3 (more
// than a call may take). The shard leaves rotation and the shard view says
// why; no buyer is told "sold out" while the product has units, nothing is
// sold twice, and every buyer whose purchase was queued is served once the
// fault is gone, each reservation an order exactly once.
func TestSlowShardThroughToxiproxy(t *testing.T) {
	r := shardtest.Start(t, 3)
	proxy, urls := r.BehindToxiproxy(t, 1)
	m := startServer(t, urls, func(c *config.Config) { c.SpoolDir = t.TempDir() })
	base := m.URL()
	putProduct(t, base, "gray", `{"stock":3000,"per_user_limit":1}`)
	if _, err := proxy.Toxics.AddToxicJson(strings.NewReader(`{"name":"slow","type":"latency","stream":"downstream","attributes":{"latency":300}}`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "shard 1 out of rotation, saying why", func() (bool, string) {
		rep := adminDo(t, "GET", base+"/admin/v1/shards", "")
		return strings.Contains(rep.raw, `"breaker":"open"`) && (strings.Contains(rep.raw, "slow") || strings.Contains(rep.raw, "deadline") || strings.Contains(rep.raw, "timeout")), rep.raw
	})
	var mu sync.Mutex
	statuses := map[int]int{}
	tickets := map[string]string{}
	var wg sync.WaitGroup
	start := time.Now()
	for w := range 16 {
		wg.Go(func() {
			for k := range 25 {
				user := fmt.Sprintf("g%d-%d", w, k)
				rep := purchase(t, base, "gray", user)
				mu.Lock()
				statuses[rep.status]++
				if rep.status == 202 {
					tickets[rep.str("ticket")] = user
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	t.Logf("400 purchases with shard 1 slow, in %s: %v", time.Since(start).Round(time.Millisecond), statuses)
	if statuses[410] > 0 || statuses[500] > 0 || statuses[200] < 200 {
		t.Fatalf("answers with one slow shard: %v (no sold out, no 500, most served at once)", statuses)
	}
	if err := proxy.Toxics.RemoveToxic(context.Background(), "slow"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "every queued purchase served once the fault is gone", func() (bool, string) {
		for tk, user := range tickets {
			if tv := do(t, "GET", base+"/api/v1/tickets/"+tk, "", "X-User-ID", user); tv.str("status") != "reserved" {
				return false, tv.raw
			}
		}
		return true, ""
	})
	reserved := int64(statuses[200] + len(tickets))
	waitFor(t, 60*time.Second, "each reservation an order exactly once", func() (bool, string) {
		c := statusCounts(t, m, "gray")
		st := productStatus(t, base, "gray")
		return c[shardstock.StatusAwaitingPayment] == reserved && st.Totals.Locked == reserved, fmt.Sprint(c, st.Totals)
	})
	checkShards(t, productStatus(t, base, "gray"))
}

// TestGrayFaultsThroughToxiproxy (issue 14): one shard of three behind
// Toxiproxy, a real fault-injecting proxy, during a race of 1,200 buyers
// over 32 connections, for 1,500 units (none told "sold out" may be right)
// or for 300 (the race sells out). Each fault below is on from the start
// of the race and taken away after 2 s, or at its end. Whatever the fault, every buyer's final answer — 200, or the
// ticket of a 202 once decided — is the truth: each order row belongs to
// a buyer told "reserved" with that order id, no buyer told anything else
// holds one, the units locked are exactly the buyers told "reserved", and
// "sold out" is said only once every unit is held. Conservation holds on
// every shard. The answers and the throughput are logged (docs/TESTING.md's
// table of gray failures comes from a run without the race detector).
func TestGrayFaultsThroughToxiproxy(t *testing.T) {
	late := `{"name":"f","type":"latency","stream":"downstream","attributes":{"latency":300}}`
	cases := []struct {
		name, toxic string
		lasts       time.Duration // 0: the whole race
		stock       int
	}{
		{name: "no fault", stock: 1500},
		{name: "answers 50 ms past the deadline", toxic: late, stock: 1500},
		{name: "answers 50 ms past the deadline, sold out", toxic: late, stock: 300},
		{name: "200 ms latency", lasts: 2 * time.Second, stock: 1500,
			toxic: `{"name":"f","type":"latency","stream":"downstream","attributes":{"latency":200}}`},
		{name: "black hole", lasts: 2 * time.Second, stock: 1500,
			toxic: `{"name":"f","type":"timeout","stream":"upstream","attributes":{"timeout":0}}`},
		{name: "connection resets", lasts: 2 * time.Second, stock: 1500,
			toxic: `{"name":"f","type":"reset_peer","stream":"upstream","attributes":{"timeout":0}}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := shardtest.Start(t, 3)
			proxy, urls := r.BehindToxiproxy(t, 1)
			m := startServer(t, urls, func(c *config.Config) { c.SpoolDir = t.TempDir() })
			g := grayRace{t: t, m: m, stock: tc.stock, buyers: 1200, conns: 32}
			putProduct(t, m.URL(), "gray", fmt.Sprintf(`{"stock":%d,"per_user_limit":1}`, g.stock))
			if tc.toxic != "" {
				if _, err := proxy.Toxics.AddToxicJson(strings.NewReader(tc.toxic)); err != nil {
					t.Fatal(err)
				}
				remove := func() { proxy.Toxics.RemoveToxic(context.Background(), "f") }
				if tc.lasts > 0 {
					defer time.AfterFunc(tc.lasts, remove).Stop()
				} else {
					g.after = remove
				}
			}
			g.run()
		})
	}
}

// grayRace is one race of distinct buyers for one product, and the check
// that every answer they end with is true.
type grayRace struct {
	t                    *testing.T
	m                    *Main
	stock, buyers, conns int
	after                func() // run when the last buyer was answered
}

func (g *grayRace) run() {
	t, base := g.t, g.m.URL()
	var mu sync.Mutex
	answers := map[string]string{} // user -> "200", "202" or the error code
	orders := map[string]string{}  // order id -> user, for every "reserved"
	tickets := map[string]string{} // ticket -> user
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range g.conns {
		wg.Go(func() {
			for j := range jobs {
				user := fmt.Sprintf("gray%d", j)
				rep := purchase(t, base, "gray", user)
				mu.Lock()
				switch rep.status {
				case 200:
					answers[user], orders[rep.str("order_id")] = "200", user
				case 202:
					answers[user], tickets[rep.str("ticket")] = "202", user
				default:
					answers[user] = rep.str("error")
				}
				mu.Unlock()
			}
		})
	}
	start := time.Now()
	for j := range g.buyers {
		jobs <- j
	}
	close(jobs)
	wg.Wait()
	took := time.Since(start)
	if g.after != nil {
		g.after()
	}
	waitFor(t, 90*time.Second, "every ticket decided once the fault is gone", func() (bool, string) {
		for tk, user := range tickets {
			if tv := do(t, "GET", base+"/api/v1/tickets/"+tk, "", "X-User-ID", user); tv.str("status") == "queued" {
				return false, tv.raw
			}
		}
		return true, ""
	})
	final := map[string]int{}
	for tk, user := range tickets {
		tv := do(t, "GET", base+"/api/v1/tickets/"+tk, "", "X-User-ID", user)
		if tv.str("status") == "reserved" {
			orders[tv.str("order_id")] = user
			answers[user] = "202 then reserved"
		} else {
			answers[user] = "202 then " + tv.str("error")
		}
	}
	for _, a := range answers {
		final[a]++
	}
	t.Logf("%d buyers in %s (%.0f req/s), %d queued (%.0f%%); final answers %v",
		g.buyers, took.Round(time.Millisecond), float64(g.buyers)/took.Seconds(), len(tickets),
		100*float64(len(tickets))/float64(g.buyers), final)
	for a, n := range final {
		switch a {
		case "200", "202 then reserved", "sold_out", "202 then sold_out", "unavailable":
		default:
			t.Errorf("%d buyers answered %q", n, a)
		}
	}
	waitFor(t, 60*time.Second, "each reservation an order", func() (bool, string) {
		c := statusCounts(t, g.m, "gray")
		return c[shardstock.StatusAwaitingPayment] >= int64(len(orders)), fmt.Sprint(c, len(orders))
	})
	exactlyOnce(t, g.m, "gray", orders) // no order a buyer was not told of
	_, locked, _ := checkShards(t, productStatus(t, base, "gray"))
	if locked != int64(len(orders)) {
		t.Fatalf("%d units locked for %d buyers told reserved", locked, len(orders))
	}
	if g.stock >= g.buyers && len(orders) != g.buyers {
		t.Fatalf("%d of %d buyers reserved, with units for all", len(orders), g.buyers)
	}
	if soldOut := final["sold_out"] + final["202 then sold_out"]; soldOut > 0 && locked != int64(g.stock) {
		t.Fatalf("%d buyers told sold out while only %d of %d units are held", soldOut, locked, g.stock)
	}
}

// The sale report records catalog products only: purchases of a made-up id
// (answered from the catalog's negative cache) leave no row, so the table
// stays bounded by the catalog.
func TestSaleReportRecordsCatalogProductsOnly(t *testing.T) {
	r := inMemory(t, 3)
	m := startServer(t, r.URLs())
	base := m.URL()
	putProduct(t, base, "real", `{"stock":5}`)
	for i := range 3 {
		purchase(t, base, "real", fmt.Sprintf("u%d", i))
		if rep := purchase(t, base, "made-up", fmt.Sprintf("u%d", i)); rep.status != 404 {
			t.Fatalf("made-up product: %d", rep.status)
		}
	}
	db := openDB(t, m.cfg.DB, nil)
	waitFor(t, 10*time.Second, "the real product's seconds written", func() (bool, string) {
		rows, err := db.Query(context.Background(), `SELECT COUNT(*) FROM sale_seconds WHERE product_id = 'real' AND kind = 'outcome'`)
		return err == nil && len(rows) == 1 && rows[0][0] != "0", fmt.Sprint(rows, err)
	})
	rows, err := db.Query(context.Background(), `SELECT COUNT(*) FROM sale_seconds WHERE product_id = 'made-up'`)
	if err != nil || rows[0][0] != "0" {
		t.Fatalf("rows for a made-up product: %v %v", rows, err)
	}
}
