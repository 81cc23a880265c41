package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/config"
	"github.com/shardstock/shardstock/messaging"
	"github.com/shardstock/shardstock/shard"
	"github.com/shardstock/shardstock/shard/shardtest"
)

// TestForgedSettlementsChangeNothing (issue 25, item 1): whoever can write
// a settle stream (Redis Streams) or the settlements topic (RocketMQ) puts
// settlements there that the order table does not bear out: a release and a
// confirm of alice's order while it awaits payment, a release_duplicate on
// the shard that holds it, a release of an order that does not exist, and
// one naming another buyer. None moves her unit: bob is still told sold
// out, each is on the dead-letter stream or topic with its reason, and
// counted. Her own cancel, which the order service makes, then frees the
// unit and bob buys it.
func TestForgedSettlementsChangeNothing(t *testing.T) {
	for _, md := range modes {
		t.Run(md.name, func(t *testing.T) {
			r := shardtest.Start(t, 3)
			var mq string
			m := startServer(t, r.URLs(), md.opts(t), func(c *config.Config) { mq = c.MQ })
			base := m.URL()
			putProduct(t, base, "widget", `{"stock":1}`)
			alice := purchase(t, base, "widget", "alice")
			if alice.status != 200 {
				t.Fatalf("alice buys: %d %s", alice.status, alice.raw)
			}
			id, at := alice.str("order_id"), int(alice.body["shard"].(float64))
			waitFor(t, 60*time.Second, "alice's order written", func() (bool, string) {
				o, err := m.store.Orders.Order(context.Background(), id)
				return o != nil && o.Status == shardstock.StatusAwaitingPayment, fmt.Sprint(o, err)
			})
			forged := []shardstock.Settlement{
				{OrderID: id, ProductID: "widget", UserID: "alice", Shard: at, Action: shardstock.Release},
				{OrderID: id, ProductID: "widget", UserID: "alice", Shard: at, Action: shardstock.Confirm},
				{OrderID: id, ProductID: "widget", UserID: "alice", Shard: at, Action: shardstock.ReleaseDuplicate},
				{OrderID: "01NOSUCHORDER0000000000000", ProductID: "widget", UserID: "alice", Shard: at, Action: shardstock.Release},
				{OrderID: id, ProductID: "widget", UserID: "mallory", Shard: at, Action: shardstock.Release},
			}
			publish := streamsSettler(t, r, at)
			if mq != "streams" {
				publish = topicSettler(t, mq)
			}
			for _, st := range forged {
				publish(t, st)
			}
			waitFor(t, 60*time.Second, "every forged settlement refused", func() (bool, string) {
				v := metricValue(t, base, "shardstock_settlements_refused_total")
				return v == fmt.Sprint(len(forged)), v
			})
			if st := productStatus(t, base, "widget"); st.Totals.Locked != 1 || st.Totals.Salable != 0 || st.Totals.Sold != 0 {
				t.Fatalf("after the forged settlements: %+v, want alice's unit still locked", st.Totals)
			}
			if bob := purchase(t, base, "widget", "bob"); bob.status != 410 {
				t.Fatalf("bob buys while alice holds the only unit: %d %s, want 410", bob.status, bob.raw)
			}
			if mq == "streams" {
				dead, err := shardClient(r, at).XRange(context.Background(), shard.DeadSettleKey, "-", "+").Result()
				if err != nil || len(dead) != len(forged) {
					t.Fatalf("dead-letter stream of shard %d: %d entries (%v), want %d", at, len(dead), err, len(forged))
				}
				for _, e := range dead {
					if e.Values["reason"] == nil || e.Values["body"] == nil {
						t.Fatalf("dead-letter entry without its body or reason: %v", e.Values)
					}
				}
			}
			if rep := do(t, "POST", base+"/api/v1/orders/"+id+"/cancel", "", "X-User-ID", "alice"); rep.status/100 != 2 {
				t.Fatalf("alice cancels: %d %s", rep.status, rep.raw)
			}
			waitFor(t, 60*time.Second, "alice's cancel settled", func() (bool, string) {
				st := productStatus(t, base, "widget")
				return st.Totals.Salable == 1 && st.Totals.Locked == 0, fmt.Sprintf("%+v", st.Totals)
			})
			if bob := purchase(t, base, "widget", "bob"); bob.status != 200 {
				t.Fatalf("bob buys the unit alice's cancel freed: %d %s", bob.status, bob.raw)
			}
			if v := metricValue(t, base, "shardstock_settlements_refused_total"); v != fmt.Sprint(len(forged)) {
				t.Fatalf("refused settlements after alice's own cancel: %s, want %d", v, len(forged))
			}
		})
	}
}

func shardClient(r *shardtest.Redis, i int) *redis.Client {
	opt, _ := redis.ParseURL(r.URLs()[i])
	return redis.NewClient(opt)
}

// streamsSettler appends settlements to shard i's settle stream, as anyone
// who reaches the shard could.
func streamsSettler(t *testing.T, r *shardtest.Redis, i int) func(*testing.T, shardstock.Settlement) {
	c := shardClient(r, i)
	t.Cleanup(func() { c.Close() })
	return func(t *testing.T, st shardstock.Settlement) {
		t.Helper()
		if err := c.XAdd(context.Background(), &redis.XAddArgs{Stream: shard.SettleKey,
			Values: []any{"body", string(st.Encode())}}).Err(); err != nil {
			t.Fatalf("XADD a settlement: %v", err)
		}
	}
}

// topicSettler publishes settlements on the settlements topic, as anyone
// holding the coordinators' broker credentials could (the broker's ACL
// keeps out everyone else, the payment centre too: TestBrokerACL).
func topicSettler(t *testing.T, mq string) func(*testing.T, shardstock.Settlement) {
	r := rocketClient(t, mq, "test-forger")
	return func(t *testing.T, st shardstock.Settlement) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := r.Publish(ctx, messaging.TopicSettlements, st.OrderID, st.Encode()); err != nil {
			t.Fatalf("publish a settlement: %v", err)
		}
	}
}
