package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardstock/shardstock/flashsale"
	"github.com/shardstock/shardstock/shard/shardtest"
)

// TestNginxEdge sends traffic through a real nginx (Debian's, with the Lua
// module) in front of two coordinators: the edge enforces the product limit
// the coordinators publish, purchases under it still work, a coordinator
// that stops is skipped, and with none left the answer is 503 unavailable.
func TestNginxEdge(t *testing.T) {
	r := shardtest.Start(t, 3)
	db := "sqlite:" + t.TempDir() + "/orders.db"
	cfg := func(c *Config) { c.DB, c.Limits = db, flashsale.Limits{Product: 10, User: 100} }
	a, b := startServer(t, r.URLs(), cfg), startServer(t, r.URLs(), cfg)
	putProduct(t, a.URL(), "edge", `{"stock":1000,"per_user_limit":1}`)
	dir, port := t.TempDir(), strings.Split(freeAddr(t), ":")[1]
	ups := strings.TrimPrefix(a.URL(), "http://") + "," + strings.TrimPrefix(b.URL(), "http://")
	runDeploy(t, "nginx.sh", "start", "--port", port, "--upstreams", ups, "--dir", dir)
	t.Cleanup(func() { runDeploy(t, "nginx.sh", "stop", "--dir", dir) })
	edge := "http://127.0.0.1:" + port

	if rep := do(t, "GET", edge+"/edge/limits", ""); !strings.Contains(rep.raw, "product edge 10") {
		t.Fatalf("published limits: %q", rep.raw)
	}
	purchase(t, edge, "edge", "warmup") // the edge fetches the limits on its first purchase
	time.Sleep(1100 * time.Millisecond)
	counts := map[string]int{}
	for k := 0; k < 60; k++ {
		rep := purchase(t, edge, "edge", fmt.Sprintf("burst%d", k))
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
		rep := purchase(t, edge, "edge", fmt.Sprintf("after%d", k))
		if rep.status != 200 {
			t.Fatalf("with one coordinator down: %d %s", rep.status, rep.raw)
		}
		time.Sleep(150 * time.Millisecond)
	}
	b.Close()
	time.Sleep(1100 * time.Millisecond)
	if rep := purchase(t, edge, "edge", "nobody"); rep.status != 503 || rep.str("error") != "unavailable" {
		t.Fatalf("with no coordinator: %d %s", rep.status, rep.raw)
	}
}
