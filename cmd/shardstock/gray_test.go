package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/shardstock/shardstock"
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
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	upstream := strings.TrimSuffix(strings.TrimPrefix(r.URLs()[1], "redis://"), "/0")
	proxy := toxiproxy.NewProxy(srv, "shard1", "127.0.0.1:0", upstream)
	if err := proxy.Start(); err != nil {
		t.Fatal(err)
	}
	defer proxy.Stop()
	urls := append([]string{}, r.URLs()...)
	urls[1] = "redis://" + proxy.Listen + "/0"
	m := startServer(t, urls, func(c *Config) { c.SpoolDir = t.TempDir() })
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
