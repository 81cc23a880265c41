package main

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/shardstock/shardstock/config"
	"github.com/shardstock/shardstock/shard"
	"github.com/shardstock/shardstock/shard/shardtest"
)

// TestShardsKnowTheirCatalog (issue 17, item 3): the shards carry the
// catalog's identity from the first start; a coordinator whose database is
// another catalog refuses to start on them, with one line that says why
// and what to do, instead of reading the other catalog's reservations. A
// shard without a stamp that holds a product this catalog does not know is
// refused too, and a first PUT of a product some shard already holds
// answers 409 rather than 201 over someone else's units.
func TestShardsKnowTheirCatalog(t *testing.T) {
	r := shardtest.Start(t, 3)
	a := startServer(t, r.URLs())
	if rep := putProduct(t, a.URL(), "lamp", `{"stock":30}`); rep.status != 201 {
		t.Fatalf("PUT: %d %s", rep.status, rep.raw)
	}
	if rep := purchase(t, a.URL(), "lamp", "alice"); rep.status != 200 {
		t.Fatalf("purchase: %d %s", rep.status, rep.raw)
	}
	// A second coordinator on the same shards with its own SQLite file.
	cfg := &config.Config{HTTPAddr: "127.0.0.1:0", Shards: r.URLs(), AdminToken: testToken, UserAuth: "header",
		ShardTimeout: a.cfg.ShardTimeout, MQ: "streams", DB: "sqlite:" + t.TempDir() + "/other.db", OrderRate: 1000}
	b := NewMain(cfg, testLog(t))
	err := b.Run(context.Background())
	b.Close()
	if err == nil || !strings.Contains(err.Error(), "another catalog") || !strings.Contains(err.Error(), "SHARDSTOCK_DB") ||
		strings.Contains(err.Error(), "\n") {
		t.Fatalf("a coordinator of another catalog started, or said it unclearly: %v", err)
	}
	t.Logf("refused: %v", err)

	// Shards from before stamps (no stamp) holding a product the new
	// catalog does not know: refused as well.
	ctx := context.Background()
	for _, u := range r.URLs() {
		opt, _ := redis.ParseURL(u)
		c := redis.NewClient(opt)
		c.Del(ctx, shard.CatalogKey)
		c.Close()
	}
	b = NewMain(cfg, testLog(t))
	err = b.Run(ctx)
	b.Close()
	if err == nil || !strings.Contains(err.Error(), "lamp") {
		t.Fatalf("unstamped shards holding an unknown product: %v", err)
	}
	// Without the product in the shards' product list the start goes
	// through (nothing says it is foreign), but the first PUT of lamp sees
	// lamp on the shards and answers 409.
	for _, u := range r.URLs() {
		opt, _ := redis.ParseURL(u)
		c := redis.NewClient(opt)
		c.Del(ctx, shard.CatalogKey)
		c.SRem(ctx, shard.ProductsKey, "lamp")
		c.Close()
	}
	b = startServer(t, r.URLs(), func(c *config.Config) { c.DB = cfg.DB })
	rep := putProduct(t, b.URL(), "lamp", `{"stock":30}`)
	if rep.status != 409 || !strings.Contains(rep.raw, "not in this catalog") {
		t.Fatalf("PUT of a product the shards hold for another catalog: %d %s", rep.status, rep.raw)
	}
}
