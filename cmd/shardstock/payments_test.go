package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardstock/shardstock"
	"github.com/shardstock/shardstock/config"
	"github.com/shardstock/shardstock/messaging"
	"github.com/shardstock/shardstock/order"
	"github.com/shardstock/shardstock/shard"
	"github.com/shardstock/shardstock/shard/shardtest"
)

// paymentCentre publishes signed payment results the way a payment centre
// would: on the payments topic, or on a shard's payments stream.
type paymentCentre struct {
	secret  []byte
	publish func(t *testing.T, n int, body []byte, sig string) // n picks the shard in streams mode
}

func (p paymentCentre) send(t *testing.T, n int, id, result string, amount int64, txn string) {
	t.Helper()
	body := fmt.Appendf(nil, `{"result":%q,"order_id":%q,"amount_cents":%d,"transaction_id":%q,"timestamp":%d}`,
		result, id, amount, txn, time.Now().Unix())
	p.publish(t, n, body, order.SignPayment(p.secret, body))
}

// streamsCentre publishes on the payments streams of the masters at urls.
func streamsCentre(urls []string, secret []byte) paymentCentre {
	return paymentCentre{secret: secret, publish: func(t *testing.T, n int, body []byte, sig string) {
		t.Helper()
		opt, _ := redis.ParseURL(urls[n%len(urls)])
		c := redis.NewClient(opt)
		defer c.Close()
		if err := c.XAdd(context.Background(), &redis.XAddArgs{Stream: shard.PaymentsKey,
			Values: []any{"body", string(body), "signature", sig}}).Err(); err != nil {
			t.Fatalf("XADD a payment result: %v", err)
		}
	}}
}

// rocketClient is a RocketMQ client of the test's own on the broker at mq
// (who: its instance name), closed when the test ends.
func rocketClient(t *testing.T, mq, who string) *messaging.RocketMQ {
	rc, err := messaging.ParseRocketMQ(mq)
	if err != nil {
		t.Fatal(err)
	}
	rc.Instance = who + "-" + messaging.ConsumerName()
	r, err := messaging.OpenRocketMQ(context.Background(), rc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func rocketCentre(t *testing.T, mq string, secret []byte) paymentCentre {
	r := rocketClient(t, mq, "test-payment-centre")
	return paymentCentre{secret: secret, publish: func(t *testing.T, _ int, body []byte, sig string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// The first sends after a broker restart may fail while the
		// producer finds the broker again: a payment centre retries.
		var err error
		for ctx.Err() == nil {
			if err = r.PublishMessage(ctx, messaging.TopicPayments, "pay",
				messaging.Message{Body: body, Properties: map[string]string{messaging.PropSignature: sig}}); err == nil {
				return
			}
			time.Sleep(500 * time.Millisecond)
		}
		t.Fatalf("publish a payment result: %v", err)
	}}
}

// TestPaymentResultsAsMessages (issue 12, item 1): payment results
// published on the queue — a RocketMQ topic, or a Redis stream on the
// shards — are applied like the callback, with the same checks: duplicates
// pay once, a stale fail after the success changes nothing, a result that
// overtakes its reservation is applied once the order exists, poison goes
// to the dead-letter topic or stream with the good results after it still
// applied, and results published after the broker (or the shard holding
// the stream) restarted are applied too. Every paid unit ends sold on its
// shard, exactly once.
func TestPaymentResultsAsMessages(t *testing.T) {
	secret := []byte(strings.Repeat("p", 32))
	for _, md := range modes {
		t.Run(md.name, func(t *testing.T) {
			r := shardtest.Start(t, 3)
			opts := md.opts(t)
			var mq string
			m := startServer(t, r.URLs(), opts, func(c *config.Config) { c.PaySecret = secret; mq = c.MQ })
			base := m.URL()
			putProduct(t, base, "pm", `{"stock":30,"price_cents":990}`)
			centre := streamsCentre(r.URLs(), secret)
			restart := func() { r.Kill(0); r.Restart(0) }
			if mq != "streams" {
				centre = rocketCentre(t, mq, secret)
				restart = func() {
					runDeploy(t, "rocketmq.sh", "stop-broker")
					runDeploy(t, "rocketmq.sh", "start-broker")
				}
			}
			// Paid at once, before the order row is likely written: the
			// result may overtake its reservation.
			early := purchase(t, base, "pm", "early")
			if early.status != 200 {
				t.Fatalf("purchase: %d %s", early.status, early.raw)
			}
			centre.send(t, 0, early.str("order_id"), "success", 990, "txn-early")

			orders := buy(t, base, "pm", "buyer", 5)
			ids := make([]string, 0, len(orders))
			for id := range orders {
				ids = append(ids, id)
			}
			a, b, c, d, e := ids[0], ids[1], ids[2], ids[3], ids[4]
			waitFor(t, 60*time.Second, "orders", func() (bool, string) {
				n := statusCounts(t, m, "pm")
				return n[shardstock.StatusAwaitingPayment]+n[shardstock.StatusPaid] == 6, fmt.Sprint(n)
			})
			for n := range 3 { // the same result three times (on three shards' streams)
				centre.send(t, n, a, "success", 990, "txn-a")
			}
			centre.send(t, 1, b, "success", 990, "txn-b2")
			waitFor(t, 60*time.Second, "b paid", func() (bool, string) {
				o, _ := m.store.Orders.Order(context.Background(), b)
				return o != nil && o.Status == shardstock.StatusPaid, fmt.Sprint(o)
			})
			centre.send(t, 1, b, "fail", 990, "txn-b1") // an earlier attempt's, overtaken by the success
			// Poison, then good results behind it.
			centre.publish(t, 2, []byte("not json"), order.SignPayment(secret, []byte("not json")))
			centre.send(t, 2, c, "success", 1, "txn-c-cheap")
			forged := fmt.Appendf(nil, `{"result":"success","order_id":%q,"amount_cents":990,"transaction_id":"txn-f","timestamp":1}`, c)
			centre.publish(t, 2, forged, "sha256=00")
			centre.send(t, 2, e, "fail", 990, "txn-e")
			centre.send(t, 0, d, "success", 990, "txn-d0")
			waitFor(t, 60*time.Second, "results before the restart", func() (bool, string) {
				n := statusCounts(t, m, "pm")
				return n[shardstock.StatusPaid] == 4 && n[shardstock.StatusCancelled] == 1, fmt.Sprint(n)
			})
			restart()
			centre.send(t, 0, c, "success", 990, "txn-c")
			centre.send(t, 0, d, "success", 990, "txn-d0") // a redelivery after the restart
			waitFor(t, 120*time.Second, "results after the restart", func() (bool, string) {
				n := statusCounts(t, m, "pm")
				return n[shardstock.StatusPaid] == 5 && n[shardstock.StatusCancelled] == 1, fmt.Sprint(n)
			})
			want := map[string]shardstock.OrderStatus{early.str("order_id"): "paid", a: "paid", b: "paid", c: "paid", d: "paid", e: "cancelled"}
			for id, st := range want {
				o, err := m.store.Orders.Order(context.Background(), id)
				if err != nil || o == nil || o.Status != st {
					t.Fatalf("order %s: %+v %v, want %s", id, o, err, st)
				}
			}
			waitFor(t, 60*time.Second, "paid units sold, the cancelled one salable", func() (bool, string) {
				st := productStatus(t, base, "pm")
				return st.Totals.Sold == 5 && st.Totals.Locked == 0 && st.Totals.Salable == 25, fmt.Sprintf("%+v", st.Totals)
			})
			if v := metricValue(t, base, `shardstock_payment_messages_total{outcome="dead_lettered"}`); v != "3" {
				t.Fatalf("dead-lettered payment messages: %q, want 3 (not json, another amount, a forged signature)", v)
			}
			if mq == "streams" {
				var dead int64
				for _, u := range r.URLs() {
					opt, _ := redis.ParseURL(u)
					c := redis.NewClient(opt)
					n, _ := c.XLen(context.Background(), shard.DeadPaymentsKey).Result()
					c.Close()
					dead += n
				}
				if dead != 3 {
					t.Fatalf("%d entries on the dead-letter streams, want 3", dead)
				}
			}
			t.Logf("payment messages: applied %s, duplicate %s, stale %s, retried %s",
				metricValue(t, base, `shardstock_payment_messages_total{outcome="applied"}`),
				metricValue(t, base, `shardstock_payment_messages_total{outcome="duplicate"}`),
				metricValue(t, base, `shardstock_payment_messages_total{outcome="stale"}`),
				metricValue(t, base, `shardstock_payment_messages_total{outcome="retried"}`))
		})
	}
}
