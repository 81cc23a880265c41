package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/config"
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
	m := startServer(t, r.URLs(), func(c *config.Config) { c.PaySecret = secret })
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
		_, unsettled, err := m.store.Orders.OpenOrders(context.Background(), "locked")
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

// TestAShardThatRefusesTheCoordinatorIsAStartUpError (issue 42, finding
// 1): a shard URL without the password the master wants, or with a wrong
// one, stopped nothing: the coordinator served, /readyz said ready while
// every shard answered NOAUTH, and purchases were queued. It is a
// settings mistake, refused at start with the setting and the shard named.
func TestAShardThatRefusesTheCoordinatorIsAStartUpError(t *testing.T) {
	const user = "coordinator:refused-at-start-pw"
	r := shardtest.StartWith(t, 2, shardtest.Options{ACLUser: user})
	good := r.URLs()
	for _, tc := range []struct{ name, url, want string }{
		{"no password", strings.Replace(good[1], user+"@", "", 1), "NOAUTH"},
		{"a wrong password", strings.Replace(good[1], "-pw@", "-wrong@", 1), "WRONGPASS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &config.Config{HTTPAddr: "127.0.0.1:0", Shards: []string{good[0], tc.url}, AdminToken: testToken, UserAuth: "header",
				ShardTimeout: 250 * time.Millisecond, LogFormat: "text", MQ: "streams", DB: "sqlite:" + t.TempDir() + "/orders.db",
				PayTimeout: 15 * time.Minute, FailFastAge: 30 * time.Minute, OrderRate: 100000, ClaimIdle: 30 * time.Second}
			m := NewMain(cfg, testLog(t))
			err := m.Run(context.Background())
			m.Close()
			if err == nil || !strings.Contains(err.Error(), "SHARDSTOCK_SHARDS: shard 1 (") || !strings.Contains(err.Error(), tc.want) ||
				strings.Contains(err.Error(), "shard 0") {
				t.Fatalf("start with shard 1's URL %q: %v; want a start-up error naming SHARDSTOCK_SHARDS, shard 1 alone and %s", tc.url, err, tc.want)
			}
			t.Logf("refused: %v", err)
		})
	}
	r.ForgetRefusals() // (the refusals were the point)
}
