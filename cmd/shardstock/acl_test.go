package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/shard/shardtest"
)

// TestRedisUsersRunASale (issue 25, item 1): a whole sale on masters locked
// down as deploy/redis.sh starts them by default, the coordinators logged in
// as their ACL user and the payment centre as its own: purchases, payment
// results on the payments streams, a pay-fail and a cancellation, stock
// added and removed, a rebalance, a shard's crash and restart (resync),
// the end and the archive. Every unit is accounted for on every shard, and
// no master refused a command for want of permission (its ACL LOG, which
// shardtest reads when the test ends).
func TestRedisUsersRunASale(t *testing.T) {
	r := shardtest.StartWith(t, 3, shardtest.Options{ACLUser: "coordinator:acl-run-a-sale-pw"})
	secret := []byte(strings.Repeat("p", 32))
	m := startServer(t, r.URLs(), func(c *Config) { c.PaySecret = secret })
	base := m.URL()
	putProduct(t, base, "locked", fmt.Sprintf(`{"stock":20,"price_cents":990,"ends_at":%q}`, time.Now().Add(time.Hour).UTC().Format(time.RFC3339)))
	orders := buy(t, base, "locked", "lb", 8)
	waitFor(t, 30*time.Second, "orders", func() (bool, string) {
		c := statusCounts(t, m, "locked")
		return c[shardstock.StatusAwaitingPayment] == 8, fmt.Sprint(c)
	})
	ids := make([]string, 0, len(orders))
	for id := range orders {
		ids = append(ids, id)
	}
	centre := streamsCentre(r.URLsAs("payments"), secret)
	for n, id := range ids[:5] {
		centre.send(t, n, id, "success", 990, "txn-"+id)
	}
	centre.send(t, 0, ids[5], "fail", 990, "txn-"+ids[5])
	if rep := do(t, "POST", base+"/api/v1/orders/"+ids[6]+"/cancel", "", "X-User-ID", orders[ids[6]]); rep.status != 202 {
		t.Fatalf("cancel: %d %s", rep.status, rep.raw)
	}
	for _, body := range []string{`{"add":6}`, `{"remove":3}`} {
		if rep := adminDo(t, "POST", base+"/admin/v1/products/locked/stock", body); rep.status != 200 {
			t.Fatalf("stock %s: %d %s", body, rep.status, rep.raw)
		}
	}
	if rep := adminDo(t, "POST", base+"/admin/v1/products/locked/rebalance", ""); rep.status != 200 {
		t.Fatalf("rebalance: %d %s", rep.status, rep.raw)
	}
	r.Kill(1)
	r.Restart(1)
	later := buy(t, base, "locked", "lc", 2)
	waitFor(t, 30*time.Second, "the later orders", func() (bool, string) {
		c := statusCounts(t, m, "locked")
		return c[shardstock.StatusAwaitingPayment] == 3, fmt.Sprint(c)
	})
	later[ids[7]] = orders[ids[7]]
	n := 0
	for id := range later {
		centre.send(t, n, id, "success", 990, "txn-"+id)
		n++
	}
	// Settled: 8 paid, 2 released; stock 20 + 6 - 3.
	waitFor(t, 30*time.Second, "settled", func() (bool, string) {
		st := productStatus(t, base, "locked")
		c := statusCounts(t, m, "locked")
		_, unsettled, err := m.store.OpenOrders(context.Background(), "locked")
		ok := err == nil && unsettled == 0 && st.Totals.Sold == 8 && st.Totals.Locked == 0 && st.Totals.Salable+st.Totals.Sold == 23 &&
			c[shardstock.StatusPaid] == 8
		return ok, fmt.Sprint(st.Totals, c, " unsettled in SQL: ", unsettled, err)
	})
	checkShards(t, productStatus(t, base, "locked"))
	adminDo(t, "PATCH", base+"/admin/v1/products/locked", fmt.Sprintf(`{"ends_at":%q}`, time.Now().UTC().Format(time.RFC3339Nano)))
	if rep := adminDo(t, "POST", base+"/admin/v1/products/locked/archive", ""); rep.status != 200 || rep.body["archived"] != true {
		t.Fatalf("archive: %d %s", rep.status, rep.raw)
	}
}
